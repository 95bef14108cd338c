/**
 * The run picker: a regular expression choosing which runs are listed (as TensorBoard's own
 * run selector filters runs, a JavaScript ``RegExp`` searched in the run's name), and a
 * checkbox per listed run. A sweep of hundreds of runs is narrowed by name first.
 */

import { multiCheck, textInput } from "./controls";
import { h } from "./dom";

/**
 * The runs of ``names`` whose name ``regex`` finds; every run where the text is empty, is
 * not a valid expression (``valid`` false) or finds none.
 */
export function matchingRuns(
  names: string[],
  regex: string,
): { runs: string[]; valid: boolean; matched: number } {
  if (!regex) return { runs: names, valid: true, matched: names.length };
  let pattern: RegExp;
  try {
    pattern = new RegExp(regex);
  } catch {
    return { runs: names, valid: false, matched: 0 };
  }
  const found = names.filter((name) => pattern.test(name));
  return { runs: found.length ? found : names, valid: true, matched: found.length };
}

/** The "Runs" control: the regex box, how many runs it matches, and their checkboxes. */
export function runPicker(
  names: string[],
  regex: string,
  chosen: string[],
  colours: Map<string, string>,
  onRegex: (regex: string) => void,
  onChosen: (runs: string[]) => void,
): HTMLElement {
  const { runs, valid, matched } = matchingRuns(names, regex);
  const input = textInput("Runs (regex)", "runRegex", regex, "e.g. lr_.*|seed_[0-3]", onRegex);
  const note = !regex
    ? `${names.length} runs`
    : !valid
      ? "not a valid regular expression: every run listed"
      : matched === 0
        ? "no run matches: every run listed"
        : `${matched} of ${names.length} runs match`;
  return h("div", { class: "tv-run-picker", data: { control: "runPicker" } }, [
    input,
    h("span", {
      class: valid && (matched > 0 || !regex) ? "tv-run-note" : "tv-run-note tv-invalid",
      text: note,
      data: { control: "runNote" },
    }),
    multiCheck(
      "Runs",
      "runs",
      runs.map((run) => ({ value: run, label: run })),
      chosen.filter((run) => runs.includes(run)),
      onChosen,
      colours,
    ),
  ]);
}
