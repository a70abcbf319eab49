// The web console end to end in headless Chromium, as a user would use it: log in, create a
// virtual host and a user, give permissions, declare a queue, publish a message, see the
// queue's depth change, get the message, delete the queue, log in as the new user, clean up.
//
// Env: WARREN_MGMT_URL   the console's base URL (e.g. http://127.0.0.1:15672/)
//      CONSOLE_DEV_API   instead of WARREN_MGMT_URL: serve the console from
//                        crates/console/assets with devserver.mjs and forward /api to this
//                        management API (e.g. RabbitMQ's, http://127.0.0.1:15672)
//      WARREN_MGMT_USER / WARREN_MGMT_PASS  an administrator (guest / guest)
//      WARREN_AMQP_URL   the same broker's AMQP URL (amqp://guest:guest@127.0.0.1:5672/): a
//                        connection the test opens shows on the connections page and is
//                        closed from there with a reason the client receives
//      CONSOLE_SCREENSHOTS  a directory to save a screenshot of each main page in
//      CONSOLE_OVERVIEW_WAIT_S  how long the overview's charts collect points first (6)
//      CHROMIUM          the browser (/usr/bin/chromium)

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { connect } from "./amqp.mjs";
import { startDevServer } from "./devserver.mjs";

const admin = process.env.WARREN_MGMT_USER || "guest";
const adminPassword = process.env.WARREN_MGMT_PASS || "guest";
const screenshots = process.env.CONSOLE_SCREENSHOTS;
const overviewWaitMs = Number(process.env.CONSOLE_OVERVIEW_WAIT_S || "6") * 1000;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const amqpUrl = process.env.WARREN_AMQP_URL;

// Names with a slash, markup and quotes: the console must URL-encode them in API paths and
// show them as typed.
const run = Date.now().toString(36);
const vhost = `console/${run} <b>&amp;</b>`;
const user = `console-user-${run} "quoted"`;
const userPassword = `pw-${run}-ü`;
const queue = `orders <${run}> & 'more'`;
const payload = `hello from the console ${run} <i>not markup</i> ✓`;
const exchange = `events <${run}>`;
const exchangePayload = `routed through ${exchange}`;
const policy = `console-policy-${run}`;
const operatorPolicy = `console-operator-policy-${run}`;
// In the test vhost, without `run` in its name: the queues page filters on `run`.
const importedQueue = "imported from a file";
const newUserPassword = `new-pw-${run}`;
const adminAuth = "Basic " + Buffer.from(`${admin}:${adminPassword}`).toString("base64");

let devServer;
let base = process.env.WARREN_MGMT_URL;
if (!base && process.env.CONSOLE_DEV_API) {
  devServer = await startDevServer({ api: process.env.CONSOLE_DEV_API });
  base = devServer.url;
}
if (!base) {
  console.error("console test: set WARREN_MGMT_URL (or CONSOLE_DEV_API to use the dev server)");
  process.exit(2);
}
if (!base.endsWith("/")) base += "/";

const profile = mkdtempSync(path.join(tmpdir(), "warren-console-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const page = context.pages()[0] || (await context.newPage());
page.setDefaultTimeout(15000);
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(error.message));
page.on("console", (message) => {
  // 400: the import of a refused definitions file, which the test provokes.
  if (message.type() === "error" && !/status of 40[014]/.test(message.text())) pageErrors.push(message.text());
});
// confirm() is accepted; prompt() answers with the next of `promptAnswers` (or its default).
const promptAnswers = [];
page.on("dialog", (dialog) => dialog.accept(dialog.type() === "prompt" ? promptAnswers.shift() : undefined));

let step = 0;
async function check(title, body) {
  step += 1;
  const started = Date.now();
  await body();
  console.log(`ok ${step} - ${title} (${Date.now() - started} ms)`);
}

async function shot(name) {
  if (!screenshots) return;
  await page.evaluate(() => document.getElementById("flash").replaceChildren());
  mkdirSync(screenshots, { recursive: true });
  await page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: true });
}

/** Waits until `locator`'s text satisfies `test`; fails with what was last seen. */
async function waitForText(locator, test, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let seen = "";
  while (Date.now() < deadline) {
    seen = (await locator.count()) > 0 ? await locator.first().innerText() : "(nothing)";
    if (test(seen)) return seen;
    await page.waitForTimeout(250);
  }
  assert.fail(`${what}: last saw ${JSON.stringify(seen)}`);
}

