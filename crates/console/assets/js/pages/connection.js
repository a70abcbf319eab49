// One connection (#/connections/NAME): its properties, its client's properties, its channels
// (each linking to its page), and closing it with a reason the client is told.

import { api, get, p } from "../api.js";
import { actionButton, el, facts, fill, flash, route } from "../dom.js";
import { byteRate, bytes, channelMode, count, json, path, yesNo } from "../format.js";
import { table } from "../list.js";

/** A client property: tables (capabilities) as their entries, other values as text. */
function propertyValue(value) {
  if (value && typeof value === "object") {
    return el("table", { class: "facts nested" }, Object.entries(value).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, propertyValue(v)))));
  }
  return String(value);
}

export async function render(main, context) {
  const name = context.segments[0];
  const about = el("div", {});
  const client = el("div", { class: "client-properties" });
  const channels = el("div", { class: "channels" });

  async function refresh() {
    const [connection, channelList] = await Promise.all([get(p("connections", name)), get(p("connections", name, "channels"))]);
    if (!context.isCurrent()) return;
    fill(
      about,
      facts([
        ["Virtual host", connection.vhost],
        ["Username", connection.user],
        ["State", el("span", { class: `state-${connection.state}` }, connection.state)],
        ["Protocol", connection.protocol],
        ["Authentication", connection.auth_mechanism],
        ["Node", connection.node],
        ["Client", `${connection.peer_host}:${connection.peer_port}`],
        ["Server", `${connection.host}:${connection.port}`],
        ["Connected at", connection.connected_at ? new Date(connection.connected_at).toLocaleString("en-GB") : undefined],
        ["TLS", yesNo(connection.ssl)],
        ["Heartbeat", connection.timeout === undefined ? undefined : `${connection.timeout} s`],
        ["Frame max", connection.frame_max === undefined ? undefined : `${count(connection.frame_max)} bytes`],
        ["Channel limit", count(connection.channel_max)],
        ["From client", `${bytes(connection.recv_oct)} (${byteRate(path(connection, "recv_oct_details.rate"))})`],
        ["To client", `${bytes(connection.send_oct)} (${byteRate(path(connection, "send_oct_details.rate"))})`],
      ]),
    );
    fill(
      client,
      facts(Object.entries(connection.client_properties || {}).map(([key, value]) => [key, propertyValue(value)])),
    );
    fill(
      channels,
      table(
        [
          { title: "Channel", name: true, cell: (c) => el("a", { href: route("channels", c.name) }, c.name) },
          { title: "Mode", cell: channelMode },
          { title: "State", cell: (c) => el("span", { class: `state-${c.state}` }, c.state) },
          { title: "Consumers", num: true, cell: (c) => count(c.consumer_count) },
          { title: "Prefetch", num: true, cell: (c) => count(c.prefetch_count) },
          { title: "Unacked", num: true, cell: (c) => count(c.messages_unacknowledged) },
          { title: "Arguments", cell: (c) => json(c.arguments) },
        ],
        channelList,
        { emptyText: "No channels." },
      ),
    );
  }

  await refresh();
  if (!context.isCurrent()) return null;
  const close = actionButton(
    "Force close",
    async () => {
      const reason = window.prompt(`Close connection ${name}? Reason given to the client:`, "Closed via management plugin");
      if (reason === null) return;
      await api("DELETE", p("connections", name), undefined, { headers: { "X-Reason": reason } });
      flash(`Connection ${name} closed`);
      location.hash = "#/connections";
    },
    { danger: true },
  );
  fill(
    main,
    el("h1", {}, "Connection ", el("small", { class: "object-name" }, name)),
    about,
    el("h2", {}, "Client properties"),
    client,
    el("h2", {}, "Channels"),
    channels,
    el("h2", {}, "Close this connection"),
    el("div", { class: "panel" }, close),
  );
  return { refresh };
}
