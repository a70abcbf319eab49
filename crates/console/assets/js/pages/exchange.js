// One exchange: its details, bindings in and out, publishing through it, deleting it.

import { api, get, p } from "../api.js";
import { bindFromExchangeForm, bindingsTable } from "../bindings.js";
import { actionButton, el, facts, fill, flash } from "../dom.js";
import { json, path, rate, yesNo } from "../format.js";
import { publishForm } from "../forms.js";

export async function render(main, context) {
  const [vhost, pathName] = context.segments;
  // The API calls the default exchange "amq.default"; its real name is "".
  const name = pathName === "amq.default" ? "" : pathName;
  const base = p("exchanges", vhost, pathName);
  const details = el("div", {});
  const outgoing = el("div", {});
  const incoming = el("div", {});

  async function refresh() {
    const [exchange, source, destination] = await Promise.all([
      get(base),
      get(base + "/bindings/source"),
      get(base + "/bindings/destination"),
    ]);
    if (!context.isCurrent()) return;
    fill(
      details,
      facts([
        ["Virtual host", exchange.vhost],
        ["Type", exchange.type],
        ["Durable", yesNo(exchange.durable)],
        ["Auto delete", yesNo(exchange.auto_delete)],
        ["Internal", yesNo(exchange.internal)],
        ["Arguments", json(exchange.arguments) || "none"],
        ["Policy", exchange.policy || undefined],
        ["Message rate in", rate(path(exchange, "message_stats.publish_in_details.rate") || 0)],
        ["Message rate out", rate(path(exchange, "message_stats.publish_out_details.rate") || 0)],
      ]),
    );
    fill(outgoing, bindingsTable(source, refresh));
    fill(incoming, bindingsTable(destination, refresh));
  }

  await refresh();
  const builtIn = name === "" || name.startsWith("amq.");
  fill(
    main,
    el("h1", {}, "Exchange: ", name === "" ? "(AMQP default)" : name, " ", el("small", {}, `in virtual host ${vhost}`)),
    details,
    el("h2", {}, "Bindings from this exchange"),
    outgoing,
    name === "" ? null : bindFromExchangeForm(vhost, name, refresh),
    el("h2", {}, "Bindings to this exchange"),
    incoming,
    el("h2", {}, "Publish"),
    publishForm(vhost, name),
    builtIn
      ? null
      : [
          el("h2", {}, "Delete this exchange"),
          actionButton(
            "Delete exchange",
            async () => {
              await api("DELETE", base);
              flash(`Exchange ${name} deleted.`);
              location.hash = "#/exchanges";
            },
            { danger: true, question: `Delete exchange ${name}?` },
          ),
        ],
  );
  return { refresh };
}
