//! The node and the whole broker: /api/overview, /api/nodes, /api/cluster-name,
//! /api/whoami, /api/extensions and the health checks.

use super::{body_json, connections, queues, rate_key, QUEUE_TOTALS_COLUMN};
use crate::acting::Report;
use crate::auth::Identity;
use crate::cluster_view::{other_nodes, OtherStats};
use crate::error::{ApiError, ApiResult};
use crate::history::{self, Range};
use crate::json::{details, message_stats, CHANNEL_STATS};
use crate::list::{respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::AccessKind;
use warren_broker::alarm::Alarm;
use warren_broker::version::{PRODUCT_VERSION, RABBITMQ_VERSION};
use warren_broker::vhost::TraceOrigin;
use warren_broker::AlarmSet;
use warren_broker::DefinitionOp;

/// The API level Warren implements (warren_broker::version): tools gate features on
/// `rabbitmq_version`/`management_version`, so they carry that, and
/// `product_name`/`product_version` say what the broker really is.
const API_VERSION: &str = RABBITMQ_VERSION;

fn exchange_types() -> Value {
    json!([
        {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
        {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
        {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
        {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
    ])
}

/// messages, messages_ready, messages_unacknowledged with their rates (the last three
/// sampled values after the message counters).
pub fn queue_totals(totals: [u64; 3], rates: Option<&[f64]>) -> Value {
    let rate = |i: usize| {
        let rate = rates.and_then(|r| r.get(QUEUE_TOTALS_COLUMN + i));
        rate.copied().unwrap_or(0.0)
    };
    json!({
        "messages": totals[0], "messages_details": details(rate(0)),
        "messages_ready": totals[1], "messages_ready_details": details(rate(1)),
        "messages_unacknowledged": totals[2], "messages_unacknowledged_details": details(rate(2)),
    })
}

/// A vhost's messages, ready and unacknowledged as the sampler last counted them (at most
/// `rates::SAMPLE_INTERVAL` ago): RabbitMQ's overview shows its queues' figures as last
/// emitted, every 5 s, too, and counting afresh reads every queue under its lock (100,000
/// queues on each GET /api/overview). A vhost made since the last round is counted now.
fn sampled_queue_totals(api: &Api, vhost: &warren_broker::VHost) -> [u64; 3] {
    let sampled = api.history.latest(&rate_key("vhost", &vhost.name, ""));
    let columns = sampled.as_deref().and_then(|values| {
        let totals = values.get(QUEUE_TOTALS_COLUMN..QUEUE_TOTALS_COLUMN + 3)?;
        <[u64; 3]>::try_from(totals).ok()
    });
    columns.unwrap_or_else(|| queues::vhost_totals(vhost).0)
}

pub async fn overview(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhosts = api.seen_vhosts(&who);
    let mut totals = [0u64; 3];
    let (mut queue_count, mut exchange_count) = (0, 0);
    for vhost in &vhosts {
        for (total, x) in totals.iter_mut().zip(sampled_queue_totals(&api, vhost)) {
            *total += x;
        }
        queue_count += vhost.queue_count();
        exchange_count += vhost.exchange_count();
    }
    let views = connections::visible(&api, &who, None).await;
    let channels: usize = views
        .iter()
        .map(|v| connections::channels_in(v).len())
        .sum();
    let consumers: usize = views
        .iter()
        .flat_map(connections::channels_in)
        .map(|ch| connections::consumers_in(ch).len())
        .sum();
    let rates = api.rates.get(&rate_key("overview", "", ""));
    let counts = api.broker.registry.message_totals(None);
    let mut message_stats = message_stats(&counts, rates.as_deref(), CHANNEL_STATS);
    OtherStats::gather(&api)
        .await
        .add_to_overview(&mut message_stats);
    let mut object_totals = json!({
        "channels": channels,
        "connections": views.len(),
        "exchanges": exchange_count,
        "queues": queue_count,
    });
    // RabbitMQ counts consumers for monitoring users only.
    if who.is_monitor() {
        object_totals["consumers"] = consumers.into();
    }
    let mut queue_totals = queue_totals(totals, rates.as_deref());
    add_overview_samples(&api, &vhosts, &query, &mut message_stats, &mut queue_totals)?;
    let body = json!({
        "management_version": API_VERSION,
        "rabbitmq_version": API_VERSION,
        "product_name": "Warren",
        "product_version": PRODUCT_VERSION,
        "rates_mode": "basic",
        "exchange_types": exchange_types(),
        "cluster_name": api.broker.cluster_name(),
        "node": api.node,
        "disable_stats": false,
        "enable_queue_totals": false,
        "message_stats": message_stats,
        "queue_totals": queue_totals,
        "object_totals": object_totals,
        "statistics_db_event_queue": 0,
        "listeners": listeners(&api),
        "contexts": contexts(&api),
    });
    Ok(respond_one(body, &query))
}

/// With `msg_rates_age`/`msg_rates_incr`, each counter's `samples` in `message_stats` (this
/// node's counters: the history holds what this node sampled); with
/// `lengths_age`/`lengths_incr`, the queued messages' in `queue_totals`, over the vhosts the
/// user sees.
fn add_overview_samples(
    api: &Api,
    vhosts: &[Arc<warren_broker::VHost>],
    query: &Query,
    message_stats: &mut Value,
    queue_totals: &mut Value,
) -> ApiResult<()> {
    let now_ms = history::now_ms();
    if let Some(range) = Range::from_query(query, "msg_rates", now_ms)? {
        let rounds = api.history.of(&rate_key("overview", "", ""));
        let names = warren_broker::MessageCounts::default()
            .fields()
            .map(|(name, _)| name);
        for (column, name) in names.iter().enumerate() {
            if let Some(details) = message_stats.get_mut(format!("{name}_details")) {
                history::add_samples(details, &range.samples(&rounds, column));
            }
        }
    }
    if let Some(range) = Range::from_query(query, "lengths", now_ms)? {
        let keys: Vec<String> = vhosts
            .iter()
            .map(|v| rate_key("vhost", &v.name, ""))
            .collect();
        let rounds = api.history.sum_of(keys.iter().map(String::as_str));
        // The vhost rounds hold the message counters, then messages, ready, unacked.
        let first = QUEUE_TOTALS_COLUMN;
        for (column, name) in ["messages", "messages_ready", "messages_unacknowledged"]
            .iter()
            .enumerate()
        {
            if let Some(details) = queue_totals.get_mut(format!("{name}_details")) {
                history::add_samples(details, &range.samples(&rounds, first + column));
            }
        }
    }
    Ok(())
}

fn listeners(api: &Api) -> Value {
    let listeners = api.listeners.iter().map(|l| {
        json!({
            "node": api.node, "protocol": l.protocol,
            "ip_address": l.address.ip().to_string(), "port": l.address.port(),
        })
    });
    Value::Array(listeners.collect())
}

/// The node's HTTP listeners as RabbitMQ's `contexts` shows them: the management API's and
/// Prometheus's, the TLS ones marked `ssl`, Prometheus's with its protocol as an Erlang atom.
fn contexts(api: &Api) -> Value {
    let contexts = api.listeners.iter().filter_map(|l| {
        let (description, tls) = match l.protocol {
            "http" => ("RabbitMQ Management", false),
            "https" => ("RabbitMQ Management", true),
            "http/prometheus" => ("RabbitMQ Prometheus", false),
            "https/prometheus" => ("RabbitMQ Prometheus", true),
            _ => return None,
        };
        let mut context = json!({
            "node": api.node, "description": description, "path": "/",
            "port": l.address.port().to_string(),
        });
        if l.protocol.ends_with("/prometheus") {
            context["protocol"] = json!(format!("'{}'", l.protocol));
        }
        if tls {
            context["ssl"] = json!("true");
        }
        Some(context)
    });
    Value::Array(contexts.collect())
}

pub async fn cluster_name(State(api): State<Arc<Api>>) -> Json<Value> {
    Json(json!({"name": api.broker.cluster_name()}))
}

pub async fn set_cluster_name(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let body = body_json(&body)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("name is required"))?;
    api.change(DefinitionOp::GlobalParameterSet {
        name: warren_broker::broker::CLUSTER_NAME_PARAMETER.to_owned(),
        value_json: Value::String(name.to_owned()).to_string(),
    })
    .await?;
    Ok(super::no_content())
}

/// This node's /api/nodes entry.
pub(crate) fn node_json(api: &Api) -> Value {
    let memory = &api.broker.memory;
    let alarms = api.broker.alarms.local();
    let disk_free = api
        .data_dir
        .as_deref()
        .and_then(warren_broker::disk::free_bytes)
        .unwrap_or(0);
    let fd_used = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    let fd_total = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => limit.rlim_cur,
        _ => 0,
    };
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sockets_used = api.broker.registry.len();
    let mut node = json!({
        "name": api.node,
        "type": "disc",
        "running": true,
        "being_drained": false,
        "uptime": api.broker.started_at.elapsed().as_millis() as u64,
        "os_pid": std::process::id().to_string(),
        "processors": processors,
        "mem_used": memory.resident_bytes(),
        "mem_used_details": details(0.0),
        "mem_limit": memory.high_watermark_bytes(),
        "mem_alarm": alarms.contains(Alarm::Memory),
        "mem_calculation_strategy": "rss",
        "disk_free": disk_free,
        "disk_free_details": details(0.0),
        "disk_free_limit": api
            .broker
            .disk_monitor()
            .map_or(api.disk_free_limit_bytes, |disk| disk.limit_bytes()),
        "disk_free_alarm": alarms.contains(Alarm::Disk),
        "fd_used": fd_used,
        "fd_total": fd_total,
        "sockets_used": sockets_used,
        "sockets_total": fd_total,
        "proc_used": sockets_used,
        "proc_total": 1_048_576,
        "run_queue": 0,
        "rates_mode": "basic",
        "net_ticktime": 60,
        "partitions": [],
        "cluster_links": [],
        "applications": [],
        "enabled_plugins": ["rabbitmq_management"],
        "auth_mechanisms": [
            {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
        ],
        "exchange_types": exchange_types(),
        "contexts": contexts(api),
        "config_files": [],
        "log_files": [],
        "db_dir": api.data_dir.as_ref().map(|d| d.display().to_string()),
    });
    if let Some((status, member)) = super::cluster::own_member(api) {
        super::cluster::add_raft_fields(&mut node, &member);
        node["raft_term"] = json!(status.term);
    }
    node
}

pub async fn nodes(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_monitor()?;
    crate::list::respond(every_node(&api).await, &query)
}

/// Every node's /api/nodes entry: this node's, the full entry of each other node that
/// answers (`cluster_view`), and what the cluster status knows of the others (a node that
/// is down shows `running: false`). Warren's Raft fields are as this node sees the cluster.
async fn every_node(api: &Api) -> Vec<Value> {
    let mut answered = other_nodes(api).await;
    let mut nodes = vec![node_json(api)];
    for member in super::cluster::other_members(api) {
        let name = member["name"].as_str().unwrap_or_default().to_owned();
        nodes.push(match answered.remove(&name) {
            Some(mut full) => {
                for field in super::cluster::RAFT_FIELDS {
                    full[field] = member[field].clone();
                }
                full
            }
            None => member,
        });
    }
    nodes
}

pub async fn one_node(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_monitor()?;
    let one = every_node(&api)
        .await
        .into_iter()
        .find(|entry| entry["name"] == node.as_str())
        .ok_or_else(ApiError::not_found)?;
    Ok(respond_one(one, &query))
}

/// The node settings' PUTs (Warren's own paths): an administrator's, for this node only
/// (another node's name is 404, as a node that is not there).
fn require_admin_on_this_node(api: &Api, who: &Identity, node: &str) -> Result<(), ApiError> {
    who.require_admin()?;
    match node == api.node {
        true => Ok(()),
        false => Err(ApiError::not_found()),
    }
}

/// The non-negative integer `key` of a node setting's JSON body.
fn integer_field(body: &Bytes, key: &str) -> Result<u64, ApiError> {
    body_json(body)?
        .get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| ApiError::bad_request(format!("{key} must be a non-negative integer")))
}

/// PUT /api/nodes/NODE/memory-high-watermark, `{"bytes": N}` or `{"fraction": F}` (of the
/// machine's memory): Warren's own path for rabbitmqctl's set_vm_memory_high_watermark
/// (RabbitMQ's API has none; its CLI asks the node directly). This node only; the alarm is
/// raised or cleared at once against the new watermark. Not kept across a restart, as in
/// RabbitMQ (the configured one comes back).
pub async fn set_memory_high_watermark(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_admin_on_this_node(&api, &who, &node)?;
    let body = body_json(&body)?;
    let bytes = match (body.get("bytes"), body.get("fraction")) {
        (Some(bytes), None) => bytes
            .as_u64()
            .ok_or_else(|| ApiError::bad_request("bytes must be a non-negative integer"))?,
        (None, Some(fraction)) => {
            let fraction = fraction
                .as_f64()
                .filter(|f| (0.0..=1.0).contains(f))
                .ok_or_else(|| ApiError::bad_request("fraction must be between 0.0 and 1.0"))?;
            let total = warren_broker::memory::total_memory_bytes().ok_or_else(|| {
                ApiError::bad_request("the machine's memory is unknown: give bytes")
            })?;
            (total as f64 * fraction) as u64
        }
        _ => return Err(ApiError::bad_request("give one of bytes and fraction")),
    };
    api.broker
        .memory
        .set_high_watermark_bytes(usize::try_from(bytes).unwrap_or(usize::MAX));
    Ok(super::no_content())
}

/// PUT /api/nodes/NODE/disk-free-limit, `{"bytes": N}`: Warren's own path for rabbitmqctl's
/// set_disk_free_limit. This node only; the disk alarm is raised or cleared at once against
/// the new limit. Not kept across a restart, as in RabbitMQ.
pub async fn set_disk_free_limit(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_admin_on_this_node(&api, &who, &node)?;
    let bytes = integer_field(&body, "bytes")?;
    let disk = api
        .broker
        .disk_monitor()
        .ok_or_else(|| ApiError::unavailable("this node watches no disk"))?;
    disk.set_limit_bytes(bytes);
    Ok(super::no_content())
}

/// PUT /api/nodes/NODE/channel-max, `{"channel_max": N}`: the channel_max AMQP 0-9-1
/// connections that start from now on are offered (0: no limit), as RabbitMQ's
/// `application:set_env(rabbit, channel_max, N)`; open connections keep theirs. Warren's own
/// path (RabbitMQ has only the Erlang call).
pub async fn set_channel_max(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_admin_on_this_node(&api, &who, &node)?;
    let channel_max = u16::try_from(integer_field(&body, "channel_max")?)
        .map_err(|_| ApiError::bad_request("channel_max must be at most 65535"))?;
    api.broker
        .channel_max
        .store(channel_max, std::sync::atomic::Ordering::Relaxed);
    Ok(super::no_content())
}

/// How long PUT /api/nodes/NODE/app waits for the AMQP side to stop or start (a stop waits
/// up to 3 s for clients to answer connection.close).
const APP_SWITCH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// PUT /api/nodes/NODE/app, `{"running": false}` or `{"running": true}`: Warren's own path
/// for rabbitmqctl's stop_app / start_app (RabbitMQ's CLI asks the node directly). Stopping
/// closes every client connection with 320 CONNECTION_FORCED and stops the AMQP listeners;
/// starting binds them again. The process, its definitions and messages and this API stay.
/// Answers once done: 204, or 503 when the listeners did not follow in time.
pub async fn set_app_running(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
    body: Bytes,
) -> ApiResult {
    require_admin_on_this_node(&api, &who, &node)?;
    let running = body_json(&body)?
        .get("running")
        .and_then(Value::as_bool)
        .ok_or_else(|| ApiError::bad_request("running must be true or false"))?;
    api.broker.app.request(running);
    if !api.broker.app.wait_for(running, APP_SWITCH_WAIT).await {
        return Err(ApiError::unavailable(match running {
            true => "the AMQP listeners did not start",
            false => "the AMQP listeners did not stop",
        }));
    }
    Ok(super::no_content())
}

pub async fn extensions() -> Json<Value> {
    Json(json!([]))
}

pub async fn whoami(Extension(who): Extension<Identity>) -> Json<Value> {
    Json(json!({"name": who.name, "tags": who.tags}))
}

/// /api/health/checks/alarms: 200 without alarms anywhere in the cluster (this node's and its
/// linked peers'), 503 with the list otherwise, as RabbitMQ.
pub async fn alarms(State(api): State<Arc<Api>>) -> Response {
    let mut alarms = vec![(api.node.clone(), api.broker.alarms.local())];
    alarms.extend(api.broker.alarms.remote());
    alarms_answer(alarms, "resource alarm(s) in effect in the cluster")
}

/// /api/health/checks/local-alarms: this node's own alarms only.
pub async fn local_alarms(State(api): State<Arc<Api>>) -> Response {
    let alarms = vec![(api.node.clone(), api.broker.alarms.local())];
    alarms_answer(alarms, "resource alarm(s) in effect on the node")
}

fn alarms_answer(by_node: Vec<(String, AlarmSet)>, reason: &str) -> Response {
    let alarms: Vec<Value> = by_node
        .iter()
        .flat_map(|(node, set)| {
            set.iter()
                .map(move |a| json!({"node": node, "resource": a.resource()}))
        })
        .collect();
    if alarms.is_empty() {
        return Json(json!({"status": "ok"})).into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "status": "failed",
            "reason": reason,
            "alarms": alarms,
        })),
    )
        .into_response()
}

