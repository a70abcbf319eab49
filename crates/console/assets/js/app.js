// The console's shell: hash routes (#/queues/%2F/orders) to pages, the session header, and the
// 5-second refresh of whatever page is showing.

import { get, hasTag, signedInUser, signOut, whenUnauthorized } from "./api.js";
import { el, fill, flash } from "./dom.js";
import * as admin from "./pages/admin.js";
import * as channelPage from "./pages/channel.js";
import * as channels from "./pages/channels.js";
import * as cluster from "./pages/cluster.js";
import * as connectionPage from "./pages/connection.js";
import * as connections from "./pages/connections.js";
import * as exchange from "./pages/exchange.js";
import * as exchanges from "./pages/exchanges.js";
import * as login from "./pages/login.js";
import * as nodePage from "./pages/node.js";
import * as overview from "./pages/overview.js";
import { pageOf } from "./pages/policy.js";
import * as queue from "./pages/queue.js";
import * as queues from "./pages/queues.js";
import * as userPage from "./pages/user.js";
import * as vhostPage from "./pages/vhost.js";

const policyPage = pageOf("policies");
const operatorPolicyPage = pageOf("operator-policies");

const REFRESH_MS = 5000;

/** route segments → [menu section, page module]; segments are already URL-decoded. */
function pageFor(segments) {
  const [first, ...rest] = segments;
  switch (first || "") {
    case "":
    case "overview":
      return ["overview", overview];
    case "connections":
      return rest.length >= 1 ? ["connections", connectionPage] : ["connections", connections];
    case "channels":
      return rest.length >= 1 ? ["channels", channelPage] : ["channels", channels];
    case "exchanges":
      return rest.length >= 2 ? ["exchanges", exchange] : ["exchanges", exchanges];
    case "queues":
      return rest.length >= 2 ? ["queues", queue] : ["queues", queues];
    case "cluster":
      return ["cluster", cluster];
    case "admin":
      return ["admin", admin];
    // One object's page, reached from its list; users, vhosts and policies are under Admin.
    case "users":
      return rest.length >= 1 ? ["admin", userPage] : [null, null];
    case "vhosts":
      return rest.length >= 1 ? ["admin", vhostPage] : [null, null];
    case "policy":
      return rest.length >= 2 ? ["admin", policyPage] : [null, null];
    case "operator-policy":
      return rest.length >= 2 ? ["admin", operatorPolicyPage] : [null, null];
    case "nodes":
      return rest.length >= 1 ? ["overview", nodePage] : [null, null];
    case "login":
      return ["login", login];
    default:
      return [null, null];
  }
}

/** "#/queues/%2F/a%2Fb" → ["queues", "/", "a/b"] */
function currentSegments() {
  const hash = location.hash.replace(/^#\/?/, "");
  if (hash === "") return [];
  return hash.split("/").map((segment) => decodeURIComponent(segment));
}

let generation = 0;
let timer = null;
let wantedAfterLogin = null;

async function show() {
  generation += 1;
  const mine = generation;
  clearInterval(timer);
  timer = null;
  const segments = currentSegments();
  const [section, page] = pageFor(segments);
  const main = document.getElementById("main");
  const user = signedInUser();

  if (!user && section !== "login") {
    wantedAfterLogin = location.hash && location.hash !== "#/login" ? location.hash : null;
    location.hash = "#/login";
    return;
  }
  document.getElementById("menu").hidden = !user;
  document.getElementById("session").hidden = !user;
  document.getElementById("session-user").textContent = user || "";
  for (const link of document.querySelectorAll("#menu a")) {
    link.classList.toggle("active", link.dataset.section === section);
  }
  // Users, vhosts and permissions are administrators' business, policies policymakers' too.
  document.querySelector('#menu a[data-section="admin"]').hidden = !hasTag("policymaker");
  // The cluster's status is for monitoring users (the API refuses it to others).
  document.querySelector('#menu a[data-section="cluster"]').hidden = !hasTag("monitoring");
  if (!page) {
    fill(main, el("h1", {}, "Not found"), el("p", {}, "No such page. ", el("a", { href: "#/" }, "Overview")));
    return;
  }

  fill(main);
  const context = {
    segments: segments.slice(1),
    isCurrent: () => mine === generation,
    afterLogin: () => {
      const target = wantedAfterLogin || "#/";
      wantedAfterLogin = null;
      location.hash = target;
    },
  };
  let shown;
  try {
    shown = await page.render(main, context);
  } catch (error) {
    if (mine !== generation) return;
    if (error.status === 401 || error.status === 403) {
      // Signed in, but the user's tags do not reach this page (a link, a bookmark, a
      // typed address): say so in words, not as the API's raw refusal.
      fill(
        main,
        el("h1", {}, "Not authorised"),
        el("p", { class: "error" },
          `User ${user} may not see this page: users, virtual hosts and permissions need the ` +
          "administrator tag, policies the policymaker tag, the cluster the monitoring tag."),
        el("p", {}, el("a", { href: "#/" }, "Overview")),
      );
      return;
    }
    fill(main, el("h1", {}, "Error"), el("p", { class: "error" }, error.message));
    return;
  }
  if (mine !== generation || !shown || !shown.refresh) return;
  let busy = false;
  let failing = false;
  timer = setInterval(async () => {
    if (busy || document.hidden) return;
    busy = true;
    try {
      await shown.refresh();
      failing = false;
    } catch (error) {
      // Say it once, not every five seconds, until refreshing works again.
      if (!failing && mine === generation) flash(error.message, true);
      failing = true;
    } finally {
      busy = false;
    }
  }, REFRESH_MS);
}

async function showCluster() {
  try {
    const overviewData = await get("/overview");
    document.getElementById("session-cluster").textContent = overviewData.cluster_name
      ? `Cluster ${overviewData.cluster_name}`
      : "";
  } catch {
    // The header's cluster name is a nicety; the page shows any real error.
  }
}

whenUnauthorized(() => {
  if (location.hash !== "#/login") {
    wantedAfterLogin = location.hash;
    sessionStorage.setItem("warren.loginReason", "Your session ended or the credentials are no longer valid: log in again.");
    location.hash = "#/login";
  }
});

document.getElementById("logout").addEventListener("click", () => {
  signOut();
  location.hash = "#/login";
});

window.addEventListener("hashchange", show);
window.addEventListener("warren:signed-in", showCluster);
if (signedInUser()) showCluster();
show();
