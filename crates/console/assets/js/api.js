// Talking to the HTTP API (RabbitMQ's /api paths and JSON). The credentials typed at login are
// kept in sessionStorage (gone when the tab closes) and sent as HTTP Basic on every call; a
// 401 forgets them and returns to the login page.

const AUTH_KEY = "warren.authorization";
const USER_KEY = "warren.user";
const TAGS_KEY = "warren.tags";

/** Basic credentials for `user:password`, UTF-8 encoded (btoa alone only takes Latin-1). */
export function basicAuthorization(user, password) {
  const utf8 = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  for (const byte of utf8) binary += String.fromCharCode(byte);
  return "Basic " + btoa(binary);
}

/** Keeps the session: credentials, user name and tags (as /api/whoami gives them). */
export function signIn(user, tags, authorization) {
  sessionStorage.setItem(AUTH_KEY, authorization);
  sessionStorage.setItem(USER_KEY, user);
  sessionStorage.setItem(TAGS_KEY, JSON.stringify(Array.isArray(tags) ? tags : String(tags || "").split(",")));
}

export function signOut() {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem(USER_KEY);
  sessionStorage.removeItem(TAGS_KEY);
}

/** Whether the signed-in user has one of `tags` (administrator implies them all). */
export function hasTag(...tags) {
  const mine = JSON.parse(sessionStorage.getItem(TAGS_KEY) || "[]").map((t) => t.trim());
  return mine.includes("administrator") || tags.some((t) => mine.includes(t));
}

export function signedInUser() {
  return sessionStorage.getItem(AUTH_KEY) ? sessionStorage.getItem(USER_KEY) : null;
}

/** What the API answered when it was not 2xx; `status` is the HTTP status. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Called when the API says 401: the app goes back to the login page. */
let onUnauthorized = () => {};
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

/**
 * One API call. `path` starts with "/" and is already URL-encoded (see `p`); `body` is sent as
 * JSON. Resolves to the parsed JSON answer (null for an empty one).
 */
export async function api(method, path, body, { headers = {}, authorization } = {}) {
  const auth = authorization || sessionStorage.getItem(AUTH_KEY);
  // credentials "omit": the Authorization header below is all the API needs, and without
  // browser-managed credentials a 401 carrying "WWW-Authenticate: Basic" (RabbitMQ sends it)
  // cannot make the browser pop up its own login dialog over the console's.
  // Accept: application/json on reads only: RabbitMQ (3.10) answers 406 to a PUT or DELETE of
  // /api/vhost-limits or /api/user-limits that sends it, and every answer is JSON anyway.
  const accept = method === "GET" ? { Accept: "application/json" } : {};
  const init = { method, headers: { ...accept, ...headers }, cache: "no-store", credentials: "omit" };
  if (auth) init.headers.Authorization = auth;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  // Relative, so the console works wherever it is mounted (its API is next to it).
  const response = await fetch("api" + path, init);
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  // RabbitMQ answers 401 both for bad credentials and for a call the user's tags do not allow
  // (e.g. /api/nodes without "monitoring"); only the first ends the session.
  if (response.status === 401 && !authorization && auth && !(await stillSignedIn(auth))) {
    signOut();
    onUnauthorized();
  }
  if (!response.ok) {
    const reason = (data && (data.reason || data.error)) || text || response.statusText;
    // The path as sent: decoded, the default vhost's "%2F" would read as a stray "/".
    throw new ApiError(response.status, `${method} ${path}: ${response.status} ${reason}`);
  }
  return data;
}

async function stillSignedIn(auth) {
  const check = await fetch("api/whoami", { headers: { Authorization: auth }, cache: "no-store", credentials: "omit" });
  return check.status !== 401;
}

export const get = (path) => api("GET", path);

/** An API path from raw segments, each URL-encoded: p("queues", "/", "a b") = "/queues/%2F/a%20b". */
export function p(...segments) {
  return "/" + segments.map((segment) => encodeURIComponent(segment)).join("/");
}

/** The name by which the API addresses an exchange: the default exchange ("") is "amq.default". */
export function exchangePathName(name) {
  return name === "" ? "amq.default" : name;
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const parts = Object.entries(params)
    .filter(([, value]) => value !== undefined && value !== null && value !== "")
    .map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`);
  return parts.length ? "?" + parts.join("&") : "";
}
