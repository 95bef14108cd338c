/** The ``findings`` route: what went wrong, grouped, and each run's headline. */

import { getJson, toNumber } from "./http";

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
