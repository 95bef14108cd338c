/** The "Over steps" card: TensorBoard's scalars and the chosen layers' metrics as lines. */

import * as api from "./api";
import { Card } from "./card";
import { checkbox, multiCheck } from "./controls";
import { h, keepFocus, replaceChildren } from "./dom";
import { type LineChart, LineCharts, type LineSeries } from "./lines";
import { layersCurrent, panelLayers } from "./rules";
import { recordedLayers } from "./run_layers";
import type { Model, Store } from "./store";

const DASHES: (number[] | undefined)[] = [undefined, [6, 3], [2, 3], [8, 3, 2, 3]];
const MAX_SCALAR_CHARTS = 6;
const LAYER_COLOURS = [
  "#1f77b4",
  "#ff7f0e",
  "#2ca02c",
  "#d62728",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#17becf",
];

type Series = { run: string; body: api.SeriesResponse | null };

export class LinesCard {
  readonly card = new Card("lines", "Over steps");
  readonly charts: LineCharts;
  private readonly grid = h("div", { class: "tv-line-grid" });
  /** The grid's width when the charts were last fetched (they are drawn that wide). */
  private loadedWidth = -1;

  /** ``hover`` gets the step under the shared crosshair (null when it leaves). */
  constructor(
    private readonly store: Store,
    hover: (step: number | null) => void,
  ) {
    this.charts = new LineCharts(this.grid, (step) => void store.update({ step }), hover);
    this.card.body.append(this.grid);
    const chosen = ["layer", "pinned", "lineMetrics", "lineLog", "compare"] as const;
    store.on(["layerList", "runs", ...chosen], () => this.load());
    store.on(["catalog", "lineMetrics", "lineLog"], () => this.renderTools());
    store.on(["step", "layer"], () => this.charts.setStep(this.store.state.step));
  }

  private renderTools(): void {
    const s = this.store.state;
    const metrics = s.catalog?.metrics ?? [];
    keepFocus(this.card.tools, () =>
      replaceChildren(this.card.tools, [
        h("details", { class: "tv-more" }, [
          h("summary", { text: `metrics (${s.lineMetrics.length})` }),
          multiCheck(
            "Metrics",
            "lineMetrics",
            metrics
              .filter((m) => !m.needs_format)
              .map((m) => ({ value: m.metric, label: m.label })),
            s.lineMetrics,
            (lineMetrics) => void this.store.update({ lineMetrics }),
          ),
        ]),
        checkbox("log y", "lineLog", s.lineLog, (lineLog) => void this.store.update({ lineLog })),
      ]),
    );
  }

  /** Fetch and draw the charts again if the page's new size changed their width. */
  resized(): void {
    if (this.grid.clientWidth !== this.loadedWidth) void this.load();
  }

  /** Fetch and draw the charts (also at a new width or theme). */
  async load(): Promise<void> {
    const s = this.store.state;
    const catalog = s.catalog;
    if (!catalog || !layersCurrent(s)) return;
    const scalarRuns = catalog.scalarRuns;
    const layers = panelLayers(s);
    const signal = this.card.signal("lines");
    this.loadedWidth = this.grid.clientWidth;
    const width = this.grid.clientWidth || 800;
    const points = Math.max(50, Math.min(2000, Math.floor(width)));
    const work = async () => {
      const scalarJobs = s.runs
        .filter((run) => scalarRuns.has(run))
        .map((run) => api.scalars(run, signal).then((body) => ({ run, body })));
      /** The series of the chosen layers that ``run`` recorded (none: nothing asked). */
      const fetchRun = async (run: string): Promise<Series> => {
        const recorded = await recordedLayers(catalog, run, s.tensorType);
        const layer = layers.filter((name) => recorded.has(name));
        if (!layer.length) return { run, body: null };
        const metric = s.lineMetrics;
        const query = { run, tensor_type: s.tensorType, layer, metric, points, reduce: "max" };
        return { run, body: await api.series(query, signal) };
      };
      const seriesJobs = layers.length && s.lineMetrics.length ? s.runs.map(fetchRun) : [];
      return Promise.all([Promise.all(scalarJobs), Promise.all(seriesJobs)]);
    };
    const result = await this.card.load(work);
    if (!result) return;
    const [scalarResults, seriesResults] = result;
    const side = s.compare === "side" && s.runs.length > 1;
    const groups = side ? s.runs.map((run) => [run]) : [s.runs];
    const charts = [
      ...scalarCharts(s, scalarResults, groups, side),
      ...metricCharts(s, seriesResults, groups, side, layers),
    ];
    this.card.clearMessage();
    if (charts.length === 0) {
      this.charts.destroy();
      this.card.showEmpty(
        layers.length
          ? "Nothing to draw over steps."
          : "No layer chosen and no TensorBoard scalars in these runs.",
        [
          "Click a heatmap cell to draw its metrics here; log your loss with SummaryWriter.add_scalar (in the same run directory) to see it beside them.",
        ],
      );
      return;
    }
    this.charts.render(charts);
    this.charts.setStep(this.store.state.step);
  }
}

