/**
 * The Findings card's list: what went wrong in the ticked runs (the ``findings`` route),
 * most severe first. Errors and warnings are listed, a few of each kind, the rest of a kind
 * folded away; info findings (scales, loss spikes: often hundreds) sit in one closed section
 * so they never bury an error. Every finding is a button that asks the app to show it.
 * Names and messages enter the page as text only.
 */

import type { Finding, FindingsResponse } from "./api";
import { h, keepFocus, replaceChildren } from "./dom";

const SEVERITIES = ["error", "warning", "info"] as const;
/** Findings of one severity and kind listed before the rest of that kind fold away. */
const SHOWN_PER_KIND = 3;
/** At most this many findings drawn per severity and kind (``tandv-tb findings`` lists all). */
const MAX_PER_KIND = 500;

const PLURAL: Record<string, string> = { error: "errors", warning: "warnings", info: "info" };

export class FindingsList {
  readonly root = h("div", { class: "tv-findings" });
  private buttons = new Map<Finding, HTMLButtonElement>();
  /** The finding last shown (by its content), kept marked when the list is redrawn. */
  private chosen = "";
  /** The metric the ``divergence`` findings compare (the route's thresholds). */
  divergenceMetric = "";

  constructor(private readonly choose: (finding: Finding) => void) {}

  clear(): void {
    this.buttons.clear();
    this.root.replaceChildren();
  }

  /** Draw ``data``'s findings; ``colours`` maps a run to its colour. */
  render(data: FindingsResponse, colours: Map<string, string>): void {
    this.buttons.clear();
    this.divergenceMetric = String(data.thresholds.divergence_metric ?? "");
    const bySeverity = new Map<string, Finding[]>(SEVERITIES.map((s) => [s, []]));
    for (const finding of data.findings) bySeverity.get(finding.severity)?.push(finding);
    const counts = SEVERITIES.filter((s) => bySeverity.get(s)?.length).map((s) => {
      const count = bySeverity.get(s)?.length ?? 0;
      return `${count} ${count === 1 ? s : PLURAL[s]}`;
    });
    const sections: HTMLElement[] = [
      h("div", { class: "tv-findings-summary tv-muted", text: counts.join(" · ") }),
    ];
    for (const severity of SEVERITIES) {
      const found = bySeverity.get(severity) ?? [];
      if (!found.length) continue;
      const groups = byKind(found).map(([kind, items]) => this.group(kind, items, colours));
      if (severity === "info") {
        sections.push(
          h("details", { class: "tv-findings-info", data: { severity } }, [
            h("summary", { text: `${found.length} info (${kinds(found)})` }),
            ...groups,
          ]),
        );
      } else {
        sections.push(h("div", { class: "tv-findings-section", data: { severity } }, groups));
      }
    }
    // TensorBoard's reload redraws the list: the sections the user opened stay open.
    keepFocus(this.root, () => replaceChildren(this.root, sections));
    const again = [...this.buttons.keys()].find((item) => identity(item) === this.chosen);
    if (again) this.mark(again);
  }

  /** Mark ``finding`` as the one shown. */
  mark(finding: Finding): void {
    this.chosen = identity(finding);
    for (const [item, button] of this.buttons) {
      button.setAttribute("aria-pressed", String(item === finding));
    }
  }

  private group(kind: string, items: Finding[], colours: Map<string, string>): HTMLElement {
    const drawn = items.slice(0, MAX_PER_KIND);
    const rows = drawn.map((finding) => this.row(finding, colours));
    const shown = rows.slice(0, SHOWN_PER_KIND);
    const rest = rows.slice(SHOWN_PER_KIND);
    const left = items.length - drawn.length;
    return h("div", { class: "tv-findings-group", data: { kind } }, [
      ...shown,
      rest.length
        ? h("details", { class: "tv-findings-more" }, [
            h("summary", { text: `${items.length - SHOWN_PER_KIND} more ${kind}` }),
            ...rest,
            left
              ? h("div", {
                  class: "tv-muted",
                  text: `and ${left} more: run tandv-tb findings LOGDIR for the full list`,
                })
              : null,
          ])
        : null,
    ]);
  }

  private row(finding: Finding, colours: Map<string, string>): HTMLButtonElement {
    const button = h(
      "button",
      {
        class: `tv-finding tv-severity-${finding.severity}`,
        title: "Show this layer and step in the heatmap and the histogram",
        attrs: { type: "button", "aria-pressed": "false" },
        data: {
          severity: finding.severity,
          kind: finding.kind,
          run: finding.run,
          step: String(finding.step),
          tensorType: finding.tensor_type,
          layer: finding.name,
        },
        on: { click: () => this.choose(finding) },
      },
      [
        h("span", { class: "tv-finding-badge", text: finding.kind }),
        h("span", { class: "tv-finding-where" }, [
          h("span", {
            class: "tv-swatch",
            attrs: { style: `background:${colours.get(finding.run) ?? "#888"}` },
          }),
          `${finding.run} · step ${finding.step}`,
        ]),
        h("span", { class: "tv-finding-message", text: finding.message }),
      ],
    );
    this.buttons.set(finding, button);
    return button;
  }
}

function identity(finding: Finding): string {
  return JSON.stringify([
    finding.run,
    finding.step,
    finding.kind,
    finding.tensor_type,
    finding.name,
  ]);
}

/** ``findings`` grouped by kind, kinds in order of their first finding. */
function byKind(findings: Finding[]): [string, Finding[]][] {
  const groups = new Map<string, Finding[]>();
  for (const finding of findings) {
    const list = groups.get(finding.kind) ?? [];
    list.push(finding);
    groups.set(finding.kind, list);
  }
  return [...groups];
}

function kinds(findings: Finding[]): string {
  return byKind(findings)
    .map(([kind, items]) => `${items.length} ${kind}`)
    .join(", ");
}
