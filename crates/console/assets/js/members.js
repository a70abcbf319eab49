// A quorum queue's members as the queues list and the queue page show them: each member's
// node name with an online mark (RabbitMQ's `online`: the member's node is running), the
// leader's name in bold. Classic queues have none.

import { el } from "./dom.js";

/** The members of `queue` (from /api/queues), or "" when it has none (a classic queue). */
export function membersCell(queue) {
  if (!Array.isArray(queue.members)) return "";
  const online = new Set(queue.online || []);
  return el(
    "span",
    { class: "members" },
    queue.members.map((name) => {
      const up = online.has(name);
      return el(
        "span",
        {
          class: `member ${up ? "online" : "offline"}${name === queue.leader ? " leader" : ""}`,
          title: `${name}: ${up ? "online" : "offline"}${name === queue.leader ? ", leader" : ""}`,
          dataset: { member: name, online: String(up) },
        },
        `${up ? "●" : "○"} ${name}`,
      );
    }),
  );
}

/** The leader's node name, or "none" while the group elects (quorum queues only). */
export function leaderCell(queue) {
  if (!Array.isArray(queue.members)) return "";
  return el("span", { class: "leader-name", dataset: { leader: queue.leader || "" } }, queue.leader || "none");
}
