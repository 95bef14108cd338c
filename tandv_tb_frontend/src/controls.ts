/** Small form controls. Labels and options from the data are set as text. */

import { h } from "./dom";

export interface Option {
  value: string;
  label: string;
  /** Options of one group follow each other under its label (an <optgroup>). */
  group?: string;
}

/** ``options`` as <option>s, those of a group under its <optgroup>. */
function optionElements(options: Option[]): HTMLElement[] {
  const out: HTMLElement[] = [];
  let group: HTMLElement | null = null;
  for (const option of options) {
    const element = h("option", { text: option.label, attrs: { value: option.value } });
    if (!option.group) {
      group = null;
      out.push(element);
      continue;
    }
    if (!group || group.getAttribute("label") !== option.group) {
      group = h("optgroup", { attrs: { label: option.group } });
      out.push(group);
    }
    group.append(element);
  }
  return out;
}

/** A labelled <select>. */
export function selectControl(
  label: string,
  name: string,
  options: Option[],
  value: string,
  onChange: (value: string) => void,
): HTMLElement {
  const select = h(
    "select",
    { attrs: { name, "aria-label": label }, data: { control: name } },
    optionElements(options),
  );
  select.value = value;
  select.addEventListener("change", () => onChange(select.value));
  return h("label", { class: "tv-control" }, [
    h("span", { class: "tv-control-label", text: label }),
    select,
  ]);
}

/** A checkbox with a label. */
export function checkbox(
  label: string,
  name: string,
  checked: boolean,
  onChange: (checked: boolean) => void,
  swatch?: string,
): HTMLElement {
  const input = h("input", { attrs: { type: "checkbox", name }, data: { control: name } });
  input.checked = checked;
  input.addEventListener("change", () => onChange(input.checked));
  return h("label", { class: "tv-check", data: { value: label } }, [
    input,
    swatch ? h("span", { class: "tv-swatch", attrs: { style: `background:${swatch}` } }) : null,
    h("span", { text: label }),
  ]);
}

/** A group of checkboxes choosing a subset of ``options``. */
export function multiCheck(
  label: string,
  name: string,
  options: Option[],
  chosen: string[],
  onChange: (chosen: string[]) => void,
  swatches?: Map<string, string>,
): HTMLElement {
  const current = new Set(chosen);
  return h("fieldset", { class: "tv-multi", data: { control: name } }, [
    h("legend", { class: "tv-control-label", text: label }),
    ...options.map((option) =>
      checkbox(
        option.label,
        `${name}:${option.value}`,
        current.has(option.value),
        (checked) => {
          if (checked) current.add(option.value);
          else current.delete(option.value);
          onChange(options.map((o) => o.value).filter((value) => current.has(value)));
        },
        swatches?.get(option.value),
      ),
    ),
  ]);
}

/** A text input that reports its value after typing pauses (and on Enter). */
export function textInput(
  label: string,
  name: string,
  value: string,
  placeholder: string,
  onChange: (value: string) => void,
): HTMLElement {
  const input = h("input", {
    attrs: { type: "text", name, placeholder, spellcheck: "false", "aria-label": label },
    data: { control: name },
  });
  input.value = value;
  let timer: number | undefined;
  const report = () => {
    window.clearTimeout(timer);
    onChange(input.value);
  };
  input.addEventListener("input", () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(report, 400);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") report();
  });
  return h("label", { class: "tv-control" }, [
    h("span", { class: "tv-control-label", text: label }),
    input,
  ]);
}

/** A button. */
export function button(
  label: string,
  name: string,
  onClick: () => void,
  title?: string,
): HTMLElement {
  return h("button", {
    class: "tv-button",
    text: label,
    title,
    attrs: { type: "button" },
    data: { control: name },
    on: { click: () => onClick() },
  });
}
