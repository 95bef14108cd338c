/** The ``graph`` route: the model's module calls and the dataflow between them. */

import { getJson } from "./http";

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
