/**
 * Under- and overflow per format: the panel's table (element formats, exact or estimated,
 * then block-scaled ones, always exact, with their SNR), the "scaled" estimates, format
 * colours.
 */

import { schemeDark2 } from "d3-scale-chromatic";
import type { BlockCast, FormatCast, HistogramLayer } from "./api";
import { h } from "./dom";
import { formatCount, formatShare, formatValue } from "./numbers";

/** A stable colour per format name, in order of first appearance. */
export class FormatColours {
  private readonly seen = new Map<string, string>();
  get(name: string): string {
    let colour = this.seen.get(name);
    if (!colour) {
      colour = schemeDark2[this.seen.size % schemeDark2.length];
      this.seen.set(name, colour);
    }
    return colour;
  }
}

/** How far the "scaled" toggle slides a format: log2(max_abs / format max), or 0. */
export function scaleShift(layer: HistogramLayer, cast: FormatCast): number {
  const maxAbs = layer.statistics.max_abs;
  if (!(maxAbs > 0) || !Number.isFinite(maxAbs)) return 0;
  return Math.log2(maxAbs) - Math.log2(cast.max);
}

/**
 * Under/overflow of a format after per-tensor scaling (its largest value meets max_abs),
 * estimated from the bins: values below half the smallest subnormal (scaled) become zero,
 * a bin cut by that threshold counts in proportion (log-uniform within the binade); nothing
 * overflows by construction.
 */
export function scaledCasts(
  layer: HistogramLayer,
  cast: FormatCast,
): { under: number; over: number } {
  const shift = scaleShift(layer, cast);
  const threshold = Math.log2(cast.smallest_subnormal / 2) + shift;
  let under = 0;
  layer.counts.forEach((count, i) => {
    const n = layer.bins_lo + i;
    if (n + 1 <= threshold) under += count;
    else if (n < threshold) under += count * (threshold - n);
  });
  return { under: Math.round(under), over: 0 };
}

/** Under/overflow per format and run: exact figures where recorded, estimates labelled. */
export function castTable(
  panelRuns: { run: string; colour: string; data: HistogramLayer | null }[],
  options: { scaled: boolean },
  colours: FormatColours,
): HTMLElement {
  const runs = panelRuns.filter((r) => r.data);
  const several = runs.length > 1;
  const rows: HTMLElement[] = [];
  const formats = new Set<string>();
  for (const { data } of runs) for (const cast of data?.formats ?? []) formats.add(cast.format);
  for (const name of formats) {
    for (const { run, colour, data } of runs) {
      const cast = data?.formats.find((c) => c.format === name);
      if (!data || !cast) continue;
      const finite = data.numel - data.nan_count - data.posinf_count - data.neginf_count;
      const scaled = options.scaled && name !== data.dtype ? scaledCasts(data, cast) : null;
      const under = scaled ? scaled.under : cast.underflow;
      const over = scaled ? scaled.over : cast.overflow;
      const exact = !scaled && cast.exact;
      const label = scaled ? "estimated, scaled" : cast.exact ? "exact" : "estimated";
      rows.push(
        h(
          "tr",
          {
            class: "tv-format-stat",
            data: {
              format: name,
              run,
              underflow: String(under),
              overflow: String(over),
              exact: String(exact),
            },
          },
          [
            ...labelCells(name, colours, several ? { run, colour } : null),
            countCell(under, finite),
            countCell(over, finite),
            h("td", { class: exact ? "tv-exact" : "tv-estimate", text: label }),
          ],
        ),
      );
    }
  }
  rows.push(...blockRows(runs, several, colours));
  return h("table", { class: "tv-cast-table" }, [
    h("thead", {}, [
      h("tr", {}, [
        h("th", { text: "format" }),
        several ? h("th", { text: "run" }) : null,
        h("th", { text: "underflow" }),
        h("th", { text: "overflow" }),
        h("th", { text: "" }),
      ]),
    ]),
    h("tbody", {}, rows),
  ]);
}

/**
 * The block-scaled formats' rows: exact counts (a block format's overflow is a value that
 * saturates at its block's largest element value) and the SNR of the tensor in it.
 */
function blockRows(
  runs: { run: string; colour: string; data: HistogramLayer | null }[],
  several: boolean,
  colours: FormatColours,
): HTMLElement[] {
  const names = new Set<string>();
  for (const { data } of runs) for (const block of data?.blocks ?? []) names.add(block.format);
  const rows: HTMLElement[] = [];
  for (const name of names) {
    for (const { run, colour, data } of runs) {
      const block = data?.blocks.find((b) => b.format === name);
      if (!data || !block) continue;
      const finite = data.numel - data.nan_count - data.posinf_count - data.neginf_count;
      rows.push(
        h(
          "tr",
          {
            class: "tv-format-stat tv-block-stat",
            title: blockTitle(block),
            data: {
              format: name,
              run,
              underflow: String(block.underflow),
              overflow: String(block.overflow),
              exact: "true",
              snr: String(block.snr_db),
            },
          },
          [
            ...labelCells(name, colours, several ? { run, colour } : null),
            countCell(block.underflow, finite),
            countCell(block.overflow, finite, " saturated"),
            h("td", { class: "tv-exact", text: `exact · SNR ${formatValue(block.snr_db)} dB` }),
          ],
        ),
      );
    }
  }
  return rows;
}

/** A row's first cells: the format with its colour, then the run with its (when several). */
function labelCells(
  name: string,
  colours: FormatColours,
  run: { run: string; colour: string } | null,
): (HTMLElement | null)[] {
  return [
    h("td", {}, [
      h("span", { class: "tv-swatch", attrs: { style: `background:${colours.get(name)}` } }),
      name,
    ]),
    run
      ? h("td", {}, [
          h("span", { class: "tv-swatch", attrs: { style: `background:${run.colour}` } }),
          run.run,
        ])
      : null,
  ];
}

/** A count and its share of the finite values. */
function countCell(count: number, finite: number, suffix = ""): HTMLElement {
  return h("td", {
    class: "tv-num",
    text: `${formatCount(count)} (${formatShare(count, finite)})${suffix}`,
  });
}

function blockTitle(block: BlockCast): string {
  return (
    `${block.format}: blocks of ${block.block_size} ${block.element} values sharing a scale ` +
    `(${block.scale_rule === "nvfp4" ? "NVFP4's two-level scale" : `${block.scale_rule} rule`}); ` +
    `underflow: values that become 0; overflow: values that saturate at their block's ` +
    `largest element value (${formatValue(block.element_max)} times its scale)`
  );
}
