// Numbers, sizes, rates and durations the way RabbitMQ's console shows them.

export function count(value) {
  if (value === undefined || value === null) return "";
  return Number(value).toLocaleString("en-US");
}

export function rate(value) {
  if (value === undefined || value === null) return "";
  const n = Number(value);
  return (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2)) + "/s";
}

export function bytes(value) {
  if (value === undefined || value === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = Number(value);
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return (unit === 0 ? String(n) : n.toFixed(1)) + " " + units[unit];
}

export function byteRate(value) {
  if (value === undefined || value === null) return "";
  return bytes(Math.round(Number(value))) + "/s";
}

export function duration(ms) {
  if (ms === undefined || ms === null) return "";
  let s = Math.floor(Number(ms) / 1000);
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  return `${m}m ${s}s`;
}

/** `obj.message_stats.publish_details.rate` without throwing on missing parts. */
export function path(obj, dotted) {
  let value = obj;
  for (const key of dotted.split(".")) {
    if (value === undefined || value === null) return undefined;
    value = value[key];
  }
  return value;
}

export function yesNo(value) {
  return value ? "yes" : "no";
}

/** Arguments, headers, policy definitions: compact JSON. */
export function json(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object" && Object.keys(value).length === 0) return "";
  return JSON.stringify(value);
}

/** Tags as a list: RabbitMQ 3.10+ answers a list, older versions a comma-separated string. */
export function tagList(tags) {
  if (Array.isArray(tags)) return tags;
  return String(tags || "").split(",").map((t) => t.trim()).filter(Boolean);
}

/** A channel's mode: "confirm", "transactional", both or "". */
export function channelMode(channel) {
  return [channel.confirm ? "confirm" : "", channel.transactional ? "transactional" : ""].filter(Boolean).join(", ");
}
