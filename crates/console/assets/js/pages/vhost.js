// One virtual host (#/vhosts/NAME): its description, tags and message totals, its limits
// (max-connections, max-queues: set and clear), its permissions, and deleting it.

import { api, get, p } from "../api.js";
import { actionButton, el, facts, field, fill, flash, form, select, tags } from "../dom.js";
import { count, tagList } from "../format.js";
import { permissionColumns, table } from "../list.js";

const LIMITS = ["max-connections", "max-queues"];

export async function render(main, context) {
  const name = context.segments[0];
  const about = el("div", {});
  const limits = el("div", { class: "vhost-limits" });
  const permissions = el("div", { class: "permissions" });

  async function refresh() {
    const [vhost, limitList, granted] = await Promise.all([
      get(p("vhosts", name)),
      get(p("vhost-limits", name)),
      get(p("vhosts", name, "permissions")),
    ]);
    if (!context.isCurrent()) return;
    const vhostTags = tagList(vhost.tags);
    fill(
      about,
      facts([
        ["Description", vhost.description || "–"],
        ["Tags", vhostTags.length ? tags(vhostTags) : "none"],
        ["Ready", count(vhost.messages_ready || 0)],
        ["Unacked", count(vhost.messages_unacknowledged || 0)],
        ["Total", count(vhost.messages || 0)],
      ]),
    );
    const set = Object.entries((limitList[0] && limitList[0].value) || {}).map(([limit, value]) => ({ limit, value }));
    fill(
      limits,
      table(
        [
          { title: "Limit", cell: (x) => x.limit },
          { title: "Value", num: true, cell: (x) => count(x.value) },
          {
            title: "",
            cell: (x) =>
              actionButton(
                "Clear",
                async () => {
                  await api("DELETE", p("vhost-limits", name, x.limit));
                  flash(`Limit ${x.limit} of ${name} cleared.`);
                  await refresh();
                },
                { danger: true, small: true },
              ),
          },
        ],
        set,
        { emptyText: "No limits." },
      ),
    );
    fill(
      permissions,
      table(
        permissionColumns({ title: "User", name: true, cell: (x) => x.user }),
        granted,
        { emptyText: "No permissions." },
      ),
    );
  }

  await refresh();
  if (!context.isCurrent()) return null;
  const setLimit = form(
    "Set limit",
    [
      field("Limit", select("limit", LIMITS.map((l) => [l, l]), LIMITS[0])),
      field("Value", el("input", { type: "number", name: "value", min: "0", required: true })),
    ],
    "Set limit",
    async (values) => {
      await api("PUT", p("vhost-limits", name, values.limit), { value: Number(values.value) });
      flash(`Limit ${values.limit} of ${name} set.`);
      await refresh();
    },
  );
  const remove = actionButton(
    "Delete this virtual host",
    async () => {
      await api("DELETE", p("vhosts", name));
      flash(`Virtual host ${name} deleted.`);
      location.hash = "#/admin/vhosts";
    },
    { danger: true, question: `Delete virtual host ${name} with all its queues, exchanges and messages?` },
  );
  fill(
    main,
    el("h1", {}, "Virtual host ", el("small", { class: "object-name" }, name)),
    about,
    el("h2", {}, "Limits"),
    limits,
    setLimit,
    el("h2", {}, "Permissions"),
    permissions,
    el("h2", {}, "Delete this virtual host"),
    el("div", { class: "panel" }, remove),
  );
  return { refresh };
}
