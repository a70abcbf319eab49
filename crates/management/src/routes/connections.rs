//! Connections, channels and consumers, from the broker's registry: /api/connections
//! (list, one, DELETE closes it with a reason), /api/channels, /api/consumers and their
//! per-vhost and per-connection lists. Users who are not monitoring see only their own, and
//! only administrators close others' connections; another user's connection is refused with
//! 401, as RabbitMQ (is_authorized_user).

use super::rate_key;
use crate::auth::{Identity, NOT_OBJECT_USER};
use crate::error::{ApiError, ApiResult};
use crate::json::{details, message_stats, table_to_json, CHANNEL_STATS};
use crate::list::{respond, respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Extension;
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use warren_broker::registry::{ChannelInfo, ConnectionInfo, ConsumerInfo};

/// RabbitMQ's reason when DELETE carries no X-Reason header.
const DEFAULT_CLOSE_REASON: &str = "Closed via management plugin";

fn visible(api: &Api, who: &Identity) -> Vec<Arc<ConnectionInfo>> {
    api.broker
        .registry
        .connections()
        .into_iter()
        .filter(|c| who.is_monitor() || c.user == who.name)
        .collect()
}

fn connection_json(api: &Api, c: &ConnectionInfo) -> Value {
    let rates = api.rates.get(&rate_key("connection", "", &c.name));
    let rate = |i: usize| {
        rates
            .as_ref()
            .and_then(|r| r.get(i))
            .copied()
            .unwrap_or(0.0)
    };
    json!({
        "name": c.name,
        "node": api.node,
        "type": "network",
        "protocol": c.protocol,
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "auth_mechanism": c.auth_mechanism,
        "client_properties": table_to_json(&c.client_properties.unpack()),
        "connected_at": c.connected_at_ms,
        "channels": c.channels().len(),
        "channel_max": c.channel_max,
        "frame_max": c.frame_max,
        "timeout": c.heartbeat_s,
        "state": c.state().name(),
        "ssl": c.tls,
        "ssl_protocol": null, "ssl_key_exchange": null, "ssl_cipher": null, "ssl_hash": null,
        "peer_cert_subject": null, "peer_cert_issuer": null, "peer_cert_validity": null,
        "recv_oct": c.recv_oct.load(Relaxed),
        "recv_oct_details": details(rate(0)),
        "recv_cnt": c.recv_cnt.load(Relaxed),
        "send_oct": c.send_oct.load(Relaxed),
        "send_oct_details": details(rate(1)),
        "send_cnt": c.send_cnt.load(Relaxed),
        "send_pend": 0,
    })
}

fn channel_name(c: &ConnectionInfo, ch: &ChannelInfo) -> String {
    format!("{} ({})", c.name, ch.number)
}

fn channel_json(api: &Api, c: &ConnectionInfo, ch: &ChannelInfo) -> Value {
    let rates = api
        .rates
        .get(&rate_key("channel", &c.name, &ch.number.to_string()));
    let blocked = c.state().name() == "blocked";
    json!({
        "name": channel_name(c, ch),
        "number": ch.number,
        "node": api.node,
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "connection_details": {"name": c.name, "peer_host": c.peer.ip().to_string(), "peer_port": c.peer.port()},
        "prefetch_count": ch.prefetch_count.load(Relaxed),
        "global_prefetch_count": ch.global_prefetch_count(),
        "confirm": ch.confirm.load(Relaxed),
        "transactional": ch.transactional.load(Relaxed),
        "messages_unacknowledged": ch.messages_unacknowledged.load(Relaxed),
        "messages_unconfirmed": ch.messages_unconfirmed.load(Relaxed),
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "consumer_count": ch.consumer_count(),
        "state": if blocked { "flow" } else { "running" },
        "message_stats": message_stats(&ch.stats.snapshot(), rates.as_deref(), CHANNEL_STATS),
    })
}

pub fn consumer_json(api: &Api, c: &ConnectionInfo, ch: &ChannelInfo, k: &ConsumerInfo) -> Value {
    json!({
        "consumer_tag": k.tag,
        "queue": {"name": k.queue, "vhost": c.vhost},
        "ack_required": k.ack_required,
        "exclusive": k.exclusive,
        "prefetch_count": k.prefetch_count,
        "arguments": table_to_json(&k.arguments),
        "active": true,
        "activity_status": "up",
        "channel_details": {
            "name": channel_name(c, ch),
            "number": ch.number,
            "connection_name": c.name,
            "peer_host": c.peer.ip().to_string(),
            "peer_port": c.peer.port(),
            "node": api.node,
            "user": c.user,
        },
    })
}

/// Every consumer the user sees, of one vhost or all, optionally of one queue.
pub fn consumers_of(
    api: &Api,
    who: &Identity,
    vhost: Option<&str>,
    queue: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for c in visible(api, who) {
        if vhost.is_some_and(|v| v != c.vhost) {
            continue;
        }
        for ch in c.channels() {
            for k in ch.consumers() {
                if queue.is_none_or(|q| q == k.queue) {
                    out.push(consumer_json(api, &c, &ch, &k));
                }
            }
        }
    }
    out
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let items = visible(&api, &who)
        .iter()
        .map(|c| connection_json(&api, c))
        .collect();
    respond(items, &query)
}

pub async fn in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.vhost_for(&who, &vhost)?;
    let items = visible(&api, &who)
        .iter()
        .filter(|c| c.vhost == vhost)
        .map(|c| connection_json(&api, c))
        .collect();
    respond(items, &query)
}

