/**
 * The model graph as the Graph view reads it: its calls by id and by parent, the level
 * drawn when a call is open (its children, every edge lifted to them, and the edges that
 * cross its boundary drawn from an "inputs" node and to an "outputs" node), the heatmap
 * rows each call covers, and, for a run that recorded no graph, a graph made from the
 * dotted layer names (the module tree, siblings chained in model order).
 */

import type { GraphNode, GraphResponse } from "./graph_api";
import { type NameNode, nameTree } from "./name_tree";

/** Ids of the boundary nodes of an open call (no recorded id starts with a NUL). */
export const INPUTS = "\u0000inputs";
export const OUTPUTS = "\u0000outputs";
/** The key of the top level (no call open). */
export const TOP = "";
/**
 * A call that feeds more calls of a level than this (rotary position embeddings, a mask),
 * or is fed by more, has its edges drawn as one bus beside the layout instead of routed:
 * laid out, such edges cost most of the layout's time (a tenth without them on a level of
 * 48 decoder layers, bench/RESULTS.md) and draw a fan no one can follow.
 */
export const MAX_FAN = 8;

/** What one open call shows. */
export interface Level {
  /** The open call's id, or ``TOP``. */
  focus: string;
  /** The calls shown, in call order. */
  nodes: GraphNode[];
  /** Edges between shown calls and the boundary nodes, each once (buses' apart). */
  edges: [string, string][];
  /** One call's edges to (``out``) or from (``in``) more than ``MAX_FAN`` others. */
  buses: Bus[];
  /** Whether edges come in from outside the open call, or leave it. */
  inputs: boolean;
  outputs: boolean;
}

export interface Bus {
  kind: "out" | "in";
  /** The call that feeds (``out``) or is fed by (``in``) the others. */
  hub: string;
  others: string[];
}

/** The edges of a level, those of a call that feeds, or is fed by, many apart as buses. */
function withBuses(edges: [string, string][]): { edges: [string, string][]; buses: Bus[] } {
  const outs = new Map<string, string[]>();
  const ins = new Map<string, string[]>();
  for (const [source, target] of edges) {
    outs.set(source, [...(outs.get(source) ?? []), target]);
    ins.set(target, [...(ins.get(target) ?? []), source]);
  }
  const buses: Bus[] = [];
  for (const [hub, others] of outs)
    if (others.length > MAX_FAN) buses.push({ kind: "out", hub, others });
  for (const [hub, others] of ins)
    if (others.length > MAX_FAN) buses.push({ kind: "in", hub, others });
  const fanOut = new Set(buses.filter((b) => b.kind === "out").map((b) => b.hub));
  const fanIn = new Set(buses.filter((b) => b.kind === "in").map((b) => b.hub));
  const kept = edges.filter(([source, target]) => !fanOut.has(source) && !fanIn.has(target));
  for (const bus of buses) {
    // An edge of two hubs is drawn once, by the bus out of its source.
    if (bus.kind === "in") bus.others = bus.others.filter((other) => !fanOut.has(other));
  }
  return { edges: kept, buses: buses.filter((bus) => bus.others.length) };
}

/** The heatmap rows a call stands for: its own (its layer's tensors) and its subtree's. */
export interface Coverage {
  own: Map<string, number[]>;
  all: Map<string, number[]>;
}

export class GraphIndex {
  readonly byId = new Map<string, GraphNode>();
  /** Each call's children (``TOP``: the calls at the top), in call order. */
  readonly children = new Map<string, GraphNode[]>();
  /** Calls of each layer, in call order (a module called twice has two). */
  private readonly calls = new Map<string, GraphNode[]>();

  /**
   * ``recorded``: the run's own graph; otherwise made from layer names, its edges the
   * model order of siblings (not dataflow).
   */
  constructor(
    readonly nodes: GraphNode[],
    readonly edges: { source: string; target: string }[],
    readonly recorded: boolean,
  ) {
    for (const node of nodes) this.byId.set(node.id, node);
    for (const node of [...nodes].sort((a, b) => a.order - b.order)) {
      const key = node.parent ?? TOP;
      const siblings = this.children.get(key) ?? [];
      siblings.push(node);
      this.children.set(key, siblings);
      const calls = this.calls.get(node.layer) ?? [];
      calls.push(node);
      this.calls.set(node.layer, calls);
    }
  }

  static fromResponse(response: GraphResponse): GraphIndex {
    return new GraphIndex(response.nodes, response.edges, true);
  }

  /**
   * The module tree of layer names (in model order, ``name_tree.ts``): a node per dotted
   * prefix, its children chained in the order their first layer comes.
   */
  static fromLayers(layers: { layer: string; module_type: string }[]): GraphIndex {
    const nodes: GraphNode[] = [];
    const add = (parent: NameNode): void => {
      for (const child of parent.children) {
        nodes.push({
          id: child.prefix,
          layer: child.prefix,
          module_type: child.layer === null ? "" : layers[child.layer].module_type,
          parent: parent === root ? null : parent.prefix,
          order: nodes.length,
          inputs: [],
          outputs: [],
          extra: {},
        });
        add(child);
      }
    };
    const root = nameTree(layers.map((layer) => layer.layer));
    add(root);
    const index = new GraphIndex(nodes, [], false);
    for (const siblings of index.children.values()) {
      for (let i = 1; i < siblings.length; i++) {
        index.edges.push({ source: siblings[i - 1].id, target: siblings[i].id });
      }
    }
    return index;
  }

