// The cluster: every node with whether it is running (as this node's failure detector sees
// it), which one leads the metadata Raft group, the group's term, and each member's matched
// log index and lag behind the leader (known on the leader only). A single node shows itself.

import { get } from "../api.js";
import { el, facts, fill } from "../dom.js";
import { count, yesNo } from "../format.js";
import { table } from "../list.js";

function orDash(value) {
  return value === null || value === undefined ? "–" : count(value);
}

export async function render(main, context) {
  const summary = el("div", {});
  const members = el("div", {});

  async function refresh() {
    const status = await get("/cluster/status");
    if (!context.isCurrent()) return;
    fill(
      summary,
      facts([
        ["This node", status.node],
        ["Metadata leader", status.leader || "none"],
        ["Term", String(status.term)],
        ["This node's state", status.state],
        ["Last log index", orDash(status.last_log_index)],
        ["Last applied index", orDash(status.last_applied_index)],
      ]),
    );
    fill(
      members,
      table(
        [
          { title: "Node", name: true, cell: (m) => el("span", { dataset: { node: m.name } }, m.name) },
          {
            title: "Running",
            cell: (m) => el("span", { class: m.running ? "state-running" : "state-down", dataset: { running: String(m.running) } }, m.running ? "running" : "down"),
          },
          { title: "Leader", cell: (m) => (m.leader ? el("b", { class: "is-leader" }, "leader") : "") },
          { title: "Voter", cell: (m) => yesNo(m.voter) },
          { title: "Address", cell: (m) => m.address || "" },
          { title: "Matched index", num: true, cell: (m) => orDash(m.matched_index) },
          { title: "Lag", num: true, cell: (m) => orDash(m.lag) },
        ],
        status.members,
        { emptyText: "No members." },
      ),
    );
  }

  await refresh();
  fill(main, el("h1", {}, "Cluster"), summary, el("h2", {}, "Nodes"), members);
  return { refresh };
}
