/**
 * The Findings card's list (the ``findings`` route): first each run's headline (its first
 * problem, or "no problem found"), then the grouped findings, most severe first: one row
 * per condition many tensors share (one run, kind, format and tensor type), the findings it
 * stands for (one per tensor) behind a disclosure, drawn when opened. The groups that are
 * expected of the recorded formats (an unscaled format's underflow and the scales that
 * remedy it; every group of a block-scaled format) are folded into at most two rows per run
 * (its element formats, its block formats), as ``tandv-tb findings`` prints them, the
 * groups behind the fold's disclosure. Info rows (scales, loss spikes) sit in one closed section. Last, which
 * runs were compared. Every headline, fold, group and finding is a button that asks the app
 * to show it (a fold or group shows its first finding). Names and messages enter the page
 * as text only.
 */

import type { Finding, FindingFold, FindingGroup, FindingsResponse } from "./findings_api";
import { h, keepFocus, replaceChildren } from "./dom";

const SEVERITIES = ["error", "warning", "info"] as const;
/** At most this many findings drawn under one group (``tandv-tb findings --all`` lists all). */
const MAX_PER_GROUP = 500;

const PLURAL: Record<string, string> = { error: "errors", warning: "warnings", info: "info" };

export class FindingsList {
  readonly root = h("div", { class: "tv-findings" });
  private buttons = new Map<HTMLButtonElement, Finding>();
  /** The finding last shown (by its content), kept marked when the list is redrawn. */
  private chosen = "";

  constructor(private readonly choose: (finding: Finding) => void) {}

  clear(): void {
    this.buttons.clear();
    this.root.replaceChildren();
  }

  /** Draw ``data``; ``colours`` maps a run to its colour. */
  render(data: FindingsResponse, colours: Map<string, string>): void {
    this.buttons.clear();
    const folded = new Set(data.folds.flatMap((fold) => fold.groups));
    const top: Row[] = [
      ...data.groups.filter((_, i) => !folded.has(i)).map((group) => ({ group })),
      ...data.folds.map((fold) => ({ fold })),
    ];
    top.sort((a, b) => compareRows(itemOf(a), itemOf(b)));
    const bySeverity = new Map<string, Row[]>(SEVERITIES.map((s) => [s, []]));
    for (const row of top) bySeverity.get(itemOf(row).severity)?.push(row);
    const counts = SEVERITIES.filter((s) => bySeverity.get(s)?.length).map((s) => {
      const count = bySeverity.get(s)?.length ?? 0;
      return `${count} ${count === 1 ? s : PLURAL[s]}`;
    });
    const total = data.findings.length;
    const sections: HTMLElement[] = [
      this.headlines(data, colours),
      h("div", {
        class: "tv-findings-summary tv-muted",
        text: `${counts.join(" · ")} (${total} finding${total === 1 ? "" : "s"} in all)`,
      }),
    ];
    for (const severity of SEVERITIES) {
      const listed = bySeverity.get(severity) ?? [];
      if (!listed.length) continue;
      const rows = listed.map((row) =>
        row.group
          ? this.group(row.group, data.findings, colours)
          : this.fold(row.fold, data, colours),
      );
      if (severity === "info") {
        sections.push(
          h("details", { class: "tv-findings-info", data: { severity } }, [
            h("summary", { text: `${listed.length} info (${kindCounts(listed.map(itemOf))})` }),
            ...rows,
          ]),
        );
      } else {
        sections.push(h("div", { class: "tv-findings-section", data: { severity } }, rows));
      }
    }
    if (data.compared) {
      sections.push(
        h("div", {
          class: "tv-findings-compared tv-muted",
          text: data.compared,
        }),
      );
    }
    // TensorBoard's reload redraws the list: the sections the user opened stay open.
    keepFocus(this.root, () => replaceChildren(this.root, sections));
    this.markChosen();
  }

  /** Mark ``finding`` as the one shown (every button that shows it). */
  mark(finding: Finding): void {
    this.chosen = identity(finding);
    this.markChosen();
  }

  private markChosen(): void {
    for (const [button, item] of this.buttons) {
      button.setAttribute("aria-pressed", String(identity(item) === this.chosen));
    }
  }

  private headlines(data: FindingsResponse, colours: Map<string, string>): HTMLElement {
    const rows = data.headlines.map((headline) => {
      const finding = headline.finding === null ? null : data.findings[headline.finding];
      const where = h("span", { class: "tv-finding-where" }, [
        swatch(colours, headline.run),
        headline.run,
      ]);
      const message = h("span", { class: "tv-finding-message", text: headline.message });
      if (!finding) {
        return h("div", { class: "tv-headline", data: { run: headline.run, problem: "false" } }, [
          where,
          message,
        ]);
      }
      const about = { severity: finding.severity, kind: finding.kind, step: String(finding.step) };
      return this.button(finding, "tv-headline", { problem: "true", ...about }, [where, message]);
    });
    return h("div", { class: "tv-headlines" }, rows);
  }

