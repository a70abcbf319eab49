// Policies and operator policies: their table and the form that adds or edits one, shared by
// the Admin tabs and a policy's own page. `kind` is the API's collection: "policies" or
// "operator-policies" (RabbitMQ's operator policies are the same shape, applied over the
// user's own, and only take the limits operators enforce).

import { api, p } from "./api.js";
import { el, field, flash, form, route, select, textInput } from "./dom.js";
import { deleteColumn } from "./list.js";
import { json } from "./format.js";
import { jsonObject, vhostSelect } from "./forms.js";

export const POLICY_KINDS = {
  policies: { noun: "Policy", page: "policy" },
  "operator-policies": { noun: "Operator policy", page: "operator-policy" },
};

const APPLY_TO = [["all", "Exchanges and queues"], ["queues", "Queues"], ["exchanges", "Exchanges"]];

/** The console page of one policy: #/policy/VHOST/NAME or #/operator-policy/VHOST/NAME. */
export function policyRoute(kind, policy) {
  return route(POLICY_KINDS[kind].page, policy.vhost, policy.name);
}

/** Columns of a list of `kind`, with a Delete button that calls `refreshAll` after. */
export function policyColumns(kind, refreshAll) {
  const { noun } = POLICY_KINDS[kind];
  return [
    { title: "Virtual host", name: true, cell: (x) => x.vhost },
    { title: "Name", name: true, cell: (x) => el("a", { href: policyRoute(kind, x) }, x.name) },
    { title: "Pattern", name: true, cell: (x) => x.pattern },
    { title: "Apply to", cell: (x) => x["apply-to"] },
    { title: "Definition", name: true, cell: (x) => json(x.definition) },
    { title: "Priority", num: true, cell: (x) => String(x.priority) },
    deleteColumn(
      "Delete",
      (x) => `Delete ${noun.toLowerCase()} ${x.name} in ${x.vhost}?`,
      (x) => p(kind, x.vhost, x.name),
      (x) => `${noun} ${x.name} deleted.`,
      refreshAll,
    ),
  ];
}

/**
 * Adds a `kind` policy, or with `existing` edits that one (its vhost and name fixed).
 * `done(values)` runs after the API accepted it.
 */
export async function policyForm(kind, { existing, done }) {
  const { noun } = POLICY_KINDS[kind];
  const controls = [
    existing ? null : field("Virtual host", await vhostSelect()),
    existing ? null : field("Name", textInput("name", { required: true })),
    field("Pattern", textInput("pattern", { required: true, placeholder: "^orders\\.", value: existing && existing.pattern })),
    field("Apply to", select("apply-to", APPLY_TO, existing ? existing["apply-to"] : "all")),
    field("Priority", el("input", { type: "number", name: "priority", value: existing ? String(existing.priority) : "0" })),
    field(
      "Definition",
      el("textarea", {
        name: "definition",
        required: true,
        placeholder: '{"max-length": 1000, "overflow": "reject-publish"}',
        value: existing ? JSON.stringify(existing.definition, null, 1) : undefined,
      }),
    ),
  ];
  const title = existing ? `Update this ${noun.toLowerCase()}` : `Add or update ${kind === "policies" ? "a policy" : "an operator policy"}`;
  const label = existing ? `Update ${noun.toLowerCase()}` : `Add ${noun.toLowerCase()}`;
  return form(title, controls, label, async (values, node) => {
    const [vhost, name] = existing ? [existing.vhost, existing.name] : [values.vhost, values.name];
    await api("PUT", p(kind, vhost, name), {
      pattern: values.pattern,
      "apply-to": values["apply-to"],
      priority: Number(values.priority) || 0,
      definition: jsonObject(values.definition, "Definition"),
    });
    flash(`${noun} ${name} set.`);
    if (!existing) node.querySelector("input[name=name]").value = "";
    await done(values);
  });
}