/** One chart per TensorBoard scalar tag (losses first), per group of runs. */
function scalarCharts(
  s: Model,
  results: { run: string; body: api.ScalarsResponse }[],
  groups: string[][],
  side: boolean,
): LineChart[] {
  const colours = s.catalog?.colours ?? new Map<string, string>();
  const tags = new Map<string, { run: string; series: LineSeries }[]>();
  for (const { run, body } of results) {
    for (const scalar of body.scalars) {
      const list = tags.get(scalar.tag) ?? [];
      const series = {
        label: run,
        colour: colours.get(run) ?? "#888",
        steps: scalar.steps,
        values: scalar.values,
      };
      list.push({ run, series });
      tags.set(scalar.tag, list);
    }
  }
  const tagNames = [...tags.keys()].sort(
    (a, b) => Number(!/loss/i.test(a)) - Number(!/loss/i.test(b)) || a.localeCompare(b),
  );
  const charts: LineChart[] = [];
  for (const tag of tagNames.slice(0, MAX_SCALAR_CHARTS)) {
    for (const group of groups) {
      const series = (tags.get(tag) ?? [])
        .filter((item) => group.includes(item.run))
        .map((item) => item.series);
      if (!series.length) continue;
      const suffix = side ? ` · ${group[0]}` : "";
      charts.push({
        key: `scalar:${tag}${suffix}`,
        title: `${tag}${suffix}`,
        series,
        log: s.lineLog,
      });
    }
  }
  return charts;
}

/** One chart per chosen metric of the chosen layers, per group of runs. */
function metricCharts(
  s: Model,
  results: Series[],
  groups: string[][],
  side: boolean,
  layers: string[],
): LineChart[] {
  const colours = s.catalog?.colours ?? new Map<string, string>();
  const several = s.runs.length > 1 && !side;
  const charts: LineChart[] = [];
  for (const metric of s.lineMetrics) {
    const label = s.catalog?.metrics.find((m) => m.metric === metric)?.label ?? metric;
    for (const group of groups) {
      const series: LineSeries[] = [];
      for (const { run, body } of results) {
        if (!group.includes(run)) continue;
        for (const item of body?.series ?? []) {
          if (item.metric !== metric) continue;
          const index = layers.indexOf(item.layer);
          series.push({
            label: several ? `${run} · ${item.layer}` : item.layer,
            colour: several
              ? (colours.get(run) ?? "#888")
              : LAYER_COLOURS[Math.max(0, index) % LAYER_COLOURS.length],
            dash: several ? DASHES[index % DASHES.length] : undefined,
            steps: item.steps,
            values: item.values,
          });
        }
      }
      const suffix = side ? ` · ${group[0]}` : "";
      if (series.length) {
        charts.push({
          key: `metric:${metric}${suffix}`,
          title: `${label} · ${s.tensorType}${suffix}`,
          series,
          log: s.lineLog,
        });
      }
    }
  }
  return charts;
}
