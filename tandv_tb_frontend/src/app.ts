/** The Numerics tab: controls, heatmap, histograms and line charts, wired to the API. */

import * as api from "./api";
import type { FormatLimits, LayerInfo, MetricInfo, RunInfo } from "./api";
import { runColors } from "./colors";
import { button, checkbox, multiCheck, selectControl, textInput } from "./controls";
import { debounce, emptyState, h, keepFocus, replaceChildren } from "./dom";
import { FindingsList } from "./findings";
import { Heatmap } from "./heatmap";
import { FormatColours, type Panel, renderHistograms } from "./histogram";
import { type LineChart, LineCharts, type LineSeries } from "./lines";
import { DEFAULT_STATE, saveState, type State } from "./state";
import { autoExpanded } from "./tree";

const DASHES: (number[] | undefined)[] = [undefined, [6, 3], [2, 3], [8, 3, 2, 3]];
const MAX_SCALAR_CHARTS = 6;
/** With ``groups: "auto"``, group levels open while the heatmap keeps at most this many rows. */
const AUTO_ROWS = 128;

export const HOW_TO_RECORD = `import tandv_tb.torch
tracker = tandv_tb.torch.track(model, logdir="runs/exp", optimizer=optimizer)
tracker.step()  # once per training step, after optimizer.step()`;

/** A card of the page, with a loading indicator for slow fetches. */
class Card {
  readonly root: HTMLElement;
  readonly tools: HTMLElement;
  readonly body: HTMLElement;
  readonly message: HTMLElement;
  private pending = 0;
  private timer: number | undefined;

  constructor(name: string, title: string) {
    this.tools = h("div", { class: "tv-card-tools" });
    this.body = h("div", { class: "tv-card-body" });
    this.message = h("div", { class: "tv-card-message" });
    this.root = h(
      "section",
      { class: `tv-card tv-card-${name}`, data: { card: name, state: "idle" } },
      [
        h("div", { class: "tv-progress" }),
        h("div", { class: "tv-card-head" }, [h("h2", { text: title }), this.tools]),
        this.message,
        this.body,
      ],
    );
  }

  /** Run ``work``; show the loading bar if it takes more than a moment. */
  async load<T>(work: () => Promise<T>): Promise<T | undefined> {
    this.pending++;
    this.root.dataset.state = "loading";
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => this.root.classList.add("tv-loading"), 120);
    try {
      const result = await work();
      return result;
    } catch (error) {
      if (api.isAbort(error)) return undefined;
      this.showError(error instanceof Error ? error.message : String(error));
      return undefined;
    } finally {
      this.pending--;
      if (this.pending === 0) {
        window.clearTimeout(this.timer);
        this.root.classList.remove("tv-loading");
        if (this.root.dataset.state === "loading") this.root.dataset.state = "ready";
      }
    }
  }

  showError(text: string): void {
    this.root.dataset.state = "error";
    replaceChildren(this.message, [
      h("div", { class: "tv-error", attrs: { role: "alert" }, text }),
    ]);
  }

  showEmpty(title: string, lines: string[] = []): void {
    this.root.dataset.state = "empty";
    replaceChildren(this.message, [emptyState(title, lines)]);
  }

  clearMessage(): void {
    this.message.replaceChildren();
  }
}

export class App {
  private state: State;
  private runs: RunInfo[] = [];
  private scalarRuns = new Set<string>();
  private tensorTypeOrder: string[] = [];
  private colours = new Map<string, string>();
  private formats: FormatLimits[] = [];
  private defaultOverlays: string[] = [];
  private metrics: MetricInfo[] = [];
  private layers: LayerInfo[] = [];
  private steps: number[] = [];
  private heatmapData: api.HeatmapResponse | null = null;
  /** The groups ``groups: "auto"`` opens for ``heatmapData``'s layers. */
  private autoOpen = new Set<string>();
  private panels: Panel[] = [];
  private readonly formatColours = new FormatColours();
  private readonly controllers = new Map<string, AbortController>();
  private refreshing: Promise<void> | null = null;
  /** A layer (of a clicked finding) whose groups open once its heatmap has loaded. */
  private revealLayer = "";
  private refreshAgain = false;

