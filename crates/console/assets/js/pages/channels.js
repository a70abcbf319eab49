// Channels: every open channel with its mode, prefetch, unacknowledged messages and rates.

import { el, fill, route } from "../dom.js";
import { channelMode, count, path, rate } from "../format.js";
import { pagedList } from "../list.js";

export async function render(main) {
  const list = pagedList({
    path: "/channels",
    noun: "channels",
    emptyText: "No channels.",
    columns: [
      { title: "Channel", name: true, sort: "name", cell: (c) => el("a", { href: route("channels", c.name) }, c.name) },
      { title: "Virtual host", sort: "vhost", cell: (c) => c.vhost },
      { title: "User", sort: "user", cell: (c) => c.user },
      { title: "Mode", cell: channelMode },
      { title: "State", sort: "state", cell: (c) => el("span", { class: `state-${c.state}` }, c.state) },
      { title: "Consumers", num: true, sort: "consumer_count", cell: (c) => count(c.consumer_count) },
      { title: "Prefetch", num: true, sort: "prefetch_count", cell: (c) => count(c.prefetch_count) },
      { title: "Unacked", num: true, sort: "messages_unacknowledged", cell: (c) => count(c.messages_unacknowledged) },
      { title: "Publish", num: true, cell: (c) => rate(path(c, "message_stats.publish_details.rate")) },
      { title: "Deliver", num: true, cell: (c) => rate(path(c, "message_stats.deliver_get_details.rate")) },
      { title: "Ack", num: true, cell: (c) => rate(path(c, "message_stats.ack_details.rate")) },
    ],
  });
  fill(main, el("h1", {}, "Channels"), list.node);
  await list.refresh();
  return { refresh: list.refresh };
}
