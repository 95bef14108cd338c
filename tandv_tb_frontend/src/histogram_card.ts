/** The "Exponent histogram" card: a panel per layer, tensor type (and run), its step slider. */

import * as api from "./api";
import { Card } from "./card";
import { button, checkbox, multiCheck, selectControl } from "./controls";
import { debounce, h, keepFocus, replaceChildren } from "./dom";
import { FormatColours } from "./cast_table";
import { type Panel, renderHistograms } from "./histogram";
import { recordedLayers } from "./run_layers";
import {
  isBlockFormat,
  layersCurrent,
  panelLayers,
  recordedBlockFormats,
  tensorTypes,
} from "./rules";
import type { State } from "./state";
import type { Store } from "./store";

export class HistogramCard {
  readonly card = new Card("histogram", "Exponent histogram");
  private readonly grid = h("div", { class: "tv-hist-grid" });
  private readonly formatColours = new FormatColours();
  private panels: Panel[] = [];
  /** The grid's width when the panels were last drawn. */
  private drawnWidth = -1;
  private slider: HTMLInputElement | null = null;
  private stepLabel: HTMLElement | null = null;

  constructor(private readonly store: Store) {
    this.card.body.append(this.grid);
    const shape = ["histCount", "histLog", "scaled", "colWrap"] as const;
    const chosen = ["layer", "pinned", "extraTypes", "overlays"] as const;
    store.on(["layerList", "runs", ...chosen, "step", "compare"], () => this.load());
    store.on([...shape], () => this.draw());
    store.on(["catalog", "layerList", "runs", "tensorType", ...chosen, ...shape], () =>
      this.renderTools(),
    );
    store.on(["step", "layer"], () => this.syncSlider());
  }

  /** Draw the panels again if the page's new size changed their width. */
  resized(): void {
    if (this.grid.clientWidth !== this.drawnWidth) this.draw();
  }

  /** Draw the loaded panels again (new size, new theme). */
  draw(): void {
    const s = this.store.state;
    this.drawnWidth = this.grid.clientWidth;
    renderHistograms(
      this.grid,
      this.panels,
      { count: s.histCount, log: s.histLog, scaled: s.scaled, colWrap: s.colWrap },
      this.formatColours,
    );
    for (const panel of this.grid.querySelectorAll<HTMLElement>(".tv-hist-panel")) {
      const layer = panel.dataset.layer ?? "";
      const pinned = s.pinned.includes(layer);
      panel.querySelector(".tv-hist-title")?.append(
        button(pinned ? "unpin" : "pin", "pin", () => {
          const now = this.store.state.pinned;
          void this.store.update({
            pinned: pinned ? now.filter((l) => l !== layer) : [...now, layer],
          });
        }),
      );
    }
  }

  private steps(): number[] {
    return this.store.state.layerList?.steps ?? [];
  }

  private syncSlider(): void {
    if (!this.slider || !this.stepLabel) return;
    const steps = this.steps();
    const step = this.store.state.step ?? steps[steps.length - 1];
    const index = nearestIndex(steps, step);
    this.slider.value = String(Math.max(0, index));
    this.stepLabel.textContent = `step ${steps[index] ?? "–"}`;
  }

  private renderTools(): void {
    const s = this.store.state;
    const catalog = s.catalog;
    if (!catalog) return;
    const update = (patch: Partial<State>) => void this.store.update(patch);
    const steps = this.steps();
    const slider = h("input", {
      class: "tv-step-slider",
      attrs: {
        type: "range",
        min: "0",
        max: String(Math.max(0, steps.length - 1)),
        step: "1",
        "aria-label": "Step",
      },
      data: { control: "step" },
    });
    const label = h("span", { class: "tv-step-label" });
    this.slider = slider;
    this.stepLabel = label;
    this.syncSlider();
    const setFromSlider = debounce(
      () => update({ step: steps[Number(slider.value)] ?? null }),
      120,
    );
    slider.addEventListener("input", () => {
      label.textContent = `step ${steps[Number(slider.value)] ?? "–"}`;
      setFromSlider();
    });
    const types = tensorTypes(catalog, s.runs).filter((type) => type !== s.tensorType);
    const layers = panelLayers(s);
    const blocks = recordedBlockFormats(catalog, s.runs);
    const ticked = s.overlays ?? [];
    const elementTicked = ticked.filter((f) => !isBlockFormat(catalog, f));
    const blockTicked = ticked.filter((f) => isBlockFormat(catalog, f));
    const overlays = (chosen: string[]) => update({ overlays: chosen.length ? chosen : null });
    keepFocus(this.card.tools, () =>
      replaceChildren(this.card.tools, [
        h("div", { class: "tv-row" }, [slider, label]),
        h("div", { class: "tv-row" }, [
          checkbox("count", "histCount", s.histCount, (histCount) => update({ histCount })),
          checkbox("log y", "histLog", s.histLog, (histLog) => update({ histLog })),
          checkbox("scaled", "scaled", s.scaled, (scaled) => update({ scaled })),
          selectControl(
            "columns",
            "colWrap",
            ["1", "2", "3", "4"].map((value) => ({ value, label: value })),
            String(s.colWrap),
            (value) => update({ colWrap: Number(value) }),
          ),
        ]),
        h("details", { class: "tv-more" }, [
          h("summary", { text: "formats, tensor types, layers" }),
          multiCheck(
            `Formats (none ticked: dtype, recorded, ${catalog.defaultOverlays.join(", ")}, ` +
              "and every block-scaled format recorded)",
            "overlays",
            catalog.formats.map((f) => ({ value: f.format, label: f.format })),
            elementTicked,
            (chosen) => overlays([...chosen, ...blockTicked]),
          ),
          multiCheck(
            blocks.length
              ? "Block-scaled formats (recorded: exact, never estimated)"
              : "Block-scaled formats: none recorded (give them to formats= when tracking)",
            "blockOverlays",
            [...new Set([...blocks, ...blockTicked])].map((f) => ({ value: f, label: f })),
            blockTicked,
            (chosen) => overlays([...elementTicked, ...chosen]),
          ),
          types.length
            ? multiCheck(
                "Also tensor types",
                "extraTypes",
                types.map((type) => ({ value: type, label: type })),
                s.extraTypes.filter((type) => types.includes(type)),
                (extraTypes) => update({ extraTypes }),
              )
            : null,
          layers.length
            ? multiCheck(
                "Pinned layers",
                "pinned",
                layers.map((layer) => ({ value: layer, label: layer })),
                s.pinned,
                (pinned) => update({ pinned }),
              )
            : null,
        ]),
      ]),
    );
  }

