// Form pieces several pages share: the virtual host picker, JSON arguments, and publishing a
// message through an exchange.

import { api, exchangePathName, get, p } from "./api.js";
import { el, field, flash, form, select, textInput } from "./dom.js";

/** A <select name="vhost"> of the virtual hosts the user can see. */
export async function vhostSelect(selected = "/") {
  const vhosts = await get("/vhosts");
  return select(
    "vhost",
    vhosts.map((v) => [v.name, v.name]),
    selected,
  );
}

/** Parses a JSON object typed into a form ("" is {}); says which field is wrong otherwise. */
export function jsonObject(text, what) {
  if (!text || !text.trim()) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`${what} must be a JSON object: ${error.message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${what} must be a JSON object such as {"x-message-ttl": 60000}`);
  }
  return value;
}

export function argumentsField(label = "Arguments") {
  return field(label, el("textarea", { name: "arguments", placeholder: '{"x-message-ttl": 60000}' }));
}

export function checkbox(name, label, checked = false) {
  return el("label", { class: "field" }, el("span", {}, label), el("input", { type: "checkbox", name, checked, style: "justify-self:start" }));
}

/**
 * "Publish message" through `exchange` in `vhost`. With `fixedRoutingKey` (a queue's page
 * publishing through the default exchange) the routing key is not asked for.
 */
export function publishForm(vhost, exchange, { fixedRoutingKey } = {}) {
  const controls = [
    fixedRoutingKey === undefined ? field("Routing key", textInput("routing_key")) : null,
    field(
      "Delivery mode",
      select(
        "delivery_mode",
        [
          ["1", "1 - Non-persistent"],
          ["2", "2 - Persistent"],
        ],
        "1",
      ),
    ),
    field("Headers", el("textarea", { name: "headers", placeholder: '{"x-origin": "console"}' })),
    field("Properties", el("textarea", { name: "properties", placeholder: '{"content_type": "text/plain"}' })),
    field("Payload", el("textarea", { name: "payload" })),
  ];
  return form("Publish message", controls, "Publish message", async (values) => {
    const properties = jsonObject(values.properties, "Properties");
    const headers = jsonObject(values.headers, "Headers");
    if (Object.keys(headers).length) properties.headers = headers;
    properties.delivery_mode = Number(values.delivery_mode);
    const answer = await api("POST", p("exchanges", vhost, exchangePathName(exchange), "publish"), {
      properties,
      routing_key: fixedRoutingKey === undefined ? values.routing_key : fixedRoutingKey,
      payload: values.payload,
      payload_encoding: "string",
    });
    flash(answer && answer.routed ? "Message published." : "Message published, but not routed to any queue.", !(answer && answer.routed));
  });
}
