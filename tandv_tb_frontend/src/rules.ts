/** What a change implies (valid runs, a tensor type the run has, …), in one place. */

import { matchingRuns } from "./run_picker";
import type { Catalog, Model, Rules } from "./store";
import { DEFAULT_STATE, VIEW_KEYS } from "./state";

/**
 * Runs ticked when the tab opens with no saved choice: every run, as TensorBoard's own
 * dashboards tick them, up to this many (so a logdir of hundreds of runs stays readable).
 */
export const DEFAULT_RUNS = 8;

/** The tensor types of ``runs``, in the server's order. */
export function tensorTypes(catalog: Catalog, runs: string[]): string[] {
  const types = new Set(
    catalog.runs.filter((run) => runs.includes(run.run)).flatMap((run) => run.tensor_types),
  );
  return catalog.tensorTypes.filter((type) => types.has(type));
}

/** The block-scaled formats recorded by any of ``runs``, sorted (the only ones shown). */
export function recordedBlockFormats(catalog: Catalog, runs: string[]): string[] {
  const found = new Set(
    catalog.runs.filter((run) => runs.includes(run.run)).flatMap((run) => run.block_formats),
  );
  return [...found].sort();
}

/** Whether ``name`` is a block-scaled format. */
export function isBlockFormat(catalog: Catalog, name: string): boolean {
  return catalog.blockFormats.some((f) => f.format === name);
}

/** The fix-ups: every choice made valid against the catalog and the loaded layers. */
export const rules: Rules = (model, changed) => {
  const catalog = model.catalog;
  if (!catalog || catalog.runs.length === 0) return {};
  // The runs the regex lists: a new regex ticks them (up to DEFAULT_RUNS); runs it does
  // not list are unticked.
  const names = matchingRuns(
    catalog.runs.map((run) => run.run),
    model.runRegex,
  ).runs;
  let runs = changed.has("runRegex")
    ? names.slice(0, DEFAULT_RUNS)
    : model.runs.filter((run) => names.includes(run));
  if (runs.length === 0) {
    // Opening (or a logdir whose saved runs went): the default; unticking all: the first.
    runs = changed.has("catalog") ? names.slice(0, DEFAULT_RUNS) : [names[0]];
  }
  const heatmapRun = runs.includes(model.heatmapRun) ? model.heatmapRun : runs[0];
  const types = tensorTypes(catalog, [heatmapRun]);
  const tensorType = types.includes(model.tensorType) ? model.tensorType : (types[0] ?? "");
  const patch: Partial<Model> = { runs, heatmapRun, tensorType };
  // A view chosen by anything but the tab's own opening on the headline is the user's; a
  // saved view of a run this logdir lacks (another logdir served at the same address) is
  // no choice made here.
  if (!changed.has("headlineShown") && VIEW_KEYS.some((key) => changed.has(key))) {
    patch.followHeadline = false;
  } else if (changed.has("catalog") && model.heatmapRun && !names.includes(model.heatmapRun)) {
    patch.followHeadline = true;
  }
  const rowsChanged =
    changed.has("heatmapRun") ||
    changed.has("tensorType") ||
    heatmapRun !== model.heatmapRun ||
    tensorType !== model.tensorType;
  if (rowsChanged) patch.window = null;
  const minus = model.minusRun;
  if (minus && (minus === heatmapRun || !runs.includes(minus))) patch.minusRun = "";
  const metrics = catalog.metrics;
  if (!metrics.some((m) => m.metric === model.metric)) {
    patch.metric = metrics[0]?.metric ?? DEFAULT_STATE.metric;
  }
  const formats = catalog.formats;
  const knownFormat =
    formats.some((f) => f.format === model.metricFormat) ||
    isBlockFormat(catalog, model.metricFormat);
  if (formats.length && !knownFormat) {
    patch.metricFormat = catalog.defaultOverlays[0] ?? formats[0].format;
  }
  const metric = metrics.find((m) => m.metric === (patch.metric ?? model.metric));
  const format = patch.metricFormat ?? model.metricFormat;
  if (metric?.needs_block_format && !isBlockFormat(catalog, format)) {
    // A metric of block formats only: the heatmap run's first recorded one.
    const recorded = recordedBlockFormats(catalog, [heatmapRun]);
    patch.metricFormat = recorded[0] ?? catalog.blockFormats[0]?.format ?? format;
  }
  if (!["auto", "expanded", "collapsed"].includes(model.groups)) patch.groups = "auto";
  if (!["heatmap", "graph"].includes(model.view)) patch.view = "heatmap";
  if (rowsChanged && changed.has("heatmapRun")) patch.graphFocus = "";
  const metricNames = new Set(metrics.map((m) => m.metric));
  patch.lineMetrics = model.lineMetrics.filter((m) => metricNames.has(m));
  const list = model.layerList;
  // A list that arrives after the run or tensor type changed again is stale: it must not
  // clear the layer chosen for the new one.
  if (changed.has("layerList") && list && layersCurrent(model)) {
    const layers = new Set(list.layers.map((layer) => layer.layer));
    patch.layer = layers.has(model.layer) ? model.layer : "";
    patch.pinned = model.pinned.filter((name) => layers.has(name));
  }
  return patch;
};

/** Whether the loaded layers are those of the chosen heatmap run and tensor type. */
export function layersCurrent(model: Model): boolean {
  const list = model.layerList;
  return !!list && list.run === model.heatmapRun && list.tensorType === model.tensorType;
}

/** The layer opened from the heatmap and the pinned ones, each once. */
export function panelLayers(model: Model): string[] {
  return [...new Set([model.layer, ...model.pinned].filter(Boolean))];
}
