/**
 * The "Model graph" card, shown instead of the heatmap (``view: "graph"``): the run's
 * module calls laid out top to bottom, one open call at a time (a click opens a module, the
 * breadcrumb goes back), each box coloured by the tab's metric at the chosen step, a
 * collapsed module as the heatmap colours a collapsed group (``group_value.ts``). The
 * values are the heatmap route's, one column per recorded step (up to 10,000), so the
 * graph and the heatmap show the same numbers.
 */

import * as api from "./api";
import type { HeatmapResponse, MetricInfo } from "./api";
import { Card } from "./card";
import { type CellScale, cellScale, SPECIAL } from "./colors";
import { button } from "./controls";
import { h, replaceChildren } from "./dom";
import { type Layout, layOut } from "./graph_layout";
import { type Coverage, GraphIndex, INPUTS, type Level, OUTPUTS, TOP } from "./graph_model";
import { groupCells } from "./group_value";
import { type GraphNode, type GraphResponse, graph, type TensorSpec } from "./graph_api";
import { boundaryLines, nodeLines, specs } from "./graph_tooltip";
import { BOX_HEIGHT, boxWidth, GraphView, type Paint, type Shown } from "./graph_view";
import { differenceMetric, runControls } from "./heatmap_card";
import { legend } from "./heatmap_draw";
import { formatValue } from "./numbers";
import { layersCurrent } from "./rules";
import type { State } from "./state";
import type { Store } from "./store";

const MAX_COLUMNS = 10000;
const PLAY_MS = 250;

export class GraphCard {
  readonly card = new Card("graph", "Model graph");
  private readonly view: GraphView;
  private readonly crumbs = h("nav", {
    class: "tv-graph-crumbs",
    attrs: { "aria-label": "Open module" },
  });
  private readonly note = h("div", { class: "tv-graph-note" });
  private readonly legend = h("div", { class: "tv-legend" });
  private readonly slider = h("input", {
    class: "tv-graph-slider",
    attrs: { type: "range", min: "0", max: "0", step: "1", "aria-label": "Step" },
    data: { control: "graphStep" },
  });
  private readonly stepLabel = h("span", { class: "tv-graph-step" });
  private readonly playButton: HTMLElement;
  private readonly steps: HTMLElement;
  private timer: number | undefined;

  private graph: GraphResponse | null = null;
  private values: HeatmapResponse | null = null;
  private index: GraphIndex | null = null;
  private indexOf: { graph: GraphResponse | null; layers: string } | null = null;
  private coverage: Coverage | null = null;
  private scale: CellScale | null = null;
  private metric: MetricInfo | null = null;
  private level: Level | null = null;
  private readonly layouts = new Map<string, Layout>();
  private drawnWidth = -1;

  constructor(private readonly store: Store) {
    this.view = new GraphView({
      click: (id) => this.click(id),
      describe: (id) => this.describe(id),
    });
    this.playButton = button("▶", "graphPlay", () => this.togglePlay(), "Play the steps");
    this.slider.addEventListener("input", () => this.stepTo(Number(this.slider.value)));
    this.steps = h("span", { class: "tv-graph-steps" }, [
      this.playButton,
      this.slider,
      this.stepLabel,
    ]);
    this.card.body.append(this.crumbs, this.note, this.legend, this.view.root);
    store.on(["catalog", "heatmapRun", "view"], () => this.loadGraph());
    store.on(["layerList", "metric", "metricFormat", "reduce", "minusRun", "view"], () =>
      this.loadValues(),
    );
    store.on(["graphFocus"], () => this.show());
    store.on(["runs", "heatmapRun", "minusRun", "view"], () => this.renderTools());
    store.on(["step"], () => this.recolour());
    store.on(["findings"], () => this.markHeadline());
  }