  private readonly toolbar = h("header", { class: "tv-toolbar" });
  private readonly findingsCard = new Card("findings", "Findings");
  private readonly findings = new FindingsList((finding) => this.showFinding(finding));
  private readonly heatCard = new Card("heatmap", "Layers × steps");
  private readonly histCard = new Card("histogram", "Exponent histogram");
  private readonly lineCard = new Card("lines", "Over steps");
  private readonly heatmap: Heatmap;
  private readonly histGrid = h("div", { class: "tv-hist-grid" });
  private readonly lineGrid = h("div", { class: "tv-line-grid" });
  private readonly lines: LineCharts;
  private readonly main = h("main", { class: "tv-main" });
  private readonly exportSlot = h("div", { class: "tv-export-slot" });
  private stepSlider: HTMLInputElement | null = null;
  private stepLabel: HTMLElement | null = null;

  constructor(
    private readonly root: HTMLElement,
    initial: State,
  ) {
    this.state = initial;
    this.heatmap = new Heatmap({
      select: (layer, step) => this.update({ layer, step }),
      toggle: (prefix) => this.toggleGroup(prefix),
      zoom: (window) => this.update({ window }),
    });
    this.lines = new LineCharts(
      this.lineGrid,
      (step) => this.update({ step }),
      (step) => this.heatmap.showStep(step),
    );
    this.findingsCard.body.append(this.findings.root);
    this.heatCard.body.append(this.heatmap.root);
    this.histCard.body.append(this.histGrid);
    this.lineCard.body.append(this.lineGrid);
    replaceChildren(this.root, [h("div", { class: "tv-app" }, [this.toolbar, this.main])]);
    const relayout = debounce(() => this.relayout(), 200);
    new ResizeObserver(relayout).observe(this.root);
  }

  /** Load everything (first render, and TensorBoard's reload). */
  refresh(): Promise<void> {
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        await this.loadAll();
      } while (this.refreshAgain);
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  /** A new AbortSignal for ``key``, cancelling the previous fetch of that key. */
  private signal(key: string): AbortSignal {
    this.controllers.get(key)?.abort();
    const controller = new AbortController();
    this.controllers.set(key, controller);
    return controller.signal;
  }

  private async loadAll(): Promise<void> {
    this.root.dataset.state = "loading";
    try {
      const [runs, formats, metrics] = await Promise.all([
        api.runs(this.signal("runs")),
        this.formats.length ? null : api.formats(),
        this.metrics.length ? null : api.metrics(),
      ]);
      if (formats) {
        this.formats = formats.formats;
        this.defaultOverlays = formats.default_overlays;
      }
      if (metrics) this.metrics = metrics.metrics;
      this.runs = runs.runs;
      this.scalarRuns = new Set(runs.scalar_runs);
      this.tensorTypeOrder = runs.tensor_type_order ?? [];
      this.colours = runColors(this.runs.map((r) => r.run));
    } catch (error) {
      if (api.isAbort(error)) return;
      this.root.dataset.state = "error";
      replaceChildren(this.main, [
        emptyState("The Numerics data could not be loaded.", [
          error instanceof Error ? error.message : String(error),
        ]),
      ]);
      return;
    }
    if (this.runs.length === 0) {
      this.root.dataset.state = "empty";
      this.toolbar.replaceChildren();
      replaceChildren(this.main, [
        emptyState(
          "No numerics in this logdir yet.",
          [
            "Record them with three lines in your PyTorch training script (tandv_tb.jax.track for JAX), run `tensorboard --logdir runs`, or press TensorBoard's reload button:",
          ],
          HOW_TO_RECORD,
        ),
      ]);
      return;
    }
    if (!this.main.contains(this.heatCard.root)) {
      replaceChildren(this.main, [
        this.findingsCard.root,
        h("div", { class: "tv-top" }, [this.heatCard.root, this.histCard.root]),
        this.lineCard.root,
      ]);
    }
    this.validateRuns();
    this.renderToolbar();
    void this.loadFindings();
    await this.loadLayers();
    this.root.dataset.state = "ready";
  }

  private selectedRuns(): RunInfo[] {
    return this.runs.filter((run) => this.state.runs.includes(run.run));
  }

  private tensorTypes(): string[] {
    const types = new Set(this.selectedRuns().flatMap((run) => run.tensor_types));
    // The server's order: its fixed types, then optimiser states, then others, by name.
    const order = this.tensorTypeOrder;
    const rank = (type: string) => {
      const index = order.indexOf(type);
      if (index >= 0) return index;
      return type.startsWith("Optimiser_State.") ? order.length : order.length + 1;
    };
    return [...types].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  }

