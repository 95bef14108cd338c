/**
 * How the tab speaks to the plugin: relative URLs with query strings, JSON answers, errors
 * with the server's message, and the strings that stand for non-finite floats.
 *
 * The tab lives in TensorBoard's plugin iframe whose <base href> is ``…/data/plugin/tandv/``,
 * so every route is fetched by a relative URL. Non-finite floats arrive as the strings
 * "NaN", "Infinity" and "-Infinity"; the routes' modules turn them into numbers only in
 * numeric fields (a layer may well be called "NaN").
 */

export type Params = Record<string, string | number | boolean | null | undefined | string[]>;

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

/** The JSON body of ``route``; an ``ApiError`` for an HTTP error or a body that is not JSON. */
export async function getJson<T>(route: string, params: Params, signal?: AbortSignal): Promise<T> {
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

/** True for the error a cancelled fetch throws. */
export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === "AbortError";
}
