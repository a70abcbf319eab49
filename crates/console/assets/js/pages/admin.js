// Admin: users (with tags), virtual hosts, permissions, policies, operator policies, vhost and
// user limits, and feature flags; each user, vhost and policy links to its own page.

import { api, get, hasTag, p } from "../api.js";
import { el, field, fill, flash, form, route, select, tags, textInput } from "../dom.js";
import { count, tagList } from "../format.js";
import { vhostSelect } from "../forms.js";
import { policyColumns, policyForm } from "../policies.js";
import { deleteColumn, permissionColumns, table } from "../list.js";

const TABS = [
  ["users", "Users"],
  ["vhosts", "Virtual hosts"],
  ["permissions", "Permissions"],
  ["policies", "Policies"],
  ["operator-policies", "Operator policies"],
  ["limits", "Limits"],
  ["feature-flags", "Feature flags"],
];

function tagsCell(userTags) {
  return tags(tagList(userTags));
}

/** Everything at `path` in a table that `refresh()` fetches and redraws. */
function fetchedTable(path, columns, emptyText) {
  const node = el("div", {});
  async function refresh() {
    fill(node, table(columns, await get(path), { emptyText }));
  }
  return { node, refresh };
}

async function users(refreshAll) {
  const list = fetchedTable(
    "/users",
    [
      { title: "Name", name: true, cell: (u) => el("a", { href: route("users", u.name) }, u.name) },
      { title: "Tags", cell: (u) => tagsCell(u.tags) },
      { title: "Can log in with password", cell: (u) => (u.password_hash ? "yes" : "no") },
      deleteColumn("Delete", (u) => `Delete user ${u.name}?`, (u) => p("users", u.name), (u) => `User ${u.name} deleted.`, refreshAll),
    ],
    "No users.",
  );
  const tagsInput = textInput("tags", { placeholder: "administrator, monitoring" });
  const addForm = form(
    "Add a user",
    [
      field("Username", textInput("username", { required: true })),
      field("Password", el("input", { type: "password", name: "password", autocomplete: "new-password" })),
      field("Tags", tagsInput),
      el(
        "div",
        { class: "toolbar", style: "margin-left:158px" },
        ["administrator", "monitoring", "policymaker", "management", "impersonator"].map((tag) =>
          el(
            "button",
            {
              type: "button",
              class: "secondary small",
              onclick: () => {
                const current = tagList(tagsInput.value);
                if (!current.includes(tag)) tagsInput.value = [...current, tag].join(", ");
              },
            },
            tag,
          ),
        ),
      ),
    ],
    "Add user",
    async (values, node) => {
      const body = { tags: tagList(values.tags).join(",") };
      // No password: a user that cannot log in with a password (RabbitMQ's password_hash "").
      if (values.password) body.password = values.password;
      else body.password_hash = "";
      await api("PUT", p("users", values.username), body);
      flash(`User ${values.username} added.`);
      node.reset();
      await refreshAll();
    },
  );
  await list.refresh();
  return { nodes: [list.node, addForm], refresh: list.refresh };
}

async function vhosts(refreshAll) {
  const list = fetchedTable(
    "/vhosts",
    [
      { title: "Name", name: true, cell: (v) => el("a", { href: route("vhosts", v.name) }, v.name) },
      { title: "Description", cell: (v) => v.description || "" },
      { title: "Tags", cell: (v) => tagsCell(v.tags) },
      { title: "Ready", num: true, cell: (v) => count(v.messages_ready || 0) },
      { title: "Unacked", num: true, cell: (v) => count(v.messages_unacknowledged || 0) },
      { title: "Total", num: true, cell: (v) => count(v.messages || 0) },
      deleteColumn(
        "Delete",
        (v) => `Delete virtual host ${v.name} with all its queues, exchanges and messages?`,
        (v) => p("vhosts", v.name),
        (v) => `Virtual host ${v.name} deleted.`,
        refreshAll,
      ),
    ],
    "No virtual hosts.",
  );
  const addForm = form(
    "Add a virtual host",
    [
      field("Name", textInput("name", { required: true })),
      field("Description", textInput("description")),
      field("Tags", textInput("tags", { placeholder: "comma, separated" })),
    ],
    "Add virtual host",
    async (values, node) => {
      await api("PUT", p("vhosts", values.name), { description: values.description, tags: tagList(values.tags).join(",") });
      flash(`Virtual host ${values.name} added.`);
      node.reset();
      await refreshAll();
    },
  );
  await list.refresh();
  return { nodes: [list.node, addForm], refresh: list.refresh };
}

async function permissions(refreshAll) {
  const list = fetchedTable(
    "/permissions",
    [
      ...permissionColumns(
        { title: "User", name: true, cell: (x) => x.user },
        { title: "Virtual host", name: true, cell: (x) => x.vhost },
      ),
      deleteColumn(
        "Clear",
        (x) => `Clear ${x.user}'s permissions in ${x.vhost}?`,
        (x) => p("permissions", x.vhost, x.user),
        (x) => `Permissions of ${x.user} in ${x.vhost} cleared.`,
        refreshAll,
      ),
    ],
    "No permissions.",
  );
  const userNames = (await get("/users")).map((u) => [u.name, u.name]);
  const setForm = form(
    "Set permission",
    [
      field("User", select("user", userNames, userNames.length ? userNames[0][0] : "")),
      field("Virtual host", await vhostSelect()),
      field("Configure regexp", textInput("configure", { value: ".*" })),
      field("Write regexp", textInput("write", { value: ".*" })),
      field("Read regexp", textInput("read", { value: ".*" })),
    ],
    "Set permission",
    async (values) => {
      await api("PUT", p("permissions", values.vhost, values.user), {
        configure: values.configure,
        write: values.write,
        read: values.read,
      });
      flash(`Permissions of ${values.user} in ${values.vhost} set.`);
      await refreshAll();
    },
  );
  await list.refresh();
  return { nodes: [list.node, setForm], refresh: list.refresh };
}