  hasChildren(id: string): boolean {
    return (this.children.get(id)?.length ?? 0) > 0;
  }

  /** The calls from the outermost to ``id`` (empty for ``TOP`` or an unknown id). */
  path(id: string): GraphNode[] {
    const out: GraphNode[] = [];
    let node = this.byId.get(id);
    while (node) {
      out.unshift(node);
      node = node.parent === null ? undefined : this.byId.get(node.parent);
    }
    return out;
  }

  /** The call to open: ``wanted`` where it has children, else the top, passing down while a
   * level would show a single call that has children (a model's own call). */
  focusFor(wanted: string): string {
    if (wanted !== TOP && this.hasChildren(wanted)) return wanted;
    let focus = TOP;
    for (;;) {
      const shown = this.children.get(focus) ?? [];
      if (shown.length !== 1 || !this.hasChildren(shown[0].id)) return focus;
      focus = shown[0].id;
    }
  }

  /** The shown call that holds ``id`` when ``focus`` is open, or null when none does. */
  private shownHolder(id: string, focus: string): string | null {
    let node = this.byId.get(id);
    while (node) {
      if ((node.parent ?? TOP) === focus) return node.id;
      node = node.parent === null ? undefined : this.byId.get(node.parent);
    }
    return null;
  }

  /** What opening ``focus`` shows (see ``Level``). */
  level(focus: string): Level {
    const nodes = this.children.get(focus) ?? [];
    const seen = new Set<string>();
    const edges: [string, string][] = [];
    let inputs = false;
    let outputs = false;
    for (const edge of this.edges) {
      const source = edge.source === focus ? null : this.shownHolder(edge.source, focus);
      const target = edge.target === focus ? null : this.shownHolder(edge.target, focus);
      if (source === target) continue; // inside one shown call, or both outside
      if (focus === TOP && (source === null || target === null)) continue;
      const from = source ?? INPUTS;
      const to = target ?? OUTPUTS;
      inputs ||= source === null;
      outputs ||= target === null;
      const key = `${from}\u0000${to}`;
      if (seen.has(key)) continue;
      seen.add(key);
      edges.push([from, to]);
    }
    return { focus, nodes, inputs, outputs, ...withBuses(edges) };
  }

  /** The outermost calls: where rows no layer of the graph names are shown. */
  private tops(): GraphNode[] {
    return this.children.get(TOP) ?? [];
  }

  /**
   * Which heatmap rows (``names``, the layers of a tensor type) each call covers: a row
   * belongs to the layer that is its longest dotted prefix (``blocks.0.attn.c_attn.weight``
   * to ``blocks.0.attn.c_attn``, a tuple output ``x.1`` to ``x``), shared by that
   * layer's calls; a row no layer prefixes to the one outermost call, if there is one.
   */
  coverage(names: string[]): Coverage {
    const own = new Map<string, number[]>();
    const tops = this.tops();
    names.forEach((name, row) => {
      const parts = name.split(".");
      let calls: GraphNode[] | undefined;
      for (let depth = parts.length; depth > 0 && !calls; depth--) {
        calls = this.calls.get(parts.slice(0, depth).join("."));
      }
      for (const call of calls ?? (tops.length === 1 ? tops : [])) {
        const rows = own.get(call.id) ?? [];
        rows.push(row);
        own.set(call.id, rows);
      }
    });
    const all = new Map<string, number[]>();
    const gather = (id: string): number[] => {
      const found = all.get(id);
      if (found) return found;
      const rows = new Set(own.get(id) ?? []);
      for (const child of this.children.get(id) ?? []) {
        for (const row of gather(child.id)) rows.add(row);
      }
      const sorted = [...rows].sort((a, b) => a - b);
      all.set(id, sorted);
      return sorted;
    };
    for (const node of this.nodes) gather(node.id);
    return { own, all };
  }

  /** The shown call of ``focus``'s level that holds the layer owning tensor ``name``. */
  shownFor(name: string, focus: string): string | null {
    const parts = name.split(".");
    for (let depth = parts.length; depth > 0; depth--) {
      const calls = this.calls.get(parts.slice(0, depth).join("."));
      for (const call of calls ?? []) {
        const shown = this.shownHolder(call.id, focus);
        if (shown) return shown;
      }
      if (calls) return null;
    }
    return null;
  }

  /** The name a call shows: its layer relative to its parent's, and which call it is. */
  label(node: GraphNode): string {
    const parent = node.parent === null ? undefined : this.byId.get(node.parent);
    let name = node.layer;
    for (let up = parent; up; up = up.parent === null ? undefined : this.byId.get(up.parent)) {
      if (name.startsWith(`${up.layer}.`)) {
        name = name.slice(up.layer.length + 1);
        break;
      }
    }
    const call = this.callOf(node);
    return call ? `${name} · ${call}` : name;
  }

  /** Which call of its module ``node`` is ("call 2 of 3"), or "" for a module called once. */
  callOf(node: GraphNode): string {
    const calls = this.calls.get(node.layer) ?? [];
    return calls.length > 1 ? `call ${calls.indexOf(node) + 1} of ${calls.length}` : "";
  }
}