const flash = () => page.locator("#flash .note").last();
const formTitled = (title) => page.locator("form", { has: page.locator("h3", { hasText: title }) });
const rowWith = (text) => page.locator("table.list tbody tr", { hasText: text });
/** The text of the cell under header `header` in the first row containing `text`. */
async function cell(text, header) {
  const headers = await page.locator("table.list thead th").allInnerTexts();
  const index = headers.findIndex((h) => h.trim() === header);
  assert.ok(index >= 0, `no column ${header} in ${headers}`);
  return rowWith(text).first().locator("td").nth(index).innerText();
}

async function logIn(name, password) {
  await page.goto(base + "#/login");
  await page.locator("input[name=username]").fill(name);
  await page.locator("input[name=password]").fill(password);
  await page.getByRole("button", { name: "Log in" }).click();
}

async function adminTab(tab) {
  await page.goto(base + `#/admin/${tab}`);
  await page.locator("nav.subnav a.active").waitFor();
}

try {
  await check("the console asks for a login and refuses a wrong password", async () => {
    await page.goto(base);
    await page.waitForURL(/#\/login$/);
    await logIn(admin, adminPassword + "-wrong");
    await waitForText(page.locator("form.login p.error"), (t) => t.includes("Login failed"), "login error");
    assert.equal(await page.locator("#menu").isVisible(), false);
  });

  await check("logging in shows the overview with charts, totals, nodes and alarms", async () => {
    await logIn(admin, adminPassword);
    await page.locator("h1", { hasText: "Overview" }).waitFor();
    assert.equal(await page.locator("#session-user").innerText(), admin);
    await waitForText(page.locator(".totals"), (t) => /Queues/.test(t) && /Connections/.test(t), "object totals");
    await waitForText(page.locator(".alarms"), (t) => /No resource alarms|alarm on/.test(t), "alarms line");
    assert.ok((await page.locator(".nodes section").count()) >= 1, "a node is listed");
    const legend = await page.locator('.chart[data-chart="Message rates"] .legend').innerText();
    // RabbitMQ's overview series (less Publish (In)/(Out), and disk reads/writes Warren does not count).
    for (const series of ["Publish", "Publisher confirm", "Deliver (manual ack)", "Deliver (auto ack)", "Consumer ack",
      "Redelivered", "Get (manual ack)", "Get (auto ack)", "Get (empty)", "Unroutable (return)", "Unroutable (drop)"]) {
      assert.ok(legend.includes(series), `${series} in the rates legend: ${legend}`);
    }
    const queued = await page.locator('.chart[data-chart="Queued messages"] .legend').innerText();
    for (const series of ["Ready", "Unacked"]) assert.match(queued, new RegExp(series));
    // A second refresh (every 5 s) draws a line of two points.
    await page.waitForTimeout(Math.max(overviewWaitMs, 5500));
    const line = await page.locator('.chart[data-chart="Message rates"] polyline[data-series="publish"]').getAttribute("points");
    assert.ok(line.split(" ").length >= 2, `publish line has points: ${line}`);
    await shot("overview");
  });

  await check("after a reload the overview's charts draw the API's last minutes at once", async () => {
    // The API keeps a round of samples every 5 s: wait until it has four for the last minute.
    const samplesUrl = new URL("api/overview?msg_rates_age=60&msg_rates_incr=5&lengths_age=60&lengths_incr=5", base);
    const deadline = Date.now() + 30000;
    let samples = [];
    while (Date.now() < deadline) {
      const overview = await (await fetch(samplesUrl, { headers: { Authorization: adminAuth } })).json();
      samples = overview.message_stats?.publish_details?.samples || [];
      if (samples.length >= 4 && (overview.queue_totals?.messages_details?.samples || []).length >= 4) break;
      await page.waitForTimeout(1000);
    }
    assert.ok(samples.length >= 4, `the API's publish samples: ${JSON.stringify(samples)}`);
    await page.reload();
    const reloaded = Date.now();
    // "attached": a flat line at 0 has no height, which playwright counts as hidden.
    await page.locator('.chart[data-chart="Message rates"] polyline[data-series="publish"]').waitFor({ state: "attached" });
    // Drawn from the samples on the first refresh, before a second one (5 s) could add a point.
    for (const [chart, series] of [["Message rates", "publish"], ["Message rates", "deliver_no_ack"], ["Queued messages", "total"]]) {
      const line = await page.locator(`.chart[data-chart="${chart}"] polyline[data-series="${series}"]`).getAttribute("points");
      assert.ok(line.split(" ").length >= 3, `${chart} ${series} has the samples' points at once: ${line}`);
    }
    assert.ok(Date.now() - reloaded < 5000, "checked before the page's second refresh");
  });

  await check("creating a virtual host shows it in the list", async () => {
    await adminTab("vhosts");
    const form = formTitled("Add a virtual host");
    await form.locator("input[name=name]").fill(vhost);
    await form.locator("input[name=description]").fill("made by the browser test");
    await form.getByRole("button", { name: "Add virtual host" }).click();
    await waitForText(flash(), (t) => t.includes("added"), "flash after adding the vhost");
    await rowWith(vhost).waitFor();
    assert.equal(await rowWith(vhost).locator("td").first().innerText(), vhost);
  });

  await check("creating a user with a tag shows it in the list", async () => {
    await adminTab("users");
    const form = formTitled("Add a user");
    await form.locator("input[name=username]").fill(user);
    await form.locator("input[name=password]").fill(userPassword);
    await form.getByRole("button", { name: "management" }).click();
    assert.equal(await form.locator("input[name=tags]").inputValue(), "management");
    await form.getByRole("button", { name: "Add user" }).click();
    await rowWith(user).waitFor();
    assert.equal(await rowWith(user).locator("td").first().innerText(), user);
    assert.match(await rowWith(user).innerText(), /management/);
  });

  await check("setting permissions in the new virtual host lists them", async () => {
    await adminTab("permissions");
    for (const who of [admin, user]) {
      const form = formTitled("Set permission");
      await form.locator("select[name=user]").selectOption(who);
      await form.locator("select[name=vhost]").selectOption(vhost);
      await form.getByRole("button", { name: "Set permission" }).click();
      await waitForText(
        page.locator("table.list tbody"),
        (t) => t.split("\n").some((line) => line.startsWith(who) && line.includes(vhost)),
        `permission row for ${who}`,
      );
    }
  });

  await check("declaring a queue in the new virtual host lists it", async () => {
    await page.goto(base + "#/queues");
    await page.locator("h1", { hasText: "Queues" }).waitFor();
    const form = formTitled("Add a new queue");
    // Only the queue types Warren serves are offered (no Stream, which it would refuse).
    const types = await form.locator("select[name=type] option").allInnerTexts();
    assert.deepEqual(types, ["Classic", "Quorum"]);
    await form.locator("select[name=vhost]").selectOption(vhost);
    await form.locator("input[name=name]").fill(queue);
    await form.getByRole("button", { name: "Add queue" }).click();
    await rowWith(queue).waitFor();
    assert.equal(await cell(queue, "Name"), queue);
    assert.equal(await cell(queue, "Virtual host"), vhost);
    // A new queue's counts appear with the API's next statistics (RabbitMQ: within 5 s).
    await waitForText(rowWith(queue).locator("td").nth(5), (t) => t === "0", "Ready column of the new queue", 30000);
  });

  await check("a policy matching the queue is listed and shows on the queues page", async () => {
    await adminTab("policies");
    const form = formTitled("Add or update a policy");
    await form.locator("select[name=vhost]").selectOption(vhost);
    await form.locator("input[name=name]").fill(policy);
    await form.locator("input[name=pattern]").fill("^orders ");
    await form.locator("select[name=apply-to]").selectOption("queues");
    await form.locator("textarea[name=definition]").fill('{"max-length": 100}');
    await form.getByRole("button", { name: "Add policy" }).click();
    await rowWith(policy).waitFor();
    assert.match(await rowWith(policy).innerText(), /max-length/);
    await page.goto(base + "#/queues");
    await page.locator("input[placeholder='Filter by name']").fill(run);
    await waitForText(rowWith(queue).locator("td").nth(3), (t) => t.includes(`policy ${policy}`), "the queue's policy", 30000);
  });

  await check("the policy's page, reached from the list, shows its definition and edits it", async () => {
    await adminTab("policies");
    await rowWith(policy).getByRole("link", { name: policy }).click();
    await page.locator("h1", { hasText: "Policy" }).waitFor();
    assert.match(await page.locator("table.facts").first().innerText(), /"max-length":100/);
    const form = formTitled("Update this policy");
    assert.equal(await form.locator("input[name=pattern]").inputValue(), "^orders ");
    await form.locator("textarea[name=definition]").fill('{"max-length": 50}');
    await form.getByRole("button", { name: "Update policy" }).click();
    await waitForText(page.locator("table.facts").first(), (t) => t.includes('"max-length":50'), "the edited definition");
  });

  await check("exporting the virtual host's definitions downloads its queue and policy", async () => {
    await page.goto(base + "#/");
    const form = formTitled("Export definitions");
    await form.locator("select[name=vhost]").selectOption(vhost);
    const [download] = await Promise.all([page.waitForEvent("download"), form.getByRole("button", { name: "Download broker definitions" }).click()]);
    assert.match(download.suggestedFilename(), /\.json$/);
    const exported = JSON.parse(readFileSync(await download.path(), "utf8"));
    assert.ok(exported.queues.some((q) => q.name === queue), `the queue in ${JSON.stringify(exported.queues)}`);
    assert.ok(exported.policies.some((x) => x.name === policy && x.definition["max-length"] === 50), "the edited policy exported");
  });

  await check("importing definitions creates what the file has and lists what it left out", async () => {
    await page.goto(base + "#/");
    const form = formTitled("Import definitions");
    const upload = async (definitions) => {
      await form.locator("input[name=file]").setInputFiles({ name: "definitions.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(definitions)) });
      await form.locator("select[name=vhost]").selectOption(vhost);
      await form.getByRole("button", { name: "Upload broker definitions" }).click();
    };
    // A refused document: nothing changes and the page says why.
    await upload({ exchanges: [{ name: `bad ${run}`, type: "no-such-type", durable: true, auto_delete: false, internal: false, arguments: {} }] });
    await waitForText(form.locator(".import-outcome"), (t) => t.includes("Nothing was imported") && t.includes("no-such-type"), "the import's refusal");
    // A stream queue Warren does not serve is left out, and each such entry is listed.
    const stream = "stream from a file"; // no `run`: the queues page filters on it
    await upload({
      queues: [
        { name: importedQueue, durable: true, auto_delete: false, arguments: {} },
        { name: stream, durable: true, auto_delete: false, arguments: { "x-queue-type": "stream" } },
      ],
    });
    const outcome = await waitForText(form.locator(".import-outcome"), (t) => t.includes("left out") || t.includes("successfully"), "the import's outcome");
    const overview = await (await fetch(new URL("api/overview", base), { headers: { Authorization: adminAuth } })).json();
    if (overview.product_name === "Warren") {
      assert.match(outcome, /1 entry was left out/);
      assert.ok(outcome.includes(stream), outcome);
    } else {
      // RabbitMQ serves stream queues: everything is imported.
      assert.match(outcome, /imported successfully/);
    }
    const imported = await fetch(new URL(`api/queues/${encodeURIComponent(vhost)}/${encodeURIComponent(importedQueue)}`, base), { headers: { Authorization: adminAuth } });
    assert.equal(imported.status, 200, "the imported queue exists");
  });

  await check("an exchange bound to the queue routes a message published on its page", async () => {
    await page.goto(base + "#/exchanges");
    const form = formTitled("Add a new exchange");
    await form.locator("select[name=vhost]").selectOption(vhost);
    await form.locator("input[name=name]").fill(exchange);
    await form.locator("select[name=type]").selectOption("topic");
    await form.getByRole("button", { name: "Add exchange" }).click();
    await page.locator("input[placeholder='Filter by name']").fill(run);
    await rowWith(exchange).getByRole("link", { name: exchange }).click();
    await page.locator("h1", { hasText: exchange }).waitFor();
    const bind = formTitled("Add binding from this exchange");
    await bind.locator("input[name=destination]").fill(queue);
    await bind.locator("input[name=routing_key]").fill("orders.#");
    await bind.getByRole("button", { name: "Bind" }).click();
    await rowWith("orders.#").waitFor();
    assert.match(await rowWith("orders.#").innerText(), new RegExp(queue.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
    const publish = formTitled("Publish message");
    await publish.locator("input[name=routing_key]").fill("orders.created");
    await publish.locator("textarea[name=payload]").fill(exchangePayload);
    await publish.getByRole("button", { name: "Publish message" }).click();
    assert.equal(await waitForText(flash(), (t) => t.startsWith("Message published"), "publish flash"), "Message published.");
  });

  await check("publishing from the queue's page is routed", async () => {
    await page.goto(base + "#/queues");
    await page.locator("input[placeholder='Filter by name']").fill(run);
    await rowWith(queue).getByRole("link", { name: queue }).click();
    await page.locator("h1", { hasText: queue }).waitFor();
    assert.match(await page.locator("h1 small").innerText(), new RegExp(`in virtual host ${vhost.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
    const form = formTitled("Publish message");
    await form.locator("select[name=delivery_mode]").selectOption("2");
    await form.locator("textarea[name=headers]").fill('{"x-test": "console"}');
    await form.locator("textarea[name=payload]").fill(payload);
    await form.getByRole("button", { name: "Publish message" }).click();
    assert.equal(await waitForText(flash(), (t) => t.startsWith("Message published"), "publish flash"), "Message published.");
  });

  await check("the queues page shows the queue's depth change to 2 ready", async () => {
    await page.goto(base + "#/queues");
    await page.locator("input[placeholder='Filter by name']").fill(run);
    await rowWith(queue).waitFor();
    // The page refreshes every 5 s; the API's statistics may lag a few seconds behind.
    await waitForText(rowWith(queue).locator("td").nth(5), (t) => t === "2", "Ready column", 30000);
    assert.equal(await cell(queue, "Total"), "2");
    if (screenshots) {
      // The whole list for the picture, not just the filtered row.
      await page.locator("input[placeholder='Filter by name']").fill("");
      await waitForText(page.locator(".paged-list .toolbar"), (t) => !t.includes("match"), "unfiltered list");
      await shot("queues");
      await page.locator("input[placeholder='Filter by name']").fill(run);
      // "N of M match" — or, on a broker whose only queue is this one, just "1 queues".
      await waitForText(page.locator(".paged-list .toolbar"), (t) => t.includes("match") || /\b1 queues\b/.test(t), "filtered list");
    }
  });

  await check("getting the messages on the queue's page shows their payloads, routes and headers", async () => {
    await rowWith(queue).getByRole("link", { name: queue }).click();
    await page.locator("h1", { hasText: queue }).waitFor();
    await waitForText(page.locator('[data-total="ready"] b'), (t) => t === "2", "queue page ready count");
    const form = formTitled("Get messages");
    await form.locator("select[name=ackmode]").selectOption("ack_requeue_false");
    await form.locator("input[name=count]").fill("2");
    await form.getByRole("button", { name: "Get message(s)" }).click();
    const messages = page.locator(".messages .message");
    await messages.nth(1).waitFor();
    assert.equal(await messages.count(), 2);
    // In publishing order: through the exchange first, then from the queue's page.
    assert.equal(await messages.nth(0).locator("pre.payload").innerText(), exchangePayload);
    const first = await messages.nth(0).innerText();
    assert.ok(first.includes(`Exchange\t${exchange}`) || first.includes(`Exchange ${exchange}`), first);
    assert.match(first, /Routing key\s+orders\.created/);
    assert.equal(await messages.nth(1).locator("pre.payload").innerText(), payload);
    const second = await messages.nth(1).innerText();
    assert.match(second, /x-test/);
    assert.match(second, /Routing key\s+orders/);
    await shot("queue");
    await waitForText(page.locator('[data-total="ready"] b'), (t) => t === "0", "queue drained after get", 30000);
  });

  await check("deleting the queue removes it from the list", async () => {
    await page.getByRole("button", { name: "Delete queue" }).click();
    await page.waitForURL(/#\/queues$/);
    await waitForText(flash(), (t) => t.includes("deleted"), "delete flash");
    await page.locator("input[placeholder='Filter by name']").fill(run);
    await waitForText(page.locator(".paged-list .list-body"), (t) => t.includes("No queues."), "empty filtered list");
  });

  await check("connections, channels and exchanges pages list what the API has", async () => {
    let client;
    if (amqpUrl) client = await connect(amqpUrl, { product: "console-test-client", connection_name: `console ${run}` });
    await page.goto(base + "#/connections");
    await page.locator("h1", { hasText: "Connections" }).waitFor();
    if (client) {
      // Connection names are "peer -> broker": ours has our local port.
      const ours = rowWith(`:${client.localPort} `);
      await ours.waitFor({ timeout: 20000 });
      assert.match(await ours.innerText(), /console-test-client/);
      await shot("connections");
      const reason = `closed by the console test ${run}`;
      promptAnswers.push(reason);
      await ours.getByRole("button", { name: "Close" }).click();
      const closed = await Promise.race([client.closed, page.waitForTimeout(10000).then(() => null)]);
      assert.ok(closed, "the client was sent connection.close");
      assert.equal(closed.code, 320);
      assert.match(closed.text, new RegExp(reason));
      await waitForText(flash(), (t) => t.includes("closed"), "close flash");
      await ours.waitFor({ state: "detached", timeout: 20000 });
    } else {
      await waitForText(page.locator(".paged-list"), (t) => /connections?/.test(t), "connections list");
      await shot("connections");
    }
    await page.goto(base + "#/channels");
    await waitForText(page.locator(".paged-list"), (t) => /channels?/.test(t), "channels list");
    await page.goto(base + "#/exchanges");
    await page.locator("input[placeholder='Filter by name']").fill("amq.topic");
    await waitForText(page.locator(".paged-list .list-body"), (t) => t.includes(vhost) && t.includes("topic"), "the new vhost's amq.topic");
  });

  await check("a connection's page shows its client and channels; a channel's its prefetch and consumer", async () => {
    if (!amqpUrl) return;
    const client = await connect(amqpUrl, { product: "console-page-client", connection_name: `page ${run}` });
    const tag = `console-consumer-${run}`;
    client.consume(1, { prefetch: 7, queue: `console-consumed-${run}`, tag });
    await page.goto(base + "#/connections");
    const ours = rowWith(`:${client.localPort} `);
    await ours.waitFor({ timeout: 20000 });
    await ours.getByRole("link").first().click();
    await page.locator("h1", { hasText: "Connection" }).waitFor();
    await waitForText(page.locator(".client-properties"), (t) => t.includes("console-page-client") && t.includes(`page ${run}`), "client properties");
    const channelLink = page.locator(".channels a", { hasText: "(1)" });
    await channelLink.waitFor({ timeout: 20000 });
    await channelLink.click();
    await page.locator("h1", { hasText: "Channel" }).waitFor();
    await waitForText(page.locator("table.facts").first(), (t) => /Prefetch count\s+7/.test(t), "the channel's prefetch");
    await waitForText(page.locator(".consumers"), (t) => t.includes(tag) && t.includes(`console-consumed-${run}`), "the channel's consumer");
    assert.match(await page.locator("table.facts").first().innerText(), /Unacked\s+0/);
    await page.locator("table.facts a").first().click();
    await page.locator("h1", { hasText: "Connection" }).waitFor();
    const reason = `closed from its page ${run}`;
    promptAnswers.push(reason);
    await page.getByRole("button", { name: "Force close" }).click();
    const closed = await Promise.race([client.closed, page.waitForTimeout(10000).then(() => null)]);
    assert.ok(closed && closed.code === 320 && closed.text.includes(reason), `the client was closed: ${JSON.stringify(closed)}`);
    await page.waitForURL(/#\/connections$/);
  });

  await check("a node's page, reached from the overview, shows its memory, descriptors and listeners", async () => {
    await page.goto(base + "#/");
    await page.locator(".nodes section h3 a").first().click();
    await page.locator("h1", { hasText: "Node" }).waitFor();
    const facts = await page.locator("table.facts").first().innerText();
    for (const fact of ["Uptime", "Memory", "File descriptors", "Sockets"]) assert.ok(facts.includes(fact), `${fact} in ${facts}`);
    assert.match(await page.locator('[data-fact="memory"]').innerText(), /high watermark/);
    await waitForText(page.locator(".listeners"), (t) => /amqp/.test(t) && /http/.test(t), "the node's listeners");
  });

  await check("a virtual host's page sets and clears its limits", async () => {
    await adminTab("vhosts");
    await rowWith(vhost).getByRole("link", { name: vhost }).click();
    await page.locator("h1", { hasText: "Virtual host" }).waitFor();
    // (Warren keeps no vhost description yet: PUT /api/vhosts ignores it.)
    assert.match(await page.locator("table.facts").first().innerText(), /Description[\s\S]*Total\s+0/);
    const form = formTitled("Set limit");
    await form.locator("select[name=limit]").selectOption("max-queues");
    await form.locator("input[name=value]").fill("5");
    await form.getByRole("button", { name: "Set limit" }).click();
    await waitForText(page.locator(".vhost-limits"), (t) => /max-queues\s+5/.test(t), "the vhost's limit");
    const limits = await (await fetch(new URL(`api/vhost-limits/${encodeURIComponent(vhost)}`, base), { headers: { Authorization: adminAuth } })).json();
    assert.deepEqual(limits[0].value, { "max-queues": 5 });
    await page.locator(".vhost-limits").getByRole("button", { name: "Clear" }).click();
    await waitForText(page.locator(".vhost-limits"), (t) => t.includes("No limits."), "the limit cleared");
  });

  await check("the Limits tab sets and clears virtual host and user limits", async () => {
    await adminTab("limits");
    const vhostForm = formTitled("Set virtual host limit");
    await vhostForm.locator("select[name=vhost]").selectOption(vhost);
    await vhostForm.locator("input[name=value]").fill("10");
    await vhostForm.getByRole("button", { name: "Set limit" }).click();
    await waitForText(page.locator(".vhost-limits"), (t) => t.includes(vhost) && /max-connections\s+10/.test(t), "the vhost limit row");
    const userForm = formTitled("Set user limit");
    await userForm.locator("select[name=user]").selectOption(user);
    await userForm.locator("select[name=name]").selectOption("max-channels");
    await userForm.locator("input[name=value]").fill("20");
    await userForm.getByRole("button", { name: "Set limit" }).click();
    await waitForText(page.locator(".user-limits"), (t) => t.includes(user) && /max-channels\s+20/.test(t), "the user limit row");
    await page.locator(".vhost-limits tr", { hasText: vhost }).getByRole("button", { name: "Clear" }).click();
    await page.locator(".user-limits tr", { hasText: user }).getByRole("button", { name: "Clear" }).click();
    await page.locator(".vhost-limits tr", { hasText: vhost }).waitFor({ state: "detached" });
    await page.locator(".user-limits tr", { hasText: user }).waitFor({ state: "detached" });
  });

  await check("an operator policy is added, shown on its page and deleted there", async () => {
    await adminTab("operator-policies");
    const form = formTitled("Add or update an operator policy");
    await form.locator("select[name=vhost]").selectOption(vhost);
    await form.locator("input[name=name]").fill(operatorPolicy);
    await form.locator("input[name=pattern]").fill(".*");
    await form.locator("select[name=apply-to]").selectOption("queues");
    await form.locator("textarea[name=definition]").fill('{"max-length": 1000}');
    await form.getByRole("button", { name: "Add operator policy" }).click();
    await rowWith(operatorPolicy).getByRole("link", { name: operatorPolicy }).click();
    await page.locator("h1", { hasText: "Operator policy" }).waitFor();
    assert.match(await page.locator("table.facts").first().innerText(), /"max-length":1000/);
    await page.getByRole("button", { name: "Delete this operator policy" }).click();
    await page.waitForURL(/#\/admin\/operator-policies$/);
    await page.locator("nav.subnav a.active", { hasText: "Operator policies" }).waitFor();
    await waitForText(page.locator("#main"), (t) => !t.includes(operatorPolicy), "the operator policy gone");
  });

  await check("the feature flags tab lists the API's flags or says the broker has none", async () => {
    await adminTab("feature-flags");
    await waitForText(page.locator("#main"), (t) => t.includes("has no feature flags") || /quorum_queue/.test(t), "feature flags");
  });

  await check("a user's page changes the password, keeping the tags", async () => {
    await adminTab("users");
    await rowWith(user).getByRole("link", { name: user }).click();
    await page.locator("h1", { hasText: "User" }).waitFor();
    const form = formTitled("Update this user");
    assert.equal(await form.locator("input[name=tags]").inputValue(), "management");
    await form.locator("input[name=password]").fill(newUserPassword);
    await form.getByRole("button", { name: "Update user" }).click();
    await waitForText(flash(), (t) => t.includes("password and tags updated"), "update flash");
    const asUser = await fetch(new URL("api/whoami", base), { headers: { Authorization: "Basic " + Buffer.from(`${user}:${newUserPassword}`).toString("base64") } });
    assert.equal(asUser.status, 200, "the new password logs in");
    assert.match(await page.locator(".user-tags").innerText(), /management/);
  });

  await check("the new user logs in and sees the console without the admin pages", async () => {
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(/#\/login$/);
    await logIn(user, newUserPassword);
    await page.locator("h1", { hasText: "Overview" }).waitFor();
    assert.equal(await page.locator("#session-user").innerText(), user);
    assert.equal(await page.locator('#menu a[data-section="queues"]').isVisible(), true);
    assert.equal(await page.locator('#menu a[data-section="admin"]').isVisible(), false);
    await waitForText(page.locator(".nodes"), (t) => t.includes("monitoring"), "note that node details need monitoring");
    // A typed or bookmarked admin address says why, not the API's raw 401.
    await page.goto(new URL("#/admin/users", base).toString());
    await page.locator("h1", { hasText: "Not authorised" }).waitFor();
    await waitForText(page.locator("#main p.error"), (t) => t.includes("administrator tag"), "why not");
    await page.goto(new URL("#/", base).toString());
    await page.locator("h1", { hasText: "Overview" }).waitFor();
  });

  await check("when the user's password changes, the next refresh returns to the login page", async () => {
    // Another operator changes the password behind the console's back (through the API).
    const answer = await fetch(new URL(`api/users/${encodeURIComponent(user)}`, base), {
      method: "PUT",
      headers: {
        Authorization: "Basic " + Buffer.from(`${admin}:${adminPassword}`).toString("base64"),
        "Content-Type": "application/json",
      },
      body: JSON.stringify({ password: newUserPassword + "-changed", tags: "management" }),
    });
    assert.ok(answer.ok, `password change answered ${answer.status}`);
    await page.waitForURL(/#\/login$/, { timeout: 15000 });
    await waitForText(page.locator("form.login p.error"), (t) => t.includes("log in again"), "session ended note");
    assert.equal(await page.locator("#menu").isVisible(), false);
  });

  await check("deleting the policy, the user and the virtual host removes them", async () => {
    await logIn(admin, adminPassword);
    await page.locator("h1", { hasText: "Overview" }).waitFor();
    await adminTab("policies");
    await rowWith(policy).getByRole("button", { name: "Delete" }).click();
    await rowWith(policy).waitFor({ state: "detached" });
    await adminTab("users");
    await shot("admin");
    // From the user's own page, which returns to the list.
    await rowWith(user).getByRole("link", { name: user }).click();
    await page.getByRole("button", { name: "Delete user" }).click();
    await waitForText(flash(), (t) => t.includes("deleted"), "user delete flash");
    await page.waitForURL(/#\/admin\/users$/);
    await page.locator("nav.subnav a.active").waitFor();
    await rowWith(admin).first().waitFor();
    assert.equal(await rowWith(user).count(), 0);
    await adminTab("vhosts");
    await rowWith(vhost).getByRole("button", { name: "Delete" }).click();
    await waitForText(flash(), (t) => t.includes("deleted"), "vhost delete flash");
    await rowWith(vhost).waitFor({ state: "detached" });
  });

  assert.deepEqual(pageErrors, [], "no script errors in the page");
  console.log(`console test: all ${step} steps passed against ${base}`);
} catch (error) {
  if (screenshots) await page.screenshot({ path: path.join(screenshots, "failure.png"), fullPage: true }).catch(() => {});
  console.error(`not ok ${step + 1} - ${error.message}`);
  if (pageErrors.length) console.error("script errors in the page:", pageErrors);
  process.exitCode = 1;
} finally {
  // What a failed run left behind, through the API (a passing run deleted both in the console).
  const auth = "Basic " + Buffer.from(`${admin}:${adminPassword}`).toString("base64");
  for (const leftover of [`api/vhosts/${encodeURIComponent(vhost)}`, `api/users/${encodeURIComponent(user)}`]) {
    await fetch(new URL(leftover, base), { method: "DELETE", headers: { Authorization: auth } }).catch(() => {});
  }
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  if (devServer) await devServer.close();
}