/** Policies or operator policies (`kind`, see policies.js). */
function policySection(kind, emptyText) {
  return async (refreshAll) => {
    const list = fetchedTable("/" + kind, policyColumns(kind, refreshAll), emptyText);
    const addForm = await policyForm(kind, { done: refreshAll });
    await list.refresh();
    return { nodes: [list.node, addForm], refresh: list.refresh };
  };
}

const LIMIT_NAMES = {
  vhost: [["max-connections", "max-connections"], ["max-queues", "max-queues"]],
  user: [["max-connections", "max-connections"], ["max-channels", "max-channels"]],
};

/**
 * Virtual host limits and user limits (RabbitMQ's Admin › Limits): one row per limit set,
 * cleared with its button, and a form each to set one.
 */
async function limits(refreshAll) {
  /** [{vhost|user, value: {name: number}}] → one row per limit. */
  const rows = (answer, owner) =>
    answer.flatMap((entry) => Object.entries(entry.value || {}).map(([name, value]) => ({ owner: entry[owner], name, value })));
  const columns = (ownerTitle, collection) => [
    { title: ownerTitle, name: true, cell: (x) => x.owner },
    { title: "Limit", cell: (x) => x.name },
    { title: "Value", num: true, cell: (x) => count(x.value) },
    deleteColumn("Clear", (x) => `Clear ${x.name} of ${x.owner}?`, (x) => p(collection, x.owner, x.name), (x) => `Limit ${x.name} of ${x.owner} cleared.`, refreshAll),
  ];
  const vhostList = el("div", { class: "vhost-limits" });
  const userList = el("div", { class: "user-limits" });
  async function refresh() {
    const [vhostLimits, userLimits] = await Promise.all([get("/vhost-limits"), get("/user-limits")]);
    fill(vhostList, table(columns("Virtual host", "vhost-limits"), rows(vhostLimits, "vhost"), { emptyText: "No virtual host limits." }));
    fill(userList, table(columns("User", "user-limits"), rows(userLimits, "user"), { emptyText: "No user limits." }));
  }
  const userNames = (await get("/users")).map((u) => [u.name, u.name]);
  const limitForm = (title, owner, collection) =>
    form(
      title,
      [
        owner,
        field("Limit", select("name", LIMIT_NAMES[collection === "vhost-limits" ? "vhost" : "user"], "max-connections")),
        field("Value", el("input", { type: "number", name: "value", min: "-1", required: true })),
      ],
      "Set limit",
      async (values) => {
        const who = collection === "vhost-limits" ? values.vhost : values.user;
        await api("PUT", p(collection, who, values.name), { value: Number(values.value) });
        flash(`Limit ${values.name} of ${who} set.`);
        await refreshAll();
      },
    );
  await refresh();
  return {
    nodes: [
      el("h3", {}, "Virtual host limits"),
      vhostList,
      limitForm("Set virtual host limit", field("Virtual host", await vhostSelect()), "vhost-limits"),
      el("h3", {}, "User limits"),
      userList,
      limitForm("Set user limit", field("User", select("user", userNames, userNames.length ? userNames[0][0] : "")), "user-limits"),
    ],
    refresh,
  };
}

/**
 * Feature flags as RabbitMQ lists them (/api/feature-flags). Warren's API has none: it has
 * no feature flags to enable, as it has no mixed-version clusters to protect; the tab says
 * so rather than inventing a list.
 */
async function featureFlags() {
  const holder = el("div", {});
  async function refresh() {
    let flags;
    try {
      flags = await get("/feature-flags");
    } catch (error) {
      if (error.status !== 404) throw error;
      fill(holder, el("p", { class: "muted feature-flags-missing" }, "This broker has no feature flags: its API has no /api/feature-flags."));
      return;
    }
    fill(
      holder,
      table(
        [
          { title: "Name", name: true, cell: (f) => f.name },
          { title: "State", cell: (f) => el("span", { class: `state-${f.state}` }, f.state) },
          { title: "Stability", cell: (f) => f.stability || "" },
          { title: "Description", cell: (f) => f.desc || "" },
        ],
        flags,
        { emptyText: "No feature flags." },
      ),
    );
  }
  await refresh();
  return { nodes: [holder], refresh };
}

const SECTIONS = {
  users,
  vhosts,
  permissions,
  policies: policySection("policies", "No policies."),
  "operator-policies": policySection("operator-policies", "No operator policies."),
  limits,
  "feature-flags": featureFlags,
};

export async function render(main, context) {
  // Policymakers who are not administrators only manage policies.
  const fallback = hasTag("administrator") ? "users" : "policies";
  const tab = SECTIONS[context.segments[0]] ? context.segments[0] : fallback;
  let section;
  const refreshAll = () => section.refresh();
  section = await SECTIONS[tab](refreshAll);
  if (!context.isCurrent()) return null;
  fill(
    main,
    el("h1", {}, "Admin"),
    el(
      "nav",
      { class: "subnav" },
      TABS.map(([key, label]) => el("a", { href: route("admin", key), class: key === tab ? "active" : null }, label)),
    ),
    el("h2", {}, TABS.find(([key]) => key === tab)[1]),
    section.nodes,
  );
  return { refresh: section.refresh };
}
