/**
 * Heatmap rows from the tree of layer names (``name_tree.ts``): a group row per module
 * prefix, open or collapsed, and a row per layer shown. A collapsed group's cells are its
 * layers' folded by ``groupCells`` (``group_value.ts``), the rule the graph uses too.
 */

import { type NameNode, nameTree } from "./name_tree";

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

/** Merge a group that holds a single child and no layer of its own into that child. */
function compress(node: NameNode): NameNode {
  let current = node;
  while (current.layer === null && current.children.length === 1) current = current.children[0];
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
  const visit = (parent: NameNode, parentPrefix: string, depth: number): void => {
    const children = parent.children.map(compress);
    // A group's own layer (a module's output beside its submodules') sits among its
    // children in model order.
    if (parent.layer !== null && parent.children.length > 0) {
      const { prefix, layer } = parent;
      children.push({ prefix, children: [], layer, first: layer, all: [layer] });
      children.sort((a, b) => a.first - b.first);
    }
    for (const child of children) {
      if (child.children.length === 0 && child.layer !== null) {
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
  visit(nameTree(names), "", 0);
  return rows;
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
