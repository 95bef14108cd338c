/** DOM helpers. Text from the data only ever enters the page as text nodes (textContent). */

export type Child = Node | string | null | undefined | false;

export interface Props {
  class?: string;
  text?: string;
  title?: string;
  attrs?: Record<string, string>;
  data?: Record<string, string>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (event: HTMLElementEventMap[K]) => void }>;
}

/** Create an element; strings among the children become text nodes, never markup. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  children: Child[] = [],
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (props.class) element.className = props.class;
  if (props.text !== undefined) element.textContent = props.text;
  if (props.title !== undefined) element.title = props.title;
  for (const [key, value] of Object.entries(props.attrs ?? {})) element.setAttribute(key, value);
  for (const [key, value] of Object.entries(props.data ?? {})) element.dataset[key] = value;
  for (const [type, listener] of Object.entries(props.on ?? {})) {
    element.addEventListener(type, listener as EventListener);
  }
  append(element, children);
  return element;
}

/** Append children (strings as text nodes). */
export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/** Replace every child of ``parent``. */
export function replaceChildren(parent: Element, children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** A message shown where a view has nothing to draw: a title and lines of advice. */
export function emptyState(title: string, lines: Child[] = [], code?: string): HTMLElement {
  return h("div", { class: "tv-empty" }, [
    h("div", { class: "tv-empty-title", text: title }),
    ...lines.map((line) => h("p", {}, [line])),
    code ? h("pre", { class: "tv-code", text: code }) : null,
  ]);
}

/**
 * Show a fixed tooltip beside the pointer, placed without measuring it (no forced
 * layout): on the pointer's other side near the window's right edge, or within
 * ``height`` of its bottom.
 */
export function placeTooltip(tooltip: HTMLElement, event: MouseEvent, height: number): void {
  tooltip.style.display = "block";
  const flipX = event.clientX > window.innerWidth - 440;
  const flipY = event.clientY > window.innerHeight - height;
  tooltip.style.transform = `translate(${event.clientX + (flipX ? -14 : 14)}px, ${
    event.clientY + (flipY ? -14 : 14)
  }px) translate(${flipX ? "-100%" : "0"}, ${flipY ? "-100%" : "0"})`;
}

/** Call ``fn`` once ``ms`` after the last call. */
export function debounce<A extends unknown[]>(fn: (...args: A) => void, ms: number) {
  let timer: number | undefined;
  return (...args: A): void => {
    if (timer !== undefined) window.clearTimeout(timer);
    timer = window.setTimeout(() => {
      timer = undefined;
      fn(...args);
    }, ms);
  };
}

/**
 * Rebuild ``container`` with ``build()`` without taking the keyboard focus away from a
 * control the user is typing in (matched by its ``data-control``), caret included, and
 * without closing the ``<details>`` sections the user opened (matched by order).
 */
export function keepFocus(container: Element, build: () => void): void {
  const open = [...container.querySelectorAll("details")].map((details) => details.open);
  const active = document.activeElement as HTMLInputElement | null;
  const name = active && container.contains(active) ? active.dataset.control : undefined;
  const caret =
    active && "selectionStart" in active ? [active.selectionStart, active.selectionEnd] : null;
  build();
  container.querySelectorAll("details").forEach((details, index) => {
    if (open[index]) details.open = true;
  });
  if (!name) return;
  const again = container.querySelector<HTMLInputElement>(`[data-control="${CSS.escape(name)}"]`);
  if (!again) return;
  again.focus();
  if (caret && caret[0] !== null && again.setSelectionRange) {
    try {
      again.setSelectionRange(caret[0], caret[1]);
    } catch {
      // not a text control
    }
  }
}
