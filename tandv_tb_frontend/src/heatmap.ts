/**
 * The layer heatmap: rows are layers (or collapsed module groups) in model order, columns
 * are step groups sent by the server (at most one per drawn pixel), colour is the metric.
 *
 * Cells are painted one pixel each into a canvas of columns x rows pixels that CSS stretches
 * over the plot without smoothing: a redraw costs one pass over the cells, and a zoom or pan
 * over steps only a CSS transform (until the server sends the zoomed window's columns).
 *
 * Rows keep a readable height; more rows than fit in ``MAX_HEIGHT`` scroll (labels and
 * cells together, the step axis stays below), and only the labels in view are in the DOM.
 */

import type { HeatmapResponse, MetricInfo } from "./api";
import { type CellScale, cellScale } from "./colors";
import { h, placeTooltip, replaceChildren } from "./dom";
import { rowCells, type RowCells } from "./group_value";
import { buildRows, type Row } from "./tree";
import { cellPixels, columnStep, drawAxis, legend, stepScale, tooltipLines } from "./heatmap_draw";
import { StepZoom } from "./heatmap_zoom";
import { VirtualRows } from "./virtual";

export interface HeatmapEvents {
  /** A layer's cell (or label) was clicked: open its histogram at ``step``. */
  select(layer: string, step: number | null): void;
  /** A group's row was clicked: open or close it. */
  toggle(prefix: string): void;
  /** The step window was zoomed or panned (null: every step). */
  zoom(window: [number, number] | null): void;
}

const MAX_HEIGHT = 640;
const MIN_ROW_HEIGHT = 10;
const MAX_ROW_HEIGHT = 18;
const AXIS_HEIGHT = 26;

export class Heatmap {
  readonly root: HTMLElement;
  private readonly legend: HTMLElement;
  private readonly labels: HTMLElement;
  private readonly scroller: HTMLElement;
  private readonly labelRows: VirtualRows;
  private readonly plot: HTMLElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly axis: SVGSVGElement;
  private readonly tooltip: HTMLElement;
  private readonly hoverRow: HTMLElement;
  private readonly hoverCol: HTMLElement;
  private readonly marker: HTMLElement;
  private readonly zoom: StepZoom;

  private data: HeatmapResponse | null = null;
  private metric: MetricInfo | null = null;
  private rows: Row[] = [];
  /** Each drawn row's cells (a group's aggregated once, at paint time). */
  private rowCells: RowCells[] = [];
  private rowHeight = 14;
  private scale: CellScale | null = null;
  private selected: { layer: string; step: number | null } = { layer: "", step: null };

  constructor(private readonly events: HeatmapEvents) {
    this.legend = h("div", { class: "tv-legend" });
    this.labels = h("div", { class: "tv-heatmap-labels" });
    this.canvas = h("canvas", { class: "tv-heatmap-canvas" });
    this.hoverRow = h("div", { class: "tv-hover-row" });
    this.hoverCol = h("div", { class: "tv-hover-col" });
    this.marker = h("div", { class: "tv-cell-marker" });
    this.plot = h("div", { class: "tv-heatmap-plot" }, [
      this.canvas,
      this.hoverRow,
      this.hoverCol,
      this.marker,
    ]);
    this.axis = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    this.axis.classList.add("tv-axis");
    this.tooltip = h("div", { class: "tv-tooltip", attrs: { role: "tooltip" } });
    this.scroller = h(
      "div",
      {
        class: "tv-heatmap-scroll",
        attrs: { style: `max-height:${MAX_HEIGHT}px` },
      },
      [
        h("div", { class: "tv-heatmap-body" }, [
          this.labels,
          h("div", { class: "tv-heatmap-right" }, [this.plot]),
        ]),
      ],
    );
    this.labelRows = new VirtualRows(
      this.labels,
      this.scroller,
      (index, top) => this.renderLabel(index, top),
      MAX_HEIGHT,
    );
    this.root = h("div", { class: "tv-heatmap" }, [
      this.legend,
      this.scroller,
      h("div", { class: "tv-heatmap-axis-row" }, [this.axis]),
      this.tooltip,
    ]);
    this.plot.addEventListener("pointermove", (event) => this.hover(event));
    this.plot.addEventListener("pointerleave", () => this.unhover());
    this.plot.addEventListener("pointerenter", () => {
      this.box = null;
    });
    window.addEventListener(
      "scroll",
      () => {
        this.box = null;
      },
      { passive: true, capture: true },
    );
    this.plot.addEventListener("click", (event) => this.click(event));
    this.labels.addEventListener("click", (event) => this.clickLabel(event));
    this.zoom = new StepZoom(
      this.plot,
      () => this.plotWidth(),
      () => this.data?.columns ?? [],
      () => {
        this.place();
        this.placeMarker();
      },
      (window) => this.events.zoom(window),
    );
  }