  /** Make the chosen runs, heatmap run and tensor type exist in the data. */
  private validateRuns(): void {
    const names = this.runs.map((run) => run.run);
    let chosen = this.state.runs.filter((run) => names.includes(run));
    if (chosen.length === 0) chosen = [names[0]];
    const heatmapRun = chosen.includes(this.state.heatmapRun) ? this.state.heatmapRun : chosen[0];
    this.state = { ...this.state, runs: chosen, heatmapRun };
    const types = this.runs.find((run) => run.run === heatmapRun)?.tensor_types ?? [];
    if (!types.includes(this.state.tensorType)) {
      this.state.tensorType = types.includes("Activation") ? "Activation" : (types[0] ?? "");
    }
    if (!this.metrics.some((m) => m.metric === this.state.metric)) {
      this.state.metric = this.metrics[0]?.metric ?? DEFAULT_STATE.metric;
    }
    if (this.formats.length && !this.formats.some((f) => f.format === this.state.metricFormat)) {
      this.state.metricFormat = this.defaultOverlays[0] ?? this.formats[0].format;
    }
    if (!["auto", "expanded", "collapsed"].includes(this.state.groups)) this.state.groups = "auto";
    this.validateMinusRun();
    const metricNames = new Set(this.metrics.map((m) => m.metric));
    this.state.lineMetrics = this.state.lineMetrics.filter((m) => metricNames.has(m));
    saveState(this.state);
  }

  /** Apply a change and reload what depends on it. */
  update(patch: Partial<State>): void {
    const before = this.state;
    this.state = { ...before, ...patch };
    const changed = (Object.keys(patch) as (keyof State)[]).filter(
      (key) => JSON.stringify(before[key]) !== JSON.stringify(this.state[key]),
    );
    if (changed.length === 0) return;
    saveState(this.state);
    const has = (...keys: (keyof State)[]) => keys.some((key) => changed.includes(key));
    if (has("runs", "heatmapRun", "tensorType")) {
      if (has("runs")) this.validateRuns();
      if (has("runs")) void this.loadFindings();
      this.validateMinusRun();
      if (has("heatmapRun", "tensorType")) this.state = { ...this.state, window: null };
      this.renderToolbar();
      void this.loadLayers();
      return;
    }
    if (has("layerRegex", "metric", "metricFormat", "reduce", "window", "minusRun")) {
      if (has("metric")) this.renderToolbar();
      if (has("minusRun")) this.renderHeatmapTools();
      void this.loadHeatmap();
    }
    if (has("toggled", "groups")) this.drawHeatmap();
    if (has("compare")) this.renderToolbar();
    if (has("layer", "pinned", "extraTypes", "overlays", "step", "compare"))
      void this.loadHistograms();
    else if (has("histCount", "histLog", "scaled", "colWrap")) this.drawHistograms();
    if (has("layer", "pinned", "lineMetrics", "lineLog", "compare")) void this.loadLines();
    if (has("step", "layer")) {
      this.heatmap.setSelected(this.state.layer, this.state.step);
      this.lines.setStep(this.state.step);
      this.syncStepSlider();
    }
    if (
      has("layer", "pinned", "extraTypes", "overlays", "histCount", "histLog", "scaled", "colWrap")
    ) {
      this.renderHistogramTools();
    }
    if (has("lineMetrics", "lineLog")) this.renderLineTools();
  }

  /** The subtracted run must be another ticked run (else no difference is drawn). */
  private validateMinusRun(): void {
    const minus = this.state.minusRun;
    if (minus && (minus === this.state.heatmapRun || !this.state.runs.includes(minus))) {
      this.state = { ...this.state, minusRun: "" };
      saveState(this.state);
    }
  }

  // ---- findings --------------------------------------------------------------------------

  private async loadFindings(): Promise<void> {
    const runs = this.state.runs;
    const signal = this.signal("findings");
    const data = await this.findingsCard.load(() => api.findings(runs, signal));
    if (!data) return;
    if (data.findings.length === 0) {
      this.findings.clear();
      this.findingsCard.showEmpty(`No findings in ${runs.join(", ")}.`, [
        "No NaN/Inf, no over- or underflow of the recorded formats, no drift, dead tensor, loss spike or divergence between the ticked runs.",
      ]);
      return;
    }
    this.findingsCard.clearMessage();
    this.findings.render(data, this.colours);
  }

