/**
 * Exponent histograms as small multiples: one panel per (layer, tensor type), the runs
 * overlaid in each. One bar per binade 2^n; zeros, NaN, +Inf and -Inf drawn apart on the
 * right; each overlay format draws its largest value, smallest normal and smallest
 * subnormal, with the share of values that would underflow or overflow.
 */

import { axisBottom, axisLeft } from "d3-axis";
import { format as d3format } from "d3-format";
import { scaleLinear, scaleLog } from "d3-scale";
import { select } from "d3-selection";
import type { HistogramLayer } from "./api";
import { blockScaleCharts } from "./block_scales";
import { castTable, type FormatColours, scaleShift } from "./cast_table";
import { h } from "./dom";
import { binadeLabel, formatCount, formatShare, formatValue } from "./numbers";
import type { RunHistogram } from "./run_histogram";

export interface Panel {
  layer: string;
  tensorType: string;
  runs: RunHistogram[];
  /** Shown after the title (the run, when runs are side by side). */
  caption?: string;
}

export interface HistogramOptions {
  count: boolean;
  log: boolean;
  scaled: boolean;
  colWrap: number;
}

const HEIGHT = 230;
const MIN_PANEL_WIDTH = 380;
const MARGIN = { top: 22, right: 8, bottom: 30, left: 52 };
const SPECIALS = ["zero", "nan", "+inf", "-inf"] as const;
const SPECIAL_LABELS: Record<(typeof SPECIALS)[number], string> = {
  zero: "0",
  nan: "NaN",
  "+inf": "+Inf",
  "-inf": "−Inf",
};
function specialCount(layer: HistogramLayer, key: (typeof SPECIALS)[number]): number {
  if (key === "zero") return layer.zero_count;
  if (key === "nan") return layer.nan_count;
  if (key === "+inf") return layer.posinf_count;
  return layer.neginf_count;
}

function svgElement(width: number, height: number): SVGSVGElement {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.classList.add("tv-hist-svg");
  return svg;
}

function exponentRange(panel: Panel, options: HistogramOptions): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (const { data } of panel.runs) {
    if (!data) continue;
    if (data.counts.length) {
      lo = Math.min(lo, data.bins_lo);
      hi = Math.max(hi, data.bins_lo + data.counts.length);
    }
    for (const cast of data.formats) {
      if (cast.format === data.dtype && data.counts.length) continue; // the dtype's range is huge
      const shift = options.scaled ? scaleShift(data, cast) : 0;
      lo = Math.min(lo, Math.floor(Math.log2(cast.smallest_subnormal) + shift) - 1);
      hi = Math.max(hi, Math.ceil(Math.log2(cast.max) + shift) + 2);
    }
  }
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [-10, 10];
  return [lo - 1, hi + 1];
}

