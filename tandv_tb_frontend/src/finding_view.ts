/**
 * Where a finding shows in the tab, in one place for a click on a finding and for the tab's
 * first view: the heatmap of its run and tensor type in the metric that shows it (a
 * ``divergence`` as its two runs' difference), its cell marked, the histogram of its layer
 * at its step.
 */

import type { Finding, FindingsResponse } from "./findings_api";
import type { HeatmapCard } from "./heatmap_card";
import type { Model } from "./store";

const SEVERITIES = ["error", "warning", "info"];

/** The choices that show ``finding`` (its layer's module groups opened). */
export function findingView(finding: Finding, s: Model, heatmap: HeatmapCard): Partial<Model> {
  const patch: Partial<Model> = {
    heatmapRun: finding.run,
    step: finding.step,
    minusRun: finding.kind === "divergence" ? (finding.other_run ?? "") : "",
  };
  if (finding.tensor_type) patch.tensorType = finding.tensor_type;
  if (s.catalog?.metrics.some((m) => m.metric === finding.metric)) patch.metric = finding.metric;
  const formats = [...(s.catalog?.formats ?? []), ...(s.catalog?.blockFormats ?? [])];
  if (finding.format && formats.some((f) => f.format === finding.format)) {
    patch.metricFormat = finding.format;
  }
  if (finding.name) {
    patch.layer = finding.name;
    if (s.layerRegex && !safeMatch(s.layerRegex, finding.name)) patch.layerRegex = "";
  }
  if (s.window && (finding.step < s.window[0] || finding.step > s.window[1])) patch.window = null;
  const sameRows =
    finding.run === s.heatmapRun && (patch.tensorType ?? s.tensorType) === s.tensorType;
  const toggled = heatmap.reveal(finding.name, sameRows);
  if (toggled) patch.toggled = toggled;
  return patch;
}

/**
 * The headline the tab opens on: of the runs' headlines that name a problem, the most
 * severe, then the earliest, then the first run; null when every run has none.
 */
export function headlineToOpen(data: FindingsResponse): Finding | null {
  const key = (f: Finding) => [SEVERITIES.indexOf(f.severity), f.step, data.runs.indexOf(f.run)];
  let best: Finding | null = null;
  for (const headline of data.headlines) {
    const finding = headline.finding === null ? undefined : data.findings[headline.finding];
    if (finding && (!best || before(key(finding), key(best)))) best = finding;
  }
  return best;
}

function before(a: number[], b: number[]): boolean {
  const at = a.findIndex((value, i) => value !== b[i]);
  return at >= 0 && a[at] < b[at];
}

/** Whether the layer filter (a regex typed by the user) matches ``name``. */
function safeMatch(pattern: string, name: string): boolean {
  try {
    return new RegExp(pattern).test(name);
  } catch {
    return false;
  }
}
