/** One run's histogram of one (layer, tensor type), as the histogram and block-scale
 * charts draw it: its own type, so that both can take it without importing each other. */

import type { HistogramLayer } from "./api";

export interface RunHistogram {
  run: string;
  colour: string;
  data: HistogramLayer | null;
  /** Block-scaled formats asked for that the run did not record (never estimated). */
  notRecorded?: string[];
}
