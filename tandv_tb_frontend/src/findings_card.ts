/** The "Findings" card: what the ticked runs' findings are, and a click shows one. */

import * as api from "./api";
import { Card } from "./card";
import { FindingsList } from "./findings";
import type { HeatmapCard } from "./heatmap_card";
import type { Model, Store } from "./store";

export class FindingsCard {
  readonly card = new Card("findings", "Findings");
  private readonly list = new FindingsList((finding) => this.show(finding));

  constructor(
    private readonly store: Store,
    private readonly heatmap: HeatmapCard,
  ) {
    this.card.body.append(this.list.root);
    // Not awaited: the page is ready without them (they can take a while on a big logdir).
    store.on(["catalog", "runs"], () => void this.load());
  }

  private async load(): Promise<void> {
    const s = this.store.state;
    if (!s.catalog) return;
    const runs = s.runs;
    const signal = this.card.signal("findings");
    const data = await this.card.load(() => api.findings(runs, signal));
    if (!data) return;
    if (data.findings.length === 0) {
      this.list.clear();
      this.card.showEmpty(`No findings in ${runs.join(", ")}.`, [
        "No NaN/Inf, no over- or underflow of the recorded formats, no drift, dead tensor, loss spike or divergence between the ticked runs.",
      ]);
      return;
    }
    this.card.clearMessage();
    this.list.render(data, s.catalog.colours);
  }

  /** Show a finding: its run, tensor type, layer and step (a divergence as a difference). */
  private show(finding: api.Finding): void {
    const s = this.store.state;
    const patch: Partial<Model> = {
      heatmapRun: finding.run,
      step: finding.step,
      minusRun: finding.kind === "divergence" ? (finding.other_run ?? "") : "",
    };
    if (finding.tensor_type) patch.tensorType = finding.tensor_type;
    const compared = this.list.divergenceMetric;
    if (finding.kind === "divergence" && s.catalog?.metrics.some((m) => m.metric === compared)) {
      patch.metric = compared;
    }
    if (finding.name) {
      patch.layer = finding.name;
      if (s.layerRegex && !safeMatch(s.layerRegex, finding.name)) patch.layerRegex = "";
    }
    if (s.window && (finding.step < s.window[0] || finding.step > s.window[1])) patch.window = null;
    const sameRows =
      finding.run === s.heatmapRun && (patch.tensorType ?? s.tensorType) === s.tensorType;
    const toggled = this.heatmap.reveal(finding.name, sameRows);
    if (toggled) patch.toggled = toggled;
    this.list.mark(finding);
    void this.store.update(patch);
  }
}

/** Whether the layer filter (a regex typed by the user) matches ``name``. */
function safeMatch(pattern: string, name: string): boolean {
  try {
    return new RegExp(pattern).test(name);
  } catch {
    return false;
  }
}
