/**
 * Talking to the TensorBoard page that holds the tab's iframe.
 *
 * TensorBoard's plugin host listens for an ``experimental.bootstrap`` message carrying a
 * MessagePort; over that port both sides send JSON ``{type, id, payload, error, isReply}``.
 * The host broadcasts ``experimental.DataReloaded`` when its reload button or auto-reload
 * has fetched new data, and answers ``experimental.GetURLPluginData`` with the entries of
 * its URL hash that start with ``p.<plugin>.``. Dark mode is the ``dark-mode`` class of the
 * host page's body (same origin, so it can be observed).
 */

interface Message {
  type: string;
  id: number;
  payload: unknown;
  error: string | null;
  isReply: boolean;
}

type Listener = (payload: unknown) => unknown;

/** The message channel to TensorBoard's plugin host (inert outside TensorBoard). */
export class Host {
  private port: MessagePort | null = null;
  private nextId = 0;
  private readonly waiting = new Map<number, (message: Message) => void>();
  private readonly listeners = new Map<string, Listener>();

  constructor() {
    if (window.parent === window) return;
    const channel = new MessageChannel();
    this.port = channel.port1;
    this.port.addEventListener("message", (event) => this.receive(event));
    this.port.start();
    window.parent.postMessage("experimental.bootstrap", "*", [channel.port2]);
  }

  /** Call ``listener`` on each host message of ``type``. */
  listen(type: string, listener: Listener): void {
    this.listeners.set(type, listener);
  }

  /** Send a request; resolve with the host's reply payload (null outside TensorBoard). */
  request(type: string, payload: unknown = null, timeoutMs = 2000): Promise<unknown> {
    const port = this.port;
    if (!port) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = window.setTimeout(() => {
        this.waiting.delete(id);
        resolve(null);
      }, timeoutMs);
      this.waiting.set(id, (reply) => {
        window.clearTimeout(timer);
        resolve(reply.error ? null : reply.payload);
      });
      port.postMessage(JSON.stringify({ type, id, payload, error: null, isReply: false }));
    });
  }

  /** The ``p.tandv.*`` entries of TensorBoard's URL hash, keys without the prefix. */
  async urlData(): Promise<Record<string, string>> {
    // The host answers only when told the plugin's name (it reads ``p.<pluginName>.*``).
    const data = await this.request("experimental.GetURLPluginData", { pluginName: "tandv" });
    return data && typeof data === "object" ? (data as Record<string, string>) : {};
  }

  private async receive(event: MessageEvent): Promise<void> {
    let message: Message;
    try {
      message = JSON.parse(String(event.data)) as Message;
    } catch {
      return;
    }
    if (message.isReply) {
      this.waiting.get(message.id)?.(message);
      this.waiting.delete(message.id);
      return;
    }
    let payload: unknown = null;
    let error: string | null = null;
    const listener = this.listeners.get(message.type);
    try {
      if (listener) payload = (await listener(message.payload)) ?? null;
    } catch (caught) {
      error = String(caught);
    }
    this.port?.postMessage(
      JSON.stringify({ type: message.type, id: message.id, payload, error, isReply: true }),
    );
  }
}

/** Follow TensorBoard's dark mode (or the browser's, outside TensorBoard). */
export function followDarkMode(onChange: (dark: boolean) => void): void {
  let hostBody: HTMLElement | null = null;
  try {
    hostBody = window.parent !== window ? window.parent.document.body : null;
  } catch {
    hostBody = null; // another origin: fall back to the browser's preference
  }
  if (hostBody) {
    const body = hostBody;
    const report = () => onChange(body.classList.contains("dark-mode"));
    new MutationObserver(report).observe(body, { attributes: true, attributeFilter: ["class"] });
    report();
    return;
  }
  const media = window.matchMedia("(prefers-color-scheme: dark)");
  media.addEventListener("change", () => onChange(media.matches));
  onChange(media.matches);
}