  /** The run menus (as the heatmap's: only one card's are on the page) and the steps. */
  private renderTools(): void {
    const update = (patch: Partial<State>) => void this.store.update(patch);
    const s = this.store.state;
    replaceChildren(
      this.card.tools,
      s.view === "graph" ? [...runControls(s, update), this.steps] : [],
    );
  }

  private active(): boolean {
    const active = this.store.state.view === "graph";
    if (!active) this.stopPlaying();
    return active;
  }

  private async loadGraph(): Promise<void> {
    const run = this.store.state.heatmapRun;
    if (!this.active() || !run) return;
    const signal = this.card.signal("graph");
    const loaded = await this.card.load(() => graph(run, signal));
    if (!loaded || loaded.run !== this.store.state.heatmapRun) return;
    this.graph = loaded;
    this.rebuild();
  }

  private async loadValues(): Promise<void> {
    const s = this.store.state;
    const metric = s.catalog?.metrics.find((m) => m.metric === s.metric);
    if (!this.active() || !metric || !layersCurrent(s)) return;
    const signal = this.card.signal("values");
    const params = {
      run: s.heatmapRun,
      tensor_type: s.tensorType,
      metric: metric.metric,
      format: metric.needs_format ? s.metricFormat : undefined,
      columns: MAX_COLUMNS,
      reduce: s.reduce,
      minus_run: s.minusRun || undefined,
    };
    const values = await this.card.load(() => api.heatmap(params, signal));
    const now = this.store.state;
    if (!values || now.heatmapRun !== params.run || now.tensorType !== params.tensor_type) {
      return;
    }
    this.values = values;
    this.metric = values.minus_run ? differenceMetric(metric, values) : metric;
    this.scale = cellScale(this.metric.scale, values.value_range, this.metric.kind === "fraction");
    this.rebuild();
  }

  /** The index of the run's graph (or of its layer names, without one) and what it covers. */
  private rebuild(): void {
    const { graph, values } = this;
    if (!graph || !values || graph.run !== values.run) return;
    const names = values.layers.map((layer) => layer.layer);
    const key = { graph, layers: graph.nodes.length ? "" : names.join("\u0000") };
    if (this.indexOf?.graph !== key.graph || this.indexOf.layers !== key.layers) {
      this.index = graph.nodes.length
        ? GraphIndex.fromResponse(graph)
        : GraphIndex.fromLayers(values.layers);
      this.indexOf = key;
      this.layouts.clear();
    }
    this.coverage = this.index?.coverage(names) ?? null;
    this.renderNote();
    replaceChildren(
      this.legend,
      this.metric && this.scale ? legend(values, this.metric, this.scale) : [],
    );
    this.slider.max = String(Math.max(0, values.columns.length - 1));
    this.show();
  }

  private renderNote(): void {
    const { graph, index } = this;
    if (!graph || !index) return;
    const lines: string[] = [];
    if (!index.recorded) {
      lines.push(
        `No graph was recorded for ${graph.run}: the module tree of its layer names, siblings in model order (not dataflow). The trackers record one; NumericsWriter.add_graph writes one of your own.`,
      );
    }
    for (const skipped of graph.skipped) {
      lines.push(`The graph record of step ${skipped.step} could not be read: ${skipped.reason}`);
    }
    replaceChildren(
      this.note,
      lines.map((line) => h("p", { text: line })),
    );
    this.card.root.dataset.recorded = String(index.recorded);
  }

  /** Draw again at the card's new width (the layout is kept). */
  resized(): void {
    if (this.level && this.card.root.clientWidth !== this.drawnWidth) this.show();
  }