  private group(
    group: FindingGroup,
    findings: Finding[],
    colours: Map<string, string>,
  ): HTMLElement {
    const members = group.findings.map((i) => findings[i]);
    const first = members[0];
    const row = this.button(
      first,
      `tv-finding tv-finding-group tv-severity-${group.severity}`,
      {
        severity: group.severity,
        kind: group.kind,
        run: group.run,
        step: String(group.step),
        tensors: String(group.tensors),
      },
      [
        h("span", { class: "tv-finding-badge", text: group.kind }),
        h("span", { class: "tv-finding-where" }, [
          swatch(colours, group.run),
          `${group.run} · step ${group.step}`,
        ]),
        h("span", { class: "tv-finding-message", text: group.message }),
      ],
    );
    if (members.length < 2) return h("div", { class: "tv-findings-row" }, [row]);
    const each = h("details", { class: "tv-findings-each" }, [
      h("summary", { text: `${members.length} findings: ${kindCounts(members)}` }),
    ]);
    each.addEventListener("toggle", () => {
      if (!each.open || each.dataset.drawn) return;
      each.dataset.drawn = "true";
      const drawn = members.slice(0, MAX_PER_GROUP);
      each.append(...drawn.map((finding) => this.member(finding, colours)));
      if (members.length > drawn.length) {
        each.append(
          h("div", {
            class: "tv-muted",
            text: `and ${members.length - drawn.length} more: tandv-tb findings LOGDIR --all lists every one`,
          }),
        );
      }
      this.markChosen();
    });
    return h("div", { class: "tv-findings-row" }, [row, each]);
  }

  /** A fold: one row saying its groups together; the groups (drawn now, so that a redraw
   * keeps open what was open) behind its disclosure. */
  private fold(fold: FindingFold, data: FindingsResponse, colours: Map<string, string>) {
    const groups = fold.groups.map((i) => data.groups[i]);
    const row = this.button(
      data.findings[groups[0].findings[0]],
      `tv-finding tv-finding-fold tv-severity-${fold.severity}`,
      {
        severity: fold.severity,
        kind: fold.kind,
        run: fold.run,
        step: String(fold.step),
        tensors: String(fold.tensors),
        format: fold.format,
      },
      [
        h("span", { class: "tv-finding-badge", text: fold.kind }),
        h("span", { class: "tv-finding-where" }, [
          swatch(colours, fold.run),
          `${fold.run} · step ${fold.step}`,
        ]),
        h("span", { class: "tv-finding-message", text: fold.message }),
      ],
    );
    const inside = h("details", { class: "tv-findings-folded" }, [
      h("summary", { text: `${groups.length} groups: ${kindCounts(groups)}` }),
      ...groups.map((group) => this.group(group, data.findings, colours)),
    ]);
    return h("div", { class: "tv-findings-row" }, [row, inside]);
  }

  private member(finding: Finding, colours: Map<string, string>): HTMLButtonElement {
    return this.button(
      finding,
      `tv-finding tv-finding-member tv-severity-${finding.severity}`,
      {
        severity: finding.severity,
        kind: finding.kind,
        run: finding.run,
        step: String(finding.step),
      },
      [
        h("span", { class: "tv-finding-badge", text: finding.kind }),
        h("span", { class: "tv-finding-where" }, [
          swatch(colours, finding.run),
          `${finding.run} · step ${finding.step}`,
        ]),
        h("span", { class: "tv-finding-message", text: finding.message }),
      ],
    );
  }

  /** A button showing ``finding`` (its tensor type and layer in ``data-*``). */
  private button(
    finding: Finding,
    className: string,
    data: Record<string, string>,
    children: HTMLElement[],
  ): HTMLButtonElement {
    const button = h(
      "button",
      {
        class: className,
        title: "Show this layer and step in the heatmap and the histogram",
        attrs: { type: "button", "aria-pressed": "false" },
        data: { run: finding.run, tensorType: finding.tensor_type, layer: finding.name, ...data },
        on: { click: () => this.choose(finding) },
      },
      children,
    );
    this.buttons.set(button, finding);
    return button;
  }
}

/** A row of the first level: a group, or a fold of groups. */
type Row = { group: FindingGroup; fold?: undefined } | { fold: FindingFold; group?: undefined };

function itemOf(row: Row): FindingGroup | FindingFold {
  return row.group ?? row.fold;
}

/** Most severe first, then by run, then step (the route's order of groups and folds). */
function compareRows(a: FindingGroup | FindingFold, b: FindingGroup | FindingFold): number {
  const bySeverity = SEVERITIES.indexOf(a.severity) - SEVERITIES.indexOf(b.severity);
  if (bySeverity) return bySeverity;
  if (a.run !== b.run) return a.run < b.run ? -1 : 1;
  return a.step - b.step;
}

function swatch(colours: Map<string, string>, run: string): HTMLElement {
  return h("span", {
    class: "tv-swatch",
    attrs: { style: `background:${colours.get(run) ?? "#888"}` },
  });
}

function identity(finding: Finding): string {
  return JSON.stringify([
    finding.run,
    finding.step,
    finding.kind,
    finding.tensor_type,
    finding.name,
    finding.other_run,
  ]);
}

/** "142 underflow, 142 scale": how many of each kind, kinds in order of appearance. */
function kindCounts(items: { kind: string }[]): string {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(item.kind, (counts.get(item.kind) ?? 0) + 1);
  return [...counts].map(([kind, count]) => `${count} ${kind}`).join(", ");
}
