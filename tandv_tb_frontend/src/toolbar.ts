/** The toolbar: the run picker and what the heatmap shows (type, layers, metric, reduction). */

import { type Option, selectControl, textInput } from "./controls";
import { h, keepFocus, replaceChildren } from "./dom";
import { isBlockFormat, recordedBlockFormats, tensorTypes } from "./rules";
import { runPicker } from "./run_picker";
import type { State } from "./state";
import type { Store } from "./store";

/** The format picker's groups of block-scaled formats (the element formats come first). */
const BLOCKS_RECORDED = "block-scaled (recorded)";
const BLOCKS_MISSING = "block-scaled (not recorded: give it to formats=)";

export class Toolbar {
  readonly root = h("header", { class: "tv-toolbar" });

  /** ``exportSlot`` is kept at the toolbar's end (the export menu draws itself into it). */
  constructor(
    private readonly store: Store,
    private readonly exportSlot: HTMLElement,
  ) {
    store.on(
      [
        "catalog",
        "runs",
        "runRegex",
        "compare",
        "tensorType",
        "layerRegex",
        "metric",
        "metricFormat",
        "reduce",
        "view",
      ],
      () => keepFocus(this.root, () => this.render()),
    );
  }

  private render(): void {
    const s = this.store.state;
    const catalog = s.catalog;
    if (!catalog) return;
    const update = (patch: Partial<State>) => void this.store.update(patch);
    const metric = catalog.metrics.find((m) => m.metric === s.metric);
    const recorded = recordedBlockFormats(catalog, s.runs);
    // A block format chosen that no ticked run recorded (a link, or the runs changed): listed
    // apart as such, so that the heatmap's message says to give it to formats=.
    const missing =
      isBlockFormat(catalog, s.metricFormat) && !recorded.includes(s.metricFormat)
        ? [s.metricFormat]
        : [];
    const formatOptions: Option[] = [
      ...(metric?.needs_block_format
        ? []
        : catalog.formats.map((f) => ({ value: f.format, label: f.format }))),
      ...recorded.map((name) => ({ value: name, label: name, group: BLOCKS_RECORDED })),
      ...missing.map((name) => ({ value: name, label: name, group: BLOCKS_MISSING })),
    ];
    // Metrics of block formats only where a ticked run recorded one (or one is chosen).
    const metrics = catalog.metrics.filter(
      (m) => !m.needs_block_format || recorded.length || m.metric === s.metric,
    );
    replaceChildren(this.root, [
      runPicker(
        catalog.runs.map((run) => run.run),
        s.runRegex,
        s.runs,
        catalog.colours,
        (runRegex) => update({ runRegex }),
        (runs) => update({ runs }),
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
            (compare) => update({ compare: compare as State["compare"] }),
          )
        : null,
      selectControl(
        "View",
        "view",
        [
          { value: "heatmap", label: "layers × steps" },
          { value: "graph", label: "model graph" },
        ],
        s.view,
        (view) => update({ view: view as State["view"] }),
      ),
      selectControl(
        "Tensor type",
        "tensorType",
        tensorTypes(catalog, s.runs).map((type) => ({ value: type, label: type })),
        s.tensorType,
        (tensorType) => update({ tensorType }),
      ),
      textInput("Layers (regex)", "layerRegex", s.layerRegex, "e.g. attn|mlp", (layerRegex) =>
        update({ layerRegex }),
      ),
      selectControl(
        "Metric",
        "metric",
        metrics.map((m) => ({ value: m.metric, label: m.label })),
        s.metric,
        (value) => update({ metric: value }),
      ),
      metric?.needs_format
        ? selectControl("Format", "metricFormat", formatOptions, s.metricFormat, (metricFormat) =>
            update({ metricFormat }),
          )
        : null,
      selectControl(
        "Per column",
        "reduce",
        ["max", "min", "mean", "last"].map((value) => ({ value, label: value })),
        s.reduce,
        (reduce) => update({ reduce: reduce as State["reduce"] }),
      ),
      this.exportSlot,
    ]);
  }
}