  /** Lay out (once per open call) and draw the open call's level. */
  private show(): void {
    const index = this.index;
    if (!index || !this.active()) return;
    const started = performance.now();
    const focus = index.focusFor(this.store.state.graphFocus);
    const level = index.level(focus);
    const shown = this.boxes(level);
    let layout = this.layouts.get(focus);
    if (!layout) {
      const sized = shown.map((box) => ({ id: box.id, width: boxWidth(box), height: BOX_HEIGHT }));
      try {
        layout = layOut(sized, level.edges);
      } catch (error) {
        this.card.showError(`The graph could not be laid out: ${String(error)}`);
        return;
      }
      this.layouts.set(focus, layout);
    }
    this.level = level;
    this.view.draw(shown, layout, level.buses);
    this.drawnWidth = this.card.root.clientWidth;
    this.renderCrumbs(focus);
    this.recolour();
    this.markHeadline();
    const root = this.card.root;
    root.dataset.focus = focus;
    root.dataset.nodes = String(level.nodes.length);
    root.dataset.showMs = (performance.now() - started).toFixed(1);
    root.dataset.shown = String(Number(root.dataset.shown ?? "0") + 1);
  }

  private boxes(level: Level): Shown[] {
    const index = this.index as GraphIndex;
    const open = index.byId.get(level.focus);
    const boundary = (id: string, label: string, list: TensorSpec[] | undefined) => ({
      id,
      label,
      sub: list ? specs(list) : "",
      opens: false,
      boundary: true,
    });
    const calls = level.nodes.map((node) => {
      const shape = node.outputs[0] ? ` · [${node.outputs[0].shape.join(",")}]` : "";
      const tensors = this.coverage?.all.get(node.id)?.length ?? 0;
      return {
        id: node.id,
        label: index.label(node),
        sub: node.module_type ? `${node.module_type}${shape}` : `${tensors} tensors`,
        opens: index.hasChildren(node.id),
        boundary: false,
      };
    });
    return [
      ...(level.inputs ? [boundary(INPUTS, "inputs", open?.inputs)] : []),
      ...calls,
      ...(level.outputs ? [boundary(OUTPUTS, "outputs", open?.outputs)] : []),
    ];
  }

  private renderCrumbs(focus: string): void {
    const index = this.index as GraphIndex;
    const path = index.path(focus);
    const items: HTMLElement[] = [];
    if ((index.children.get(TOP)?.length ?? 0) > 1) {
      items.push(this.crumb("model", TOP, path.length === 0));
    }
    path.forEach((node, i) =>
      items.push(this.crumb(index.label(node), node.id, i === path.length - 1)),
    );
    replaceChildren(this.crumbs, items);
  }

  private crumb(label: string, id: string, current: boolean): HTMLElement {
    return h("button", {
      class: `tv-crumb${current ? " tv-crumb-current" : ""}`,
      text: label,
      attrs: { type: "button", ...(current ? { "aria-current": "page" } : {}) },
      data: { focus: id },
      on: { click: () => void this.store.update({ graphFocus: id }) },
    });
  }

  /** The heatmap column the chosen step falls in (the last one for no step). */
  private column(): number {
    const columns = this.values?.columns ?? [];
    const step = this.store.state.step;
    if (step === null) return columns.length - 1;
    const found = columns.findIndex((c) => step <= c.last_step);
    return found < 0 ? columns.length - 1 : found;
  }

  /** A box's value at the chosen step: its rows' folded as the heatmap folds a group's. */
  private valueOf(id: string, column: number): number | null {
    const { values, coverage } = this;
    if (!values || !coverage || column < 0) return null;
    const cell = groupCells(values, coverage.all.get(id) ?? [], column, column + 1);
    return cell.missing[0] ? null : cell.values[0];
  }

  private recolour(): void {
    const { level, values, scale } = this;
    if (!level || !values || !scale || !this.active()) return;
    const started = performance.now();
    const column = this.column();
    const paints = new Map<string, Paint>();
    for (const node of level.nodes) {
      const value = this.valueOf(node.id, column);
      paints.set(node.id, {
        fill: value === null ? null : fill(value, scale),
        value: value === null ? "" : String(value),
      });
    }
    this.view.paint(paints);
    const step = values.columns[column]?.step;
    this.slider.value = String(Math.max(0, column));
    this.stepLabel.textContent = step === undefined ? "" : `step ${step}`;
    const root = this.card.root;
    root.dataset.step = step === undefined ? "" : String(step);
    root.dataset.recolourMs = (performance.now() - started).toFixed(2);
  }