/** One panel's chart. */
function chart(panel: Panel, options: HistogramOptions, width: number, colours: FormatColours) {
  const svg = svgElement(width, HEIGHT);
  const runs = panel.runs.filter((r) => r.data);
  const specialsWidth = 4 * Math.max(26, 8 * runs.length) + 14;
  const plotRight = width - MARGIN.right - specialsWidth;
  const [lo, hi] = exponentRange(panel, options);
  const x = scaleLinear().domain([lo, hi]).range([MARGIN.left, plotRight]);
  const value = (count: number, numel: number) =>
    options.count ? count : count / Math.max(1, numel);
  let top = 0;
  let smallest = Infinity;
  for (const { data } of runs) {
    if (!data) continue;
    const all = [...data.counts, ...SPECIALS.map((key) => specialCount(data, key))];
    for (const count of all) {
      const v = value(count, data.numel);
      top = Math.max(top, v);
      if (v > 0) smallest = Math.min(smallest, v);
    }
  }
  if (!(top > 0)) top = 1;
  const bottom = HEIGHT - MARGIN.bottom;
  const y = options.log
    ? scaleLog()
        .domain([Math.min(smallest, top) / 2, top * 1.5])
        .range([bottom, MARGIN.top])
        .clamp(true)
    : scaleLinear()
        .domain([0, top * 1.08])
        .range([bottom, MARGIN.top]);
  const base = options.log ? bottom : y(0);
  const root = select(svg);

  // Format overlays: shaded over/underflow zones and lines at the format's limits.
  const overlayOf = runs[0]?.data;
  if (overlayOf) {
    const casts = overlayOf.formats.filter(
      (c) => c.format !== overlayOf.dtype || !overlayOf.counts.length,
    );
    casts.forEach((cast, index) => {
      const colour = colours.get(cast.format);
      const shift = options.scaled ? scaleShift(overlayOf, cast) : 0;
      const edges = [
        { value: Math.log2(cast.max), label: "max", dash: "" },
        { value: Math.log2(cast.smallest_normal), label: "min normal", dash: "5,3" },
        { value: Math.log2(cast.smallest_subnormal), label: "min subnormal", dash: "2,3" },
      ];
      const group = root
        .append("g")
        .attr("class", "tv-format-overlay")
        .attr("data-format", cast.format);
      const overflowAt = x(Math.log2(cast.max) + shift);
      const underflowAt = x(Math.log2(cast.smallest_subnormal) - 1 + shift);
      group
        .append("rect")
        .attr("x", Math.min(Math.max(overflowAt, MARGIN.left), plotRight))
        .attr("y", MARGIN.top)
        .attr("width", Math.max(0, plotRight - Math.max(overflowAt, MARGIN.left)))
        .attr("height", bottom - MARGIN.top)
        .attr("fill", colour)
        .attr("opacity", 0.06);
      group
        .append("rect")
        .attr("x", MARGIN.left)
        .attr("y", MARGIN.top)
        .attr("width", Math.max(0, Math.min(underflowAt, plotRight) - MARGIN.left))
        .attr("height", bottom - MARGIN.top)
        .attr("fill", colour)
        .attr("opacity", 0.06);
      for (const edge of edges) {
        const at = x(edge.value + shift);
        if (at < MARGIN.left || at > plotRight) continue;
        group
          .append("line")
          .attr("x1", at)
          .attr("x2", at)
          .attr("y1", MARGIN.top - 4)
          .attr("y2", bottom)
          .attr("stroke", colour)
          .attr("stroke-width", 1.5)
          .attr("stroke-dasharray", edge.dash)
          .append("title")
          .text(`${cast.format} ${edge.label}${options.scaled ? " (scaled)" : ""}`);
      }
      group
        .append("text")
        .attr("class", "tv-format-label")
        .attr("x", Math.min(plotRight - 2, Math.max(MARGIN.left + 2, overflowAt - 3)))
        .attr("y", MARGIN.top - 8 + 10 * index)
        .attr("text-anchor", "end")
        .attr("fill", colour)
        .text(cast.format);
    });
  }

  // Bars, one slot per run inside each binade.
  const binWidth = Math.max(1, x(1) - x(0));
  const slot = binWidth / Math.max(1, runs.length);
  runs.forEach(({ run, colour, data }, r) => {
    if (!data) return;
    const group = root.append("g").attr("class", "tv-bars").attr("data-run", run);
    data.counts.forEach((count, i) => {
      if (count === 0) return;
      const n = data.bins_lo + i;
      const v = value(count, data.numel);
      const top = y(v);
      group
        .append("rect")
        .attr("class", "tv-bar")
        .attr("data-run", run)
        .attr("data-bin", String(n))
        .attr("data-count", String(count))
        .attr("x", x(n) + r * slot + 0.5)
        .attr("width", Math.max(1, slot - 1))
        .attr("y", Math.min(top, base))
        .attr("height", Math.max(1, Math.abs(base - top)))
        .attr("fill", colour)
        .attr("opacity", runs.length > 1 ? 0.85 : 1)
        .append("title")
        .text(
          `${run}: 2^${n} ≤ |x| < 2^${n + 1}: ${formatCount(count)} (${formatShare(count, data.numel)})`,
        );
    });
  });

  // Zeros, NaN and infinities, apart from the bins.
  const specialsLeft = plotRight + 16;
  const specialSlot = (specialsWidth - 16) / SPECIALS.length;
  const runSlot = (specialSlot - 4) / Math.max(1, runs.length);
  SPECIALS.forEach((key, k) => {
    const left = specialsLeft + k * specialSlot;
    root
      .append("text")
      .attr("class", "tv-special-label")
      .attr("x", left + specialSlot / 2)
      .attr("y", bottom + 14)
      .attr("text-anchor", "middle")
      .text(SPECIAL_LABELS[key]);
    runs.forEach(({ run, colour, data }, r) => {
      if (!data) return;
      const count = specialCount(data, key);
      const v = value(count, data.numel);
      const top = count > 0 ? y(v) : base;
      root
        .append("rect")
        .attr("class", "tv-bar tv-special-bar")
        .attr("data-run", run)
        .attr("data-bin", key)
        .attr("data-count", String(count))
        .attr("x", left + r * runSlot)
        .attr("width", Math.max(1, runSlot - 1))
        .attr("y", Math.min(top, base))
        .attr("height", count > 0 ? Math.max(1, Math.abs(base - top)) : 0)
        .attr("fill", key === "zero" ? colour : "#d81b60")
        .append("title")
        .text(
          `${run}: ${SPECIAL_LABELS[key]}: ${formatCount(count)} (${formatShare(count, data.numel)})`,
        );
    });
  });
  root
    .append("line")
    .attr("class", "tv-separator")
    .attr("x1", specialsLeft - 8)
    .attr("x2", specialsLeft - 8)
    .attr("y1", MARGIN.top)
    .attr("y2", bottom);

  // Axes.
  const span = hi - lo;
  const step = Math.max(1, Math.ceil(span / Math.max(2, (plotRight - MARGIN.left) / 34)));
  const ticks: number[] = [];
  for (let n = Math.ceil(lo / step) * step; n <= hi; n += step) ticks.push(n);
  root
    .append("g")
    .attr("class", "tv-axis")
    .attr("transform", `translate(0,${bottom})`)
    .call(
      axisBottom(x)
        .tickValues(ticks)
        .tickFormat((n) => binadeLabel(Number(n))),
    );
  const yAxis = axisLeft(y);
  if (options.log) {
    // One tick per power of ten (at most 6), labelled compactly.
    const [low, high] = y.domain();
    const decades: number[] = [];
    for (let e = Math.ceil(Math.log10(low)); e <= Math.floor(Math.log10(high)); e++) {
      decades.push(10 ** e);
    }
    const stride = Math.ceil(decades.length / 6);
    yAxis
      .tickValues(decades.filter((_, i) => i % stride === 0))
      .tickFormat(d3format(options.count ? "~s" : ".0e"));
  } else {
    yAxis.ticks(4).tickFormat(d3format(options.count ? "~s" : ".0%"));
  }
  root
    .append("g")
    .attr("class", "tv-axis")
    .attr("transform", `translate(${MARGIN.left},0)`)
    .call(yAxis);
  root
    .append("text")
    .attr("class", "tv-axis-title")
    .attr("x", MARGIN.left)
    .attr("y", 10)
    .text(options.count ? "count" : "fraction of values");
  return svg;
}

