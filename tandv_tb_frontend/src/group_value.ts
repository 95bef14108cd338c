/**
 * A collapsed group's value: the one rule of the heatmap's group rows and the graph's
 * collapsed modules, so the same group shows the same colour in both views.
 *
 * - NaN if any of its layers is NaN, so that no problem hides.
 * - When two runs are subtracted (``minus_run``): the difference farthest from zero, its
 *   sign kept. A run lower by far matters as much as one higher by far; the largest would
 *   hide a large negative difference behind a small positive one.
 * - Otherwise the largest value: for the fractions and counts of trouble (overflow,
 *   underflow, NaN) the worst, and for a magnitude its largest layer.
 * - No data where none of its layers has any.
 */

import type { HeatmapResponse } from "./api";

/** A drawn row's values and "no data" marks (1), one per column. */
export type RowCells = { values: Float64Array; missing: Uint8Array };

/** How the rule folds a group's layers in ``data``, in words (for tooltips). */
export function groupRule(data: HeatmapResponse): string {
  return data.minus_run ? "farthest from 0" : "max";
}

/**
 * The cells of a group of the heatmap rows ``rows`` of ``data`` in the columns
 * ``[first, last)`` (by the rule above); NaN where no layer has data, marked missing.
 */
export function groupCells(
  data: HeatmapResponse,
  rows: number[],
  first = 0,
  last = data.columns.length,
): RowCells {
  const columns = data.columns.length;
  const width = last - first;
  const byMagnitude = !!data.minus_run;
  const values = new Float64Array(width);
  const missing = new Uint8Array(width).fill(1);
  const isNan = new Uint8Array(width);
  for (const row of rows) {
    const start = row * columns + first;
    for (let c = 0; c < width; c++) {
      if (data.missing[start + c]) continue;
      const value = data.values[start + c];
      if (Number.isNaN(value)) isNan[c] = 1;
      else if (missing[c]) values[c] = value;
      else if (byMagnitude ? Math.abs(value) > Math.abs(values[c]) : value > values[c]) {
        values[c] = value;
      }
      missing[c] = 0;
    }
  }
  for (let c = 0; c < width; c++) {
    if (missing[c] || isNan[c]) values[c] = NaN;
  }
  return { values, missing };
}

/** The cells of a heatmap row: a layer's own (a view, no copy), or a group's. */
export function rowCells(data: HeatmapResponse, rows: number[]): RowCells {
  if (rows.length !== 1) return groupCells(data, rows);
  const columns = data.columns.length;
  const start = rows[0] * columns;
  return {
    values: data.values.subarray(start, start + columns),
    missing: data.missing.subarray(start, start + columns),
  };
}