  /** Outline the box holding the run's headline finding. */
  private markHeadline(): void {
    const { level, index, values } = this;
    const findings = this.store.state.findings;
    if (!level || !index || !values) return;
    const headline = findings?.headlines.find((line) => line.run === values.run);
    const finding = headline?.finding == null ? undefined : findings?.findings[headline.finding];
    const id = finding?.name ? index.shownFor(finding.name, level.focus) : null;
    this.view.outline(id, headline?.message ?? "");
  }

  private click(id: string): void {
    const index = this.index;
    const level = this.level;
    if (!index || !level) return;
    if (id === INPUTS || id === OUTPUTS) {
      const open = index.byId.get(level.focus);
      void this.store.update({ graphFocus: open?.parent ?? TOP });
      return;
    }
    const node = index.byId.get(id);
    if (!node) return;
    const patch: Parameters<Store["update"]>[0] = {};
    if (index.hasChildren(id)) patch.graphFocus = id;
    if (this.coverage?.own.get(id)?.length) {
      patch.layer = node.layer;
      patch.step = this.values?.columns[this.column()]?.step ?? null;
    }
    void this.store.update(patch);
  }

  private describe(id: string): HTMLElement[] {
    const { index, level } = this;
    if (!index || !level) return [];
    const open = index.byId.get(level.focus);
    if (id === INPUTS || id === OUTPUTS) return boundaryLines(id === INPUTS, open);
    const node = index.byId.get(id) as GraphNode;
    const headline = this.view.root.querySelector<SVGGElement>(".tv-gnode-headline");
    const marked = headline?.dataset.id === id ? (headline.dataset.headline ?? "") : "";
    return nodeLines(node, index.callOf(node), this.valueLine(node), marked, index.hasChildren(id));
  }

  private valueLine(node: GraphNode): string {
    const { values, metric, coverage } = this;
    if (!values || !metric || !coverage) return "";
    const column = this.column();
    const value = this.valueOf(node.id, column);
    const rows = coverage.all.get(node.id) ?? [];
    const own = coverage.own.get(node.id) ?? [];
    const format = values.format ? ` (${values.format})` : "";
    const shown = value === null ? "no data" : formatValue(value);
    const worst =
      rows.length > own.length || rows.length > 1
        ? ` (worst of ${rows.length} ${values.tensor_type} tensors)`
        : "";
    const step = values.columns[column]?.step;
    return `${metric.label}${format} at step ${step ?? "–"}: ${shown}${worst}`;
  }

  private stepTo(column: number): void {
    const step = this.values?.columns[column]?.step;
    if (step !== undefined) void this.store.update({ step });
  }

  private togglePlay(): void {
    if (this.timer !== undefined) {
      this.stopPlaying();
      return;
    }
    const columns = this.values?.columns.length ?? 0;
    if (columns < 2) return;
    if (this.column() >= columns - 1) this.stepTo(0);
    this.playButton.textContent = "❚❚";
    this.timer = window.setInterval(() => {
      const next = this.column() + 1;
      if (next >= columns) this.stopPlaying();
      else this.stepTo(next);
    }, PLAY_MS);
  }

  private stopPlaying(): void {
    if (this.timer === undefined) return;
    window.clearInterval(this.timer);
    this.timer = undefined;
    this.playButton.textContent = "▶";
  }
}

/** A value's colour on ``scale``; NaN and infinities in their own colours. */
function fill(value: number, scale: CellScale): string {
  if (Number.isNaN(value)) return SPECIAL.nan;
  if (value === Infinity) return SPECIAL.posinf;
  if (value === -Infinity) return SPECIAL.neginf;
  return scale.css(Math.min(scale.hi, Math.max(scale.lo, value)));
}
