/**
 * The plugin's HTTP API (tandv_tb/plugin/http_api.md): typed, relative fetches.
 *
 * The tab lives in TensorBoard's plugin iframe whose <base href> is ``…/data/plugin/tandv/``,
 * so every route is fetched by a relative URL. Non-finite floats arrive as the strings
 * "NaN", "Infinity" and "-Infinity"; they are turned into numbers only in numeric fields
 * (a layer may well be called "NaN").
 */

export type Params = Record<string, string | number | boolean | null | undefined | string[]>;

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

/** A failed request: the server's message, or what went wrong on the way. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    /**
     * Why the logdir's storage failed (``denied``, ``missing``, ``unreachable``, ``failed``),
     * or ``cache``: the plugin's store could be written nowhere.
     */
    readonly storage: string | null = null,
  ) {
    super(message);
  }
}

/** A JSON number, or one of the strings used for non-finite floats. */
export function toNumber(value: unknown): number {
  if (typeof value === "number") return value;
  if (value === "NaN") return NaN;
  if (value === "Infinity") return Infinity;
  if (value === "-Infinity") return -Infinity;
  return NaN;
}

/** The query string for ``params`` (arrays repeat their key; empty values are left out). */
export function query(params: Params): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    for (const item of Array.isArray(value) ? value : [value]) search.append(key, String(item));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** The relative URL of a route. */
export function url(route: string, params: Params = {}): string {
  return route + query(params);
}

async function getJson<T>(route: string, params: Params, signal?: AbortSignal): Promise<T> {
  const response = await fetch(url(route, params), { signal, credentials: "same-origin" });
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ApiError(
      `${route}: the server sent no JSON (HTTP ${response.status})`,
      response.status,
    );
  }
  if (!response.ok) {
    const { error: message, storage } = (body ?? {}) as { error?: unknown; storage?: unknown };
    throw new ApiError(
      typeof message === "string" ? message : `${route}: HTTP ${response.status}`,
      response.status,
      typeof storage === "string" ? storage : null,
    );
  }
  return body as T;
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

/** The heatmap's ``values`` on the wire: base64 of little-endian floats (http_api.md). */
export interface WireMatrix {
  dtype: "float32" | "float64";
  shape: [number, number];
  data: string;
  /** base64 of one bit per cell (little bit order), 1 = no data; null when none is missing. */
  missing: string | null;
}

function base64Bytes(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The cells of a ``WireMatrix`` as float64 values (NaN where missing) and a missing mask. */
export function decodeMatrix(matrix: WireMatrix): { values: Float64Array; missing: Uint8Array } {
  const [rows, cols] = matrix.shape;
  const n = rows * cols;
  const width = matrix.dtype === "float64" ? 8 : 4;
  const bytes = base64Bytes(matrix.data);
  if (bytes.length !== n * width) {
    throw new ApiError(`heatmap: ${bytes.length} bytes for ${rows} x ${cols} cells`, 200);
  }
  let values: Float64Array;
  if (LITTLE_ENDIAN) {
    values =
      width === 8
        ? new Float64Array(bytes.buffer)
        : Float64Array.from(new Float32Array(bytes.buffer));
  } else {
    const view = new DataView(bytes.buffer);
    values = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      values[i] = width === 8 ? view.getFloat64(8 * i, true) : view.getFloat32(4 * i, true);
    }
  }
  const missing = new Uint8Array(n);
  if (matrix.missing !== null) {
    const bits = base64Bytes(matrix.missing);
    for (let i = 0; i < n; i++) {
      if ((bits[i >> 3] >> (i & 7)) & 1) {
        missing[i] = 1;
        values[i] = NaN;
      }
    }
  }
  return { values, missing };
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

/** The shape and dtype of a tensor a module call took or returned. */
export interface TensorSpec {
  shape: number[];
  dtype: string;
}
/** One module call of the model's graph (``graph`` route). */
export interface GraphNode {
  /** Unique; ``<layer>#<k>`` for the k-th call of a module. */
  id: string;
  /** The module's recorded name, as every other route names it. */
  layer: string;
  module_type: string;
  /** The call it ran in; null at the top. */
  parent: string | null;
  order: number;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  /** ``extra_repr`` and ``parameters`` where the tracker recorded them; any JSON. */
  extra: Record<string, unknown>;
}
export interface GraphResponse {
  run: string;
  /** The step the graph was recorded at; null without a graph. */
  step: number | null;
  nodes: GraphNode[];
  /** An output of ``source`` reaches an input of ``target``. */
  edges: { source: string; target: string }[];
  /** Graph records that could not be read, with why. */
  skipped: { step: number; reason: string }[];
}

export function graph(run: string, signal?: AbortSignal): Promise<GraphResponse> {
  return getJson<GraphResponse>("graph", { run }, signal);
}

/** True for the error a cancelled fetch throws. */
export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === "AbortError";
}

/** ``request``'s body, or null where the route answered 404 (a run without that layer). */
export function nullIfMissing<T>(request: Promise<T>): Promise<T | null> {
  return request.catch((error: unknown) => {
    if (isAbort(error) || !(error instanceof ApiError) || error.status !== 404) throw error;
    return null;
  });
}

/** One finding of the ``findings`` route: what went wrong, where (run, tensor, step). */
export interface Finding {
  run: string;
  step: number;
  kind: string;
  severity: "error" | "warning" | "info";
  tensor_type: string;
  name: string;
  value: number | null;
  message: string;
  other_run: string | null;
  /** The heatmap metric that shows it, and the format that metric needs (or null). */
  metric: string;
  format: string | null;
}
/** Findings that many tensors share, in one row; ``findings`` indexes the route's list. */
export interface FindingGroup {
  run: string;
  step: number;
  kind: string;
  severity: "error" | "warning" | "info";
  tensor_type: string;
  name: string;
  value: number | null;
  message: string;
  tensors: number;
  findings: number[];
}
/**
 * Groups told on one line of the card's first level, as ``tandv-tb findings`` prints them:
 * the underflow of an unscaled format and its scales, one run and format (``groups``
 * indexes the route's list).
 */
export interface FindingFold {
  run: string;
  step: number;
  kind: string;
  severity: "error" | "warning" | "info";
  /** Its format, or its formats separated by ", ". */
  format: string;
  tensors: number;
  message: string;
  groups: number[];
}
/** A run's first problem (``finding`` indexes the route's list), or none. */
export interface Headline {
  run: string;
  message: string;
  finding: number | null;
}
export interface FindingsResponse {
  runs: string[];
  /** One per run, in run order. */
  headlines: Headline[];
  /** Most severe first, then by run and step. */
  groups: FindingGroup[];
  /** Most severe first, then by run and step; each group is in at most one. */
  folds: FindingFold[];
  /** One per tensor; most severe first, then by run and step. */
  findings: Finding[];
  /** Which runs were compared for divergence, and why the others were not ("" for one run). */
  compared: string;
  thresholds: Record<string, number | string>;
}

export async function findings(runs: string[], signal?: AbortSignal): Promise<FindingsResponse> {
  const body = await getJson<FindingsResponse>("findings", { run: runs }, signal);
  for (const item of [...body.findings, ...body.groups]) {
    item.value = item.value === null ? null : toNumber(item.value);
  }
  return body;
}
