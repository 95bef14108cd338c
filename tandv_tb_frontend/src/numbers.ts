/** Number formatting for tooltips and labels. */

import { format } from "d3-format";

const general = format(".4~g");
const grouped = format(",");
const percent = format(".3~%");

/** A metric value: NaN and infinities spelled out. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "−Inf";
  return general(value);
}

/** An exact count with thousands separators. */
export function formatCount(value: number): string {
  return grouped(value);
}

/** A share in percent; tiny non-zero shares are not rounded to zero. */
export function formatShare(part: number, whole: number): string {
  if (whole <= 0) return "–";
  const share = part / whole;
  if (share > 0 && share < 1e-5) return "<0.001%";
  return percent(share);
}

const SUPERSCRIPT: Record<string, string> = {
  "-": "⁻",
  "0": "⁰",
  "1": "¹",
  "2": "²",
  "3": "³",
  "4": "⁴",
  "5": "⁵",
  "6": "⁶",
  "7": "⁷",
  "8": "⁸",
  "9": "⁹",
};

/** 2ⁿ with a superscript exponent. */
export function binadeLabel(n: number): string {
  return `2${[...String(n)].map((c) => SUPERSCRIPT[c] ?? c).join("")}`;
}
