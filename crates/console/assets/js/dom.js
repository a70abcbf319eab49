// Building the page. Everything shown is made with createElement and text nodes, never by
// assigning HTML strings, so a queue or user name holding "<", "&" or quotes is shown as
// typed and cannot inject markup.

/** el("td", {class: "num", onclick: f}, "text", childNode, [more children]) */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(node.dataset, value);
    } else if (key === "value" || key === "checked" || key === "selected") {
      node[key] = value;
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces the children of `node`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A short note in the corner: what an action did, or why it failed. */
export function flash(text, isError = false) {
  const note = el("div", { class: isError ? "note error" : "note" }, text);
  document.getElementById("flash").appendChild(note);
  setTimeout(() => note.remove(), isError ? 8000 : 4000);
}

/** A labelled input row for forms. */
export function field(label, input) {
  return el("label", { class: "field" }, el("span", {}, label), input);
}

export function textInput(name, attrs = {}) {
  return el("input", { type: "text", name, autocomplete: "off", ...attrs });
}

export function select(name, options, selected) {
  return el(
    "select",
    { name },
    options.map(([value, label]) => el("option", { value, selected: value === selected }, label)),
  );
}

/** A table of key/value facts; rows whose value is undefined are left out. */
export function facts(rows) {
  return el(
    "table",
    { class: "facts" },
    rows
      .filter(([, value]) => value !== undefined)
      .map(([key, value]) => el("tr", {}, el("th", {}, key), el("td", {}, value))),
  );
}

/** A form that calls `onsubmit(values)` and shows the error if it throws. */
export function form(title, controls, submitLabel, onsubmit) {
  const node = el(
    "form",
    { class: "panel" },
    title ? el("h3", {}, title) : null,
    controls,
    el("button", { type: "submit" }, submitLabel),
  );
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(node).entries());
    const button = node.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      await onsubmit(values, node);
    } catch (error) {
      flash(error.message, true);
    } finally {
      button.disabled = false;
    }
  });
  return node;
}

/** Runs an action from a button, confirming first when `question` is given. */
export function actionButton(label, action, { question, danger = false, small = false } = {}) {
  const classes = [danger ? "danger" : "", small ? "small" : ""].join(" ").trim();
  return el(
    "button",
    {
      type: "button",
      class: classes || null,
      onclick: async (event) => {
        if (question && !window.confirm(question)) return;
        event.target.disabled = true;
        try {
          await action();
        } catch (error) {
          flash(error.message, true);
        } finally {
          event.target.disabled = false;
        }
      },
    },
    label,
  );
}

/** The hash of a console page from raw segments: route("queues", "/", "a/b") = "#/queues/%2F/a%2Fb". */
export function route(...segments) {
  return "#/" + segments.map((segment) => encodeURIComponent(segment)).join("/");
}

/** Little labels ("durable", a user's tags); empty texts are left out. */
export function tags(texts) {
  return texts.filter(Boolean).map((text) => el("span", { class: "tag" }, text));
}