/// A connection `who` may see: its own, or any for monitoring users.
fn find(api: &Api, who: &Identity, name: &str) -> ApiResult<Arc<ConnectionInfo>> {
    let c = api
        .broker
        .registry
        .connection(name)
        .ok_or_else(ApiError::not_found)?;
    match who.is_monitor() || c.user == who.name {
        true => Ok(c),
        false => Err(ApiError::not_authorised(NOT_OBJECT_USER)),
    }
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let c = find(&api, &who, &name)?;
    Ok(respond_one(connection_json(&api, &c), &query))
}

/// DELETE /api/connections/NAME: connection.close 320 CONNECTION_FORCED with the
/// X-Reason header's text. Administrators close any connection, others their own.
pub async fn close(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult {
    let c = api
        .broker
        .registry
        .connection(&name)
        .ok_or_else(ApiError::not_found)?;
    if !who.is_admin() && c.user != who.name {
        return Err(ApiError::not_authorised(NOT_OBJECT_USER));
    }
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(DEFAULT_CLOSE_REASON);
    c.request_close(reason.to_owned());
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn channels_of(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let c = find(&api, &who, &name)?;
    let items = c
        .channels()
        .iter()
        .map(|ch| channel_json(&api, &c, ch))
        .collect();
    respond(items, &query)
}

fn channels_where(api: &Api, who: &Identity, vhost: Option<&str>) -> Vec<Value> {
    visible(api, who)
        .iter()
        .filter(|c| vhost.is_none_or(|v| v == c.vhost))
        .flat_map(|c| {
            c.channels()
                .iter()
                .map(|ch| channel_json(api, c, ch))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub async fn channels(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    respond(channels_where(&api, &who, None), &query)
}

pub async fn channels_in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.vhost_for(&who, &vhost)?;
    respond(channels_where(&api, &who, Some(&vhost)), &query)
}

/// GET /api/channels/NAME, NAME being "CONNECTION (NUMBER)".
pub async fn one_channel(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let (connection, number) = name
        .strip_suffix(')')
        .and_then(|n| n.rsplit_once(" ("))
        .ok_or_else(ApiError::not_found)?;
    let number: u16 = number.parse().map_err(|_| ApiError::not_found())?;
    let c = find(&api, &who, connection)?;
    let ch = c.channel(number).ok_or_else(ApiError::not_found)?;
    let mut body = channel_json(&api, &c, &ch);
    body["consumer_details"] = Value::Array(
        ch.consumers()
            .iter()
            .map(|k| consumer_json(&api, &c, &ch, k))
            .collect(),
    );
    Ok(respond_one(body, &query))
}

pub async fn consumers(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    respond(consumers_of(&api, &who, None, None), &query)
}

pub async fn consumers_in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    // RabbitMQ checks no permission here: the list holds only what the user sees anyway.
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    respond(consumers_of(&api, &who, Some(&vhost), None), &query)
}