  /** Show a finding: its run, tensor type, layer and step (a divergence as a difference). */
  private showFinding(finding: api.Finding): void {
    const s = this.state;
    const patch: Partial<State> = {
      heatmapRun: finding.run,
      step: finding.step,
      minusRun: finding.kind === "divergence" ? (finding.other_run ?? "") : "",
    };
    if (finding.tensor_type) patch.tensorType = finding.tensor_type;
    const compared = this.findings.divergenceMetric;
    if (finding.kind === "divergence" && this.metrics.some((m) => m.metric === compared)) {
      patch.metric = compared;
    }
    if (finding.name) {
      patch.layer = finding.name;
      if (s.layerRegex && !safeMatch(s.layerRegex, finding.name)) patch.layerRegex = "";
    }
    if (s.window && (finding.step < s.window[0] || finding.step > s.window[1])) patch.window = null;
    const sameRows =
      finding.run === s.heatmapRun && (patch.tensorType ?? s.tensorType) === s.tensorType;
    if (finding.name && sameRows && this.heatmapData) patch.toggled = this.opened(finding.name);
    else this.revealLayer = finding.name;
    this.findings.mark(finding);
    this.update(patch);
    if (patch.layerRegex !== undefined) this.renderToolbar();
  }

  /** ``toggled`` with every group holding ``layer`` open. */
  private opened(layer: string): string[] {
    const toggled = new Set(this.state.toggled);
    const parts = layer.split(".");
    for (let depth = 1; depth < parts.length; depth++) {
      const prefix = parts.slice(0, depth).join(".");
      if (this.isExpanded(prefix)) continue;
      if (toggled.has(prefix)) toggled.delete(prefix);
      else toggled.add(prefix);
    }
    return [...toggled];
  }

  private toggleGroup(prefix: string): void {
    const toggled = new Set(this.state.toggled);
    if (toggled.has(prefix)) toggled.delete(prefix);
    else toggled.add(prefix);
    this.update({ toggled: [...toggled] });
  }

  private isExpanded = (prefix: string): boolean => {
    const groups = this.state.groups;
    const open = groups === "expanded" || (groups === "auto" && this.autoOpen.has(prefix));
    return open !== this.state.toggled.includes(prefix);
  };

  private metricInfo(): MetricInfo | undefined {
    return this.metrics.find((m) => m.metric === this.state.metric);
  }

  // ---- toolbar -------------------------------------------------------------------------

  private renderToolbar(): void {
    keepFocus(this.toolbar, () => this.buildToolbar());
    this.renderExport();
    this.renderHeatmapTools();
    this.renderHistogramTools();
    this.renderLineTools();
  }

  private buildToolbar(): void {
    const s = this.state;
    const metric = this.metricInfo();
    const formatOptions = this.formats.map((f) => ({ value: f.format, label: f.format }));
    replaceChildren(this.toolbar, [
      multiCheck(
        "Runs",
        "runs",
        this.runs.map((run) => ({ value: run.run, label: run.run })),
        s.runs,
        (runs) => this.update({ runs }),
        this.colours,
      ),
      s.runs.length > 1
        ? selectControl(
            "Compare runs",
            "compare",
            [
              { value: "overlay", label: "overlaid" },
              { value: "side", label: "side by side" },
            ],
            s.compare,
            (compare) => this.update({ compare: compare as State["compare"] }),
          )
        : null,
      selectControl(
        "Tensor type",
        "tensorType",
        this.tensorTypes().map((type) => ({ value: type, label: type })),
        s.tensorType,
        (tensorType) => this.update({ tensorType }),
      ),
      textInput("Layers (regex)", "layerRegex", s.layerRegex, "e.g. attn|mlp", (layerRegex) =>
        this.update({ layerRegex }),
      ),
      selectControl(
        "Metric",
        "metric",
        this.metrics.map((m) => ({ value: m.metric, label: m.label })),
        s.metric,
        (value) => this.update({ metric: value }),
      ),
      metric?.needs_format
        ? selectControl("Format", "metricFormat", formatOptions, s.metricFormat, (metricFormat) =>
            this.update({ metricFormat }),
          )
        : null,
      selectControl(
        "Per column",
        "reduce",
        ["max", "min", "mean", "last"].map((value) => ({ value, label: value })),
        s.reduce,
        (reduce) => this.update({ reduce: reduce as State["reduce"] }),
      ),
      this.exportSlot,
    ]);
  }

