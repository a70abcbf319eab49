// Overview: message rates and queued messages over the last ten minutes (charts drawn from the
// `samples` /api/overview keeps, so a reload shows them at once), object counts, the nodes'
// facts and any resource alarm, and exporting and importing definitions.

import { get, hasTag, query } from "../api.js";
import { lineChart } from "../chart.js";
import { definitionsPanels } from "../definitions.js";
import { el, facts, fill, route } from "../dom.js";
import { bytes, count, duration, path, rate } from "../format.js";

const HISTORY_POINTS = 120; // ten minutes at one point per 5 s refresh
const SAMPLE_INCR_S = 5;
/** The first fetch asks for the ten minutes the API keeps; later ones for the newest points. */
const FIRST_AGE_S = HISTORY_POINTS * SAMPLE_INCR_S;
const LATER_AGE_S = 3 * SAMPLE_INCR_S;

// RabbitMQ's overview charts (its charts.js message_rates and queue_lengths), less the
// exchange-only Publish (In)/(Out) and the disk reads/writes Warren does not count.
const RATE_SERIES = [
  { key: "publish", label: "Publish", color: "#d9822b" },
  { key: "confirm", label: "Publisher confirm", color: "#8a5a2b" },
  { key: "deliver", label: "Deliver (manual ack)", color: "#2b5f8a" },
  { key: "deliver_no_ack", label: "Deliver (auto ack)", color: "#5b8fc7" },
  { key: "ack", label: "Consumer ack", color: "#2f7d32" },
  { key: "redeliver", label: "Redelivered", color: "#b23b3b" },
  { key: "get", label: "Get (manual ack)", color: "#7b4f9d" },
  { key: "get_no_ack", label: "Get (auto ack)", color: "#a97cc9" },
  { key: "get_empty", label: "Get (empty)", color: "#999999" },
  { key: "return_unroutable", label: "Unroutable (return)", color: "#c9a227" },
  { key: "drop_unroutable", label: "Unroutable (drop)", color: "#6b6b2b" },
].map((s) => ({ ...s, field: `message_stats.${s.key}` }));
const QUEUED_SERIES = [
  { key: "ready", label: "Ready", color: "#d9822b", field: "queue_totals.messages_ready" },
  { key: "unacked", label: "Unacked", color: "#2b5f8a", field: "queue_totals.messages_unacknowledged" },
  { key: "total", label: "Total", color: "#616e7c", field: "queue_totals.messages" },
];

/**
 * Kept across visits to the page: timestamp (ms) → {series key: value}, the API's samples
 * (cumulative counters for rates, lengths for queued messages), or the live values of an
 * API that gives no samples.
 */
const points = new Map();
let sampled = false;
/** When (browser clock) samples were last merged: after a longer absence, ask for all again. */
let mergedAt = 0;

/** Merges the answer's `samples` into `points`; false when the API gave none. */
function mergeSamples(overview) {
  let any = false;
  for (const s of [...RATE_SERIES, ...QUEUED_SERIES]) {
    for (const { sample, timestamp } of path(overview, `${s.field}_details.samples`) || []) {
      any = true;
      if (!points.has(timestamp)) points.set(timestamp, {});
      points.get(timestamp)[s.key] = Number(sample);
    }
  }
  return any;
}

/** Without samples: the live rates and lengths of this answer, as a point at now. */
function recordLive(overview) {
  const values = {};
  for (const s of RATE_SERIES) values[s.key] = Number(path(overview, `${s.field}_details.rate`) || 0);
  for (const s of QUEUED_SERIES) values[s.key] = Number(path(overview, s.field) || 0);
  points.set(Date.now(), values);
}

/** The charts' history, oldest first; from samples, a rate is the growth since the point before. */
function chartHistory() {
  const times = [...points.keys()].sort((a, b) => a - b);
  while (times.length > HISTORY_POINTS + 1) points.delete(times.shift());
  if (!sampled) return times.map((time) => ({ time, values: points.get(time) }));
  return times.slice(1).map((time, i) => {
    const [before, now] = [points.get(times[i]), points.get(time)];
    const seconds = (time - times[i]) / 1000;
    const values = {};
    for (const s of RATE_SERIES) values[s.key] = Math.max(0, ((now[s.key] || 0) - (before[s.key] || 0)) / seconds);
    for (const s of QUEUED_SERIES) values[s.key] = now[s.key] || 0;
    return { time, values };
  });
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
    el("h3", {}, el("a", { href: route("nodes", node.name) }, node.name)),
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
  const definitions = el("div", {});
  let nodeName;
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
    definitions,
  );

  async function refresh() {
    // Node facts and alarms are for monitoring users (RabbitMQ refuses /api/nodes to others).
    const monitoring = hasTag("monitoring");
    const recent = sampled && Date.now() - mergedAt < (LATER_AGE_S - SAMPLE_INCR_S) * 1000;
    const age = recent ? LATER_AGE_S : FIRST_AGE_S;
    const ranges = query({ lengths_age: age, lengths_incr: SAMPLE_INCR_S, msg_rates_age: age, msg_rates_incr: SAMPLE_INCR_S });
    const [overview, nodeList] = await Promise.all([get("/overview" + ranges), monitoring ? get("/nodes") : null]);
    if (!context.isCurrent()) return;
    nodeName = overview.node;
    if (mergeSamples(overview)) {
      sampled = true;
      mergedAt = Date.now();
    } else {
      if (sampled) points.clear();
      sampled = false;
      recordLive(overview);
    }
    const history = chartHistory();
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
  // Definitions are administrators' (RabbitMQ refuses /api/definitions to others).
  if (hasTag("administrator") && context.isCurrent()) {
    fill(definitions, el("h2", {}, "Export and import definitions"), await definitionsPanels(nodeName));
  }
  return { refresh };
}
