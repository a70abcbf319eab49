// Exchanges: the list (type, features, rates) and adding one.

import { api, get, p } from "../api.js";
import { el, field, fill, flash, form, route, select, tags, textInput } from "../dom.js";
import { json, path, rate } from "../format.js";
import { argumentsField, checkbox, jsonObject, vhostSelect } from "../forms.js";
import { pagedList } from "../list.js";

export function features(exchange) {
  return tags([
    exchange.durable ? "durable" : "",
    exchange.auto_delete ? "auto-delete" : "",
    exchange.internal ? "internal" : "",
    json(exchange.arguments) ? `args ${json(exchange.arguments)}` : "",
  ]);
}

export async function render(main) {
  const list = pagedList({
    path: "/exchanges",
    noun: "exchanges",
    emptyText: "No exchanges.",
    columns: [
      { title: "Virtual host", sort: "vhost", cell: (x) => x.vhost },
      {
        title: "Name",
        name: true,
        sort: "name",
        cell: (x) => el("a", { href: route("exchanges", x.vhost, x.name === "" ? "amq.default" : x.name) }, x.name === "" ? "(AMQP default)" : x.name),
      },
      { title: "Type", sort: "type", cell: (x) => x.type },
      { title: "Features", cell: features },
      { title: "Message rate in", num: true, cell: (x) => rate(path(x, "message_stats.publish_in_details.rate")) },
      { title: "Message rate out", num: true, cell: (x) => rate(path(x, "message_stats.publish_out_details.rate")) },
    ],
  });
  const [overview, vhosts] = await Promise.all([get("/overview"), vhostSelect()]);
  const types = (overview.exchange_types || []).map((t) => t.name);
  const addForm = form(
    "Add a new exchange",
    [
      field("Virtual host", vhosts),
      field("Name", textInput("name", { required: true })),
      field("Type", select("type", (types.length ? types : ["direct", "fanout", "topic", "headers"]).map((t) => [t, t]), "direct")),
      checkbox("durable", "Durable", true),
      checkbox("auto_delete", "Auto delete"),
      checkbox("internal", "Internal"),
      argumentsField(),
    ],
    "Add exchange",
    async (values, node) => {
      await api("PUT", p("exchanges", values.vhost, values.name), {
        type: values.type,
        durable: values.durable === "on",
        auto_delete: values.auto_delete === "on",
        internal: values.internal === "on",
        arguments: jsonObject(values.arguments, "Arguments"),
      });
      flash(`Exchange ${values.name} added.`);
      node.querySelector("input[name=name]").value = "";
      await list.refresh();
    },
  );
  fill(main, el("h1", {}, "Exchanges"), list.node, addForm);
  await list.refresh();
  return { refresh: list.refresh };
}