  private renderExport(): void {
    replaceChildren(this.exportSlot, [this.exportMenu()]);
  }

  private exportMenu(): HTMLElement {
    const s = this.state;
    const links: [string, string][] = [];
    const heat = this.heatmapParams();
    if (heat) links.push([`Heatmap (${s.heatmapRun})`, api.url("heatmap.csv", heat)]);
    for (const run of s.runs) {
      const layers = this.panelLayers();
      if (layers.length) {
        links.push([
          `Histograms (${run})`,
          api.url("histogram.csv", {
            run,
            tensor_type: s.tensorType,
            layer: layers,
            step: s.step ?? undefined,
          }),
        ]);
        links.push([
          `Series (${run})`,
          api.url("series.csv", {
            run,
            tensor_type: s.tensorType,
            layer: layers,
            metric: s.lineMetrics,
            format: s.metricFormat,
          }),
        ]);
      }
      if (this.scalarRuns.has(run))
        links.push([`Scalars (${run})`, api.url("scalars.csv", { run })]);
      links.push([`Layers (${run})`, api.url("layers.csv", { run, tensor_type: s.tensorType })]);
    }
    return h("details", { class: "tv-export", data: { control: "export" } }, [
      h("summary", { class: "tv-button", text: "Export CSV" }),
      h(
        "div",
        { class: "tv-export-menu" },
        links.map(([label, href]) =>
          h("a", { text: label, attrs: { href, download: "" }, data: { export: label } }),
        ),
      ),
    ]);
  }

  // ---- heatmap ---------------------------------------------------------------------------

  private renderHeatmapTools(): void {
    const s = this.state;
    replaceChildren(this.heatCard.tools, [
      s.runs.length > 1
        ? selectControl(
            "Run",
            "heatmapRun",
            s.runs.map((run) => ({ value: run, label: run })),
            s.heatmapRun,
            (heatmapRun) => this.update({ heatmapRun }),
          )
        : h("span", { class: "tv-muted", text: s.heatmapRun }),
      s.runs.length > 1
        ? selectControl(
            "minus",
            "minusRun",
            [
              { value: "", label: "—" },
              ...s.runs
                .filter((run) => run !== s.heatmapRun)
                .map((run) => ({ value: run, label: run })),
            ],
            s.minusRun,
            (minusRun) => this.update({ minusRun }),
          )
        : null,
      selectControl(
        "Groups",
        "groups",
        [
          { value: "auto", label: "auto" },
          { value: "expanded", label: "all open" },
          { value: "collapsed", label: "all closed" },
        ],
        s.groups,
        (groups) => this.update({ groups: groups as State["groups"], toggled: [] }),
      ),
      s.window
        ? button(
            `Steps ${s.window[0]}–${s.window[1]} ✕`,
            "resetZoom",
            () => this.update({ window: null }),
            "Show every step (or double-click the heatmap)",
          )
        : h("span", { class: "tv-muted tv-hint", text: "wheel: zoom · drag: pan" }),
    ]);
  }

  private heatmapParams(): api.Params | null {
    const s = this.state;
    const metric = this.metricInfo();
    if (!s.heatmapRun || !s.tensorType || !metric) return null;
    return {
      run: s.heatmapRun,
      tensor_type: s.tensorType,
      metric: metric.metric,
      format: metric.needs_format ? s.metricFormat : undefined,
      columns: Math.min(10000, this.heatmap.plotWidth()),
      reduce: s.reduce,
      step_min: s.window?.[0],
      step_max: s.window?.[1],
      layer_regex: s.layerRegex || undefined,
      minus_run: s.minusRun || undefined,
    };
  }

  private async loadLayers(): Promise<void> {
    const s = this.state;
    const signal = this.signal("layers");
    const result = await this.heatCard.load(() =>
      Promise.all([
        api.layers(s.heatmapRun, s.tensorType, signal),
        api.steps(s.heatmapRun, s.tensorType, signal),
      ]),
    );
    if (!result) return;
    const [layers, steps] = result;
    this.layers = layers.layers;
    this.steps = steps.steps;
    const names = new Set(this.layers.map((layer) => layer.layer));
    const layer = names.has(s.layer) ? s.layer : "";
    const pinned = s.pinned.filter((name) => names.has(name));
    if (layer !== s.layer || pinned.length !== s.pinned.length) {
      this.state = { ...this.state, layer, pinned };
      saveState(this.state);
    }
    this.renderHistogramTools();
    await Promise.all([this.loadHeatmap(), this.loadHistograms(), this.loadLines()]);
  }

