// Exporting and importing definitions (users, vhosts, permissions, policies, parameters,
// exchanges, queues, bindings), as RabbitMQ's overview page offers them: the whole broker or
// one virtual host, downloaded as a JSON file or uploaded from one. Administrators only.

import { api, get, p } from "./api.js";
import { el, field, fill, flash, form, select } from "./dom.js";

const ALL = "";

async function vhostChoice() {
  const vhosts = await get("/vhosts");
  return select("vhost", [[ALL, "All virtual hosts"], ...vhosts.map((v) => [v.name, v.name])], ALL);
}

/** "warren_rabbit@host_2026-11-30.json", as RabbitMQ names its downloads after the node. */
function fileName(node, vhost) {
  const date = new Date().toISOString().slice(0, 10);
  const what = vhost === ALL ? node || "warren" : `${node || "warren"}_${vhost}`;
  return `warren_${what}_${date}.json`.replace(/[^\w.@-]+/g, "_");
}

function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const link = el("a", { href: url, download: name, hidden: true });
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** The two forms; `node` names the download. */
export async function definitionsPanels(node) {
  const exportForm = form(
    "Export definitions",
    [field("Virtual host", await vhostChoice())],
    "Download broker definitions",
    async (values) => {
      const definitions = await get(values.vhost === ALL ? "/definitions" : p("definitions", values.vhost));
      download(fileName(node, values.vhost), JSON.stringify(definitions, null, 2));
      flash("Definitions exported.");
    },
  );
  // What the last import said: where it failed, or which entries it left out.
  const outcome = el("div", { class: "import-outcome" });
  const importForm = form(
    "Import definitions",
    [
      field("Definitions file", el("input", { type: "file", name: "file", accept: ".json,application/json", required: true })),
      field("Virtual host", await vhostChoice()),
      outcome,
    ],
    "Upload broker definitions",
    async (values) => {
      fill(outcome);
      let definitions;
      try {
        definitions = JSON.parse(await values.file.text());
      } catch (error) {
        fill(outcome, el("p", { class: "error" }, `${values.file.name} is not JSON: ${error.message}`));
        return;
      }
      let answer;
      try {
        answer = await api("POST", values.vhost === ALL ? "/definitions" : p("definitions", values.vhost), definitions);
      } catch (error) {
        fill(outcome, el("p", { class: "error" }, `Nothing was imported: ${error.message}`));
        return;
      }
      const skipped = (answer && answer.skipped) || [];
      if (skipped.length === 0) {
        fill(outcome, el("p", {}, el("span", { class: "fine" }, "Your definitions were imported successfully.")));
        flash("Definitions imported.");
        return;
      }
      fill(
        outcome,
        el("p", { class: "error" }, `Imported, but ${skipped.length} ${skipped.length === 1 ? "entry was" : "entries were"} left out:`),
        el("ul", { class: "import-problems" }, skipped.map((why) => el("li", {}, why))),
      );
    },
  );
  return el("div", { class: "definitions" }, exportForm, importForm);
}
