/**
 * Zoom and pan of the heatmap over steps only (d3-zoom): a CSS transform of the painted
 * cells while the pointer moves, then, once it settles, the step window to ask the server
 * for at full resolution.
 */

import { select } from "d3-selection";
import {
  type D3ZoomEvent,
  type ZoomBehavior,
  type ZoomTransform,
  zoom,
  zoomIdentity,
} from "d3-zoom";
import type { HeatmapColumn } from "./api";

/** How long the zoom must rest before the visible window is asked for, in ms. */
const SETTLE_MS = 350;

export class StepZoom {
  /** The current zoom: scale and shift along x only. */
  transform: ZoomTransform = zoomIdentity;
  private readonly zoomer: ZoomBehavior<HTMLElement, unknown>;
  private resetting = false;
  private timer: number | undefined;

  /**
   * @param plot the element zoomed over
   * @param width the plot's width in CSS pixels
   * @param columns the columns drawn now
   * @param moved called after each zoom or pan step (redraw the transform)
   * @param settled called with the visible step window once zooming stops (null: all)
   */
  constructor(
    private readonly plot: HTMLElement,
    private readonly width: () => number,
    private readonly columns: () => HeatmapColumn[],
    private readonly moved: () => void,
    private readonly settled: (window: [number, number] | null) => void,
  ) {
    this.zoomer = zoom<HTMLElement, unknown>()
      .scaleExtent([1, 256])
      .filter((event: Event) => {
        const mouse = event as MouseEvent;
        return !mouse.button && event.type !== "dblclick";
      })
      .on("zoom", (event: D3ZoomEvent<HTMLElement, unknown>) => this.zoomed(event));
    select(plot).call(this.zoomer);
    plot.addEventListener("dblclick", () => this.settled(null));
  }

  /** Back to every column (new data), without reporting a zoom. */
  reset(): void {
    this.transform = zoomIdentity;
    this.resetting = true;
    select(this.plot).call(this.zoomer.transform, zoomIdentity);
    this.resetting = false;
  }

  /** Fractional column range [first, last) shown under the current zoom. */
  visibleColumns(width: number): [number, number] {
    const count = this.columns().length;
    const first = (this.transform.invertX(0) / width) * count;
    const last = (this.transform.invertX(width) / width) * count;
    return [Math.max(0, first), Math.min(count, Math.max(first + 1e-6, last))];
  }

  /** The x position of a column's left edge in the plot, under the zoom. */
  columnLeft(column: number): number {
    const count = this.columns().length || 1;
    return this.transform.applyX((column / count) * this.width());
  }

  private zoomed(event: D3ZoomEvent<HTMLElement, unknown>): void {
    if (this.resetting) return;
    const width = this.width();
    // Zoom and pan over steps only: keep k and x, clamp so the data fill the plot.
    const k = event.transform.k;
    const x = Math.min(0, Math.max(width - width * k, event.transform.x));
    this.transform = zoomIdentity.translate(x, 0).scale(k);
    this.moved();
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => this.settle(), SETTLE_MS);
  }

  /** After zooming stops, report the visible step window. */
  private settle(): void {
    const columns = this.columns();
    if (columns.length === 0 || this.transform.k === 1) return;
    const [first, last] = this.visibleColumns(this.width());
    const from = columns[Math.max(0, Math.floor(first))].first_step;
    const to = columns[Math.min(columns.length - 1, Math.ceil(last) - 1)].last_step;
    this.settled([from, to]);
  }
}
