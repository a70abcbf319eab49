// The console's cluster and quorum queue views in headless Chromium, against every node of
// a running Warren (one node, or each node of a cluster): the Cluster page lists every
// expected node as running with exactly one metadata leader, and the queues list and the
// queue page show a quorum queue's leader and its members with online marks. Driven by
// tests/interop/py/test_console_quorum.py, which starts the brokers and declares the queue.
//
// Env: WARREN_MGMT_URLS   comma-separated console base URLs, one per node
//      EXPECT_NODES       comma-separated node names every Cluster page must list
//      QUORUM_QUEUE       a quorum queue in vhost "/" (its group already elected)
//      WARREN_MGMT_USER / WARREN_MGMT_PASS  an administrator (guest / guest)
//      CHROMIUM           the browser (/usr/bin/chromium)

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const admin = process.env.WARREN_MGMT_USER || "guest";
const adminPassword = process.env.WARREN_MGMT_PASS || "guest";
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const bases = (process.env.WARREN_MGMT_URLS || "").split(",").filter(Boolean).map((b) => (b.endsWith("/") ? b : b + "/"));
const expectedNodes = (process.env.EXPECT_NODES || "").split(",").filter(Boolean);
const queue = process.env.QUORUM_QUEUE;
if (bases.length === 0 || expectedNodes.length === 0 || !queue) {
  console.error("quorum console test: set WARREN_MGMT_URLS, EXPECT_NODES and QUORUM_QUEUE");
  process.exit(2);
}

const profile = mkdtempSync(path.join(tmpdir(), "warren-console-quorum-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
});
const page = context.pages()[0] || (await context.newPage());
page.setDefaultTimeout(20000);
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(error.message));

let step = 0;
async function check(title, body) {
  step += 1;
  await body();
  console.log(`ok ${step} - ${title}`);
}

/** Polls `read` (re-rendered by the page's 5 s refresh) until `test` holds, for 30 s. */
async function eventually(read, test, what) {
  const deadline = Date.now() + 30000;
  let seen;
  while (Date.now() < deadline) {
    seen = await read();
    if (test(seen)) return seen;
    await page.waitForTimeout(300);
  }
  assert.fail(`${what}: last saw ${JSON.stringify(seen)}`);
}

async function logIn(base) {
  await page.goto(base + "#/login");
  await page.locator("input[name=username]").fill(admin);
  await page.locator("input[name=password]").fill(adminPassword);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.locator("#menu").waitFor();
}

/** The cluster page's rows: node name → {running, leader}. */
async function clusterRows() {
  return page.locator("table.list tbody tr").evaluateAll((rows) =>
    rows.map((row) => ({
      node: row.querySelector("[data-node]")?.dataset.node,
      running: row.querySelector("[data-running]")?.dataset.running === "true",
      leader: row.querySelector(".is-leader") !== null,
    })),
  );
}

/** The members shown inside `scope`: [{name, online, leader}]. */
async function membersIn(scope) {
  return scope.locator("[data-member]").evaluateAll((spans) =>
    spans.map((s) => ({ name: s.dataset.member, online: s.dataset.online === "true", leader: s.classList.contains("leader") })),
  );
}

function checkMembers(members, leader, where) {
  const names = members.map((m) => m.name);
  assert.ok(names.length >= 1, `${where}: no members shown`);
  for (const name of names) assert.ok(expectedNodes.includes(name), `${where}: member ${name} is not a cluster node`);
  assert.ok(names.includes(leader), `${where}: the leader ${leader} is not among the members ${names}`);
  for (const m of members) assert.equal(m.online, true, `${where}: member ${m.name} not marked online`);
  assert.deepEqual(members.filter((m) => m.leader).map((m) => m.name), [leader], `${where}: leader mark`);
}

try {
  for (const base of bases) {
    await check(`${base}: the Cluster page lists every node running, one of them the leader`, async () => {
      await logIn(base);
      await page.locator('#menu a[data-section="cluster"]').click();
      await page.locator("h1", { hasText: "Cluster" }).waitFor();
      const rows = await eventually(
        clusterRows,
        (rows) => rows.length === expectedNodes.length && rows.every((r) => r.running) && rows.filter((r) => r.leader).length === 1,
        "cluster rows",
      );
      assert.deepEqual(rows.map((r) => r.node).sort(), [...expectedNodes].sort());
      const term = await page.locator("table.facts tr", { hasText: "Term" }).locator("td").innerText();
      assert.match(term, /^\d+$/);
    });

    await check(`${base}: the queues list shows the quorum queue's leader and members online`, async () => {
      await page.locator('#menu a[data-section="queues"]').click();
      const row = page.locator("table.list tbody tr", { has: page.locator("td.name", { hasText: queue }) });
      const leader = await eventually(
        () => row.locator("[data-leader]").evaluateAll((s) => s.map((x) => x.dataset.leader)),
        (l) => l.length === 1 && expectedNodes.includes(l[0]),
        "queue leader",
      );
      checkMembers(await membersIn(row), leader[0], "queues list");
    });

    await check(`${base}: the queue page shows the leader, members and Raft term`, async () => {
      await page.locator("table.list tbody tr td.name a", { hasText: queue }).click();
      await page.locator("h1", { hasText: queue }).waitFor();
      const facts = page.locator("table.facts");
      const leader = await facts.locator("[data-leader]").first().getAttribute("data-leader");
      checkMembers(await membersIn(facts), leader, "queue page");
      const term = await facts.locator("tr", { hasText: "Raft term" }).locator("td").innerText();
      assert.ok(Number(term) >= 1, `raft term ${term}`);
    });
  }
  assert.deepEqual(pageErrors, [], "page errors");
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
