/**
 * A timing of the real heatmap on a synthetic matrix. Not part of the shipped bundle:
 * ``node build.mjs --bench FILE`` makes a script defining ``tandvBench.benchHeatmap``, which
 * the browser test evaluates in the open tab. It draws into a hidden container and removes it.
 */

import type { HeatmapResponse, MetricInfo } from "./api";
import { Heatmap } from "./heatmap";

export interface HeatmapTiming {
  rows: number;
  columns: number;
  /** Fastest and median of ``draws`` full draws (a busy machine slows some of them). */
  drawMs: number;
  drawMedianMs: number;
  hoverP95Ms: number;
  hoverMaxMs: number;
  hoverMeanMs: number;
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** Draw a ``rows`` x ``columns`` heatmap ``draws`` times, then hover over ``moves`` cells. */
export function benchHeatmap(rows: number, columns: number, moves = 200, draws = 5): HeatmapTiming {
  const values = new Float64Array(rows * columns);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < columns; c++) values[r * columns + c] = Math.sin(r / 7) * 8 + c / columns;
  }
  values[5] = NaN;
  values[7] = Infinity;
  const data: HeatmapResponse = {
    run: "bench",
    tensor_type: "Activation",
    metric: "log2_rm2",
    format: null,
    reduce: "max",
    total_steps: columns,
    columns: Array.from({ length: columns }, (_, i) => ({
      step: i,
      first_step: i,
      last_step: i,
      count: 1,
    })),
    // Flat names: one row per layer, as a fully expanded tree of this size would be.
    layers: Array.from({ length: rows }, (_, i) => ({
      layer: `layer_${i}`,
      module_type: "Linear",
      order: i,
      dtype: "float32",
    })),
    exact: new Array(rows).fill(true),
    values,
    missing: new Uint8Array(rows * columns),
    value_range: { min: -8, max: 9 },
  };
  const metric: MetricInfo = {
    metric: "log2_rm2",
    label: "log2(rm2)",
    kind: "log2",
    scale: "diverging",
    needs_format: false,
    needs_block_format: false,
  };
  const heatmap = new Heatmap({ select() {}, toggle() {}, zoom() {} });
  const holder = document.createElement("div");
  holder.style.cssText = `position:absolute;left:0;top:0;width:${columns + 240}px;visibility:hidden`;
  holder.appendChild(heatmap.root);
  document.body.appendChild(holder);
  try {
    const drawTimes: number[] = [];
    for (let i = 0; i < draws; i++) {
      const started = performance.now();
      heatmap.setData(data, metric, () => true);
      void heatmap.root.offsetHeight; // include the layout the draw causes
      drawTimes.push(performance.now() - started);
    }
    const canvas = heatmap.root.querySelector("canvas.tv-heatmap-canvas") as HTMLCanvasElement;
    const plot = canvas.parentElement as HTMLElement;
    const box = canvas.getBoundingClientRect();
    const hoverTimes: number[] = [];
    for (let i = 0; i < moves; i++) {
      const event = new PointerEvent("pointermove", {
        clientX: box.left + ((i * 7919) % Math.max(1, Math.floor(box.width))),
        clientY: box.top + ((i * 104729) % Math.max(1, Math.floor(box.height))),
        bubbles: true,
      });
      const t0 = performance.now();
      plot.dispatchEvent(event);
      void heatmap.root.offsetHeight; // include the style and layout work the hover causes
      hoverTimes.push(performance.now() - t0);
    }
    return {
      rows: Number(heatmap.root.dataset.rows),
      columns: Number(heatmap.root.dataset.columns),
      drawMs: Math.min(...drawTimes),
      drawMedianMs: quantile(drawTimes, 0.5),
      hoverP95Ms: quantile(hoverTimes, 0.95),
      hoverMaxMs: Math.max(...hoverTimes),
      hoverMeanMs: hoverTimes.reduce((a, b) => a + b, 0) / moves,
    };
  } finally {
    holder.remove();
  }
}
