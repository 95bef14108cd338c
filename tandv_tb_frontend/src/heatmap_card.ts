/** The "Layers × steps" card: loads the run's layers and its heatmap, draws it, its tools. */

import * as api from "./api";
import type { MetricInfo } from "./api";
import type { Params } from "./http";
import { Card } from "./card";
import { button, selectControl } from "./controls";
import { type Child, h, replaceChildren } from "./dom";
import { Heatmap } from "./heatmap";
import { layersCurrent } from "./rules";
import type { State } from "./state";
import type { Store } from "./store";
import { autoExpanded } from "./tree";

/** With ``groups: "auto"``, group levels open while the heatmap keeps at most this many rows. */
const AUTO_ROWS = 128;

export class HeatmapCard {
  readonly card = new Card("heatmap", "Layers × steps");
  readonly heatmap: Heatmap;
  /** The groups ``groups: "auto"`` opens for the loaded heatmap's layers. */
  private autoOpen = new Set<string>();
  /** A layer (of a clicked finding) whose groups open once its heatmap has loaded. */
  private revealLayer = "";
  /** The plot's width at the last relayout. */
  private drawnWidth = -1;

  constructor(private readonly store: Store) {
    this.heatmap = new Heatmap({
      select: (layer, step) => void store.update({ layer, step }),
      toggle: (prefix) => this.toggleGroup(prefix),
      zoom: (window) => void store.update({ window }),
    });
    this.card.body.append(this.heatmap.root);
    store.on(["catalog", "heatmapRun", "tensorType"], () => this.loadLayers());
    store.on(
      ["layerList", "layerRegex", "metric", "metricFormat", "reduce", "window", "minusRun", "view"],
      () => this.load(),
    );
    store.on(["heatmapData", "toggled", "groups"], () => this.draw());
    store.on(["runs", "heatmapRun", "minusRun", "groups", "window", "view"], () =>
      this.renderTools(),
    );
    store.on(["layer", "step"], () => {
      const s = this.store.state;
      this.heatmap.setSelected(s.layer, s.step);
    });
  }

