/**
 * The "Findings" card: each ticked run's headline and the grouped findings; a click shows
 * one. While the user has chosen no view of their own (``followHeadline``), the tab shows
 * the headline by itself: the first problem of the ticked runs, in the heatmap and the
 * histogram.
 */

import { type Finding, findings } from "./findings_api";
import { Card } from "./card";
import { FindingsList } from "./findings";
import { findingView, headlineToOpen } from "./finding_view";
import type { HeatmapCard } from "./heatmap_card";
import type { Store } from "./store";

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
    const data = await this.card.load(() => findings(runs, signal));
    if (!data) return;
    void this.store.update({ findings: data });
    if (data.findings.length === 0) {
      this.list.clear();
      this.card.showEmpty(`No findings in ${runs.join(", ")}.`, [
        "No NaN/Inf, no over- or underflow of the recorded formats, no drift, dead tensor, loss spike or divergence between the ticked runs.",
      ]);
      return;
    }
    this.card.clearMessage();
    this.list.render(data, s.catalog.colours);
    const headline = headlineToOpen(data);
    if (headline && this.store.state.followHeadline) this.show(headline, true);
  }

  /** Show a finding; ``opening``: the tab's own view of the headline, not the user's. */
  private show(finding: Finding, opening = false): void {
    const patch = findingView(finding, this.store.state, this.heatmap);
    this.list.mark(finding);
    void this.store.update(opening ? { ...patch, headlineShown: finding } : patch);
  }
}
