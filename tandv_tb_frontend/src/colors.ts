/** Colours: one per run, the heatmap's scales and the marks for special values. */

import { scaleDiverging, scaleSequential } from "d3-scale";
import { interpolateRdBu, interpolateViridis, schemeTableau10 } from "d3-scale-chromatic";
import { rgb } from "d3-color";

/** A colour per run that stays the same as long as the logdir holds the same runs. */
export function runColors(allRuns: string[]): Map<string, string> {
  const sorted = [...allRuns].sort();
  return new Map(sorted.map((run, i) => [run, schemeTableau10[i % schemeTableau10.length]]));
}

/** Cell colours for values that are not numbers on the scale. */
export const SPECIAL = {
  nan: "#ff00ff",
  posinf: "#000000",
  neginf: "#9e9e9e",
};

export interface CellScale {
  kind: "diverging" | "sequential";
  lo: number;
  hi: number;
  /** The scale's middle (diverging) where the colour is neutral. */
  mid: number;
  /** Colour of a value as CSS. */
  css(value: number): string;
  /** 256 colours from ``lo`` to ``hi`` packed as little-endian RGBA words. */
  lut: Uint32Array;
}

function packed(css: string): number {
  const c = rgb(css);
  return ((255 << 24) | (c.b << 16) | (c.g << 8) | c.r) >>> 0;
}

/** The heatmap's colour scale for a metric's scale hint and the cells' finite range. */
export function cellScale(
  kind: "diverging" | "sequential",
  range: { min: number; max: number } | null,
  isFraction: boolean,
): CellScale {
  let lo = range ? range.min : 0;
  let hi = range ? range.max : 1;
  let mid = 0;
  let colour: (value: number) => string;
  if (kind === "diverging") {
    const extent = Math.max(Math.abs(lo), Math.abs(hi), 1e-12);
    lo = -extent;
    hi = extent;
    mid = 0;
    const scale = scaleDiverging((t: number) => interpolateRdBu(1 - t)).domain([lo, mid, hi]);
    colour = (value) => scale(value);
  } else {
    if (isFraction) lo = 0;
    if (!(hi > lo)) hi = lo + (isFraction ? 1e-6 : 1);
    mid = (lo + hi) / 2;
    const scale = scaleSequential(interpolateViridis).domain([lo, hi]);
    colour = (value) => scale(value);
  }
  const lut = new Uint32Array(256);
  for (let i = 0; i < 256; i++) lut[i] = packed(colour(lo + ((hi - lo) * i) / 255));
  return { kind, lo, hi, mid, css: colour, lut };
}

export const SPECIAL_PACKED = {
  nan: packed(SPECIAL.nan),
  posinf: packed(SPECIAL.posinf),
  neginf: packed(SPECIAL.neginf),
  missing: 0,
};