/// Declares the queue `aliveness-test` in the vhost, publishes a message to it and gets it
/// back (RabbitMQ's aliveness test), as the user: it needs configure and read on the queue
/// and write on the default exchange.
pub async fn aliveness(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let name = "aliveness-test";
    let acting = api.acting(&who, &vhost.name, Report::Get)?;
    acting.queue(AccessKind::Configure, name)?;
    acting.exchange(AccessKind::Write, "")?;
    acting.queue(AccessKind::Read, name)?;
    queues::declare_simple(&api, &vhost, name).await?;
    let default_exchange = vhost.exchange("").ok_or_else(ApiError::not_found)?;
    let routed = super::exchanges::publish_message(
        &vhost,
        &default_exchange,
        &[name],
        Default::default(),
        Bytes::from_static(b"test_message"),
        &who.name,
    )
    .await?;
    let got = vhost.queue(name).and_then(|q| {
        let (m, _) = q.get(true)?;
        if vhost.tracing() {
            vhost.trace_deliver(&q.name, &m, TraceOrigin::http_api(&who.name));
        }
        Some(m.message.body_bytes())
    });
    if routed && got.as_deref() == Some(b"test_message".as_slice()) {
        Ok(Json(json!({"status": "ok"})).into_response())
    } else {
        Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "reason": "aliveness test message not received"})),
        )
            .into_response())
    }
}
