/**
 * Heatmap rows as a tree of module prefixes: ``blocks.3.attn`` and ``blocks.3.mlp`` sit in
 * the group ``blocks.3``, which sits in ``blocks``. A collapsed group is one row whose cells
 * are the max over its layers (NaN if any layer is NaN, so no problem is hidden). Groups and
 * layers keep model order: a group sits where its first layer does.
 */

export interface Row {
  kind: "layer" | "group";
  /** Full layer name (layer rows) or the group's prefix (group rows). */
  key: string;
  /** What the row shows: the name relative to its parent group. */
  label: string;
  depth: number;
  /** Indices (into the heatmap's layers) of the layers the row covers. */
  indices: number[];
  expanded: boolean;
}

interface Node {
  prefix: string;
  children: Map<string, Node>;
  layer: number | null;
  first: number;
  all: number[];
}

function newNode(prefix: string): Node {
  return { prefix, children: new Map(), layer: null, first: Infinity, all: [] };
}

function buildTrie(names: string[]): Node {
  const root = newNode("");
  names.forEach((name, index) => {
    let node = root;
    node.all.push(index);
    node.first = Math.min(node.first, index);
    const parts = name.split(".");
    parts.forEach((part, depth) => {
      const prefix = parts.slice(0, depth + 1).join(".");
      let child = node.children.get(part);
      if (!child) {
        child = newNode(prefix);
        node.children.set(part, child);
      }
      child.all.push(index);
      child.first = Math.min(child.first, index);
      node = child;
    });
    node.layer = index;
  });
  return root;
}

/** Merge a group that holds a single child and no layer of its own into that child. */
function compress(node: Node): Node {
  let current = node;
  while (current.layer === null && current.children.size === 1) {
    current = [...current.children.values()][0];
  }
  return current;
}

function relative(name: string, parentPrefix: string): string {
  return parentPrefix && name.startsWith(`${parentPrefix}.`)
    ? name.slice(parentPrefix.length + 1)
    : name;
}

/**
 * The rows to draw for layers ``names`` (in model order). ``isExpanded(prefix)`` says
 * whether a group is open.
 */
export function buildRows(names: string[], isExpanded: (prefix: string) => boolean): Row[] {
  const rows: Row[] = [];
  const visit = (parent: Node, parentPrefix: string, depth: number): void => {
    const children = [...parent.children.values()].map(compress);
    // A group's own layer (a module's output beside its submodules') sits among its
    // children in model order.
    if (parent.layer !== null && parent.children.size > 0) {
      const own = newNode(parent.prefix);
      own.layer = parent.layer;
      own.first = parent.layer;
      children.push(own);
    }
    children.sort((a, b) => a.first - b.first);
    for (const child of children) {
      if (child.children.size === 0 && child.layer !== null) {
        const name = names[child.layer];
        const own = child.prefix === parent.prefix;
        rows.push({
          kind: "layer",
          key: name,
          label: own ? `${name.split(".").pop()} (self)` : relative(name, parentPrefix),
          depth,
          indices: [child.layer],
          expanded: false,
        });
        continue;
      }
      const expanded = isExpanded(child.prefix);
      rows.push({
        kind: "group",
        key: child.prefix,
        label: `${relative(child.prefix, parentPrefix)}.*`,
        depth,
        indices: child.all,
        expanded,
      });
      if (expanded) visit(child, child.prefix, depth + 1);
    }
  };
  visit(buildTrie(names), "", 0);
  return rows;
}

/**
 * One row's cell values: a layer's own, or for a group the max over its layers per column
 * (NaN wins, columns where no layer has data stay missing).
 */
export function rowValues(
  row: Row,
  values: Float64Array,
  missing: Uint8Array,
  columns: number,
): { values: Float64Array; missing: Uint8Array } {
  if (row.indices.length === 1) {
    const start = row.indices[0] * columns;
    return {
      values: values.subarray(start, start + columns),
      missing: missing.subarray(start, start + columns),
    };
  }
  const out = new Float64Array(columns).fill(-Infinity);
  const none = new Uint8Array(columns).fill(1);
  const isNan = new Uint8Array(columns);
  for (const index of row.indices) {
    const start = index * columns;
    for (let c = 0; c < columns; c++) {
      if (missing[start + c]) continue;
      none[c] = 0;
      const value = values[start + c];
      if (Number.isNaN(value)) isNan[c] = 1;
      else if (value > out[c]) out[c] = value;
    }
  }
  for (let c = 0; c < columns; c++) {
    if (none[c] || isNan[c]) out[c] = NaN;
  }
  return { values: out, missing: none };
}

/**
 * The groups to open by default for layers ``names``: level by level from the top, every
 * group of the next level is opened while the rows stay within ``budget`` (and always while
 * fewer than ``minRows`` rows would show), so a model of thousands of layers opens on an
 * overview (one row per block, say) and a small one fully expanded.
 */
export function autoExpanded(names: string[], budget: number, minRows = 8): Set<string> {
  let open = new Set<string>();
  let rows = buildRows(names, (prefix) => open.has(prefix));
  for (;;) {
    const closed = rows.filter((row) => row.kind === "group" && !open.has(row.key));
    if (closed.length === 0) return open;
    const wider = new Set([...open, ...closed.map((row) => row.key)]);
    const next = buildRows(names, (prefix) => wider.has(prefix));
    if (next.length > budget && rows.length >= minRows) return open;
    open = wider;
    rows = next;
  }
}
