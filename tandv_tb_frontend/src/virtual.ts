/**
 * A virtual list of fixed-height rows: of ``count`` rows only those in (or near) the
 * scroller's view exist in the DOM, each placed absolutely at ``index * rowHeight`` in a
 * container as tall as every row together. Scrolling re-renders the window once per frame.
 */
export class VirtualRows {
  private count = 0;
  private rowHeight = 14;
  private first = 0;
  private last = -1;
  private frame = 0;

  constructor(
    private readonly container: HTMLElement,
    private readonly scroller: HTMLElement,
    private readonly renderRow: (index: number, top: number) => HTMLElement,
    private readonly fallbackHeight: number,
    private readonly overscan = 16,
  ) {
    scroller.addEventListener("scroll", () => this.schedule(), { passive: true });
  }

  /** Show ``count`` rows of ``rowHeight`` pixels (rebuilding those in view). */
  reset(count: number, rowHeight: number): void {
    this.count = count;
    this.rowHeight = rowHeight;
    this.container.style.height = `${count * rowHeight}px`;
    this.first = 0;
    this.last = -1;
    this.update(true);
  }

  /** Scroll so that row ``index`` is in view (unchanged when it already is). */
  reveal(index: number): void {
    const top = index * this.rowHeight;
    const view = this.viewHeight();
    if (top >= this.scroller.scrollTop && top + this.rowHeight <= this.scroller.scrollTop + view)
      return;
    this.scroller.scrollTop = Math.max(0, top - view / 2);
    this.update();
  }

  private viewHeight(): number {
    return this.scroller.clientHeight || this.fallbackHeight;
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = window.requestAnimationFrame(() => {
      this.frame = 0;
      this.update();
    });
  }

  /** Render the rows in view, plus ``overscan`` on either side. */
  update(force = false): void {
    const top = this.scroller.scrollTop;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - this.overscan);
    const last = Math.min(
      this.count - 1,
      Math.ceil((top + this.viewHeight()) / this.rowHeight) + this.overscan,
    );
    if (!force && first === this.first && last === this.last) return;
    this.first = first;
    this.last = last;
    const rows: HTMLElement[] = [];
    for (let index = first; index <= last; index++) {
      rows.push(this.renderRow(index, index * this.rowHeight));
    }
    this.container.replaceChildren(...rows);
  }
}
