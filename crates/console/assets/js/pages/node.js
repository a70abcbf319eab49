// One node (#/nodes/NAME): what /api/nodes/NAME gives (uptime, memory, disk, file
// descriptors, sockets, processes, alarms) and its listeners from /api/overview. Monitoring
// users only, as RabbitMQ.

import { get, p } from "../api.js";
import { el, facts, fill } from "../dom.js";
import { bytes, count, duration, yesNo } from "../format.js";
import { table } from "../list.js";

/** "used of total" when the total is known. */
function usage(used, total, format = count) {
  if (used === undefined) return undefined;
  return total ? `${format(used)} of ${format(total)}` : format(used);
}

export async function render(main, context) {
  const name = context.segments[0];
  const about = el("div", {});
  const listeners = el("div", { class: "listeners" });

  async function refresh() {
    const [node, overview] = await Promise.all([get(p("nodes", name)), get("/overview")]);
    if (!context.isCurrent()) return;
    fill(
      about,
      facts([
        ["Running", yesNo(node.running)],
        ["Uptime", duration(node.uptime)],
        ["Type", node.type],
        ["OS process id", node.os_pid],
        ["Processors", node.processors === undefined ? undefined : count(node.processors)],
        ["Memory", el("span", { dataset: { fact: "memory" } }, `${bytes(node.mem_used)} of ${bytes(node.mem_limit)} high watermark`)],
        ["Memory alarm", yesNo(node.mem_alarm)],
        ["Free disk", `${bytes(node.disk_free)} (limit ${bytes(node.disk_free_limit)})`],
        ["Disk alarm", yesNo(node.disk_free_alarm)],
        ["File descriptors", el("span", { dataset: { fact: "fds" } }, usage(node.fd_used, node.fd_total))],
        ["Sockets", usage(node.sockets_used, node.sockets_total)],
        ["Processes", usage(node.proc_used, node.proc_total)],
        ["Rates mode", node.rates_mode],
        ["Data directory", node.db_dir],
      ]),
    );
    const own = (overview.listeners || []).filter((l) => !l.node || l.node === name);
    fill(
      listeners,
      table(
        [
          { title: "Protocol", cell: (l) => l.protocol },
          { title: "Bound to", cell: (l) => l.ip_address },
          { title: "Port", num: true, cell: (l) => String(l.port) },
        ],
        own,
        { emptyText: "No listeners." },
      ),
    );
  }

  await refresh();
  if (!context.isCurrent()) return null;
  fill(main, el("h1", {}, "Node ", el("small", { class: "object-name" }, name)), about, el("h2", {}, "Listeners"), listeners);
  return { refresh };
}
