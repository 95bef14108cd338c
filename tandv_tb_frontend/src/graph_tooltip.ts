/** The Graph view's tooltip: what a box stands for, as text (never markup). */

import type { GraphNode, TensorSpec } from "./graph_api";
import { h } from "./dom";

/** Shapes as ``[2, 16, 32] float32``. */
export function specs(list: TensorSpec[]): string {
  return list.map((s) => `[${s.shape.join(", ")}] ${s.dtype}`).join(", ") || "–";
}

/** The tensors entering (``inputs``) or leaving the open call ``open``. */
export function boundaryLines(inputs: boolean, open: GraphNode | undefined): HTMLElement[] {
  const side = inputs ? "inputs" : "outputs";
  return [
    h("div", { class: "tv-tooltip-name", text: `${side} of ${open?.layer ?? "the model"}` }),
    h("div", { text: specs((inputs ? open?.inputs : open?.outputs) ?? []) }),
    h("div", { class: "tv-muted", text: "click: back to the enclosing module" }),
  ];
}

/** ``name [shape]`` of the parameters a tracker put in ``extra`` (any JSON: checked). */
function parametersText(parameters: unknown): string {
  if (!Array.isArray(parameters) || !parameters.length) return "";
  const text = parameters
    .slice(0, 8)
    .map((p: unknown) => {
      const { name, shape } = (p && typeof p === "object" ? p : {}) as Record<string, unknown>;
      return `${String(name)} [${Array.isArray(shape) ? shape.join(", ") : ""}]`;
    })
    .join(", ");
  return `parameters: ${text}${parameters.length > 8 ? ", …" : ""}`;
}

/**
 * A call's lines: its layer, type and which call, shapes and dtypes in and out, its
 * ``extra_repr`` and parameters, the metric's ``value`` line, the headline it holds.
 */
export function nodeLines(
  node: GraphNode,
  call: string,
  value: string,
  headline: string,
  opens: boolean,
): HTMLElement[] {
  const repr = typeof node.extra.extra_repr === "string" ? node.extra.extra_repr : "";
  const parameters = parametersText(node.extra.parameters);
  const lines = [
    h("div", { class: "tv-tooltip-name", text: node.layer }),
    h("div", { text: [node.module_type || "module", call].filter(Boolean).join(" · ") }),
    h("div", { text: `in: ${specs(node.inputs)}` }),
    h("div", { text: `out: ${specs(node.outputs)}` }),
    repr ? h("div", { class: "tv-graph-repr", text: repr }) : null,
    parameters ? h("div", { text: parameters }) : null,
    h("div", { text: value }),
    headline ? h("div", { class: "tv-graph-headline-text", text: headline }) : null,
    opens ? h("div", { class: "tv-muted", text: "click: open" }) : null,
  ];
  return lines.filter((line): line is HTMLDivElement => line !== null);
}