  private async loadHeatmap(): Promise<void> {
    const params = this.heatmapParams();
    const metric = this.metricInfo();
    if (!params || !metric) return;
    const signal = this.signal("heatmap");
    const data = await this.heatCard.load(() => api.heatmap(params, signal));
    if (!data) {
      if (this.heatCard.root.dataset.state === "error") this.heatmap.root.hidden = true;
      return;
    }
    this.heatmapData = data;
    this.autoOpen = autoExpanded(
      data.layers.map((layer) => layer.layer),
      AUTO_ROWS,
    );
    if (this.revealLayer) {
      this.state = { ...this.state, toggled: this.opened(this.revealLayer) };
      this.revealLayer = "";
      saveState(this.state);
    }
    if (data.layers.length === 0) {
      this.heatmap.root.hidden = true;
      this.heatCard.showEmpty(
        this.state.layerRegex
          ? `No ${this.state.tensorType} layer matches /${this.state.layerRegex}/.`
          : `No ${this.state.tensorType} layers in ${this.state.heatmapRun}.`,
        ["Change the layer filter or the tensor type."],
      );
      return;
    }
    this.heatCard.clearMessage();
    this.heatmap.root.hidden = false;
    this.drawHeatmap();
    this.heatmap.revealSelected();
    this.renderHeatmapTools();
    this.renderExport();
  }

  private drawHeatmap(): void {
    const data = this.heatmapData;
    const metric = this.metricInfo();
    if (!data || !metric || data.layers.length === 0) return;
    this.heatmap.setData(
      data,
      data.minus_run ? differenceMetric(metric, data) : metric,
      this.isExpanded,
    );
    this.heatmap.setSelected(this.state.layer, this.state.step);
  }

  // ---- histograms ------------------------------------------------------------------------

  private panelLayers(): string[] {
    return [...new Set([this.state.layer, ...this.state.pinned].filter(Boolean))];
  }

  private syncStepSlider(): void {
    if (!this.stepSlider || !this.stepLabel) return;
    const step = this.state.step ?? this.steps[this.steps.length - 1];
    const index = nearestIndex(this.steps, step);
    this.stepSlider.value = String(Math.max(0, index));
    this.stepLabel.textContent = `step ${this.steps[index] ?? "–"}`;
  }

  private renderHistogramTools(): void {
    const s = this.state;
    const slider = h("input", {
      class: "tv-step-slider",
      attrs: {
        type: "range",
        min: "0",
        max: String(Math.max(0, this.steps.length - 1)),
        step: "1",
        "aria-label": "Step",
      },
      data: { control: "step" },
    });
    const label = h("span", { class: "tv-step-label" });
    this.stepSlider = slider;
    this.stepLabel = label;
    this.syncStepSlider();
    const setFromSlider = debounce(
      () => this.update({ step: this.steps[Number(slider.value)] ?? null }),
      120,
    );
    slider.addEventListener("input", () => {
      label.textContent = `step ${this.steps[Number(slider.value)] ?? "–"}`;
      setFromSlider();
    });
    const types = this.tensorTypes().filter((type) => type !== s.tensorType);
    const overlays = s.overlays ?? [];
    keepFocus(this.histCard.tools, () =>
      replaceChildren(this.histCard.tools, [
        h("div", { class: "tv-row" }, [slider, label]),
        h("div", { class: "tv-row" }, [
          checkbox("count", "histCount", s.histCount, (histCount) => this.update({ histCount })),
          checkbox("log y", "histLog", s.histLog, (histLog) => this.update({ histLog })),
          checkbox("scaled", "scaled", s.scaled, (scaled) => this.update({ scaled })),
          selectControl(
            "columns",
            "colWrap",
            ["1", "2", "3", "4"].map((value) => ({ value, label: value })),
            String(s.colWrap),
            (value) => this.update({ colWrap: Number(value) }),
          ),
        ]),
        h("details", { class: "tv-more" }, [
          h("summary", { text: "formats, tensor types, layers" }),
          multiCheck(
            `Formats (none ticked: dtype, recorded, ${this.defaultOverlays.join(", ")})`,
            "overlays",
            this.formats.map((f) => ({ value: f.format, label: f.format })),
            overlays,
            (chosen) => this.update({ overlays: chosen.length ? chosen : null }),
          ),
          types.length
            ? multiCheck(
                "Also tensor types",
                "extraTypes",
                types.map((type) => ({ value: type, label: type })),
                s.extraTypes.filter((type) => types.includes(type)),
                (extraTypes) => this.update({ extraTypes }),
              )
            : null,
          s.pinned.length || s.layer
            ? multiCheck(
                "Pinned layers",
                "pinned",
                this.panelLayers().map((layer) => ({ value: layer, label: layer })),
                s.pinned,
                (pinned) => this.update({ pinned }),
              )
            : null,
        ]),
      ]),
    );
  }

