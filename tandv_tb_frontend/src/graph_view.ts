/**
 * The Graph view's drawing: one level of the model graph as SVG (a box per call, the
 * edges as routed), scaled to the card's width; its colours, the headline's outline, a
 * tooltip on hover and clicks. Text from the data only ever enters as text nodes and
 * attribute values.
 */

import { hsl } from "d3-color";
import { h, placeTooltip } from "./dom";
import type { Layout, Placed } from "./graph_layout";
import type { Bus } from "./graph_model";

const SVG = "http://www.w3.org/2000/svg";
export const BOX_HEIGHT = 36;
const MAX_HEIGHT = 720;
/** Room beside the layout for each bus (``graph_model.MAX_FAN``). */
const BUS_GAP = 9;

/** A box to draw: its name, the line under it, and whether a click opens it. */
export interface Shown {
  id: string;
  label: string;
  sub: string;
  opens: boolean;
  /** A boundary of the open call ("inputs", "outputs"): drawn apart, never coloured. */
  boundary: boolean;
}

/** A box's colour and its value, as ``String(number)`` ("" and ``fill`` null: no data). */
export interface Paint {
  fill: string | null;
  value: string;
}

export interface GraphViewEvents {
  click(id: string): void;
  /** The tooltip's lines for a box. */
  describe(id: string): HTMLElement[];
}

/** The width a box needs for its texts (estimated: measuring text forces layout). */
export function boxWidth(shown: Shown): number {
  const chars = Math.max(shown.label.length, shown.sub.length);
  return Math.max(84, Math.min(260, 18 + 6.6 * chars));
}

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) element.setAttribute(key, value);
  return element;
}

function clipped(text: string, width: number): string {
  const room = Math.max(4, Math.floor((width - 14) / 6.6));
  return text.length > room ? `${text.slice(0, room - 1)}…` : text;
}

export class GraphView {
  readonly root: HTMLElement;
  private readonly scroller: HTMLElement;
  private readonly canvas: SVGSVGElement;
  private readonly tooltip: HTMLElement;
  private readonly boxes = new Map<string, SVGGElement>();

  constructor(private readonly events: GraphViewEvents) {
    this.canvas = svg("svg", { class: "tv-graph-svg", role: "img" });
    this.scroller = h("div", { class: "tv-graph-scroll" });
    this.scroller.style.maxHeight = `${MAX_HEIGHT}px`;
    this.scroller.append(this.canvas);
    this.tooltip = h("div", { class: "tv-graph-tooltip", attrs: { role: "tooltip" } });
    this.root = h("div", { class: "tv-graph" }, [this.scroller, this.tooltip]);
    this.canvas.addEventListener("pointermove", (event) => this.hover(event));
    this.canvas.addEventListener("pointerleave", () => this.unhover());
    this.canvas.addEventListener("click", (event) => {
      const id = this.boxAt(event);
      if (id !== null) this.events.click(id);
    });
  }

  /**
   * Draw a level laid out as ``layout``: its boxes (``shown``) and edges, and its ``buses``
   * beside it (those out of one call on the left, those into one on the right).
   */
  draw(shown: Shown[], layout: Layout, buses: Bus[]): void {
    const outs = buses.filter((bus) => bus.kind === "out");
    const ins = buses.filter((bus) => bus.kind === "in");
    const left = outs.length ? BUS_GAP * (outs.length + 1) : 0;
    const right = ins.length ? BUS_GAP * (ins.length + 1) : 0;
    const total = layout.width + left + right;
    const width = Math.max(1, this.scroller.clientWidth - 2);
    const scale = Math.min(1, width / Math.max(1, total));
    this.canvas.setAttribute("viewBox", `${-left} 0 ${total} ${layout.height}`);
    this.canvas.setAttribute("width", String(Math.ceil(total * scale)));
    this.canvas.setAttribute("height", String(Math.ceil(layout.height * scale)));
    const defs = svg("defs");
    const marker = svg("marker", {
      id: "tv-graph-arrow",
      viewBox: "0 0 8 8",
      refX: "8",
      refY: "4",
      markerWidth: "7",
      markerHeight: "7",
      orient: "auto-start-reverse",
    });
    marker.append(svg("path", { d: "M0,0 L8,4 L0,8 z", class: "tv-graph-arrowhead" }));
    defs.append(marker);
    const edges = svg("g", { class: "tv-graph-edges" });
    for (const edge of layout.edges) {
      if (edge.points.length < 2) continue;
      const d = edge.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join("");
      edges.append(svg("path", { d, "marker-end": "url(#tv-graph-arrow)" }));
    }
    outs.forEach((bus, i) => edges.append(busPaths(bus, layout, -BUS_GAP * (i + 1), shown)));
    ins.forEach((bus, i) =>
      edges.append(busPaths(bus, layout, layout.width + BUS_GAP * (i + 1), shown)),
    );
    const nodes = svg("g", { class: "tv-graph-nodes" });
    this.boxes.clear();
    for (const box of shown) {
      const placed = layout.nodes.get(box.id);
      if (!placed) continue;
      const group = svg("g", {
        class: `tv-gnode${box.boundary ? " tv-gnode-boundary" : ""}${box.opens ? " tv-gnode-opens" : ""}`,
        transform: `translate(${placed.x},${placed.y})`,
      });
      group.dataset.id = box.id;
      const rect = svg("rect", {
        width: String(placed.width),
        height: String(placed.height),
        rx: box.boundary ? "18" : "4",
      });
      const name = svg("text", { x: "8", y: "15", class: "tv-gnode-name" });
      name.textContent = clipped(`${box.opens ? "▸ " : ""}${box.label}`, placed.width);
      const sub = svg("text", { x: "8", y: "29", class: "tv-gnode-sub" });
      sub.textContent = clipped(box.sub, placed.width);
      group.append(rect, name, sub);
      nodes.append(group);
      this.boxes.set(box.id, group);
    }
    this.canvas.replaceChildren(defs, edges, nodes);
    this.unhover();
  }

