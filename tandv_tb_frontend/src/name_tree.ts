/**
 * The tree of dotted layer names, built once for both views: ``blocks.3.attn`` and
 * ``blocks.3.mlp`` sit under ``blocks.3``, which sits under ``blocks``. The heatmap draws it
 * as rows (``tree.ts``), the graph of a run without a recorded graph as boxes
 * (``GraphIndex.fromLayers``). Children keep model order: a node sits where its first layer
 * does.
 */

export interface NameNode {
  /** The dotted prefix the node stands for ("" at the root). */
  prefix: string;
  /** In model order (by their first layer). */
  children: NameNode[];
  /** The index (into the names) of the layer named exactly ``prefix``, or null. */
  layer: number | null;
  /** The index of its first layer. */
  first: number;
  /** The indices of every layer at or under it, in model order. */
  all: number[];
}

/** The tree of ``names`` (in model order); its root stands for every layer. */
export function nameTree(names: string[]): NameNode {
  type Building = NameNode & { byPart: Map<string, Building> };
  // Layers come in model order: a node is made at its first layer, and a child is added
  // to its parent's list then, so the lists need no sorting.
  const node = (prefix: string, first: number): Building => ({
    prefix,
    children: [],
    layer: null,
    first,
    all: [],
    byPart: new Map(),
  });
  const root = node("", 0);
  names.forEach((name, index) => {
    let at = root;
    at.all.push(index);
    const parts = name.split(".");
    parts.forEach((part, depth) => {
      let child = at.byPart.get(part);
      if (!child) {
        child = node(parts.slice(0, depth + 1).join("."), index);
        at.byPart.set(part, child);
        at.children.push(child);
      }
      child.all.push(index);
      at = child;
    });
    at.layer = index;
  });
  return root;
}
