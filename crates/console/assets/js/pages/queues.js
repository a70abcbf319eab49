// Queues: the list with depth (ready, unacked, total) and rates, and adding one.

import { api, p } from "../api.js";
import { el, field, fill, flash, form, route, select, tags, textInput } from "../dom.js";
import { count, json, path, rate } from "../format.js";
import { argumentsField, checkbox, jsonObject, vhostSelect } from "../forms.js";
import { pagedList } from "../list.js";
import { leaderCell, membersCell } from "../members.js";

export function features(queue) {
  return tags([
    queue.durable ? "durable" : "",
    queue.auto_delete ? "auto-delete" : "",
    queue.exclusive ? "exclusive" : "",
    json(queue.arguments) ? `args ${json(queue.arguments)}` : "",
    queue.policy ? `policy ${queue.policy}` : "",
  ]);
}

export async function render(main) {
  const list = pagedList({
    path: "/queues",
    noun: "queues",
    emptyText: "No queues.",
    columns: [
      { title: "Virtual host", sort: "vhost", cell: (q) => q.vhost },
      { title: "Name", name: true, sort: "name", cell: (q) => el("a", { href: route("queues", q.vhost, q.name) }, q.name) },
      { title: "Type", sort: "type", cell: (q) => q.type },
      { title: "Features", cell: features },
      { title: "State", sort: "state", cell: (q) => el("span", { class: `state-${q.state}` }, q.state) },
      { title: "Ready", num: true, sort: "messages_ready", cell: (q) => count(q.messages_ready) },
      { title: "Unacked", num: true, sort: "messages_unacknowledged", cell: (q) => count(q.messages_unacknowledged) },
      { title: "Total", num: true, sort: "messages", cell: (q) => count(q.messages) },
      { title: "Consumers", num: true, sort: "consumers", cell: (q) => count(q.consumers) },
      { title: "Incoming", num: true, cell: (q) => rate(path(q, "message_stats.publish_details.rate")) },
      { title: "Deliver / get", num: true, cell: (q) => rate(path(q, "message_stats.deliver_get_details.rate")) },
      { title: "Ack", num: true, cell: (q) => rate(path(q, "message_stats.ack_details.rate")) },
      // Quorum queues' Raft group (empty for classic queues); last, so the columns before
      // keep their places.
      { title: "Leader", cell: leaderCell },
      { title: "Members", cell: membersCell },
    ],
  });
  const addForm = form(
    "Add a new queue",
    [
      field("Virtual host", await vhostSelect()),
      field("Name", textInput("name", { required: true })),
      // The types Warren serves (no streams: the API would refuse one).
      field("Type", select("type", [["classic", "Classic"], ["quorum", "Quorum"]], "classic")),
      checkbox("durable", "Durable", true),
      checkbox("auto_delete", "Auto delete"),
      argumentsField(),
    ],
    "Add queue",
    async (values, node) => {
      const args = jsonObject(values.arguments, "Arguments");
      if (values.type !== "classic") args["x-queue-type"] = values.type;
      await api("PUT", p("queues", values.vhost, values.name), {
        durable: values.durable === "on",
        auto_delete: values.auto_delete === "on",
        arguments: args,
      });
      flash(`Queue ${values.name} added.`);
      node.querySelector("input[name=name]").value = "";
      await list.refresh();
    },
  );
  fill(main, el("h1", {}, "Queues"), list.node, addForm);
  await list.refresh();
  return { refresh: list.refresh };
}
