//! Bindings: /api/bindings[/vhost], those between an exchange and a queue or exchange
//! (GET, POST → 201 with Location), one by its properties key (GET, DELETE), and the
//! per-exchange and per-queue lists. The default exchange's implicit binding to every
//! queue is listed, as RabbitMQ lists it. Binding and unbinding need write on the
//! destination and read on the source, as queue.bind (`acting`).

use super::body_json;
use super::exchanges::path_name;
use crate::acting::Report;
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::json::{json_to_table, table_to_json};
use crate::list::{respond_one, respond_sorted, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Extension;
use bytes::Bytes;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::DefinitionOp;
use warren_broker::VHost;
use warren_codec::FieldTable;

/// What a properties key leaves unescaped: letters, digits and `-_.` ("a.#" → "a.%23").
const KEY_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');
/// What a path segment leaves unescaped.
const SEGMENT_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A binding's identity in URLs, as RabbitMQ's: the escaped routing key, then `~` and a
/// digest of the arguments when there are any ("~" alone for an empty key without them).
pub fn properties_key(routing_key: &str, arguments: &FieldTable) -> String {
    let key = utf8_percent_encode(routing_key, KEY_ESCAPE).to_string();
    if arguments.is_empty() {
        return if key.is_empty() { "~".into() } else { key };
    }
    // FNV-1a over the arguments' JSON: stable across restarts, short, URL-safe.
    let text = table_to_json(arguments).to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    use base64::Engine;
    let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&hash.to_be_bytes()[..6]);
    format!("{key}~{digest}")
}

struct Row {
    source: String,
    destination: String,
    queue: bool,
    routing_key: String,
    arguments: FieldTable,
}

impl Row {
    fn json(&self, vhost: &str) -> Value {
        json!({
            "source": self.source,
            "vhost": vhost,
            "destination": self.destination,
            "destination_type": if self.queue { "queue" } else { "exchange" },
            "routing_key": self.routing_key,
            "arguments": table_to_json(&self.arguments),
            "properties_key": properties_key(&self.routing_key, &self.arguments),
        })
    }
}

/// Every binding of a vhost: the default exchange's first, then each exchange's.
fn rows(vhost: &VHost) -> Vec<Row> {
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<Row> = queues
        .iter()
        .map(|q| Row {
            source: String::new(),
            destination: q.name.to_string(),
            queue: true,
            routing_key: q.name.to_string(),
            arguments: FieldTable::new(),
        })
        .collect();
    let mut exchanges = vhost.exchanges();
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    for x in exchanges {
        for b in x.bindings() {
            out.push(Row {
                source: x.name.to_string(),
                destination: b.destination.name().to_string(),
                queue: b.destination.is_queue(),
                routing_key: b.routing_key.to_string(),
                arguments: b.arguments.clone(),
            });
        }
    }
    out
}

/// Bindings keep their listing order (RabbitMQ does not sort them by name).
fn respond_rows(rows: Vec<Row>, vhost: &str, query: &Query) -> ApiResult {
    respond_sorted(rows.iter().map(|r| r.json(vhost)).collect(), query, &[])
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let items: Vec<Value> = api
        .used_vhosts(&who)
        .iter()
        .flat_map(|v| rows(v).iter().map(|r| r.json(&v.name)).collect::<Vec<_>>())
        .collect();
    respond_sorted(items, &query, &[])
}

pub async fn in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    respond_rows(rows(&vhost), &vhost.name, &query)
}

pub async fn by_source(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let name = path_name(&name);
    vhost.exchange(name).ok_or_else(ApiError::not_found)?;
    let rows = rows(&vhost)
        .into_iter()
        .filter(|r| r.source == name)
        .collect();
    respond_rows(rows, &vhost.name, &query)
}

pub async fn by_exchange_destination(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let name = path_name(&name);
    vhost.exchange(name).ok_or_else(ApiError::not_found)?;
    let rows = rows(&vhost)
        .into_iter()
        .filter(|r| !r.queue && r.destination == name)
        .collect();
    respond_rows(rows, &vhost.name, &query)
}

pub async fn by_queue(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    vhost.queue(&name).ok_or_else(ApiError::not_found)?;
    let rows = rows(&vhost)
        .into_iter()
        .filter(|r| r.queue && r.destination == name)
        .collect();
    respond_rows(rows, &vhost.name, &query)
}

/// The destination kind of a path: "q" or "e".
fn destination_is_queue(kind: &str) -> ApiResult<bool> {
    match kind {
        "q" => Ok(true),
        "e" => Ok(false),
        _ => Err(ApiError::not_found()),
    }
}

/// The vhost, checking that both ends exist (404 otherwise).
fn ends(
    api: &Api,
    who: &Identity,
    vhost: &str,
    source: &str,
    queue: bool,
    destination: &str,
) -> ApiResult<Arc<VHost>> {
    let vhost = api.vhost_for(who, vhost)?;
    vhost.exchange(source).ok_or_else(ApiError::not_found)?;
    let found = match queue {
        true => vhost.queue(destination).is_some(),
        false => vhost.exchange(destination).is_some(),
    };
    if !found {
        return Err(ApiError::not_found());
    }
    Ok(vhost)
}