  private async loadHistograms(): Promise<void> {
    const s = this.state;
    const layers = this.panelLayers();
    if (layers.length === 0) {
      this.panels = [];
      this.histGrid.replaceChildren();
      this.histCard.showEmpty(
        "Click a heatmap cell to see the exponent histogram of that layer at that step.",
        ["Click a line chart to move the step; pin layers to compare them side by side."],
      );
      return;
    }
    this.histCard.clearMessage();
    const types = [s.tensorType, ...s.extraTypes.filter((type) => type !== s.tensorType)];
    const signal = this.signal("histogram");
    const jobs: Promise<{ key: string; data: api.HistogramLayer | null }>[] = [];
    for (const type of types) {
      for (const layer of layers) {
        for (const run of s.runs) {
          const key = `${type}\u0000${layer}\u0000${run}`;
          jobs.push(
            api
              .nullIfMissing(
                api.histogram(
                  {
                    run,
                    tensor_type: type,
                    layer,
                    step: s.step ?? undefined,
                    format: s.overlays ?? undefined,
                  },
                  signal,
                ),
              )
              .then((body) => ({ key, data: body?.layers[0] ?? null })),
          );
        }
      }
    }
    const results = await this.histCard.load(() => Promise.all(jobs));
    if (!results) return;
    const byKey = new Map(results.map((r) => [r.key, r.data]));
    this.panels = [];
    const side = s.compare === "side" && s.runs.length > 1;
    for (const type of types) {
      for (const layer of layers) {
        const runs = s.runs.map((run) => ({
          run,
          colour: this.colours.get(run) ?? "#888",
          data: byKey.get(`${type}\u0000${layer}\u0000${run}`) ?? null,
        }));
        if (side) {
          for (const one of runs)
            this.panels.push({ layer, tensorType: type, runs: [one], caption: one.run });
        } else {
          this.panels.push({ layer, tensorType: type, runs });
        }
      }
    }
    this.drawHistograms();
  }

  private drawHistograms(): void {
    const s = this.state;
    renderHistograms(
      this.histGrid,
      this.panels,
      { count: s.histCount, log: s.histLog, scaled: s.scaled, colWrap: s.colWrap },
      this.formatColours,
    );
    for (const panel of this.histGrid.querySelectorAll<HTMLElement>(".tv-hist-panel")) {
      const layer = panel.dataset.layer ?? "";
      const pinned = this.state.pinned.includes(layer);
      panel.querySelector(".tv-hist-title")?.append(
        button(pinned ? "unpin" : "pin", "pin", () =>
          this.update({
            pinned: pinned
              ? this.state.pinned.filter((l) => l !== layer)
              : [...this.state.pinned, layer],
          }),
        ),
      );
    }
  }

  // ---- lines ----------------------------------------------------------------------------

  private renderLineTools(): void {
    const s = this.state;
    keepFocus(this.lineCard.tools, () =>
      replaceChildren(this.lineCard.tools, [
        h("details", { class: "tv-more" }, [
          h("summary", { text: `metrics (${s.lineMetrics.length})` }),
          multiCheck(
            "Metrics",
            "lineMetrics",
            this.metrics
              .filter((m) => !m.needs_format)
              .map((m) => ({ value: m.metric, label: m.label })),
            s.lineMetrics,
            (lineMetrics) => this.update({ lineMetrics }),
          ),
        ]),
        checkbox("log y", "lineLog", s.lineLog, (lineLog) => this.update({ lineLog })),
      ]),
    );
  }