  /** Colour the boxes (those not in ``paints`` keep no colour). */
  paint(paints: Map<string, Paint>): void {
    delete this.tooltip.dataset.id; // its value is rebuilt at the next hover
    for (const [id, group] of this.boxes) {
      const paint = paints.get(id);
      if (!paint) continue;
      const rect = group.firstElementChild as SVGRectElement;
      group.classList.toggle("tv-gnode-nodata", paint.fill === null);
      rect.style.fill = paint.fill ?? "";
      group.style.setProperty("--tv-gnode-text", paint.fill ? textColour(paint.fill) : "");
      group.dataset.value = paint.value;
      group.dataset.fill = paint.fill ?? "";
    }
  }

  /** Outline the box ``id`` (the run's headline finding), or none. */
  outline(id: string | null, title: string): void {
    for (const [key, group] of this.boxes) {
      const marked = key === id;
      group.classList.toggle("tv-gnode-headline", marked);
      if (marked) group.dataset.headline = title;
      else delete group.dataset.headline;
    }
  }

  private boxAt(event: Event): string | null {
    const group = (event.target as Element).closest?.("g.tv-gnode") as SVGGElement | null;
    return group?.dataset.id ?? null;
  }

  private hover(event: PointerEvent): void {
    const id = this.boxAt(event);
    if (id === null) {
      this.unhover();
      return;
    }
    if (this.tooltip.dataset.id !== id) {
      this.tooltip.replaceChildren(...this.events.describe(id));
      this.tooltip.dataset.id = id;
    }
    placeTooltip(this.tooltip, event, 220);
  }

  private unhover(): void {
    this.tooltip.style.display = "none";
    delete this.tooltip.dataset.id;
  }
}

/**
 * A bus: a trunk at ``x`` beside the layout, joined to the hub just above it (``out``) or
 * below it (``in``), clear of the boxes of its rank, and a branch with an arrow to each
 * call it feeds (``out``: into their left sides) or from each call feeding it (``in``: out
 * of their right sides).
 */
function busPaths(bus: Bus, layout: Layout, x: number, shown: Shown[]): SVGGElement {
  const group = svg("g", { class: "tv-graph-bus" });
  const hub = layout.nodes.get(bus.hub);
  const others = bus.others
    .map((id) => layout.nodes.get(id))
    .filter((p): p is Placed => p !== undefined);
  if (!hub || !others.length) return group;
  const side = (p: Placed) => (bus.kind === "out" ? p.x : p.x + p.width);
  const mid = (p: Placed) => p.y + p.height / 2;
  const centre = hub.x + hub.width / 2;
  const join = bus.kind === "out" ? hub.y - BUS_GAP : hub.y + hub.height + BUS_GAP;
  const ys = [join, ...others.map(mid)];
  const edge = bus.kind === "out" ? hub.y : hub.y + hub.height;
  const trunk = svg("path", { d: `M${x},${Math.min(...ys)}V${Math.max(...ys)}` });
  const title = svg("title");
  const name = shown.find((box) => box.id === bus.hub)?.label ?? bus.hub;
  title.textContent =
    bus.kind === "out" ? `${name} → ${others.length} calls` : `${others.length} calls → ${name}`;
  trunk.append(title);
  group.append(trunk);
  const arrow = { "marker-end": "url(#tv-graph-arrow)" };
  for (const other of others) {
    const d =
      bus.kind === "out"
        ? `M${x},${mid(other)}H${side(other)}`
        : `M${side(other)},${mid(other)}H${x}`;
    group.append(svg("path", bus.kind === "out" ? { d, ...arrow } : { d }));
  }
  group.append(
    bus.kind === "out"
      ? svg("path", { d: `M${centre},${edge}V${join}H${x}` })
      : svg("path", { d: `M${x},${join}H${centre}V${edge}`, ...arrow }),
  );
  return group;
}

/** Dark text on a light fill, light text on a dark one. */
function textColour(fill: string): string {
  return hsl(fill).l > 0.55 ? "#111" : "#fff";
}