function summary(runs: RunHistogram[]): HTMLElement {
  return h(
    "div",
    { class: "tv-hist-summary" },
    runs.map(({ run, colour, data }) => {
      if (!data) return h("div", { class: "tv-muted", text: `${run}: not recorded` });
      const s = data.statistics;
      return h("div", { class: "tv-hist-stats", data: { run, step: String(data.step) } }, [
        h("span", { class: "tv-swatch", attrs: { style: `background:${colour}` } }),
        `${run} · step ${data.step} · ${data.dtype} · ${formatCount(data.numel)} values · max|x| ${formatValue(
          s.max_abs,
        )} · rm2 ${formatValue(s.rm2)} · min|x|≠0 ${formatValue(s.min_abs_nonzero)}`,
      ]);
    }),
  );
}

/** What the panel cannot show: the block formats asked for that a run did not record. */
function notRecorded(runs: RunHistogram[]): HTMLElement | null {
  const lines = runs.flatMap(({ run, notRecorded }) =>
    (notRecorded ?? []).map(
      (name) =>
        `${name} was not recorded for run ${run}: a block-scaled format cannot be estimated ` +
        `from the exponent histogram (the blocks are gone); give '${name}' to formats= when tracking`,
    ),
  );
  if (!lines.length) return null;
  return h(
    "div",
    { class: "tv-block-missing tv-muted" },
    lines.map((text) => h("div", { text })),
  );
}

/** Draw every panel into ``container`` (which is emptied first). */
export function renderHistograms(
  container: HTMLElement,
  panels: Panel[],
  options: HistogramOptions,
  colours: FormatColours,
): void {
  const available = container.clientWidth || 600;
  // Wrap into at most ``colWrap`` columns, fewer where panels would be too narrow to read.
  const fit = Math.max(1, Math.floor((available + 12) / (MIN_PANEL_WIDTH + 12)));
  const columns = Math.max(1, Math.min(options.colWrap, panels.length, fit));
  const width = Math.max(240, Math.floor((available - (columns - 1) * 12) / columns) - 2);
  container.style.gridTemplateColumns = `repeat(${columns}, minmax(0, 1fr))`;
  const key = h("div", {
    class: "tv-hist-key tv-muted",
    text:
      "Format lines: solid = largest value, dashed = smallest normal, dotted = smallest subnormal; " +
      "shaded = would overflow (right) or underflow to zero (left)" +
      (options.scaled ? "; scaled: each format slid so its largest value meets max|x|." : "."),
  });
  container.replaceChildren(
    key,
    ...panels.map((panel) => {
      const first = panel.runs.find((r) => r.data)?.data;
      return h(
        "section",
        {
          class: "tv-hist-panel",
          data: {
            layer: panel.layer,
            tensorType: panel.tensorType,
            step: first ? String(first.step) : "",
          },
        },
        [
          h("div", { class: "tv-hist-title" }, [
            h("span", { class: "tv-hist-layer", text: panel.layer, title: panel.layer }),
            h("span", { class: "tv-muted", text: ` · ${panel.tensorType}` }),
            panel.caption
              ? h("span", { class: "tv-hist-caption", text: ` · ${panel.caption}` })
              : null,
          ]),
          first
            ? chart(panel, options, width, colours)
            : h("div", { class: "tv-empty-small", text: "Not recorded for this tensor type." }),
          first ? summary(panel.runs) : null,
          first ? castTable(panel.runs, options, colours) : null,
          first ? blockScaleCharts(panel.runs, width, colours) : null,
          notRecorded(panel.runs),
        ],
      );
    }),
  );
}
