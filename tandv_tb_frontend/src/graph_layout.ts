/**
 * The Graph view's layout: elkjs's layered algorithm, top to bottom, chosen over dagre by
 * measurement (bench/RESULTS.md, 2026-11-28). elkjs is large (1.6 MB), so it is a chunk
 * of its own, loaded when the view first lays out a graph, and it runs in the page's
 * thread (its "fake worker": the frame's Content-Security-Policy allows no worker made
 * from a blob).
 */

import type { ELK, ElkNode } from "elkjs/lib/elk-api";

export interface Box {
  id: string;
  width: number;
  height: number;
}

export interface Placed extends Box {
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

/** Where a node must go: ``first`` (the inputs of an open call) or ``last`` layer. */
export type Pin = "first" | "last" | null;

const OPTIONS = {
  "elk.algorithm": "layered",
  "elk.direction": "DOWN",
  "elk.edgeRouting": "POLYLINE",
  // Fewer sweeps of crossing minimisation: a tenth of the time on a level of 48 blocks,
  // the drawing of a network's chains alike (bench/RESULTS.md).
  "elk.layered.thoroughness": "1",
  "elk.layered.mergeEdges": "true",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
  "elk.spacing.nodeNode": "24",
  "elk.layered.spacing.nodeNodeBetweenLayers": "28",
  "elk.padding": "[top=12,left=12,bottom=12,right=12]",
};

let engine: Promise<ELK> | null = null;

function elk(): Promise<ELK> {
  engine ??= import("elkjs/lib/elk.bundled.js").then(
    (module) => new module.default(),
    (error: unknown) => {
      engine = null; // tried again at the next layout
      throw error;
    },
  );
  return engine;
}

/** Start loading the layout library (while the graph and its values are fetched). */
export function prepareLayout(): void {
  elk().catch(() => undefined); // a failure is told by the layout that needs it
}

/** Lay out ``boxes`` (in model order) and the ``edges`` between them. */
export async function layOut(
  boxes: (Box & { pin: Pin })[],
  edges: [string, string][],
): Promise<Layout> {
  const graph: ElkNode = {
    id: "\u0000root",
    layoutOptions: OPTIONS,
    children: boxes.map(({ id, width, height, pin }) => ({
      id,
      width,
      height,
      layoutOptions: pin
        ? { "elk.layered.layering.layerConstraint": pin === "first" ? "FIRST" : "LAST" }
        : undefined,
    })),
    edges: edges.map(([source, target], i) => ({
      id: `\u0000e${i}`,
      sources: [source],
      targets: [target],
    })),
  };
  const laid = await (await elk()).layout(graph);
  const nodes = new Map<string, Placed>();
  for (const child of laid.children ?? []) {
    nodes.set(child.id, {
      id: child.id,
      x: child.x ?? 0,
      y: child.y ?? 0,
      width: child.width ?? 0,
      height: child.height ?? 0,
    });
  }
  const routed: Routed[] = (laid.edges ?? []).map((edge) => {
    const [source, target] = edges[Number(edge.id.slice(2))];
    const section = edge.sections?.[0];
    const points = section
      ? [section.startPoint, ...(section.bendPoints ?? []), section.endPoint]
      : [];
    return { source, target, points };
  });
  return { width: laid.width ?? 0, height: laid.height ?? 0, nodes, edges: routed };
}