fn rows_between(vhost: &VHost, source: &str, queue: bool, destination: &str) -> Vec<Row> {
    rows(vhost)
        .into_iter()
        .filter(|r| r.source == source && r.queue == queue && r.destination == destination)
        .collect()
}

pub async fn between(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let queue = destination_is_queue(&kind)?;
    let source = path_name(&source);
    let vhost = ends(&api, &who, &vhost, source, queue, &destination)?;
    respond_rows(
        rows_between(&vhost, source, queue, &destination),
        &vhost.name,
        &query,
    )
}

/// POST: `{"routing_key", "arguments"}` → 201 with the new binding's URL in Location.
pub async fn create(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let queue = destination_is_queue(&kind)?;
    let source = path_name(&source);
    let vhost = ends(&api, &who, &vhost, source, queue, &destination)?;
    let body = body_json(&body)?;
    let routing_key = match body.get("routing_key") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid routing_key: {other}"
            )))
        }
    };
    let arguments =
        json_to_table(body.get("arguments"), "binding arguments").map_err(ApiError::bad_request)?;
    api.acting(&who, &vhost.name, Report::Plain)?.binding(
        vhost.exchange(source).as_deref(),
        source,
        queue,
        &destination,
        &routing_key,
    )?;
    let key = properties_key(&routing_key, &arguments);
    let op = match queue {
        true => DefinitionOp::QueueBind {
            vhost: vhost.name.clone(),
            queue: destination.clone(),
            exchange: source.to_owned(),
            routing_key,
            arguments,
            connection: 0,
        },
        false => DefinitionOp::ExchangeBind {
            vhost: vhost.name.clone(),
            destination: destination.clone(),
            source: source.to_owned(),
            routing_key,
            arguments,
        },
    };
    api.change(op).await?;
    let segment = |s: &str| utf8_percent_encode(s, SEGMENT_ESCAPE).to_string();
    let location = format!(
        "/api/bindings/{}/e/{}/{}/{}/{}",
        segment(&vhost.name),
        segment(if source.is_empty() {
            "amq.default"
        } else {
            source
        }),
        kind,
        segment(&destination),
        segment(&key)
    );
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

fn find_one(
    vhost: &VHost,
    source: &str,
    queue: bool,
    destination: &str,
    props: &str,
) -> ApiResult<Row> {
    // The path segment arrives decoded once: `a.%23` (the listed key, escaped again by the
    // client) or `a.#` (rabbitmqadmin's properties_key='a.#', escaped once). RabbitMQ takes
    // both; so does Warren.
    rows_between(vhost, source, queue, destination)
        .into_iter()
        .find(|r| {
            let key = properties_key(&r.routing_key, &r.arguments);
            key == props || percent_encoding::percent_decode_str(&key).decode_utf8_lossy() == props
        })
        .ok_or_else(ApiError::not_found)
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let queue = destination_is_queue(&kind)?;
    let source = path_name(&source);
    let vhost = ends(&api, &who, &vhost, source, queue, &destination)?;
    let row = find_one(&vhost, source, queue, &destination, &props)?;
    Ok(respond_one(row.json(&vhost.name), &query))
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
) -> ApiResult {
    let queue = destination_is_queue(&kind)?;
    let source = path_name(&source);
    let lookup = || -> ApiResult<_> {
        let found = ends(&api, &who, &vhost, source, queue, &destination)?;
        let row = find_one(&found, source, queue, &destination, &props)?;
        Ok((found, row))
    };
    // Not found here: maybe not applied here yet (`Api::caught_up`).
    let (vhost, row) = match lookup() {
        Ok(found) => found,
        Err(_) => {
            api.caught_up().await?;
            lookup()?
        }
    };
    api.acting(&who, &vhost.name, Report::Plain)?.binding(
        vhost.exchange(source).as_deref(),
        source,
        queue,
        &destination,
        &row.routing_key,
    )?;
    let op = match queue {
        true => DefinitionOp::QueueUnbind {
            vhost: vhost.name.clone(),
            queue: destination,
            exchange: source.to_owned(),
            routing_key: row.routing_key.to_string(),
            arguments: row.arguments,
            connection: 0,
        },
        false => DefinitionOp::ExchangeUnbind {
            vhost: vhost.name.clone(),
            destination,
            source: source.to_owned(),
            routing_key: row.routing_key.to_string(),
            arguments: row.arguments,
        },
    };
    api.change(op).await?;
    Ok(super::no_content())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_keys_as_rabbitmq() {
        assert_eq!(properties_key("a.#", &FieldTable::new()), "a.%23");
        assert_eq!(properties_key("", &FieldTable::new()), "~");
        let mut args = FieldTable::new();
        args.insert("k", warren_codec::FieldValue::string("v"));
        let key = properties_key("a.#", &args);
        assert!(
            key.starts_with("a.%23~") && key.len() == "a.%23~".len() + 8,
            "{key}"
        );
    }
}
