/**
 * Which layers a run recorded, by tensor type, so that the cards ask a run only for the
 * layers it has: the routes answer any other with a 404, which the browser logs as an error.
 * Each run's list is asked of the ``layers`` route once per catalog (TensorBoard's reload
 * brings a new catalog, and maybe new layers); a run without the tensor type is not asked.
 */

import { layers } from "./api";
import type { Catalog } from "./store";

const lists = new WeakMap<Catalog, Map<string, Promise<Set<string>>>>();

/** The names of the ``tensorType`` layers ``run`` recorded, as ``catalog`` lists its runs. */
export function recordedLayers(
  catalog: Catalog,
  run: string,
  tensorType: string,
): Promise<Set<string>> {
  const info = catalog.runs.find((item) => item.run === run);
  if (!info?.tensor_types.includes(tensorType)) return Promise.resolve(new Set());
  let known = lists.get(catalog);
  if (!known) {
    known = new Map();
    lists.set(catalog, known);
  }
  const key = `${run}\u0000${tensorType}`;
  let names = known.get(key);
  if (!names) {
    // Not cancelled with a card's fetches: the list is shared, and outlives them.
    names = layers(run, tensorType).then((body) => new Set(body.layers.map((l) => l.layer)));
    const shared = known;
    names.catch(() => shared.delete(key)); // asked again next time
    known.set(key, names);
  }
  return names;
}
