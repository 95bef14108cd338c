/**
 * What the user chose, kept across reloads: in the iframe's own URL hash (so a copied
 * address of the frame reproduces the view) and in localStorage (so TensorBoard's reload,
 * which recreates the frame, keeps it). TensorBoard's own hash entries ``p.tandv.<key>``
 * (a link into TensorBoard) override both for the keys they name.
 */

export interface State {
  /** Runs shown (compared); empty means the default (every run, up to ``DEFAULT_RUNS``). */
  runs: string[];
  /** Which runs the picker lists (a regular expression searched in run names). */
  runRegex: string;
  /** The run whose heatmap is drawn (one of ``runs``). */
  heatmapRun: string;
  tensorType: string;
  layerRegex: string;
  metric: string;
  /** Format for the metrics that need one (under/overflow). */
  metricFormat: string;
  reduce: "max" | "min" | "mean" | "last";
  /** Step window of the heatmap (zoom); null for every step. */
  window: [number, number] | null;
  /**
   * Module groups (name prefixes) open by default: ``auto`` opens levels while the rows stay
   * few (an overview of a big model), or every group, or none. ``toggled`` groups are the
   * user's exceptions to that default.
   */
  groups: "auto" | "expanded" | "collapsed";
  toggled: string[];
  /** The layer opened from the heatmap, and further layers pinned beside it. */
  layer: string;
  pinned: string[];
  /** Further tensor types drawn as small multiples. */
  extraTypes: string[];
  /** The histogram's step; null for each layer's last step. */
  step: number | null;
  /** Formats overlaid on the histogram; null for the defaults (dtype, recorded, fp8). */
  overlays: string[] | null;
  histCount: boolean;
  histLog: boolean;
  scaled: boolean;
  colWrap: number;
  /** Metrics drawn as lines for the chosen layers. */
  lineMetrics: string[];
  lineLog: boolean;
  /** Several runs: overlaid in one chart, or side by side in one chart each. */
  compare: "overlay" | "side";
  /** A ticked run whose values the heatmap subtracts from ``heatmapRun``'s; "" for none. */
  minusRun: string;
  /** What the top card shows: the layers x steps heatmap, or the model's graph. */
  view: "heatmap" | "graph";
  /** The module call open in the graph (its id); "" for the default (the model's). */
  graphFocus: string;
  /**
   * Whether the heatmap and histogram show the findings' headline (the tab opens on what
   * went wrong) until the user chooses a view of their own (any of ``VIEW_KEYS``).
   */
  followHeadline: boolean;
}

export const DEFAULT_STATE: State = {
  runs: [],
  runRegex: "",
  heatmapRun: "",
  tensorType: "",
  layerRegex: "",
  metric: "log2_rm2",
  metricFormat: "float8_e4m3fn",
  reduce: "max",
  window: null,
  groups: "auto",
  toggled: [],
  layer: "",
  pinned: [],
  extraTypes: [],
  step: null,
  overlays: null,
  histCount: false,
  histLog: false,
  scaled: false,
  colWrap: 3,
  lineMetrics: ["log2_rm2"],
  lineLog: false,
  compare: "overlay",
  minusRun: "",
  view: "heatmap",
  graphFocus: "",
  followHeadline: true,
};

/** The choices that make the heatmap's view: choosing any of them stops ``followHeadline``. */
export const VIEW_KEYS = [
  "heatmapRun",
  "tensorType",
  "metric",
  "metricFormat",
  "layer",
  "step",
  "minusRun",
  "window",
] as const;

/**
 * A saved state or address that names a view but says nothing of ``followHeadline`` (a
 * ``p.tandv.*`` link, a state saved by an older version): the user's own view, kept.
 */
function ownView(state: Partial<State>): Partial<State> {
  if (state.followHeadline !== undefined) return state;
  const named = VIEW_KEYS.some(
    (key) =>
      state[key] !== undefined && JSON.stringify(state[key]) !== JSON.stringify(DEFAULT_STATE[key]),
  );
  return named ? { ...state, followHeadline: false } : state;
}

const STORAGE_KEY = "tandv_tb.numerics.state.v1";
const HASH_KEY = "state";

function sanitize(raw: unknown): Partial<State> {
  if (!raw || typeof raw !== "object") return {};
  const out: Record<string, unknown> = {};
  for (const [key, fallback] of Object.entries(DEFAULT_STATE)) {
    const value = (raw as Record<string, unknown>)[key];
    if (value === undefined) continue;
    const sameKind =
      (Array.isArray(fallback) && Array.isArray(value)) ||
      (fallback === null && (value === null || Array.isArray(value))) ||
      (key === "step" && (value === null || typeof value === "number")) ||
      (key === "window" && (value === null || Array.isArray(value))) ||
      (fallback !== null && !Array.isArray(fallback) && typeof fallback === typeof value);
    if (sameKind) out[key] = value;
  }
  return out as Partial<State>;
}

function fromHash(): Partial<State> {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const text = params.get(HASH_KEY);
  if (!text) return {};
  try {
    return ownView(sanitize(JSON.parse(text)));
  } catch {
    return {};
  }
}

function fromStorage(): Partial<State> {
  try {
    return ownView(sanitize(JSON.parse(window.localStorage.getItem(STORAGE_KEY) ?? "null")));
  } catch {
    return {};
  }
}

/** Values from TensorBoard's ``p.tandv.*`` hash entries (strings; lists comma-separated). */
export function fromHostData(data: Record<string, string>): Partial<State> {
  const out: Record<string, unknown> = {};
  for (const [key, text] of Object.entries(data)) {
    const fallback = (DEFAULT_STATE as unknown as Record<string, unknown>)[key];
    if (fallback === undefined) continue;
    if (Array.isArray(fallback)) out[key] = text.split(",").filter(Boolean);
    else if (typeof fallback === "boolean") out[key] = text === "true";
    else if (typeof fallback === "number" || key === "step") out[key] = Number(text);
    else if (typeof fallback === "string") out[key] = text;
  }
  return ownView(sanitize(out));
}

/** The state saved by an earlier visit (hash first, then localStorage). */
export function loadState(): State {
  return { ...DEFAULT_STATE, ...fromStorage(), ...fromHash() };
}

/** Save the state in the frame's URL hash and in localStorage. */
export function saveState(state: State): void {
  const text = JSON.stringify(state);
  try {
    window.localStorage.setItem(STORAGE_KEY, text);
  } catch {
    // storage full or disabled: the hash still holds the state
  }
  const params = new URLSearchParams();
  params.set(HASH_KEY, text);
  // An absolute URL: the frame's <base href> would turn "#…" into another page's address.
  const address = new URL(window.location.href);
  address.hash = params.toString();
  window.history.replaceState(null, "", address.href);
}
