// Bindings: the table shown on exchange and queue pages, unbinding, and adding a binding.

import { api, p } from "./api.js";
import { actionButton, el, field, flash, form, route, select, textInput } from "./dom.js";
import { json } from "./format.js";
import { argumentsField, jsonObject } from "./forms.js";
import { table } from "./list.js";

function exchangeLink(vhost, name) {
  return el("a", { href: route("exchanges", vhost, name === "" ? "amq.default" : name) }, name === "" ? "(AMQP default)" : name);
}

function destinationLink(binding) {
  return binding.destination_type === "queue"
    ? el("a", { href: route("queues", binding.vhost, binding.destination) }, binding.destination)
    : exchangeLink(binding.vhost, binding.destination);
}

/** bindings as /api/…/bindings returns them; `refresh` is called after an unbind. */
export function bindingsTable(bindings, refresh) {
  return table(
    [
      { title: "From", name: true, cell: (b) => exchangeLink(b.vhost, b.source) },
      { title: "To", name: true, cell: destinationLink },
      { title: "Routing key", name: true, cell: (b) => b.routing_key },
      { title: "Arguments", cell: (b) => json(b.arguments) },
      {
        title: "",
        cell: (b) =>
          // The default exchange's implicit bindings cannot be removed.
          b.source === ""
            ? ""
            : actionButton(
                "Unbind",
                async () => {
                  const kind = b.destination_type === "queue" ? "q" : "e";
                  await api("DELETE", p("bindings", b.vhost, "e", b.source, kind, b.destination, b.properties_key));
                  flash("Binding removed.");
                  await refresh();
                },
                { small: true, danger: true },
              ),
      },
    ],
    bindings,
    { emptyText: "No bindings." },
  );
}

/** "Add binding from this exchange" (to a queue or exchange). */
export function bindFromExchangeForm(vhost, exchange, refresh) {
  return form(
    "Add binding from this exchange",
    [
      field("To", select("kind", [["q", "Queue"], ["e", "Exchange"]], "q")),
      field("Destination name", textInput("destination", { required: true })),
      field("Routing key", textInput("routing_key")),
      argumentsField(),
    ],
    "Bind",
    async (values, node) => {
      await api("POST", p("bindings", vhost, "e", exchange, values.kind, values.destination), {
        routing_key: values.routing_key,
        arguments: jsonObject(values.arguments, "Arguments"),
      });
      flash("Binding added.");
      node.reset();
      await refresh();
    },
  );
}

/** "Add binding to this queue" (from an exchange). */
export function bindToQueueForm(vhost, queue, refresh) {
  return form(
    "Add binding to this queue",
    [field("From exchange", textInput("source", { required: true })), field("Routing key", textInput("routing_key")), argumentsField()],
    "Bind",
    async (values, node) => {
      await api("POST", p("bindings", vhost, "e", values.source, "q", queue), {
        routing_key: values.routing_key,
        arguments: jsonObject(values.arguments, "Arguments"),
      });
      flash("Binding added.");
      node.reset();
      await refresh();
    },
  );
}
