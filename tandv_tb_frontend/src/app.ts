/** The Numerics tab: one store of the state, the cards that depend on it, loading and layout. */

import * as api from "./api";
import { runColors } from "./colors";
import { debounce, emptyState, h, replaceChildren } from "./dom";
import { ExportMenu } from "./export_menu";
import { FindingsCard } from "./findings_card";
import { GraphCard } from "./graph_card";
import { HeatmapCard } from "./heatmap_card";
import { HistogramCard } from "./histogram_card";
import { ApiError, isAbort } from "./http";
import { LinesCard } from "./lines_card";
import { rules } from "./rules";
import type { State } from "./state";
import { type Catalog, Store } from "./store";
import { Toolbar } from "./toolbar";

export const HOW_TO_RECORD = `import tandv_tb.torch
tracker = tandv_tb.torch.track(model, logdir="runs/exp", optimizer=optimizer)
tracker.step()  # once per training step, after optimizer.step()`;

/** What to do about a logdir's storage that failed, by ``ApiError.storage``. */
const STORAGE_HINTS: Record<string, string> = {
  denied:
    "Check the credentials TensorBoard runs with (environment variables, ~/.aws or the cloud SDK's login) and their access to the bucket.",
  missing: "Check the bucket and the path given to --logdir.",
  unreachable:
    "Check the endpoint (AWS_ENDPOINT_URL, S3_ENDPOINT) and the network; the tab tries again at TensorBoard's next reload.",
  failed: "See TensorBoard's log; the tab tries again at its next reload.",
  cache:
    "Free space in the cache folder, or start TensorBoard with --tandv_cache_dir naming a folder that can be written.",
};
/** The title of a storage failure, by ``ApiError.storage`` (the logdir's, unless named). */
const STORAGE_TITLES: Record<string, string> = {
  cache: "The Numerics store could not be written.",
};

export class App {
  private readonly store: Store;
  private readonly toolbar: Toolbar;
  private readonly heatmap: HeatmapCard;
  private readonly graph: GraphCard;
  private readonly histograms: HistogramCard;
  private readonly lines: LinesCard;
  private readonly cards: HTMLElement[];
  private readonly main = h("main", { class: "tv-main" });
  /** What the plugin says of itself (``RunsResponse.notices``), above everything else. */
  private readonly notices = h("div", { class: "tv-notices", attrs: { role: "status" } });
  private refreshing: Promise<void> | null = null;
  private refreshAgain = false;

  constructor(
    private readonly root: HTMLElement,
    initial: State,
  ) {
    this.store = new Store(initial, rules);
    // The order of construction is the order in which the dependents of a change run:
    // the chosen view is shown first, so that a card loads knowing its size.
    this.store.on(["view"], () => this.showView());
    this.heatmap = new HeatmapCard(this.store);
    this.graph = new GraphCard(this.store);
    const exportMenu = new ExportMenu(this.store, () => this.heatmap.params());
    this.toolbar = new Toolbar(this.store, exportMenu.root);
    const findings = new FindingsCard(this.store, this.heatmap);
    this.histograms = new HistogramCard(this.store);
    this.lines = new LinesCard(this.store, (step) => this.heatmap.heatmap.showStep(step));
    this.cards = [
      findings.card.root,
      h("div", { class: "tv-top" }, [
        this.heatmap.card.root,
        this.graph.card.root,
        this.histograms.card.root,
      ]),
      this.lines.card.root,
    ];
    replaceChildren(this.root, [
      h("div", { class: "tv-app" }, [this.toolbar.root, this.notices, this.main]),
    ]);
    this.showView();
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

  private async loadAll(): Promise<void> {
    this.root.dataset.state = "loading";
    const known = this.store.state.catalog;
    let catalog: Catalog;
    try {
      const [runs, formats, metrics] = await Promise.all([
        api.runs(),
        known ? null : api.formats(),
        known ? null : api.metrics(),
      ]);
      replaceChildren(
        this.notices,
        (runs.notices ?? []).map((text) => h("p", { class: "tv-notice", text })),
      );
      catalog = {
        runs: runs.runs,
        scalarRuns: new Set(runs.scalar_runs),
        tensorTypes: runs.tensor_types,
        colours: runColors(runs.runs.map((r) => r.run)),
        formats: formats?.formats ?? known?.formats ?? [],
        blockFormats: formats?.block_formats ?? known?.blockFormats ?? [],
        defaultOverlays: formats?.default_overlays ?? known?.defaultOverlays ?? [],
        metrics: metrics?.metrics ?? known?.metrics ?? [],
      };
    } catch (error) {
      if (isAbort(error)) return;
      this.root.dataset.state = "error";
      const storage = error instanceof ApiError ? error.storage : null;
      this.root.dataset.storage = storage ?? "";
      const message = error instanceof Error ? error.message : String(error);
      replaceChildren(this.main, [
        storage
          ? emptyState(STORAGE_TITLES[storage] ?? "The logdir's storage could not be read.", [
              message,
              STORAGE_HINTS[storage] ?? STORAGE_HINTS.failed,
            ])
          : emptyState("The Numerics data could not be loaded.", [message]),
      ]);
      return;
    }
    if (catalog.runs.length === 0) {
      this.root.dataset.state = "empty";
      this.toolbar.root.replaceChildren();
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
    this.root.dataset.storage = "";
    if (!this.main.contains(this.heatmap.card.root)) replaceChildren(this.main, this.cards);
    await this.store.update({ catalog });
    this.root.dataset.state = "ready";
  }

  /** Show the heatmap's card or the graph's, as chosen. */
  private showView(): void {
    const graph = this.store.state.view === "graph";
    this.heatmap.card.root.hidden = graph;
    this.graph.card.root.hidden = !graph;
  }

  /** The page changed size: redraw (or refetch) what changed width, and only that. */
  private relayout(): void {
    this.heatmap.relayout();
    this.graph.resized();
    this.histograms.resized();
    this.lines.resized();
  }

  /** Re-read colours from CSS after a theme change. */
  themeChanged(): void {
    this.heatmap.heatmap.render();
    this.histograms.draw();
    void this.lines.load();
  }
}
