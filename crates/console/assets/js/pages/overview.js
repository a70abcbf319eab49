// Overview: live message rates and queued-message totals (charts fed by /api/overview every
// refresh), object counts, the nodes' facts and any resource alarm.

import { get, hasTag } from "../api.js";
import { lineChart } from "../chart.js";
import { el, facts, fill } from "../dom.js";
import { bytes, count, duration, path, rate } from "../format.js";

const HISTORY_POINTS = 120; // ten minutes at one point per 5 s refresh

/** Kept across visits to the page, so coming back shows the last minutes again. */
const history = [];

const RATE_SERIES = [
  { key: "publish", label: "Publish", color: "#d9822b", field: "message_stats.publish_details.rate" },
  { key: "deliver", label: "Deliver", color: "#2b5f8a", field: "message_stats.deliver_get_details.rate" },
  { key: "ack", label: "Ack", color: "#2f7d32", field: "message_stats.ack_details.rate" },
];
const QUEUED_SERIES = [
  { key: "ready", label: "Ready", color: "#d9822b", field: "queue_totals.messages_ready" },
  { key: "unacked", label: "Unacked", color: "#2b5f8a", field: "queue_totals.messages_unacknowledged" },
  { key: "total", label: "Total", color: "#616e7c", field: "queue_totals.messages" },
];

function record(overview) {
  const values = {};
  for (const s of [...RATE_SERIES, ...QUEUED_SERIES]) values[s.key] = Number(path(overview, s.field) || 0);
  history.push({ time: Date.now(), values });
  while (history.length > HISTORY_POINTS) history.shift();
}

function alarmsOf(nodes) {
  const alarms = [];
  for (const node of nodes) {
    if (node.mem_alarm) alarms.push(`Memory alarm on ${node.name}: ${bytes(node.mem_used)} used, limit ${bytes(node.mem_limit)}`);
    if (node.disk_free_alarm) alarms.push(`Disk alarm on ${node.name}: ${bytes(node.disk_free)} free, limit ${bytes(node.disk_free_limit)}`);
  }
  return alarms;
}

function nodeTable(node) {
  return el(
    "section",
    { class: "panel", dataset: { node: node.name } },
    el("h3", {}, node.name),
    facts([
      ["Uptime", duration(node.uptime)],
      ["Memory", `${bytes(node.mem_used)} of ${bytes(node.mem_limit)} high watermark`],
      ["Free disk", `${bytes(node.disk_free)} (limit ${bytes(node.disk_free_limit)})`],
      ["File descriptors", node.fd_total ? `${count(node.fd_used)} of ${count(node.fd_total)}` : count(node.fd_used)],
      ["Sockets", node.sockets_total ? `${count(node.sockets_used)} of ${count(node.sockets_total)}` : undefined],
      ["Processes", node.proc_total ? `${count(node.proc_used)} of ${count(node.proc_total)}` : undefined],
    ]),
  );
}

export async function render(main, context) {
  const rates = lineChart("Message rates", RATE_SERIES, rate);
  const queued = lineChart("Queued messages", QUEUED_SERIES, count);
  const totals = el("div", { class: "totals" });
  const alarms = el("div", { class: "alarms" });
  const nodes = el("div", { class: "nodes" });
  const about = el("div", {});
  fill(
    main,
    el("h1", {}, "Overview"),
    alarms,
    el("div", { class: "charts" }, queued.node, rates.node),
    el("h2", {}, "Totals"),
    totals,
    el("h2", {}, "Nodes"),
    nodes,
    el("h2", {}, "About"),
    about,
  );

  async function refresh() {
    // Node facts and alarms are for monitoring users (RabbitMQ refuses /api/nodes to others).
    const monitoring = hasTag("monitoring");
    const [overview, nodeList] = await Promise.all([get("/overview"), monitoring ? get("/nodes") : null]);
    if (!context.isCurrent()) return;
    record(overview);
    rates.render(history);
    queued.render(history);
    const objects = overview.object_totals || {};
    fill(
      totals,
      [
        ["Connections", objects.connections],
        ["Channels", objects.channels],
        ["Exchanges", objects.exchanges],
        ["Queues", objects.queues],
        ["Consumers", objects.consumers],
      ]
        // RabbitMQ counts consumers for monitoring users only; the others get no such total.
        .filter(([, value]) => value !== undefined)
        .map(([label, value]) => el("div", { dataset: { total: label.toLowerCase() } }, el("b", {}, count(value || 0)), el("span", {}, label))),
    );
    if (!monitoring) {
      fill(nodes, el("p", { class: "muted" }, "Node details and alarms are shown to users tagged monitoring or administrator."));
    }
    const raised = monitoring ? alarmsOf(nodeList) : [];
    fill(
      alarms,
      !monitoring
        ? null
        : raised.length
        ? raised.map((text) => el("p", {}, el("span", { class: "alarm" }, text)))
        : el("p", {}, el("span", { class: "fine" }, "No resource alarms")),
    );
    if (monitoring) fill(nodes, nodeList.map(nodeTable));
    fill(
      about,
      facts([
        ["Product", [overview.product_name, overview.product_version].filter(Boolean).join(" ") || undefined],
        ["Compatible with", overview.rabbitmq_version ? `RabbitMQ ${overview.rabbitmq_version}` : undefined],
        ["Cluster", overview.cluster_name],
        ["Node", overview.node],
        [
          "Listeners",
          (overview.listeners || []).map((l) => `${l.protocol} ${l.ip_address}:${l.port}`).join(", ") || undefined,
        ],
      ]),
    );
  }

  await refresh();
  return { refresh };
}