  /** Width in CSS pixels of the plot area: the number of columns worth asking for. */
  plotWidth(): number {
    return Math.max(50, Math.floor(this.plot.clientWidth || this.root.clientWidth - 220));
  }

  /** Draw new data. */
  setData(
    data: HeatmapResponse,
    metric: MetricInfo,
    isExpanded: (prefix: string) => boolean,
  ): void {
    this.data = data;
    this.metric = metric;
    this.rows = buildRows(
      data.layers.map((layer) => layer.layer),
      isExpanded,
    );
    this.scale = cellScale(metric.scale, data.value_range, metric.kind === "fraction");
    this.zoom.reset();
    this.render();
  }

  /** Mark the opened layer and step. */
  setSelected(layer: string, step: number | null): void {
    this.selected = { layer, step };
    this.placeMarker();
  }

  /** Redraw everything (after a resize or a theme change). */
  render(): void {
    const data = this.data;
    if (!data || !this.metric || !this.scale) return;
    const count = this.rows.length;
    this.rowHeight = Math.max(
      MIN_ROW_HEIGHT,
      Math.min(MAX_ROW_HEIGHT, Math.floor(MAX_HEIGHT / Math.max(1, count))),
    );
    this.renderLabels();
    this.renderLegend();
    this.paint();
    this.placeMarker();
  }

  private renderLabels(): void {
    this.labels.classList.toggle("tv-labels-small", this.rowHeight < 13);
    this.labelRows.reset(this.rows.length, this.rowHeight);
  }

  /** The label of row ``index`` (text from the data only as text). */
  private renderLabel(index: number, top: number): HTMLElement {
    const row = this.rows[index];
    return h(
      "div",
      {
        class: `tv-row-label tv-row-${row.kind}`,
        title: row.kind === "group" ? `${row.key}.* (${row.indices.length} layers)` : row.key,
        data: { key: row.key, kind: row.kind, row: String(index) },
        attrs: {
          style: `top:${top}px;height:${this.rowHeight}px;line-height:${this.rowHeight}px;padding-left:${
            4 + row.depth * 10
          }px`,
        },
      },
      row.kind === "group"
        ? [
            h("span", { class: "tv-twisty", text: row.expanded ? "▾ " : "▸ " }),
            row.label,
            h("span", { class: "tv-group-count", text: ` (${row.indices.length})` }),
          ]
        : [row.label],
    );
  }

  /** Scroll the opened layer's row into view. */
  revealSelected(): void {
    const index = this.rows.findIndex(
      (row) => row.kind === "layer" && row.key === this.selected.layer,
    );
    if (index >= 0) this.labelRows.reveal(index);
  }

  private renderLegend(): void {
    const { scale, metric, data } = this;
    if (!scale || !metric || !data) return;
    replaceChildren(this.legend, legend(data, metric, scale));
  }

  /** Paint every cell into the canvas, one pixel per cell. */
  private paint(): void {
    const data = this.data;
    const scale = this.scale;
    if (!data || !scale) return;
    const started = performance.now();
    const columns = data.columns.length;
    const rows = this.rows.length;
    this.canvas.width = Math.max(1, columns);
    this.canvas.height = Math.max(1, rows);
    this.rowCells = this.rows.map((row) => rowCells(data, row.indices));
    if (columns > 0 && rows > 0) {
      const image = cellPixels(this.rowCells, columns, scale);
      this.canvas.getContext("2d")?.putImageData(image, 0, 0);
    }
    this.place();
    this.root.dataset.drawMs = (performance.now() - started).toFixed(1);
    this.root.dataset.rows = String(rows);
    this.root.dataset.columns = String(columns);
  }

  /** Size the canvas over the plot and apply the zoom (a CSS transform), then the axis. */
  private place(): void {
    if (!this.data) return;
    const width = this.plotWidth();
    const height = this.rows.length * this.rowHeight;
    this.plot.style.height = `${height}px`;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const { k, x } = this.zoom.transform;
    this.canvas.style.transform = k === 1 && x === 0 ? "" : `translateX(${x}px) scaleX(${k})`;
    this.box = null;
    this.hovered = null;
    this.renderAxis(width);
  }

  private renderAxis(width: number): void {
    const data = this.data;
    if (!data || data.columns.length === 0) return;
    const columns = data.columns;
    const [first, last] = this.zoom.visibleColumns(width);
    drawAxis(this.axis, stepScale(columns, first, last, width), width, AXIS_HEIGHT);
  }

  /**
   * The cell the tooltip names; a click opens it. (Recomputing the cell from the click's
   * coordinates could name the neighbouring column: Chromium rounds a click's position
   * to whole pixels, not a pointer move's, and a column can be a pixel wide.)
   */
  private hovered: { row: number; column: number } | null = null;

  /** The plot's position, measured once per pointer visit (reading it forces layout). */
  private box: DOMRect | null = null;
  private canvasBox(): DOMRect {
    if (!this.box) this.box = this.plot.getBoundingClientRect();
    return this.box;
  }

