/**
 * Entry of the Numerics tab. TensorBoard loads this ES module in the plugin's iframe and
 * calls ``render()`` (see TensorBoard's ``plugin_entry.html``).
 */

import uplotCss from "uplot/dist/uPlot.min.css";
import { App } from "./app";
import { followDarkMode, Host } from "./host";
import { fromHostData, loadState } from "./state";
import css from "./styles.css";

function addStyles(): void {
  for (const text of [uplotCss, css]) {
    const style = document.createElement("style");
    style.textContent = text;
    document.head.appendChild(style);
  }
}

/** Build the tab into the iframe's document. */
export async function render(): Promise<void> {
  addStyles();
  document.title = "Numerics";
  const root = document.createElement("div");
  root.id = "tandv-numerics";
  document.body.appendChild(root);
  const host = new Host();
  const state = { ...loadState(), ...fromHostData(await host.urlData()) };
  const app = new App(root, state);
  followDarkMode((dark) => {
    document.documentElement.classList.toggle("tv-dark", dark);
    app.themeChanged();
  });
  host.listen("experimental.DataReloaded", () => {
    void app.refresh();
  });
  await app.refresh();
}
