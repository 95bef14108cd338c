/** The heatmap's pure drawing: its legend, its cells' pixels, its step axis, a column's step. */

import { axisBottom } from "d3-axis";
import { format as d3format } from "d3-format";
import { scaleLinear } from "d3-scale";
import { select } from "d3-selection";
import type { HeatmapColumn, HeatmapResponse, MetricInfo } from "./api";
import { type CellScale, SPECIAL, SPECIAL_PACKED } from "./colors";
import { h } from "./dom";
import { formatValue } from "./numbers";
import { groupRule, type RowCells } from "./group_value";
import type { Row } from "./tree";

/**
 * The step a column stands for: the server's ``step`` (its first recorded step). The tooltip
 * names it and a click opens it, so what the user reads is what opens.
 */
export function columnStep(column: HeatmapColumn): number {
  return column.step;
}

/** The legend: the metric and the data's size, the colour bar, the special values. */
export function legend(data: HeatmapResponse, metric: MetricInfo, scale: CellScale): HTMLElement[] {
  const gradient = h("canvas", { class: "tv-legend-bar", attrs: { width: "256", height: "1" } });
  const context = gradient.getContext("2d");
  if (context) {
    const image = context.createImageData(256, 1);
    new Uint32Array(image.data.buffer).set(scale.lut);
    context.putImageData(image, 0, 0);
  }
  const ticks = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  ticks.classList.add("tv-legend-axis");
  ticks.setAttribute("width", "276");
  ticks.setAttribute("height", "20");
  const legendScale = scaleLinear().domain([scale.lo, scale.hi]).range([0, 256]);
  select(ticks)
    .append("g")
    .attr("transform", "translate(10,0)")
    .call(axisBottom(legendScale).ticks(5).tickSize(4).tickFormat(d3format(".3~g")));
  const swatch = (colour: string, label: string, key: string) =>
    h("span", { class: "tv-swatch-item", data: { special: key } }, [
      h("span", { class: "tv-swatch", attrs: { style: `background:${colour}` } }),
      label,
    ]);
  const reduce = data.columns.some((column) => column.count > 1)
    ? `, ${data.reduce} per column`
    : "";
  return [
    h("div", { class: "tv-legend-title" }, [
      `${metric.label}${data.format ? ` (${data.format})` : ""}`,
      h("span", {
        class: "tv-muted",
        text: ` · ${data.layers.length} layers × ${data.total_steps} steps in ${data.columns.length} columns${reduce}`,
      }),
    ]),
    h("div", { class: "tv-legend-scale" }, [h("div", {}, [gradient, ticks])]),
    h("div", { class: "tv-legend-specials" }, [
      swatch(SPECIAL.nan, "NaN", "nan"),
      swatch(SPECIAL.posinf, "+Inf", "posinf"),
      swatch(SPECIAL.neginf, metric.kind === "log2" ? "−Inf (all zero)" : "−Inf", "neginf"),
      h("span", { class: "tv-swatch-item" }, [
        h("span", { class: "tv-swatch tv-swatch-missing" }),
        "no data",
      ]),
    ]),
  ];
}

/** One pixel per cell, coloured by ``scale`` (special values in their own colours). */
export function cellPixels(cells: RowCells[], columns: number, scale: CellScale): ImageData {
  const rows = cells.length;
  const image = new ImageData(columns, rows);
  const pixels = new Uint32Array(image.data.buffer);
  const { lo, hi, lut } = scale;
  const factor = hi > lo ? 255 / (hi - lo) : 0;
  for (let r = 0; r < rows; r++) {
    const { values, missing } = cells[r];
    const base = r * columns;
    for (let c = 0; c < columns; c++) {
      const value = values[c];
      let colour: number;
      if (missing[c]) colour = SPECIAL_PACKED.missing;
      else if (value === Infinity) colour = SPECIAL_PACKED.posinf;
      else if (value === -Infinity) colour = SPECIAL_PACKED.neginf;
      else if (value !== value) colour = SPECIAL_PACKED.nan;
      else {
        const index = Math.round((value - lo) * factor);
        colour = lut[index < 0 ? 0 : index > 255 ? 255 : index];
      }
      pixels[base + c] = colour;
    }
  }
  return image;
}

/** The step axis under the columns ``[first, last)`` (fractional) drawn over ``width`` px. */
export function stepScale(columns: HeatmapColumn[], first: number, last: number, width: number) {
  const stepAt = (position: number) => {
    const index = Math.min(columns.length - 1, Math.max(0, Math.floor(position)));
    const column = columns[index];
    const span = column.last_step + 1 - column.first_step;
    return column.first_step + span * Math.min(1, Math.max(0, position - index));
  };
  return scaleLinear()
    .domain([stepAt(first), stepAt(last)])
    .range([0, width]);
}

/** Draw the step axis ``scale`` into the ``svg`` element. */
export function drawAxis(
  svg: SVGSVGElement,
  scale: ReturnType<typeof stepScale>,
  width: number,
  height: number,
): void {
  svg.setAttribute("width", String(width + 20));
  svg.setAttribute("height", String(height));
  const root = select(svg);
  root.selectAll("*").remove();
  root
    .append("g")
    .attr("transform", "translate(0,0)")
    .call(
      axisBottom(scale)
        .ticks(Math.max(2, Math.floor(width / 90)))
        .tickFormat(d3format("~s")),
    );
}

/** The tooltip of the cell of ``row`` in ``column``: its name, the step it opens, its value. */
export function tooltipLines(
  data: HeatmapResponse,
  metric: MetricInfo | null,
  row: Row,
  value: RowCells,
  index: number,
): HTMLElement[] {
  const column = data.columns[index];
  const missing = value.missing[index] === 1;
  const steps =
    column.first_step === column.last_step
      ? `step ${columnStep(column)}`
      : `step ${columnStep(column)} (column of steps ${column.first_step}–${column.last_step}: ${column.count} recorded, ${data.reduce})`;
  const rule = groupRule(data);
  const name =
    row.kind === "group" ? `${row.key}.* (${rule} of ${row.indices.length} layers)` : row.key;
  const exact = row.indices.every((i) => data.exact[i]);
  return [
    h("div", { class: "tv-tooltip-name", text: name }),
    h("div", { text: steps }),
    h("div", {
      text: `${metric?.label ?? data.metric}: ${
        missing ? "no data" : formatValue(value.values[index])
      }${exact ? "" : " (estimated)"}`,
    }),
  ];
}
