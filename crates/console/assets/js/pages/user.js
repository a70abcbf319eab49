// One user (#/users/NAME): its tags, permissions and limits; changing its password and tags,
// and deleting it. Administrators only, as RabbitMQ.

import { api, get, p } from "../api.js";
import { actionButton, el, facts, field, fill, flash, form, tags, textInput } from "../dom.js";
import { count, tagList } from "../format.js";
import { permissionColumns, table } from "../list.js";

export async function render(main, context) {
  const name = context.segments[0];
  const about = el("div", {});
  const permissions = el("div", { class: "permissions" });
  let user;

  async function refresh() {
    const [shown, granted, limits] = await Promise.all([
      get(p("users", name)),
      get(p("users", name, "permissions")),
      get(p("user-limits", name)),
    ]);
    if (!context.isCurrent()) return;
    user = shown;
    const limitValues = (limits[0] && limits[0].value) || {};
    fill(
      about,
      facts([
        ["Tags", el("span", { class: "user-tags" }, tagList(user.tags).length ? tags(tagList(user.tags)) : "none")],
        ["Can log in with password", user.password_hash ? "yes" : "no"],
        ...Object.entries(limitValues).map(([limit, value]) => [limit, count(value)]),
      ]),
    );
    fill(
      permissions,
      table(
        permissionColumns({ title: "Virtual host", name: true, cell: (x) => x.vhost }),
        granted,
        { emptyText: "No permissions." },
      ),
    );
  }

  await refresh();
  if (!context.isCurrent()) return null;
  const update = form(
    "Update this user",
    [
      field("Password", el("input", { type: "password", name: "password", autocomplete: "new-password", placeholder: "unchanged when empty" })),
      field("Tags", textInput("tags", { value: tagList(user.tags).join(", ") })),
    ],
    "Update user",
    async (values, node) => {
      const body = { tags: tagList(values.tags).join(",") };
      // Without a new password the stored hash is kept (RabbitMQ's PUT needs one or the other).
      if (values.password) body.password = values.password;
      else {
        body.password_hash = user.password_hash || "";
        if (user.hashing_algorithm) body.hashing_algorithm = user.hashing_algorithm;
      }
      await api("PUT", p("users", name), body);
      flash(values.password ? `User ${name}: password and tags updated.` : `User ${name}: tags updated.`);
      node.querySelector("input[name=password]").value = "";
      await refresh();
    },
  );
  const remove = actionButton(
    "Delete user",
    async () => {
      await api("DELETE", p("users", name));
      flash(`User ${name} deleted.`);
      location.hash = "#/admin/users";
    },
    { danger: true, question: `Delete user ${name}?` },
  );
  fill(
    main,
    el("h1", {}, "User ", el("small", { class: "object-name" }, name)),
    about,
    el("h2", {}, "Permissions"),
    permissions,
    update,
    el("h2", {}, "Delete this user"),
    el("div", { class: "panel" }, remove),
  );
  return { refresh };
}
