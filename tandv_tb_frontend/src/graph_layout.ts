/**
 * The Graph view's layout: dagre's layered layout, top to bottom (as TensorBoard's own
 * graph uses it). Chosen over elkjs by measurement on a 48-layer Llama (bench/RESULTS.md,
 * 2026-11-28): on the levels the view lays out (a call's children, the edges of a call
 * that feeds many drawn apart as buses) dagre's first layout took 30-60 ms against
 * elkjs's 370-650 ms with its loading, they were alike afterwards, and dagre is 49 kB
 * against 1.5 MB.
 */

import { graphlib, layout as dagreLayout } from "@dagrejs/dagre";

export interface Box {
  id: string;
  width: number;
  height: number;
}

export interface Placed extends Box {
  /** The top left corner. */
  x: number;
  y: number;
}

export interface Routed {
  source: string;
  target: string;
  /** The edge's route, start to end. */
  points: { x: number; y: number }[];
}

export interface Layout {
  width: number;
  height: number;
  nodes: Map<string, Placed>;
  edges: Routed[];
}

const MARGIN = 12;

/** Lay out ``boxes`` (in model order: dagre's first order of a rank) and ``edges``. */
export function layOut(boxes: Box[], edges: [string, string][]): Layout {
  const graph = new graphlib.Graph({ multigraph: false });
  graph.setGraph({
    rankdir: "TB",
    nodesep: 24,
    ranksep: 28,
    edgesep: 10,
    marginx: MARGIN,
    marginy: MARGIN,
  });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const { id, width, height } of boxes) graph.setNode(id, { width, height });
  for (const [source, target] of edges) graph.setEdge(source, target);
  dagreLayout(graph);
  const nodes = new Map<string, Placed>();
  for (const { id, width, height } of boxes) {
    const { x, y } = graph.node(id) as { x: number; y: number };
    nodes.set(id, { id, width, height, x: x - width / 2, y: y - height / 2 });
  }
  const routed = edges.map(([source, target]) => {
    const label = graph.edge(source, target) as { points?: { x: number; y: number }[] };
    return { source, target, points: label.points ?? [] };
  });
  const { width = 0, height = 0 } = graph.graph() as { width?: number; height?: number };
  return { width, height, nodes, edges: routed };
}
