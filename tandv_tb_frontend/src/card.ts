/** A card of the page: title, tools, message and body, with a loading bar for slow fetches. */

import { isAbort } from "./http";
import { emptyState, h, replaceChildren } from "./dom";

export class Card {
  readonly root: HTMLElement;
  readonly tools: HTMLElement;
  readonly body: HTMLElement;
  readonly message: HTMLElement;
  private pending = 0;
  private timer: number | undefined;
  private readonly controllers = new Map<string, AbortController>();

  constructor(name: string, title: string) {
    this.tools = h("div", { class: "tv-card-tools" });
    this.body = h("div", { class: "tv-card-body" });
    this.message = h("div", { class: "tv-card-message" });
    this.root = h(
      "section",
      { class: `tv-card tv-card-${name}`, data: { card: name, state: "idle" } },
      [
        h("div", { class: "tv-progress" }),
        h("div", { class: "tv-card-head" }, [h("h2", { text: title }), this.tools]),
        this.message,
        this.body,
      ],
    );
  }

  /** A new AbortSignal for the fetches of ``key``, cancelling the previous ones. */
  signal(key: string): AbortSignal {
    this.controllers.get(key)?.abort();
    const controller = new AbortController();
    this.controllers.set(key, controller);
    return controller.signal;
  }

  /** Run ``work``; show the loading bar if it takes more than a moment. */
  async load<T>(work: () => Promise<T>): Promise<T | undefined> {
    this.pending++;
    this.root.dataset.state = "loading";
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => this.root.classList.add("tv-loading"), 120);
    try {
      const result = await work();
      return result;
    } catch (error) {
      if (isAbort(error)) return undefined;
      this.showError(error instanceof Error ? error.message : String(error));
      return undefined;
    } finally {
      this.pending--;
      if (this.pending === 0) {
        window.clearTimeout(this.timer);
        this.root.classList.remove("tv-loading");
        if (this.root.dataset.state === "loading") this.root.dataset.state = "ready";
      }
    }
  }

  showError(text: string): void {
    this.root.dataset.state = "error";
    replaceChildren(this.message, [
      h("div", { class: "tv-error", attrs: { role: "alert" }, text }),
    ]);
  }

  showEmpty(title: string, lines: string[] = []): void {
    this.root.dataset.state = "empty";
    replaceChildren(this.message, [emptyState(title, lines)]);
  }

  clearMessage(): void {
    this.message.replaceChildren();
  }
}