  private async loadLines(): Promise<void> {
    const s = this.state;
    const layers = this.panelLayers();
    const signal = this.signal("lines");
    const width = this.lineGrid.clientWidth || 800;
    const points = Math.max(50, Math.min(2000, Math.floor(width)));
    const work = async () => {
      const scalarJobs = s.runs
        .filter((run) => this.scalarRuns.has(run))
        .map((run) => api.scalars(run, signal).then((body) => ({ run, body })));
      const seriesJobs =
        layers.length && s.lineMetrics.length
          ? s.runs.map((run) =>
              api
                .nullIfMissing(
                  api.series(
                    {
                      run,
                      tensor_type: s.tensorType,
                      layer: layers,
                      metric: s.lineMetrics,
                      points,
                      reduce: "max",
                    },
                    signal,
                  ),
                )
                .then((body) => ({ run, body })),
            )
          : [];
      return Promise.all([Promise.all(scalarJobs), Promise.all(seriesJobs)]);
    };
    const result = await this.lineCard.load(work);
    if (!result) return;
    const [scalarResults, seriesResults] = result;
    const charts: LineChart[] = [];
    const side = s.compare === "side" && s.runs.length > 1;
    const several = s.runs.length > 1 && !side;
    const groups = side ? s.runs.map((run) => [run]) : [s.runs];
    const tags = new Map<string, { run: string; series: LineSeries }[]>();
    for (const { run, body } of scalarResults) {
      for (const scalar of body.scalars) {
        const list = tags.get(scalar.tag) ?? [];
        const series = {
          label: run,
          colour: this.colours.get(run) ?? "#888",
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
    for (const metric of s.lineMetrics) {
      const label = this.metrics.find((m) => m.metric === metric)?.label ?? metric;
      for (const group of groups) {
        const series: LineSeries[] = [];
        for (const { run, body } of seriesResults) {
          if (!group.includes(run)) continue;
          for (const item of body?.series ?? []) {
            if (item.metric !== metric) continue;
            const dash = DASHES[layers.indexOf(item.layer) % DASHES.length];
            series.push({
              label: several ? `${run} · ${item.layer}` : item.layer,
              colour: several
                ? (this.colours.get(run) ?? "#888")
                : layerColour(layers.indexOf(item.layer)),
              dash: several ? dash : undefined,
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
    this.lineCard.clearMessage();
    if (charts.length === 0) {
      this.lines.destroy();
      this.lineCard.showEmpty(
        layers.length
          ? "Nothing to draw over steps."
          : "No layer chosen and no TensorBoard scalars in these runs.",
        [
          "Click a heatmap cell to draw its metrics here; log your loss with SummaryWriter.add_scalar (in the same run directory) to see it beside them.",
        ],
      );
      return;
    }
    this.lines.render(charts);
    this.lines.setStep(this.state.step);
  }

  // ---- layout ---------------------------------------------------------------------------

  private relayout(): void {
    if (!this.heatmapData) return;
    const wanted = Math.min(10000, this.heatmap.plotWidth());
    if (
      this.heatmapData.columns.length < this.heatmapData.total_steps &&
      wanted !== this.heatmapData.columns.length
    ) {
      void this.loadHeatmap();
    } else {
      this.heatmap.render();
    }
    this.drawHistograms();
    void this.loadLines();
  }

  /** Re-read colours from CSS after a theme change. */
  themeChanged(): void {
    this.heatmap.render();
    if (this.panels.length) this.drawHistograms();
    if (this.runs.length) void this.loadLines();
  }
}

/** The metric as a difference of two runs: centred on 0, labelled with both runs. */
function differenceMetric(metric: MetricInfo, data: api.HeatmapResponse): MetricInfo {
  return {
    ...metric,
    kind: metric.kind === "fraction" ? "statistic" : metric.kind,
    scale: "diverging",
    label: `${metric.label}: ${data.run} − ${data.minus_run}`,
  };
}

/** Whether the layer filter (a regex typed by the user) matches ``name``. */
function safeMatch(pattern: string, name: string): boolean {
  try {
    return new RegExp(pattern).test(name);
  } catch {
    return false;
  }
}

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

function layerColour(index: number): string {
  return LAYER_COLOURS[Math.max(0, index) % LAYER_COLOURS.length];
}

/** Index of the element of sorted ``values`` nearest to ``target`` (the earlier on a tie). */
export function nearestIndex(values: number[], target: number | undefined): number {
  if (values.length === 0 || target === undefined) return values.length - 1;
  let best = 0;
  for (let i = 1; i < values.length; i++) {
    if (Math.abs(values[i] - target) < Math.abs(values[best] - target)) best = i;
  }
  return best;
}