  /** The row and column under a pointer position, or null outside the cells. */
  private cellAt(event: MouseEvent): { row: number; column: number } | null {
    const data = this.data;
    if (!data) return null;
    const box = this.canvasBox();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    const row = Math.floor(y / this.rowHeight);
    if (row < 0 || row >= this.rows.length || x < 0 || x >= box.width) return null;
    const position = (this.zoom.transform.invertX(x) / box.width) * data.columns.length;
    const column = Math.floor(position);
    if (column < 0 || column >= data.columns.length) return null;
    return { row, column };
  }

  private columnLeft(column: number): number {
    return this.zoom.columnLeft(column);
  }

  private hover(event: PointerEvent): void {
    const started = performance.now();
    const cell = this.cellAt(event);
    const data = this.data;
    if (!cell || !data) {
      this.unhover();
      return;
    }
    this.hovered = cell;
    const column = data.columns[cell.column];
    this.tooltip.replaceChildren(
      ...tooltipLines(data, this.metric, this.rows[cell.row], this.rowCells[cell.row], cell.column),
    );
    this.tooltip.dataset.step = String(columnStep(column));
    // The exact value, as a graph box carries its own (the text is rounded).
    const cells = this.rowCells[cell.row];
    this.tooltip.dataset.value = cells.missing[cell.column]
      ? ""
      : String(cells.values[cell.column]);
    placeTooltip(this.tooltip, event, 90);
    const left = this.columnLeft(cell.column);
    const right = this.columnLeft(cell.column + 1);
    this.hoverRow.style.display = "block";
    this.hoverRow.style.transform = `translateY(${cell.row * this.rowHeight}px)`;
    this.hoverRow.style.height = `${this.rowHeight}px`;
    this.hoverCol.style.display = "block";
    this.hoverCol.style.transform = `translateX(${left}px)`;
    this.hoverCol.style.width = `${Math.max(1, right - left)}px`;
    const elapsed = performance.now() - started;
    this.root.dataset.hoverMs = elapsed.toFixed(2);
    const worst = Number(this.root.dataset.hoverMaxMs ?? "0");
    if (elapsed > worst) this.root.dataset.hoverMaxMs = elapsed.toFixed(2);
  }

  private unhover(): void {
    this.hovered = null;
    this.tooltip.style.display = "none";
    this.hoverRow.style.display = "none";
    this.hoverCol.style.display = "none";
  }

  private click(event: MouseEvent): void {
    const cell = this.hovered ?? this.cellAt(event);
    const data = this.data;
    if (!cell || !data) return;
    const row = this.rows[cell.row];
    if (row.kind === "group") {
      this.events.toggle(row.key);
      return;
    }
    this.events.select(row.key, columnStep(data.columns[cell.column]));
  }

  private clickLabel(event: MouseEvent): void {
    const target = (event.target as HTMLElement).closest<HTMLElement>(".tv-row-label");
    if (!target) return;
    const key = target.dataset.key ?? "";
    if (target.dataset.kind === "group") this.events.toggle(key);
    else this.events.select(key, this.selected.step);
  }

  private placeMarker(): void {
    const data = this.data;
    const rowIndex = this.rows.findIndex(
      (row) => row.kind === "layer" && row.key === this.selected.layer,
    );
    if (!data || rowIndex < 0 || data.columns.length === 0) {
      this.marker.style.display = "none";
      return;
    }
    const step = this.selected.step;
    let column = data.columns.length - 1;
    if (step !== null) {
      const found = data.columns.findIndex((c) => step <= c.last_step);
      column = found < 0 ? data.columns.length - 1 : found;
    }
    const left = this.columnLeft(column);
    const right = this.columnLeft(column + 1);
    this.marker.style.display = "block";
    Object.assign(this.marker.dataset, {
      layer: this.selected.layer,
      row: String(rowIndex),
      column: String(column),
    });
    this.marker.style.transform = `translate(${left - 1}px, ${rowIndex * this.rowHeight - 1}px)`;
    this.marker.style.width = `${Math.max(2, right - left) + 2}px`;
    this.marker.style.height = `${this.rowHeight + 2}px`;
  }

  /** Show the shared crosshair's step (hovered on a line chart) as a column; null hides it. */
  showStep(step: number | null): void {
    const data = this.data;
    if (!data || step === null || data.columns.length === 0) {
      this.hoverCol.style.display = "none";
      return;
    }
    const column = data.columns.findIndex((c) => step >= c.first_step && step <= c.last_step);
    if (column < 0) {
      this.hoverCol.style.display = "none";
      return;
    }
    const left = this.columnLeft(column);
    this.hoverCol.style.display = "block";
    this.hoverCol.style.transform = `translateX(${left}px)`;
    this.hoverCol.style.width = `${Math.max(1, this.columnLeft(column + 1) - left)}px`;
  }
}
