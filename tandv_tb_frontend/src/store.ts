/** The tab's one state (the user's choices and what the server sent) and who depends on it. */

import type {
  BlockFormatInfo,
  FormatLimits,
  HeatmapResponse,
  LayerInfo,
  MetricInfo,
  RunInfo,
} from "./api";
import type { Finding, FindingsResponse } from "./findings_api";
import { DEFAULT_STATE, saveState, type State } from "./state";

/** What the runs, formats and metrics routes sent (reloaded by TensorBoard's reload). */
export interface Catalog {
  runs: RunInfo[];
  scalarRuns: Set<string>;
  /** Every run's tensor types, in the server's dashboard order (the one place it is decided). */
  tensorTypes: string[];
  colours: Map<string, string>;
  formats: FormatLimits[];
  /** The block-scaled formats, listed apart: shown only where a run recorded them. */
  blockFormats: BlockFormatInfo[];
  defaultOverlays: string[];
  metrics: MetricInfo[];
}

/** The layers and recorded steps of the heatmap's run and tensor type. */
export interface Layers {
  run: string;
  tensorType: string;
  layers: LayerInfo[];
  steps: number[];
}

/** Data loaded from the server: its keys are replaced whole, never edited in place. */
export interface Loaded {
  catalog: Catalog | null;
  layerList: Layers | null;
  heatmapData: HeatmapResponse | null;
  /** The headline finding the tab opened its view on by itself (``followHeadline``). */
  headlineShown: Finding | null;
  /** The findings of the ticked runs, as the Findings card loaded them. */
  findings: FindingsResponse | null;
}

export type Model = State & Loaded;
export type Key = keyof Model;

/**
 * The fix-ups a change implies (a valid run, a tensor type the run has, …), computed from
 * the state after the change and the keys it changed.
 */
export type Rules = (model: Model, changed: Set<Key>) => Partial<Model>;

/** A dependent's work; a promise when the page is ready only once it has settled. */
type Work = () => void | Promise<void>;

interface Dependent {
  keys: Key[];
  run: Work;
}

/**
 * Each dependent declares the keys it reads; a change runs exactly the dependents of the
 * keys it changed, once each, in the order they were declared. (A signals library such as
 * ``@preact/signals-core`` tracks reads instead of declaring them, but the loads here are
 * asynchronous and must not track what they read after an ``await``, and the user's choices
 * must still be diffed to be saved: see the README's "State" section for the comparison.)
 */
export class Store {
  private current: Model;
  private readonly dependents: Dependent[] = [];

  constructor(
    initial: State,
    private readonly rules: Rules,
  ) {
    this.current = {
      ...initial,
      catalog: null,
      layerList: null,
      heatmapData: null,
      headlineShown: null,
      findings: null,
    };
  }

  get state(): Readonly<Model> {
    return this.current;
  }

  /** Run ``run`` after every change of one of ``keys``. */
  on(keys: Key[], run: Work): void {
    this.dependents.push({ keys, run });
  }

  /**
   * Apply ``patch`` and the rules' fix-ups, save the choices, run the dependents; resolves
   * once the work they return (and the changes that work makes in turn) has settled.
   */
  async update(patch: Partial<Model>): Promise<void> {
    const changed = this.apply(patch);
    if (changed.size === 0) return;
    for (const key of this.apply(this.rules(this.current, changed))) changed.add(key);
    if ([...changed].some((key) => key in DEFAULT_STATE)) saveState(this.choices());
    const work: (void | Promise<void>)[] = [];
    for (const dependent of this.dependents) {
      if (dependent.keys.some((key) => changed.has(key))) work.push(dependent.run());
    }
    await Promise.all(work);
  }

  /** The user's choices (what is saved), without the loaded data. */
  choices(): State {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(DEFAULT_STATE)) out[key] = this.current[key as keyof State];
    return out as unknown as State;
  }

  private apply(patch: Partial<Model>): Set<Key> {
    const before = this.current;
    this.current = { ...before, ...patch };
    const changed = new Set<Key>();
    for (const key of Object.keys(patch) as Key[]) {
      const loaded = !(key in DEFAULT_STATE);
      const same = loaded
        ? before[key] === this.current[key]
        : JSON.stringify(before[key]) === JSON.stringify(this.current[key]);
      if (!same) changed.add(key);
    }
    return changed;
  }
}