  /** The heatmap route's parameters for the current choices (null until they are known). */
  params(): Params | null {
    const s = this.store.state;
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

  /**
   * Groups to open so that ``layer`` shows: ``toggled`` with them open when the drawn rows
   * are those ``sameRows`` says; otherwise null, and they open once the heatmap loads.
   */
  reveal(layer: string, sameRows: boolean): string[] | null {
    if (layer && sameRows && this.store.state.heatmapData) return this.opened(layer);
    this.revealLayer = layer;
    return null;
  }

  /** Draw again if the plot's width changed (more columns are fetched when it grew). */
  relayout(): void {
    const data = this.store.state.heatmapData;
    const width = this.heatmap.plotWidth();
    if (!data || width === this.drawnWidth) return;
    this.drawnWidth = width;
    const wanted = Math.min(10000, width);
    if (data.columns.length < data.total_steps && wanted !== data.columns.length) {
      void this.load();
    } else {
      this.heatmap.render();
    }
  }

  private metricInfo(): MetricInfo | undefined {
    const s = this.store.state;
    return s.catalog?.metrics.find((m) => m.metric === s.metric);
  }

  private async loadLayers(): Promise<void> {
    const s = this.store.state;
    if (!s.catalog || !s.heatmapRun || !s.tensorType) return;
    const { heatmapRun: run, tensorType } = s;
    const signal = this.card.signal("layers");
    const result = await this.card.load(() =>
      Promise.all([api.layers(run, tensorType, signal), api.steps(run, tensorType, signal)]),
    );
    if (!result) return;
    const [layers, steps] = result;
    await this.store.update({
      layerList: { run, tensorType, layers: layers.layers, steps: steps.steps },
    });
  }

  private async load(): Promise<void> {
    const s = this.store.state;
    const params = this.params();
    if (!params || !layersCurrent(s) || s.view !== "heatmap") return;
    const signal = this.card.signal("heatmap");
    const data = await this.card.load(() => api.heatmap(params, signal));
    const now = this.store.state;
    // An answer for a run or tensor type left meanwhile (a finding opened before it came):
    // its own load follows once that run's layers have loaded.
    if (data && (now.heatmapRun !== params.run || now.tensorType !== params.tensor_type)) return;
    if (!data) {
      if (this.card.root.dataset.state === "error") this.heatmap.root.hidden = true;
      return;
    }
    this.autoOpen = autoExpanded(
      data.layers.map((layer) => layer.layer),
      AUTO_ROWS,
    );
    const patch: Partial<State> = {};
    if (this.revealLayer) {
      patch.toggled = this.opened(this.revealLayer);
      this.revealLayer = "";
    }
    if (data.layers.length === 0) {
      this.heatmap.root.hidden = true;
      this.card.showEmpty(
        now.layerRegex
          ? `No ${now.tensorType} layer matches /${now.layerRegex}/.`
          : `No ${now.tensorType} layers in ${now.heatmapRun}.`,
        ["Change the layer filter or the tensor type."],
      );
    } else {
      this.card.clearMessage();
      this.heatmap.root.hidden = false;
    }
    await this.store.update({ ...patch, heatmapData: data });
    if (data.layers.length) this.heatmap.revealSelected();
  }

  private draw(): void {
    const s = this.store.state;
    const data = s.heatmapData;
    const metric = this.metricInfo();
    if (!data || !metric || data.layers.length === 0) return;
    this.heatmap.setData(
      data,
      data.minus_run ? differenceMetric(metric, data) : metric,
      this.isExpanded,
    );
    this.heatmap.setSelected(s.layer, s.step);
  }

  private renderTools(): void {
    const s = this.store.state;
    const update = (patch: Partial<State>) => void this.store.update(patch);
    if (s.view !== "heatmap") {
      this.card.tools.replaceChildren(); // the graph's card has the run menus then
      return;
    }
    replaceChildren(this.card.tools, [
      ...runControls(s, update),
      selectControl(
        "Groups",
        "groups",
        [
          { value: "auto", label: "auto" },
          { value: "expanded", label: "all open" },
          { value: "collapsed", label: "all closed" },
        ],
        s.groups,
        (groups) => update({ groups: groups as State["groups"], toggled: [] }),
      ),
      s.window
        ? button(
            `Steps ${s.window[0]}–${s.window[1]} ✕`,
            "resetZoom",
            () => update({ window: null }),
            "Show every step (or double-click the heatmap)",
          )
        : h("span", { class: "tv-muted tv-hint", text: "wheel: zoom · drag: pan" }),
    ]);
  }

  /** ``toggled`` with every group holding ``layer`` open. */
  private opened(layer: string): string[] {
    const toggled = new Set(this.store.state.toggled);
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
    const toggled = new Set(this.store.state.toggled);
    if (toggled.has(prefix)) toggled.delete(prefix);
    else toggled.add(prefix);
    void this.store.update({ toggled: [...toggled] });
  }

  private isExpanded = (prefix: string): boolean => {
    const { groups, toggled } = this.store.state;
    const open = groups === "expanded" || (groups === "auto" && this.autoOpen.has(prefix));
    return open !== toggled.includes(prefix);
  };
}

/** The run shown and the run subtracted from it (the heatmap's and the graph's). */
export function runControls(s: State, update: (patch: Partial<State>) => void): Child[] {
  if (s.runs.length < 2) return [h("span", { class: "tv-muted", text: s.heatmapRun })];
  return [
    selectControl(
      "Run",
      "heatmapRun",
      s.runs.map((run) => ({ value: run, label: run })),
      s.heatmapRun,
      (heatmapRun) => update({ heatmapRun }),
    ),
    selectControl(
      "minus",
      "minusRun",
      [
        { value: "", label: "—" },
        ...s.runs.filter((run) => run !== s.heatmapRun).map((run) => ({ value: run, label: run })),
      ],
      s.minusRun,
      (minusRun) => update({ minusRun }),
    ),
  ];
}

/** The metric as a difference of two runs: centred on 0, labelled with both runs. */
export function differenceMetric(metric: MetricInfo, data: api.HeatmapResponse): MetricInfo {
  return {
    ...metric,
    kind: metric.kind === "fraction" ? "statistic" : metric.kind,
    scale: "diverging",
    label: `${metric.label}: ${data.run} − ${data.minus_run}`,
  };
}
