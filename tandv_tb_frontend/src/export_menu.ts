/** The "Export CSV" menu: links to the CSV routes for what the tab shows. */

import { type Params, url } from "./http";
import { h, replaceChildren } from "./dom";
import { panelLayers } from "./rules";
import type { Store } from "./store";

export class ExportMenu {
  readonly root = h("div", { class: "tv-export-slot" });

  /** ``heatmapParams`` gives the heatmap route's parameters as the heatmap card asks them. */
  constructor(
    private readonly store: Store,
    private readonly heatmapParams: () => Params | null,
  ) {
    store.on(
      [
        "catalog",
        "heatmapData",
        "runs",
        "heatmapRun",
        "tensorType",
        "layer",
        "pinned",
        "step",
        "lineMetrics",
        "metricFormat",
      ],
      () => this.render(),
    );
  }

  private render(): void {
    const s = this.store.state;
    const links: [string, string][] = [];
    const heat = this.heatmapParams();
    if (heat) links.push([`Heatmap (${s.heatmapRun})`, url("heatmap.csv", heat)]);
    const layers = panelLayers(s);
    for (const run of s.runs) {
      if (layers.length) {
        const common = { run, tensor_type: s.tensorType, layer: layers };
        links.push([
          `Histograms (${run})`,
          url("histogram.csv", { ...common, step: s.step ?? undefined }),
        ]);
        links.push([
          `Series (${run})`,
          url("series.csv", { ...common, metric: s.lineMetrics, format: s.metricFormat }),
        ]);
        if (s.catalog?.runs.find((r) => r.run === run)?.block_formats.length) {
          // every step of each block format of the layers: counts, SNR, blocks per scale
          links.push([`Block formats (${run})`, url("blocks.csv", common)]);
        }
      }
      if (s.catalog?.scalarRuns.has(run))
        links.push([`Scalars (${run})`, url("scalars.csv", { run })]);
      links.push([`Layers (${run})`, url("layers.csv", { run, tensor_type: s.tensorType })]);
    }
    replaceChildren(this.root, [
      h("details", { class: "tv-export", data: { control: "export" } }, [
        h("summary", { class: "tv-button", text: "Export CSV" }),
        h(
          "div",
          { class: "tv-export-menu" },
          links.map(([label, href]) =>
            h("a", { text: label, attrs: { href, download: "" }, data: { export: label } }),
          ),
        ),
      ]),
    ]);
  }
}