  private async load(): Promise<void> {
    const s = this.store.state;
    const catalog = s.catalog;
    if (!catalog || !layersCurrent(s)) return;
    const layers = panelLayers(s);
    if (layers.length === 0) {
      this.panels = [];
      this.grid.replaceChildren();
      this.card.showEmpty(
        "Click a heatmap cell to see the exponent histogram of that layer at that step.",
        ["Click a line chart to move the step; pin layers to compare them side by side."],
      );
      return;
    }
    this.card.clearMessage();
    const types = [s.tensorType, ...s.extraTypes.filter((type) => type !== s.tensorType)];
    const signal = this.card.signal("histogram");
    const isBlock = (name: string) => !!s.catalog && isBlockFormat(s.catalog, name);
    const ticked = s.overlays;
    /** The formats of a layer the user ticked (every one sent back, when none is ticked). */
    const shown = (data: api.HistogramLayer | undefined): api.HistogramLayer | null => {
      if (!data) return null;
      if (!ticked) return data;
      return {
        ...data,
        formats: data.formats.filter((f) => ticked.includes(f.format)),
        blocks: data.blocks.filter((b) => ticked.includes(b.format)),
      };
    };
    const missing = (data: api.HistogramLayer | null) =>
      data
        ? (ticked ?? []).filter((f) => isBlock(f) && !data.blocks.some((b) => b.format === f))
        : [];
    const key = (type: string, layer: string, run: string) => `${type}\u0000${layer}\u0000${run}`;
    // Block formats are never asked for by name: each layer sends every one it recorded
    // (few, exact), and only those ticked are shown.
    const elements = (s.overlays ?? []).filter((f) => !isBlock(f));
    /** The histograms of the chosen layers that ``run`` recorded as ``type``. */
    const fetchRun = async (type: string, run: string) => {
      const recorded = await recordedLayers(catalog, run, type);
      const query = (layer: string) => ({
        run,
        tensor_type: type,
        layer,
        step: s.step ?? undefined,
        format: elements.length ? elements : undefined,
      });
      return Promise.all(
        layers
          .filter((layer) => recorded.has(layer))
          .map(async (layer) => {
            const body = await api.histogram(query(layer), signal);
            return { key: key(type, layer, run), data: shown(body.layers[0]) };
          }),
      );
    };
    const jobs = types.flatMap((type) => s.runs.map((run) => fetchRun(type, run)));
    const results = await this.card.load(() => Promise.all(jobs));
    if (!results) return;
    const byKey = new Map(results.flat().map((r) => [r.key, r.data]));
    const colours = s.catalog?.colours ?? new Map<string, string>();
    this.panels = [];
    const side = s.compare === "side" && s.runs.length > 1;
    for (const type of types) {
      for (const layer of layers) {
        const runs = s.runs.map((run) => {
          const data = byKey.get(key(type, layer, run)) ?? null;
          return { run, colour: colours.get(run) ?? "#888", data, notRecorded: missing(data) };
        });
        if (side) {
          for (const one of runs)
            this.panels.push({ layer, tensorType: type, runs: [one], caption: one.run });
        } else {
          this.panels.push({ layer, tensorType: type, runs });
        }
      }
    }
    this.draw();
  }
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
