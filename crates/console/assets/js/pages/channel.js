// One channel (#/channels/NAME, "peer -> broker (N)"): its connection, mode, prefetch,
// unacknowledged and unconfirmed messages, message rates, and its consumers.

import { get, p } from "../api.js";
import { el, facts, fill, route } from "../dom.js";
import { channelMode, count, json, path, rate, yesNo } from "../format.js";
import { table } from "../list.js";

const RATES = [
  ["Publish", "publish"],
  ["Publisher confirm", "confirm"],
  ["Deliver (manual ack)", "deliver"],
  ["Deliver (auto ack)", "deliver_no_ack"],
  ["Consumer ack", "ack"],
  ["Redelivered", "redeliver"],
  ["Get (manual ack)", "get"],
  ["Get (auto ack)", "get_no_ack"],
];

export async function render(main, context) {
  const name = context.segments[0];
  const about = el("div", {});
  const consumers = el("div", { class: "consumers" });

  async function refresh() {
    const channel = await get(p("channels", name));
    if (!context.isCurrent()) return;
    const connection = path(channel, "connection_details.name");
    fill(
      about,
      facts([
        ["Connection", connection ? el("a", { href: route("connections", connection) }, connection) : undefined],
        ["Virtual host", channel.vhost],
        ["Username", channel.user],
        ["Node", channel.node],
        ["State", el("span", { class: `state-${channel.state}` }, channel.state)],
        ["Mode", channelMode(channel) || "–"],
        ["Prefetch count", count(channel.prefetch_count)],
        ["Global prefetch count", count(channel.global_prefetch_count)],
        ["Unacked", el("b", { dataset: { fact: "unacked" } }, count(channel.messages_unacknowledged))],
        ["Unconfirmed", count(channel.messages_unconfirmed)],
        ...RATES.map(([label, key]) => [label, rate(path(channel, `message_stats.${key}_details.rate`)) || undefined]),
      ]),
    );
    fill(
      consumers,
      table(
        [
          { title: "Consumer tag", name: true, cell: (c) => c.consumer_tag },
          { title: "Queue", name: true, cell: (c) => el("a", { href: route("queues", c.queue.vhost, c.queue.name) }, c.queue.name) },
          { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
          { title: "Exclusive", cell: (c) => yesNo(c.exclusive) },
          { title: "Prefetch", num: true, cell: (c) => count(c.prefetch_count) },
          { title: "Arguments", cell: (c) => json(c.arguments) },
        ],
        channel.consumer_details || [],
        { emptyText: "No consumers." },
      ),
    );
  }

  await refresh();
  if (!context.isCurrent()) return null;
  fill(main, el("h1", {}, "Channel ", el("small", { class: "object-name" }, name)), about, el("h2", {}, "Consumers"), consumers);
  return { refresh };
}
