// Which layout library lays out the Graph view: elkjs (layered) against dagre, timed in
// Node.js (V8, as in Chromium) on a model graph written by `bench/graph_view.py --json`.
// Not shipped, and not the view's own code: it lays out what the view would draw, (a) the
// whole graph flat (every module call a node, as when every module is open) and (b) the
// widest level the view opens (one call's children, edges lifted to them), with and
// without the edges of a call that feeds many (which the view draws apart, as buses).
// First, each library's cold start, in a fresh process each time (as when the view
// opens): loading it, then its first layout of (b) without those edges.
//
//   npm install --prefix /tmp/layouts elkjs@0.12.1 @dagrejs/dagre@3.1.3
//   node bench/graph_layout_choice.mjs GRAPH.json /tmp/layouts [repeats]
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [graphPath, folder, repeatsText, cold] = process.argv.slice(2);
const require = createRequire(join(folder, "node_modules", "x.js"));
const loading = performance.now();
const ELK = cold === "dagre" ? null : require("elkjs/lib/elk.bundled.js");
const dagre = cold === "elkjs" ? null : require("@dagrejs/dagre");
const loaded = performance.now() - loading;
const graph = JSON.parse(readFileSync(graphPath, "utf8"));
const repeats = Number(repeatsText ?? 5);
const WIDTH = 150;
const HEIGHT = 36;

/** The children of ``parent`` and the edges between them, each end lifted to them; with
 * ``buses``, without the edges of a call feeding (or fed by) more than 8 others, as the
 * view draws those beside the layout (src/graph_model.ts, MAX_FAN). */
function level(parent, buses) {
  const parentOf = new Map(graph.nodes.map((n) => [n.id, n.parent]));
  const shown = new Set(
    graph.nodes.filter((n) => n.parent === parent).map((n) => n.id),
  );
  const lift = (id) => {
    while (id !== null && id !== undefined && !shown.has(id))
      id = parentOf.get(id);
    return id ?? null;
  };
  const edges = new Map();
  for (const e of graph.edges) {
    const [s, t] = [lift(e.source), lift(e.target)];
    if (s && t && s !== t) edges.set(`${s}\u0000${t}`, [s, t]);
  }
  let kept = [...edges.values()];
  if (buses) {
    const count = (i) =>
      kept.reduce((m, e) => m.set(e[i], (m.get(e[i]) ?? 0) + 1), new Map());
    const [outs, ins] = [count(0), count(1)];
    kept = kept.filter(([s, t]) => outs.get(s) <= 8 && ins.get(t) <= 8);
  }
  return { nodes: [...shown], edges: kept };
}

const flat = {
  nodes: graph.nodes.map((n) => n.id),
  edges: graph.edges.map((e) => [e.source, e.target]),
};
const counts = new Map();
for (const n of graph.nodes)
  counts.set(n.parent, (counts.get(n.parent) ?? 0) + 1);
const widest = [...counts.entries()].sort((a, b) => b[1] - a[1])[0][0];
const size = (g) => `${g.nodes.length} nodes, ${g.edges.length} edges`;
const wide = level(widest, false);
const bused = level(widest, true);
const cases = {
  [`flat (${size(flat)})`]: flat,
  [`${widest} (${size(wide)})`]: wide,
  [`${widest}, buses apart (${size(bused)})`]: bused,
};

/** elkjs tuned for speed (fewer crossing-minimisation sweeps, polyline edges, merged edges). */
const TUNED = {
  "elk.edgeRouting": "POLYLINE",
  "elk.layered.thoroughness": "1",
  "elk.layered.mergeEdges": "true",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
};

function elk(options) {
  return async (g) => {
    await new ELK().layout({
      id: "root",
      layoutOptions: {
        "elk.algorithm": "layered",
        "elk.direction": "DOWN",
        ...options,
      },
      children: g.nodes.map((id) => ({ id, width: WIDTH, height: HEIGHT })),
      edges: g.edges.map(([s, t], i) => ({
        id: `e${i}`,
        sources: [s],
        targets: [t],
      })),
    });
  };
}

function dagreLayout(options) {
  return (g) => {
    const d = new dagre.graphlib.Graph();
    d.setGraph({ rankdir: "TB", nodesep: 20, ranksep: 40, ...options });
    d.setDefaultEdgeLabel(() => ({}));
    for (const id of g.nodes) d.setNode(id, { width: WIDTH, height: HEIGHT });
    for (const [s, t] of g.edges) d.setEdge(s, t);
    dagre.layout(d);
  };
}

async function timed(fn) {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

if (cold) {
  const lay = cold === "elkjs" ? elk(TUNED) : dagreLayout({});
  const first = await timed(() => lay(bused));
  console.log(
    `${cold} cold: load ${loaded.toFixed(0)} ms, first layout ${first.toFixed(0)} ms`,
  );
  process.exit(0);
}
for (const library of ["elkjs", "dagre"]) {
  for (let i = 0; i < 3; i++) {
    const args = [process.argv[1], graphPath, folder, "0", library];
    process.stdout.write(execFileSync(process.execPath, args));
  }
}

// Each configuration's first layout of each case (a library's first ever also compiles
// its code, as when the view opens), then `repeats` more: first / median.
const libraries = [
  ["elkjs 0.12.1, defaults", elk({})],
  ["elkjs 0.12.1, tuned", elk(TUNED)],
  ["dagre 3.1.3, defaults", dagreLayout({})],
  ["dagre 3.1.3, longest-path", dagreLayout({ ranker: "longest-path" })],
];
for (const [name, lay] of libraries) {
  for (const [label, g] of Object.entries(cases)) {
    const first = await timed(() => lay(g));
    const rest = [];
    for (let i = 0; i < repeats; i++) rest.push(await timed(() => lay(g)));
    rest.sort((a, b) => a - b);
    const median = rest[rest.length >> 1];
    console.log(
      `${name.padEnd(28)} ${label.padEnd(52)} first ${first.toFixed(0).padStart(5)} ms, median ${median.toFixed(0).padStart(5)} ms`,
    );
  }
}
