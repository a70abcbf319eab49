// One policy or operator policy (#/policy/VHOST/NAME, #/operator-policy/VHOST/NAME): its
// pattern, what it applies to, priority and definition; editing it and deleting it.

import { api, get, p } from "../api.js";
import { actionButton, el, facts, fill, flash } from "../dom.js";
import { json } from "../format.js";
import { POLICY_KINDS, policyForm } from "../policies.js";

/** The page for `kind` ("policies" or "operator-policies"). */
export function pageOf(kind) {
  const { noun } = POLICY_KINDS[kind];
  const listRoute = `#/admin/${kind}`;
  return {
    async render(main, context) {
      const [vhost, name] = context.segments;
      const about = el("div", {});
      let policy;

      async function refresh() {
        policy = await get(p(kind, vhost, name));
        if (!context.isCurrent()) return;
        fill(
          about,
          facts([
            ["Virtual host", vhost],
            ["Pattern", policy.pattern],
            ["Apply to", policy["apply-to"]],
            ["Priority", String(policy.priority)],
            ["Definition", el("code", { class: "definition" }, json(policy.definition))],
          ]),
        );
      }

      await refresh();
      if (!context.isCurrent()) return null;
      const edit = await policyForm(kind, { existing: policy, done: refresh });
      const remove = actionButton(
        `Delete this ${noun.toLowerCase()}`,
        async () => {
          await api("DELETE", p(kind, vhost, name));
          flash(`${noun} ${name} deleted.`);
          location.hash = listRoute;
        },
        { danger: true, question: `Delete ${noun.toLowerCase()} ${name} in ${vhost}?` },
      );
      fill(main, el("h1", {}, `${noun} `, el("small", { class: "object-name" }, name)), about, edit, el("h2", {}, `Delete this ${noun.toLowerCase()}`), el("div", { class: "panel" }, remove));
      return { refresh };
    },
  };
}
