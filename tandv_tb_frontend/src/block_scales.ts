/**
 * The scale distribution of a block-scaled format under a histogram panel: one small bar
 * chart per format, the blocks per scale exponent 2^k (runs side by side in each bin), the
 * blocks without a finite non-zero value apart ("0"), and the blocks whose scale clamps
 * drawn at the end of the scale's range where they lie.
 */

import { scaleLinear } from "d3-scale";
import { select } from "d3-selection";
import type { BlockCast } from "./api";
import type { FormatColours } from "./cast_table";
import { h } from "./dom";
import { binadeLabel, formatCount, formatShare } from "./numbers";
import type { RunHistogram } from "./run_histogram";

const HEIGHT = 84;
const MARGIN = { top: 14, right: 8, bottom: 18, left: 52 };
const ZERO_SLOT = 30;
const CLAMPED = "#d81b60";

/** The charts of every block format shown in a panel (null when it shows none). */
export function blockScaleCharts(
  runs: RunHistogram[],
  width: number,
  colours: FormatColours,
): HTMLElement | null {
  const names = [...new Set(runs.flatMap((r) => (r.data?.blocks ?? []).map((b) => b.format)))];
  if (!names.length) return null;
  return h(
    "div",
    { class: "tv-block-scales" },
    names.map((name) => {
      const shown = runs
        .map((r) => ({ ...r, block: r.data?.blocks.find((b) => b.format === name) }))
        .filter((r): r is RunHistogram & { block: BlockCast } => r.block !== undefined);
      return h("div", { class: "tv-block-scale", data: { format: name } }, [
        chart(name, shown, width, colours.get(name)),
      ]);
    }),
  );
}

function chart(
  name: string,
  runs: (RunHistogram & { block: BlockCast })[],
  width: number,
  colour: string,
): SVGSVGElement {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(HEIGHT));
  svg.classList.add("tv-hist-svg");
  const root = select(svg);
  let lo = Infinity;
  let hi = -Infinity;
  let top = 0;
  for (const { block } of runs) {
    if (block.scales.length) {
      lo = Math.min(lo, block.scale_lo);
      hi = Math.max(hi, block.scale_lo + block.scales.length - 1);
    }
    for (const count of [...block.scales, block.zero_blocks]) {
      top = Math.max(top, count / Math.max(1, block.blocks));
    }
  }
  if (!Number.isFinite(lo)) [lo, hi] = [0, 0];
  const plotRight = width - MARGIN.right - ZERO_SLOT - 8;
  const x = scaleLinear()
    .domain([lo - 0.5, hi + 1.5])
    .range([MARGIN.left, plotRight]);
  const bottom = HEIGHT - MARGIN.bottom;
  const y = scaleLinear()
    .domain([0, Math.max(top, 1e-9) * 1.1])
    .range([bottom, MARGIN.top]);
  const binWidth = Math.max(1, x(1) - x(0));
  const slot = binWidth / Math.max(1, runs.length);
  runs.forEach(({ run, colour: runColour, block }, r) => {
    const group = root.append("g").attr("class", "tv-block-bars").attr("data-run", run);
    const share = (count: number) => formatShare(count, block.blocks);
    const bar = (left: number, count: number, fill: string, kind: string, text: string) => {
      const height = Math.max(count > 0 ? 1 : 0, bottom - y(count / Math.max(1, block.blocks)));
      group
        .append("rect")
        .attr("class", "tv-block-bar")
        .attr("data-run", run)
        .attr("data-kind", kind)
        .attr("data-count", String(count))
        .attr("x", left)
        .attr("width", Math.max(1, slot - 1))
        .attr("y", bottom - height)
        .attr("height", height)
        .attr("fill", fill)
        .append("title")
        .text(text);
      return height;
    };
    block.scales.forEach((count, i) => {
      if (!count) return;
      const k = block.scale_lo + i;
      const left = x(k - 0.5) + r * slot + 0.5;
      const clamped =
        (k === block.scale_min_exponent ? block.clamped_low : 0) +
        (k === block.scale_max_exponent ? block.clamped_high : 0);
      bar(
        left,
        count,
        runs.length > 1 ? runColour : colour,
        "scale",
        `${run}: ${count} blocks (${share(count)}) scaled by 2^${k}`,
      );
      if (clamped) {
        const side = k === block.scale_min_exponent ? "below" : "above";
        bar(
          left,
          clamped,
          CLAMPED,
          "clamped",
          `${run}: ${formatCount(clamped)} blocks (${share(clamped)}) need a scale ${side} ` +
            `2^${k}, clamped to it`,
        );
      }
    });
    const zeroLeft = plotRight + 16 + (r * (ZERO_SLOT - 4)) / runs.length;
    bar(
      zeroLeft,
      block.zero_blocks,
      runs.length > 1 ? runColour : colour,
      "zero",
      `${run}: ${formatCount(block.zero_blocks)} blocks (${share(block.zero_blocks)}) without a finite non-zero value`,
    );
  });
  const step = Math.max(1, Math.ceil((hi - lo + 1) / Math.max(2, (plotRight - MARGIN.left) / 34)));
  for (let k = Math.ceil(lo / step) * step; k <= hi; k += step) {
    root
      .append("text")
      .attr("class", "tv-special-label")
      .attr("x", x(k))
      .attr("y", bottom + 12)
      .attr("text-anchor", "middle")
      .text(binadeLabel(k));
  }
  root
    .append("text")
    .attr("class", "tv-special-label")
    .attr("x", plotRight + 16 + (ZERO_SLOT - 4) / 2)
    .attr("y", bottom + 12)
    .attr("text-anchor", "middle")
    .text("0");
  root
    .append("text")
    .attr("class", "tv-axis-title")
    .attr("x", MARGIN.left)
    .attr("y", 10)
    .text(`${name}: blocks per scale (red: clamped)`);
  return svg;
}
