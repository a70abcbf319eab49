// Admin: users (with tags), virtual hosts, permissions and policies.

import { api, get, hasTag, p } from "../api.js";
import { actionButton, el, field, fill, flash, form, route, select, tags, textInput } from "../dom.js";
import { count, json } from "../format.js";
import { jsonObject, vhostSelect } from "../forms.js";
import { table } from "../list.js";

const TABS = [
  ["users", "Users"],
  ["vhosts", "Virtual hosts"],
  ["permissions", "Permissions"],
  ["policies", "Policies"],
];

/** RabbitMQ 3.10+ answers tags as a list; older versions as a comma-separated string. */
function tagList(tags) {
  if (Array.isArray(tags)) return tags;
  return (tags || "").split(",").map((t) => t.trim()).filter(Boolean);
}

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

/** A last column whose button asks `question(row)`, sends DELETE `apiPath(row)`, says `done(row)`. */
function deleteColumn(label, question, apiPath, done, refreshAll) {
  return {
    title: "",
    cell: (row) =>
      actionButton(
        label,
        async () => {
          await api("DELETE", apiPath(row));
          flash(done(row));
          await refreshAll();
        },
        { danger: true, small: true, question: question(row) },
      ),
  };
}

async function users(refreshAll) {
  const list = fetchedTable(
    "/users",
    [
      { title: "Name", name: true, cell: (u) => u.name },
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
      { title: "Name", name: true, cell: (v) => v.name },
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
      { title: "User", name: true, cell: (x) => x.user },
      { title: "Virtual host", name: true, cell: (x) => x.vhost },
      { title: "Configure regexp", name: true, cell: (x) => x.configure },
      { title: "Write regexp", name: true, cell: (x) => x.write },
      { title: "Read regexp", name: true, cell: (x) => x.read },
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

async function policies(refreshAll) {
  const list = fetchedTable(
    "/policies",
    [
      { title: "Virtual host", name: true, cell: (x) => x.vhost },
      { title: "Name", name: true, cell: (x) => x.name },
      { title: "Pattern", name: true, cell: (x) => x.pattern },
      { title: "Apply to", cell: (x) => x["apply-to"] },
      { title: "Definition", name: true, cell: (x) => json(x.definition) },
      { title: "Priority", num: true, cell: (x) => String(x.priority) },
      deleteColumn(
        "Delete",
        (x) => `Delete policy ${x.name} in ${x.vhost}?`,
        (x) => p("policies", x.vhost, x.name),
        (x) => `Policy ${x.name} deleted.`,
        refreshAll,
      ),
    ],
    "No policies.",
  );
  const addForm = form(
    "Add or update a policy",
    [
      field("Virtual host", await vhostSelect()),
      field("Name", textInput("name", { required: true })),
      field("Pattern", textInput("pattern", { required: true, placeholder: "^orders\\." })),
      field("Apply to", select("apply-to", [["all", "Exchanges and queues"], ["queues", "Queues"], ["exchanges", "Exchanges"]], "all")),
      field("Priority", el("input", { type: "number", name: "priority", value: "0" })),
      field("Definition", el("textarea", { name: "definition", required: true, placeholder: '{"max-length": 1000, "overflow": "reject-publish"}' })),
    ],
    "Add policy",
    async (values, node) => {
      const definition = jsonObject(values.definition, "Definition");
      await api("PUT", p("policies", values.vhost, values.name), {
        pattern: values.pattern,
        "apply-to": values["apply-to"],
        priority: Number(values.priority) || 0,
        definition,
      });
      flash(`Policy ${values.name} set.`);
      node.querySelector("input[name=name]").value = "";
      await refreshAll();
    },
  );
  await list.refresh();
  return { nodes: [list.node, addForm], refresh: list.refresh };
}

const SECTIONS = { users, vhosts, permissions, policies };

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
