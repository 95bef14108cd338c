/**
 * The plugin's HTTP API (tandv_tb/plugin/http_api.md) for the data routes: typed answers,
 * non-finite floats made numbers in their numeric fields (``http.ts``). The findings and
 * graph routes have modules of their own (``findings_api.ts``, ``graph_api.ts``).
 */

import { decodeMatrix, type WireMatrix } from "./heatmap_wire";
import { getJson, type Params, toNumber } from "./http";

export interface RunInfo {
  run: string;
  tensor_types: string[];
  formats: string[];
  /** The block-scaled formats recorded by any of its tags (never estimated). */
  block_formats: string[];
  layer_count: number;
  max_step: number;
}
/** A numerics tag (``runs``) or some steps of a layer (``layers``) that could not be read. */
export interface Skipped {
  run?: string;
  layer?: string;
  tag: string;
  steps?: number;
  reason: string;
}
export interface RunsResponse {
  runs: RunInfo[];
  scalar_runs: string[];
  skipped: Skipped[];
  /** What the plugin says of itself, once (its store kept in a temporary place, and why). */
  notices: string[];
  /** Every run's tensor types together, in dashboard order (the server decides it). */
  tensor_types: string[];
}
export interface LayerInfo {
  layer: string;
  module_type: string;
  order: number;
  dtype: string;
  formats: string[];
  block_formats: string[];
  steps: number;
  first_step: number;
  last_step: number;
}
export interface LayersResponse {
  run: string;
  tensor_type: string;
  layers: LayerInfo[];
  skipped: Skipped[];
}
export interface StepsResponse {
  steps: number[];
}
export interface FormatLimits {
  format: string;
  bits: number;
  min_exponent: number;
  max_exponent: number;
  smallest_subnormal: number;
  smallest_normal: number;
  max: number;
  has_inf: boolean;
  has_nan: boolean;
}
/** A block-scaled format (MX, NVFP4): its element format, block and scale rule. */
export interface BlockFormatInfo {
  format: string;
  element: string;
  block_size: number;
  scale_rule: "ocp" | "rceil" | "nvfp4";
  element_max: number;
  /** The range of its blocks' scale exponents (clamped blocks lie at its ends). */
  scale_min_exponent: number;
  scale_max_exponent: number;
}
export interface FormatsResponse {
  formats: FormatLimits[];
  block_formats: BlockFormatInfo[];
  default_overlays: string[];
}
export interface MetricInfo {
  metric: string;
  label: string;
  kind: "statistic" | "log2" | "fraction" | "count";
  scale: "diverging" | "sequential";
  needs_format: boolean;
  /** The format must be block-scaled (``snr_db``, ``clamped_block_fraction``). */
  needs_block_format: boolean;
}
export interface MetricsResponse {
  metrics: MetricInfo[];
}
export interface FormatCast extends FormatLimits {
  exact: boolean;
  underflow: number;
  overflow: number;
}
/** What one record of a block-scaled format shows: always exact. */
export interface BlockCast extends BlockFormatInfo {
  exact: true;
  underflow: number;
  /** Values that saturate at their block's largest element value. */
  overflow: number;
  blocks: number;
  zero_blocks: number;
  clamped_low: number;
  clamped_high: number;
  /** ``scales[i]`` blocks (zero blocks aside) have the scale exponent ``scale_lo + i``. */
  scale_lo: number;
  scales: number[];
  snr_db: number;
}
export interface HistogramLayer {
  layer: string;
  module_type: string;
  order: number;
  step: number;
  dtype: string;
  dtype_min_exponent: number;
  dtype_max_exponent: number;
  numel: number;
  zero_count: number;
  nan_count: number;
  posinf_count: number;
  neginf_count: number;
  bins_lo: number;
  counts: number[];
  statistics: Record<string, number>;
  formats: FormatCast[];
  blocks: BlockCast[];
}
export interface HistogramResponse {
  run: string;
  tensor_type: string;
  requested_step: number | null;
  layers: HistogramLayer[];
}
export interface HeatmapColumn {
  step: number;
  first_step: number;
  last_step: number;
  count: number;
}
export interface HeatmapResponse {
  run: string;
  /** The run subtracted from ``run`` (a difference heatmap), or null. */
  minus_run?: string | null;
  tensor_type: string;
  metric: string;
  format: string | null;
  reduce: string;
  total_steps: number;
  columns: HeatmapColumn[];
  layers: { layer: string; module_type: string; order: number; dtype: string }[];
  exact: boolean[];
  /** Row-major cell values; NaN where the server sent null ("no data"): see ``missing``. */
  values: Float64Array;
  /** 1 where a cell has no data (null), else 0. */
  missing: Uint8Array;
  value_range: { min: number; max: number } | null;
}
export interface Series {
  layer: string;
  metric: string;
  exact: boolean;
  steps: number[];
  values: number[];
}
export interface SeriesResponse {
  run: string;
  tensor_type: string;
  series: Series[];
}
export interface ScalarSeries {
  tag: string;
  steps: number[];
  values: number[];
}
export interface ScalarsResponse {
  run: string;
  scalars: ScalarSeries[];
}

function numbers(values: unknown[]): number[] {
  return values.map(toNumber);
}

function statistics(raw: Record<string, unknown>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(raw)) out[key] = toNumber(value);
  return out;
}

export function runs(signal?: AbortSignal): Promise<RunsResponse> {
  return getJson<RunsResponse>("runs", {}, signal);
}

export function layers(run: string, tensorType: string, signal?: AbortSignal) {
  return getJson<LayersResponse>("layers", { run, tensor_type: tensorType }, signal);
}

export function steps(run: string, tensorType: string, signal?: AbortSignal) {
  return getJson<StepsResponse>("steps", { run, tensor_type: tensorType }, signal);
}

export function formats(signal?: AbortSignal): Promise<FormatsResponse> {
  return getJson<FormatsResponse>("formats", {}, signal);
}

export function metrics(signal?: AbortSignal): Promise<MetricsResponse> {
  return getJson<MetricsResponse>("metrics", {}, signal);
}

export async function histogram(params: Params, signal?: AbortSignal) {
  const body = await getJson<HistogramResponse>("histogram", params, signal);
  for (const layer of body.layers) {
    layer.statistics = statistics(layer.statistics as Record<string, unknown>);
    for (const cast of layer.formats) {
      for (const key of ["max", "smallest_normal", "smallest_subnormal"] as const) {
        cast[key] = toNumber(cast[key]);
      }
    }
    for (const block of layer.blocks) block.snr_db = toNumber(block.snr_db);
  }
  return body;
}

export async function heatmap(params: Params, signal?: AbortSignal): Promise<HeatmapResponse> {
  type Raw = Omit<HeatmapResponse, "values" | "missing"> & { values: WireMatrix };
  const raw = await getJson<Raw>("heatmap", params, signal);
  const { values, missing } = decodeMatrix(raw.values);
  const range = raw.value_range
    ? { min: toNumber(raw.value_range.min), max: toNumber(raw.value_range.max) }
    : null;
  return { ...raw, values, missing, value_range: range };
}

export async function series(params: Params, signal?: AbortSignal): Promise<SeriesResponse> {
  const body = await getJson<SeriesResponse>("series", params, signal);
  for (const item of body.series) item.values = numbers(item.values as unknown[]);
  return body;
}

export async function scalars(run: string, signal?: AbortSignal): Promise<ScalarsResponse> {
  const body = await getJson<ScalarsResponse>("scalars", { run }, signal);
  for (const item of body.scalars) item.values = numbers(item.values as unknown[]);
  return body;
}
