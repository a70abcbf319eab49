// A development server for the console: serves crates/console/assets at / the way the Rust
// crate does (same paths, same content types) and forwards /api/* to a management API, e.g.
// RabbitMQ's at 15672, so the console and its browser test run before Warren serves them.
//
//   node devserver.mjs --api http://127.0.0.1:15672 --port 8077
//
// Exported `startDevServer` is what run.sh / the test use to start it in-process.

import { readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const assets = path.resolve(here, "../../crates/console/assets");

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".svg": "image/svg+xml",
};

async function serveAsset(urlPath, response) {
  const relative = urlPath === "/" ? "index.html" : decodeURIComponent(urlPath.slice(1));
  const file = path.resolve(assets, relative);
  const type = TYPES[path.extname(file)];
  if (!file.startsWith(assets + path.sep) || !type) {
    response.writeHead(404).end("not found");
    return;
  }
  try {
    const body = await readFile(file);
    response.writeHead(200, { "Content-Type": type, "Cache-Control": "no-cache" }).end(body);
  } catch {
    response.writeHead(404).end("not found");
  }
}

function proxy(request, response, api) {
  const target = new URL(request.url, api);
  const upstream = http.request(
    target,
    { method: request.method, headers: { ...request.headers, host: target.host } },
    (answer) => {
      response.writeHead(answer.statusCode, answer.headers);
      answer.pipe(response);
    },
  );
  upstream.on("error", (error) => response.writeHead(502).end(`upstream: ${error.message}`));
  request.pipe(upstream);
}

/** Starts the server; resolves to {url, close()}. port 0 picks a free port. */
export function startDevServer({ api, port = 0, host = "127.0.0.1" }) {
  const server = http.createServer((request, response) => {
    const urlPath = new URL(request.url, "http://x").pathname;
    if (urlPath === "/api" || urlPath.startsWith("/api/")) proxy(request, response, api);
    else if (request.method === "GET" || request.method === "HEAD") serveAsset(urlPath, response);
    else response.writeHead(405).end();
  });
  return new Promise((resolve) => {
    server.listen(port, host, () => {
      const { port: bound } = server.address();
      resolve({ url: `http://${host}:${bound}/`, close: () => new Promise((done) => server.close(done)) });
    });
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name, fallback) => {
    const at = process.argv.indexOf(name);
    return at > 0 ? process.argv[at + 1] : fallback;
  };
  const api = arg("--api", "http://127.0.0.1:15672");
  const { url } = await startDevServer({ api, port: Number(arg("--port", "8077")) });
  console.log(`console dev server at ${url}, API forwarded to ${api}`);
}
