// One queue: details, consumers, bindings, publishing to it, getting messages, purge, delete.

import { api, get, p } from "../api.js";
import { bindToQueueForm, bindingsTable } from "../bindings.js";
import { actionButton, el, facts, field, fill, flash, form, select } from "../dom.js";
import { bytes, count, json, path, rate, yesNo } from "../format.js";
import { publishForm } from "../forms.js";
import { table } from "../list.js";
import { leaderCell, membersCell } from "../members.js";

function consumersTable(queue) {
  return table(
    [
      { title: "Consumer tag", name: true, cell: (c) => c.consumer_tag },
      { title: "Channel", name: true, cell: (c) => path(c, "channel_details.name") },
      { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
      { title: "Exclusive", cell: (c) => yesNo(c.exclusive) },
      { title: "Prefetch", num: true, cell: (c) => count(c.prefetch_count) },
      { title: "Arguments", cell: (c) => json(c.arguments) },
    ],
    queue.consumer_details || [],
    { emptyText: "No consumers." },
  );
}

function shownMessage(message, index) {
  return el(
    "div",
    { class: "message", dataset: { message: index + 1 } },
    facts([
      ["Message", String(index + 1)],
      ["Exchange", message.exchange === "" ? "(AMQP default)" : message.exchange],
      ["Routing key", message.routing_key],
      ["Redelivered", yesNo(message.redelivered)],
      ["Messages left", count(message.message_count)],
      ["Properties", json(message.properties) || "none"],
      ["Payload", `${count(message.payload_bytes)} bytes, encoding ${message.payload_encoding}`],
    ]),
    el("pre", { class: "payload" }, message.payload),
  );
}

function getForm(base) {
  const results = el("div", { class: "messages" });
  const node = form(
    "Get messages",
    [
      field(
        "Ack mode",
        select(
          "ackmode",
          [
            ["ack_requeue_true", "Nack message requeue true"],
            ["ack_requeue_false", "Automatic ack"],
            ["reject_requeue_true", "Reject requeue true"],
            ["reject_requeue_false", "Reject requeue false"],
          ],
          "ack_requeue_true",
        ),
      ),
      field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
      field("Messages", el("input", { type: "number", name: "count", value: "1", min: "1" })),
    ],
    "Get message(s)",
    async (values) => {
      const messages = await api("POST", base + "/get", {
        count: Number(values.count) || 1,
        ackmode: values.ackmode,
        encoding: values.encoding,
        truncate: 50000,
      });
      fill(results, messages.length ? messages.map(shownMessage) : el("p", { class: "empty" }, "Queue is empty."));
    },
  );
  node.appendChild(results);
  return node;
}

export async function render(main, context) {
  const [vhost, name] = context.segments;
  const base = p("queues", vhost, name);
  const details = el("div", {});
  const consumers = el("div", {});
  const bindings = el("div", {});

  async function refresh() {
    const [queue, queueBindings] = await Promise.all([get(base), get(base + "/bindings")]);
    if (!context.isCurrent()) return;
    fill(
      details,
      el(
        "div",
        { class: "totals" },
        [
          ["Ready", queue.messages_ready],
          ["Unacked", queue.messages_unacknowledged],
          ["Total", queue.messages],
          ["Consumers", queue.consumers],
        ].map(([label, value]) => el("div", { dataset: { total: label.toLowerCase() } }, el("b", {}, count(value || 0)), el("span", {}, label))),
      ),
      facts([
        ["Virtual host", queue.vhost],
        ["Type", queue.type],
        ["State", queue.state],
        ["Leader", Array.isArray(queue.members) ? leaderCell(queue) : undefined],
        ["Members", Array.isArray(queue.members) ? membersCell(queue) : undefined],
        ["Raft term", queue.raft ? String(queue.raft.term) : undefined],
        ["Commit index", queue.raft && queue.raft.commit_index !== null ? count(queue.raft.commit_index) : undefined],
        ["Durable", yesNo(queue.durable)],
        ["Auto delete", yesNo(queue.auto_delete)],
        ["Exclusive", yesNo(queue.exclusive)],
        ["Arguments", json(queue.arguments) || "none"],
        ["Policy", queue.policy || undefined],
        ["Operator policy", queue.operator_policy || undefined],
        ["Effective policy definition", json(queue.effective_policy_definition) || undefined],
        ["Message bytes", queue.message_bytes === undefined ? undefined : bytes(queue.message_bytes)],
        ["Incoming", rate(path(queue, "message_stats.publish_details.rate") || 0)],
        ["Deliver / get", rate(path(queue, "message_stats.deliver_get_details.rate") || 0)],
        ["Ack", rate(path(queue, "message_stats.ack_details.rate") || 0)],
      ]),
    );
    fill(consumers, consumersTable(queue));
    fill(bindings, bindingsTable(queueBindings, refresh));
  }

  await refresh();
  fill(
    main,
    el("h1", {}, "Queue: ", name, " ", el("small", {}, `in virtual host ${vhost}`)),
    details,
    el("h2", {}, "Consumers"),
    consumers,
    el("h2", {}, "Bindings"),
    bindings,
    bindToQueueForm(vhost, name, refresh),
    el("h2", {}, "Publish and get"),
    el("p", { class: "muted" }, "Published through the default exchange with the queue's name as routing key."),
    publishForm(vhost, "", { fixedRoutingKey: name }),
    el("p", { class: "muted" }, "Getting messages is a destructive action: with a requeueing ack mode they come back redelivered."),
    getForm(base),
    el("h2", {}, "Purge and delete"),
    el(
      "div",
      { class: "toolbar" },
      actionButton(
        "Purge messages",
        async () => {
          await api("DELETE", base + "/contents");
          flash(`Queue ${name} purged.`);
          await refresh();
        },
        { question: `Purge all ready messages of queue ${name}?` },
      ),
      actionButton(
        "Delete queue",
        async () => {
          await api("DELETE", base);
          flash(`Queue ${name} deleted.`);
          location.hash = "#/queues";
        },
        { danger: true, question: `Delete queue ${name}?` },
      ),
    ),
  );
  return { refresh };
}
