/**
 * Line charts (uPlot): metrics of chosen layers over steps and the run's own TensorBoard
 * scalars. Every chart on the page shares one crosshair; clicking a step on any chart
 * picks that step for the histograms, and each chart marks the histograms' step.
 */

import uPlot from "uplot";
import { h } from "./dom";
import { formatValue } from "./numbers";

export interface LineSeries {
  label: string;
  colour: string;
  dash?: number[];
  steps: number[];
  values: number[];
}

export interface LineChart {
  key: string;
  title: string;
  series: LineSeries[];
  log: boolean;
}

const SYNC_KEY = "tandv-steps";
const HEIGHT = 200;

/** Union of the series' steps, and each series' values on it (null where absent). */
export function align(series: LineSeries[]): uPlot.AlignedData {
  const steps = [...new Set(series.flatMap((s) => s.steps))].sort((a, b) => a - b);
  const position = new Map(steps.map((step, i) => [step, i]));
  const columns = series.map((s) => {
    const column: (number | null)[] = new Array(steps.length).fill(null);
    s.steps.forEach((step, i) => {
      const value = s.values[i];
      column[position.get(step) as number] = Number.isFinite(value) ? value : null;
    });
    return column;
  });
  return [steps, ...columns] as uPlot.AlignedData;
}

function cssVar(name: string, fallback: string): string {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

export class LineCharts {
  private charts: uPlot[] = [];
  private step: number | null = null;

  constructor(
    private readonly container: HTMLElement,
    private readonly pickStep: (step: number) => void,
    private readonly hoverStep: (step: number | null) => void = () => {},
  ) {}

  /** Replace every chart. */
  render(charts: LineChart[]): void {
    this.destroy();
    const width = Math.max(320, (this.container.clientWidth || 800) - 4);
    const perRow = width > 1100 ? 2 : 1;
    const chartWidth = Math.floor((width - (perRow - 1) * 12) / perRow) - 4;
    const axisColour = cssVar("--tv-text-muted", "#666");
    const gridColour = cssVar("--tv-grid", "#e0e0e0");
    this.container.style.gridTemplateColumns = `repeat(${perRow}, minmax(0, 1fr))`;
    for (const spec of charts) {
      const data = align(spec.series);
      const positive = spec.series.every((s) =>
        s.values.every((v) => !Number.isFinite(v) || v > 0),
      );
      const log = spec.log && positive;
      const wrapper = h("div", { class: "tv-line-chart", data: { key: spec.key } }, [
        h("div", { class: "tv-line-title" }, [
          spec.title,
          spec.log && !positive
            ? h("span", { class: "tv-muted", text: " (log y needs positive values)" })
            : null,
        ]),
      ]);
      this.container.appendChild(wrapper);
      const options: uPlot.Options = {
        width: chartWidth,
        height: HEIGHT,
        cursor: {
          sync: { key: SYNC_KEY, scales: ["x", null] },
          drag: { x: true, y: false },
        },
        scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
        axes: [
          {
            stroke: axisColour,
            grid: { stroke: gridColour, width: 1 },
            ticks: { stroke: gridColour },
          },
          {
            stroke: axisColour,
            grid: { stroke: gridColour, width: 1 },
            ticks: { stroke: gridColour },
            size: 60,
            values: (_u, values) => values.map((v) => formatValue(v)),
          },
        ],
        series: [
          { label: "step" },
          ...spec.series.map((s) => ({
            label: s.label,
            stroke: s.colour,
            width: 1.5,
            dash: s.dash,
            spanGaps: false,
            points: { show: s.steps.length < 60 },
            value: (_u: uPlot, v: number | null) => (v === null ? "–" : formatValue(v)),
          })),
        ],
        hooks: {
          draw: [(u) => this.drawStepMarker(u)],
          setCursor: [
            (u) => {
              const index = u.cursor.idx;
              const step = index === null || index === undefined ? null : u.data[0][index];
              this.hoverStep(typeof step === "number" ? step : null);
            },
          ],
        },
      };
      const chart = new uPlot(options, data, wrapper);
      chart.over.addEventListener("click", () => {
        const index = chart.cursor.idx;
        if (index === null || index === undefined) return;
        const step = chart.data[0][index];
        if (typeof step === "number") this.pickStep(step);
      });
      this.charts.push(chart);
    }
  }

  /** Mark ``step`` (the histograms' step) on every chart. */
  setStep(step: number | null): void {
    this.step = step;
    for (const chart of this.charts) chart.redraw(false, false);
  }

  private drawStepMarker(u: uPlot): void {
    if (this.step === null) return;
    const x = Math.round(u.valToPos(this.step, "x", true));
    const { left, top, width, height } = u.bbox;
    if (x < left || x > left + width) return;
    const context = u.ctx;
    context.save();
    context.strokeStyle = cssVar("--tv-accent", "#f57c00");
    context.lineWidth = 2 * (window.devicePixelRatio || 1);
    context.beginPath();
    context.moveTo(x, top);
    context.lineTo(x, top + height);
    context.stroke();
    context.restore();
  }

  destroy(): void {
    for (const chart of this.charts) chart.destroy();
    this.charts = [];
    this.container.replaceChildren();
  }
}
