//! /api/exchanges: list (all, per vhost), one, PUT (declare), DELETE (`if-unused`), and
//! POST …/publish, which routes a message as a basic.publish would. Declaring and deleting
//! need configure on the exchange, publishing write (`acting`).

use super::{body_bool, body_json, rate_key};
use crate::acting::Report;
use crate::auth::Identity;
use crate::cluster_view::OtherStats;
use crate::error::{ApiError, ApiResult};
use crate::json::{json_to_table, message_stats, table_to_json, EXCHANGE_STATS};
use crate::list::{respond_named, respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::{required, AccessKind};
use warren_broker::confirm::ConfirmTo;
use warren_broker::policy::EntityKind;
use warren_broker::routing_keys::{header_routes, strip_bcc, PublishKeys};
use warren_broker::vhost::{Publish, PublishScratch, TraceOrigin};
use warren_broker::{event_channel, DefinitionOp, Exchange, Message, VHost};
use warren_codec::{BasicProperties, ContentHeader, ShortStr, BASIC_CLASS_ID};

/// The default exchange's name in paths ("" cannot be a path segment).
pub const DEFAULT_EXCHANGE: &str = "amq.default";

pub fn path_name(name: &str) -> &str {
    if name == DEFAULT_EXCHANGE {
        ""
    } else {
        name
    }
}

fn exchange_json(api: &Api, vhost: &VHost, x: &Exchange) -> Value {
    let applied = vhost.applied_policies(EntityKind::Exchange, &x.name);
    let vhost = vhost.name.as_str();
    let rates = api.rates.get(&rate_key("exchange", vhost, &x.name));
    let mut body = json!({
        "name": x.name.as_str(),
        "vhost": vhost,
        "type": x.kind.as_str(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "user_who_performed_action": "rmq-internal",
        "message_stats": message_stats(&x.stats.snapshot(), rates.as_deref(), EXCHANGE_STATS),
    });
    // RabbitMQ shows an exchange's policy only when one applies.
    if let Some(policy) = applied.policy_name() {
        body["policy"] = Value::String(policy.to_owned());
    }
    body
}

/// Serves the exchanges of `vhosts` as the query asks, with the other nodes' stats added to
/// the ones served.
async fn respond_exchanges(api: &Api, vhosts: Vec<Arc<VHost>>, query: &Query) -> ApiResult {
    let others = OtherStats::gather(api).await;
    let vhosts = super::listed::<Exchange>(vhosts);
    respond_named(&vhosts, query, |served| {
        let mut items: Vec<Value> = served
            .iter()
            .map(|(listed, x)| exchange_json(api, &listed.vhost, x))
            .collect();
        others.add_to_objects("exchanges", &mut items);
        items
    })
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhosts = api.used_vhosts(&who);
    respond_exchanges(&api, vhosts, &query).await
}

pub async fn in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    respond_exchanges(&api, vec![vhost], &query).await
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let x = vhost
        .exchange(path_name(&name))
        .ok_or_else(ApiError::not_found)?;
    let mut items = [exchange_json(&api, &vhost, &x)];
    OtherStats::gather(&api)
        .await
        .add_to_objects("exchanges", &mut items);
    let [body] = items;
    Ok(respond_one(body, &query))
}

/// PUT: declares the exchange (201 when new, 204 when it existed and is equivalent; 400
/// for a different type or flags, as exchange.declare's 406). As exchange.declare, a new
/// exchange with an alternate exchange also needs read on itself and write on that one.
pub async fn declare(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let body = body_json(&body)?;
    let kind = body
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("type is required"))?;
    if warren_broker::ExchangeKind::parse(kind).is_none() {
        return Err(ApiError::bad_request(format!(
            "unknown exchange type '{kind}'"
        )));
    }
    let arguments = json_to_table(body.get("arguments"), "exchange arguments")
        .map_err(ApiError::bad_request)?;
    let name = path_name(&name);
    if name.is_empty() || name.len() > 255 {
        return Err(ApiError::bad_request(format!(
            "invalid exchange name '{name}'"
        )));
    }
    let acting = api.acting(&who, &vhost.name, Report::Plain)?;
    let exists = vhost.exchange(name).is_some();
    acting.all(&required::exchange_declare(name, exists, &arguments))?;
    let outcome = api
        .change(DefinitionOp::ExchangeDeclare {
            vhost: vhost.name.clone(),
            name: name.to_owned(),
            kind: kind.to_owned(),
            durable: body_bool(&body, "durable", false)?,
            auto_delete: body_bool(&body, "auto_delete", false)?,
            internal: body_bool(&body, "internal", false)?,
            arguments,
        })
        .await?;
    Ok(super::created_or_updated(!outcome.created()))
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let name = path_name(&name);
    if vhost.exchange(name).is_none() {
        api.caught_up().await?;
        if vhost.exchange(name).is_none() {
            return Err(ApiError::not_found());
        }
    }
    api.acting(&who, &vhost.name, Report::Plain)?
        .exchange(AccessKind::Configure, name)?;
    let if_unused = query.get("if-unused").is_some_and(|v| v == "true");
    api.change(DefinitionOp::ExchangeDelete {
        vhost: vhost.name.clone(),
        name: name.to_owned(),
        if_unused,
    })
    .await?;
    Ok(super::no_content())
}

