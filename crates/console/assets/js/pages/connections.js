// Connections: every client connection, and closing one with a reason the client is told.

import { api, p } from "../api.js";
import { actionButton, el, fill, flash, route } from "../dom.js";
import { byteRate, count, path } from "../format.js";
import { pagedList } from "../list.js";

export async function render(main) {
  const list = pagedList({
    path: "/connections",
    noun: "connections",
    emptyText: "No connections.",
    columns: [
      {
        title: "Name",
        name: true,
        sort: "name",
        // The name a client gives its connection (client_properties.connection_name) under the peer.
        cell: (c) => [el("a", { href: route("connections", c.name) }, c.name), path(c, "client_properties.connection_name") ? el("div", { class: "muted" }, path(c, "client_properties.connection_name")) : null],
      },
      { title: "Virtual host", sort: "vhost", cell: (c) => c.vhost },
      { title: "User", sort: "user", cell: (c) => c.user },
      { title: "State", sort: "state", cell: (c) => el("span", { class: `state-${c.state}` }, c.state) },
      { title: "Protocol", cell: (c) => c.protocol },
      { title: "Client", cell: (c) => [path(c, "client_properties.product"), path(c, "client_properties.version")].filter(Boolean).join(" ") },
      { title: "Channels", num: true, sort: "channels", cell: (c) => count(c.channels) },
      { title: "From client", num: true, cell: (c) => byteRate(path(c, "recv_oct_details.rate")) },
      { title: "To client", num: true, cell: (c) => byteRate(path(c, "send_oct_details.rate")) },
      {
        title: "",
        cell: (c) =>
          actionButton(
            "Close",
            async () => {
              const reason = window.prompt(`Close connection ${c.name}? Reason given to the client:`, "Closed via management plugin");
              if (reason === null) return;
              await api("DELETE", p("connections", c.name), undefined, { headers: { "X-Reason": reason } });
              flash(`Connection ${c.name} closed`);
              await list.refresh();
            },
            { danger: true, small: true },
          ),
      },
    ],
  });
  fill(main, el("h1", {}, "Connections"), list.node);
  await list.refresh();
  return { refresh: list.refresh };
}