/// Message properties from the API's JSON (the names of RabbitMQ's P_basic record).
pub fn properties_from_json(v: &Value) -> ApiResult<BasicProperties> {
    let mut p = BasicProperties::default();
    let Some(map) = v.as_object() else {
        return Ok(p);
    };
    let text = |key: &str| -> ApiResult<Option<ShortStr>> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() <= 255 => Ok(Some(ShortStr::from(s.as_str()))),
            Some(Value::Number(n)) => Ok(Some(ShortStr::from(n.to_string()))),
            Some(other) => Err(ApiError::bad_request(format!("invalid {key}: {other}"))),
        }
    };
    let small = |key: &str| -> ApiResult<Option<u8>> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .and_then(|n| u8::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| ApiError::bad_request(format!("invalid {key}: {v}"))),
        }
    };
    p.content_type = text("content_type")?;
    p.content_encoding = text("content_encoding")?;
    p.delivery_mode = small("delivery_mode")?;
    p.priority = small("priority")?;
    p.correlation_id = text("correlation_id")?;
    p.reply_to = text("reply_to")?;
    p.expiration = text("expiration")?;
    p.message_id = text("message_id")?;
    p.message_type = text("type")?;
    p.user_id = text("user_id")?;
    p.app_id = text("app_id")?;
    p.timestamp = map.get("timestamp").and_then(Value::as_u64);
    if let Some(headers) = map.get("headers").filter(|h| !h.is_null()) {
        p.headers = Some(json_to_table(Some(headers), "headers").map_err(ApiError::bad_request)?);
    }
    Ok(p)
}

/// Message properties as the API shows them: only those present.
pub fn properties_to_json(p: &BasicProperties) -> Value {
    let mut m = serde_json::Map::new();
    let mut text = |key: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            m.insert(key.to_owned(), Value::String(v.to_string()));
        }
    };
    text("content_type", &p.content_type);
    text("content_encoding", &p.content_encoding);
    text("correlation_id", &p.correlation_id);
    text("reply_to", &p.reply_to);
    text("expiration", &p.expiration);
    text("message_id", &p.message_id);
    text("type", &p.message_type);
    text("user_id", &p.user_id);
    text("app_id", &p.app_id);
    if let Some(v) = p.delivery_mode {
        m.insert("delivery_mode".into(), v.into());
    }
    if let Some(v) = p.priority {
        m.insert("priority".into(), v.into());
    }
    if let Some(v) = p.timestamp {
        m.insert("timestamp".into(), v.into());
    }
    if let Some(h) = &p.headers {
        m.insert("headers".into(), table_to_json(h));
    }
    Value::Object(m)
}

/// Publishes one message from the API through the vhost's one publish, as RabbitMQ's
/// management plugin does through a channel in confirm mode with `mandatory` set: answered
/// once the message is safe in every queue it reached (stored, committed), with whether it
/// reached any. A queue or store that refused it is RabbitMQ's 400 "rejected". The
/// properties' `BCC` header routes but is not delivered.
pub async fn publish_message(
    vhost: &Arc<VHost>,
    exchange: &Arc<Exchange>,
    routing_keys: &[&str],
    mut properties: BasicProperties,
    body: Bytes,
    user: &str,
) -> ApiResult<bool> {
    strip_bcc(&mut properties);
    let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
    let message = Arc::new(Message::new(
        exchange.name.clone(),
        ShortStr::from(routing_keys[0]),
        &properties,
        raw,
        body,
    ));
    let (wake, mut woken) = event_channel();
    let routed = vhost
        .publish(
            Publish {
                exchange,
                message: &message,
                routing_keys,
                headers: properties.headers.as_ref(),
                confirm_to: ConfirmTo::Connection(&wake),
                origin: TraceOrigin::http_api(user),
            },
            &mut PublishScratch::default(),
        )
        .map_err(|e| ApiError::bad_request(format!("message store: {e}")))?;
    if !routed
        .confirm
        .wait_outcome(vhost.store.as_ref(), &mut woken)
        .await
    {
        return Err(ApiError::bad_request(
            "rejected Unable to publish message. Check queue limits.",
        ));
    }
    Ok(routed.queues > 0)
}

/// POST …/publish: `{"properties", "routing_key", "payload", "payload_encoding"}` →
/// `{"routed": bool}`. Needs write on the exchange and, on a topic exchange, topic write on
/// the routing key.
pub async fn publish(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let body = body_json(&body)?;
    let routing_key = body
        .get("routing_key")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("routing_key is required"))?;
    let payload = body
        .get("payload")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("payload is required"))?;
    let payload = match body.get("payload_encoding").and_then(Value::as_str) {
        None | Some("string") => Bytes::copy_from_slice(payload.as_bytes()),
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map(Bytes::from)
            .map_err(|_| ApiError::bad_request("payload is not valid base64"))?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "payload_encoding must be string or base64, not {other}"
            )))
        }
    };
    let properties = properties_from_json(body.get("properties").unwrap_or(&Value::Null))?;
    if let Some(refusal) = api
        .broker
        .access
        .user_id_refusal(properties.user_id.as_deref(), &who.name)
    {
        return Err(ApiError::bad_request(refusal));
    }
    let cc = header_routes(properties.headers.as_ref())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let keys = PublishKeys::new(routing_key, &cc);
    let exchange = path_name(&name);
    let acting = api.acting(&who, &vhost.name, Report::Publish)?;
    acting.exchange(AccessKind::Write, exchange)?;
    let x = vhost.exchange(exchange).ok_or_else(ApiError::not_found)?;
    if let Some(refusal) = x.publish_refusal(&vhost.name) {
        // RabbitMQ's channel refuses it with 403, which its API answers as not_authorised.
        return Err(ApiError::not_authorised(format!(
            "ACCESS_REFUSED - {refusal}"
        )));
    }
    for key in keys.all() {
        acting.topic(&x, AccessKind::Write, key)?;
    }
    let routed = publish_message(&vhost, &x, keys.all(), properties, payload, &who.name).await?;
    Ok(Json(json!({"routed": routed})).into_response())
}
