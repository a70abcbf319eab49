//! The /api routes, one file per kind of object, and what they share: request bodies as
//! JSON, vhost lookup and visibility, and the sampler that feeds message rates.

mod bindings;
mod cluster;
mod connections;
mod definitions;
mod exchanges;
mod node;
mod policies;
mod queues;
mod user_limits;
mod users;
mod vhosts;

pub(crate) use connections::connection_views;
pub(crate) use node::node_json;

use crate::acting::{Acting, Report};
use crate::auth::{Identity, NOT_OBJECT_USER, NOT_VHOST_USER};
use crate::error::{ApiError, ApiResult};
use crate::Api;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use std::sync::{Arc, Weak};
use warren_broker::named_entries::{InOrder, Named};
use warren_broker::VHost;

pub fn api_routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/api/overview", get(node::overview))
        .route(
            "/api/cluster-name",
            get(node::cluster_name).put(node::set_cluster_name),
        )
        .route("/api/nodes", get(node::nodes))
        .route("/api/cluster/status", get(cluster::status))
        .route("/api/cluster/nodes", axum::routing::post(cluster::add_node))
        .route(
            "/api/cluster/nodes/{name}",
            axum::routing::delete(cluster::forget_node),
        )
        .route(
            "/api/queues/quorum/replicas/on/{node}/grow",
            axum::routing::post(cluster::grow_quorum_queues),
        )
        .route("/api/nodes/{node}", get(node::one_node))
        .route(
            "/api/nodes/{node}/memory-high-watermark",
            axum::routing::put(node::set_memory_high_watermark),
        )
        .route(
            "/api/nodes/{node}/disk-free-limit",
            axum::routing::put(node::set_disk_free_limit),
        )
        .route(
            "/api/nodes/{node}/channel-max",
            axum::routing::put(node::set_channel_max),
        )
        .route(
            "/api/nodes/{node}/app",
            axum::routing::put(node::set_app_running),
        )
        .route("/api/extensions", get(node::extensions))
        .route("/api/whoami", get(node::whoami))
        .route("/api/health/checks/alarms", get(node::alarms))
        .route("/api/health/checks/local-alarms", get(node::local_alarms))
        .route("/api/aliveness-test/{vhost}", get(node::aliveness))
        .route("/api/connections", get(connections::list))
        .route(
            "/api/connections/{name}",
            get(connections::one).delete(connections::close),
        )
        .route(
            "/api/connections/{name}/channels",
            get(connections::channels_of),
        )
        .route(
            "/api/vhosts/{vhost}/connections",
            get(connections::in_vhost),
        )
        .route(
            "/api/vhosts/{vhost}/channels",
            get(connections::channels_in_vhost),
        )
        .route("/api/channels", get(connections::channels))
        .route("/api/channels/{name}", get(connections::one_channel))
        .route("/api/consumers", get(connections::consumers))
        .route(
            "/api/consumers/{vhost}",
            get(connections::consumers_in_vhost),
        )
        .route("/api/exchanges", get(exchanges::list))
        .route("/api/exchanges/{vhost}", get(exchanges::in_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::one)
                .put(exchanges::declare)
                .delete(exchanges::delete),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            axum::routing::post(exchanges::publish),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(bindings::by_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(bindings::by_exchange_destination),
        )
        .route("/api/queues", get(queues::list))
        .route("/api/queues/{vhost}", get(queues::in_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::one).put(queues::declare).delete(queues::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(queues::purge),
        )
        .route(
            "/api/queues/{vhost}/{name}/get",
            axum::routing::post(queues::get_messages),
        )
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::by_queue),
        )
        .route("/api/bindings", get(bindings::list))
        .route("/api/bindings/{vhost}", get(bindings::in_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::between).post(bindings::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::one).delete(bindings::delete),
        )
        .route(
            "/api/definitions",
            get(definitions::export).post(definitions::import),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost).post(definitions::import_vhost),
        )
        .route("/api/vhosts", get(vhosts::list))
        .route(
            "/api/vhosts/{vhost}",
            get(vhosts::one)
                .put(users::put_vhost)
                .delete(users::delete_vhost),
        )
        .route(
            "/api/vhosts/{vhost}/permissions",
            get(users::vhost_permissions),
        )
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(users::vhost_topic_permissions),
        )
        .route("/api/users", get(users::list))
        .route(
            "/api/users/{user}",
            get(users::one).put(users::put).delete(users::delete),
        )
        .route(
            "/api/users/{user}/permissions",
            get(users::user_permissions),
        )
        .route(
            "/api/users/{user}/topic-permissions",
            get(users::user_topic_permissions),
        )
        .route("/api/permissions", get(users::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(users::permission)
                .put(users::set_permission)
                .delete(users::clear_permission),
        )
        .route("/api/policies", get(policies::policies))
        .route("/api/policies/{vhost}", get(policies::policies_in))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::policy)
                .put(policies::put_policy)
                .delete(policies::delete_policy),
        )
        .route("/api/operator-policies", get(policies::operator_policies))
        .route(
            "/api/operator-policies/{vhost}",
            get(policies::operator_policies_in),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::operator_policy)
                .put(policies::put_operator_policy)
                .delete(policies::delete_operator_policy),
        )
        .route("/api/parameters", get(policies::parameters))
        .route("/api/parameters/{component}", get(policies::parameters_of))
        .route(
            "/api/parameters/{component}/{vhost}",
            get(policies::parameters_in),
        )
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(policies::parameter)
                .put(policies::put_parameter)
                .delete(policies::delete_parameter),
        )
        .route("/api/global-parameters", get(policies::global_parameters))
        .route(
            "/api/global-parameters/{name}",
            get(policies::global_parameter)
                .put(policies::put_global_parameter)
                .delete(policies::delete_global_parameter),
        )
        .route("/api/user-limits", get(user_limits::all))
        .route("/api/user-limits/{user}", get(user_limits::of))
        .route(
            "/api/user-limits/{user}/{name}",
            axum::routing::put(user_limits::put).delete(user_limits::delete),
        )
        .route("/api/vhost-limits", get(policies::vhost_limits))
        .route("/api/vhost-limits/{vhost}", get(policies::vhost_limits_of))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            axum::routing::put(policies::put_vhost_limit).delete(policies::delete_vhost_limit),
        )
        .route("/api/topic-permissions", get(users::topic_permissions))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(users::topic_permission)
                .put(users::set_topic_permission)
                .delete(users::clear_topic_permission),
        )
        .route(
            "/api/topic-permissions/{vhost}/{user}/{exchange}",
            axum::routing::delete(users::clear_topic_permission_on),
        )
}

/// The console's pages load only their own scripts, styles and API (the charts set colours in
/// `style` attributes, hence `'unsafe-inline'` for styles alone), and no other site may frame
/// them (clickjacking). RabbitMQ sends a CSP when `management.csp.policy` is set and
/// X-Frame-Options when `management.headers.frame_options` is; Warren's console always does.
const CONSOLE_CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'self'; form-action 'self'";

/// Any other path: a file of the web console (warren-console) for a GET outside /api,
/// otherwise RabbitMQ's 404.
pub async fn not_found(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path();
    if method == axum::http::Method::GET && !path.starts_with("/api/") {
        if let Some((content_type, bytes)) = warren_console::asset(path) {
            use axum::http::header;
            let headers = [
                (header::CONTENT_TYPE, content_type),
                (
                    header::CONTENT_SECURITY_POLICY,
                    CONSOLE_CONTENT_SECURITY_POLICY,
                ),
                (header::X_FRAME_OPTIONS, "DENY"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ];
            return (headers, bytes).into_response();
        }
    }
    ApiError::not_found().into_response()
}

/// RabbitMQ's answer to a PUT: 201 when it created the object, 204 when it was there.
pub fn created_or_updated(existed: bool) -> axum::response::Response {
    use axum::response::IntoResponse;
    match existed {
        true => axum::http::StatusCode::NO_CONTENT,
        false => axum::http::StatusCode::CREATED,
    }
    .into_response()
}

/// 204, the answer to a DELETE that did something.
pub fn no_content() -> axum::response::Response {
    use axum::response::IntoResponse;
    axum::http::StatusCode::NO_CONTENT.into_response()
}

/// A request body as JSON; an empty body is `{}`.
pub fn body_json(body: &Bytes) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|_| ApiError::bad_request("not_json"))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("not_json"));
    }
    Ok(value)
}

/// A boolean field of a request body: JSON true/false, or "true"/"false" as rabbitmqadmin
/// sends them.
pub fn body_bool(body: &Value, key: &str, default: bool) -> ApiResult<bool> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" => Ok(true),
        Some(Value::String(s)) if s == "false" => Ok(false),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be a boolean, got {other}"
        ))),
    }
}

impl Api {
    /// The vhost of a path, if it exists (404) and the user may use it (401 otherwise):
    /// RabbitMQ's is_authorized_vhost, for the vhost's objects and acting in it.
    pub fn vhost_for(&self, who: &Identity, name: &str) -> ApiResult<Arc<VHost>> {
        let vhost = self.broker.vhost(name).ok_or_else(ApiError::not_found)?;
        if !self.uses_vhost(who, name) {
            return Err(ApiError::not_authorised(NOT_VHOST_USER));
        }
        Ok(vhost)
    }

    /// The vhost of a path whose totals or limits monitoring users see too.
    pub fn seen_vhost_for(&self, who: &Identity, name: &str) -> ApiResult<Arc<VHost>> {
        let vhost = self.broker.vhost(name).ok_or_else(ApiError::not_found)?;
        if !self.sees_vhost(who, name) {
            return Err(ApiError::not_authorised(NOT_VHOST_USER));
        }
        Ok(vhost)
    }

    /// Whose queues, exchanges, bindings, policies and parameters a user sees, and where it
    /// may act: administrators every vhost, others those they have permissions in
    /// (monitoring users too).
    pub fn uses_vhost(&self, who: &Identity, vhost: &str) -> bool {
        who.is_admin() || self.accounts.can_access_vhost(&who.name, vhost)
    }

    /// Which vhosts /api/vhosts, vhost limits and the overview's totals show: monitoring
    /// users every one, others those they have permissions in.
    pub fn sees_vhost(&self, who: &Identity, vhost: &str) -> bool {
        who.is_monitor() || self.accounts.can_access_vhost(&who.name, vhost)
    }

    /// The vhosts whose objects a user's lists show (`uses_vhost`).
    pub fn used_vhosts(&self, who: &Identity) -> Vec<Arc<VHost>> {
        self.broker
            .vhosts()
            .into_iter()
            .filter(|v| self.uses_vhost(who, &v.name))
            .collect()
    }

    /// The vhosts a user sees listed (`sees_vhost`).
    pub fn seen_vhosts(&self, who: &Identity) -> Vec<Arc<VHost>> {
        self.broker
            .vhosts()
            .into_iter()
            .filter(|v| self.sees_vhost(who, &v.name))
            .collect()
    }

    /// A policy or runtime parameter of a vhost: administrators, and policymakers with
    /// permissions in it (RabbitMQ's is_authorized_policies; a missing vhost passes, to be
    /// 404).
    pub fn require_policymaker_in(&self, who: &Identity, vhost: &str) -> ApiResult<()> {
        let in_vhost =
            self.broker.vhost(vhost).is_none() || self.accounts.can_access_vhost(&who.name, vhost);
        match who.is_admin() || (who.is_policymaker() && in_vhost) {
            true => Ok(()),
            false => Err(ApiError::not_authorised(NOT_OBJECT_USER)),
        }
    }

    /// The user acting in a vhost, with its AMQP permissions checked as `report` says.
    pub fn acting<'a>(
        &'a self,
        who: &'a Identity,
        vhost: &'a str,
        report: Report,
    ) -> ApiResult<Acting<'a>> {
        Acting::new(&self.broker.access, who, vhost, report)
    }
}

/// Key of an object's rates: kind, vhost and name, NUL-separated.
pub fn rate_key(kind: &str, vhost: &str, name: &str) -> String {
    let mut key = String::new();
    rate_key_into(&mut key, kind, vhost, name);
    key
}

/// Writes [`rate_key`] into `key` (a buffer the sampler reuses).
fn rate_key_into(key: &mut String, kind: &str, vhost: &str, name: &str) {
    for (i, part) in [kind, vhost, name].into_iter().enumerate() {
        if i > 0 {
            key.push('\0');
        }
        key.push_str(part);
    }
}

/// Samples every counter the API shows rates for, every `rates::SAMPLE_INTERVAL`, until the
/// API is gone.
pub async fn sample_forever(api: Weak<Api>) {
    let mut tick = tokio::time::interval(crate::rates::SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(api) = api.upgrade() else {
            return;
        };
        // A round can read many queues (the first reads every one, a million: a second or
        // more of CPU; later ones those that changed), so it runs on a blocking thread: on an
        // async worker it stalled the connections queued behind it, and a client declaring
        // queues without pause heard nothing for 15 s and closed (amqp091-go at 900,000
        // queues).
        if tokio::task::spawn_blocking(move || sample_round(&api))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// One round of the sampler: the queues that changed into their rates and the vhosts'
/// totals (`queue_rates.rs`), every other object's counters into the rates, and the vhosts'
/// and the overview's into the history.
fn sample_round(api: &Api) {
    let vhosts = api.broker.vhosts();
    let queue_totals = api.queue_rates.round(&vhosts);
    let mut round = api.rates.begin();
    let mut kept = Vec::new();
    let mut all_queues = [0u64; 3];
    for (vhost, vhost_queues) in vhosts.iter().zip(queue_totals) {
        for x in vhost.exchanges() {
            round.record(
                |k| rate_key_into(k, "exchange", &vhost.name, &x.name),
                &counts_vec(&x.stats.snapshot()),
            );
        }
        let mut values = counts_vec(&api.broker.registry.message_totals(Some(&vhost.name)));
        values.extend(vhost_queues);
        round.record(|k| rate_key_into(k, "vhost", &vhost.name, ""), &values);
        kept.push((rate_key("vhost", &vhost.name, ""), values));
        for i in 0..3 {
            all_queues[i] += vhost_queues[i];
        }
    }
    for c in api.broker.registry.connections() {
        use std::sync::atomic::Ordering::Relaxed;
        round.record(
            |k| rate_key_into(k, "connection", "", &c.name),
            &[c.recv_oct.load(Relaxed), c.send_oct.load(Relaxed)],
        );
        for ch in c.channels() {
            round.record(
                |k| rate_key_into(k, "channel", &c.name, &ch.number.to_string()),
                &counts_vec(&ch.stats.snapshot()),
            );
        }
    }
    let mut values = counts_vec(&api.broker.registry.message_totals(None));
    values.extend(all_queues);
    round.record(|k| rate_key_into(k, "overview", "", ""), &values);
    kept.push((rate_key("overview", "", ""), values));
    api.history.record(crate::history::now_ms(), kept);
    api.rates.finish(round);
}

/// This node's message counters and rates for `cluster_view` (the other nodes add them to
/// theirs): `{"overview", "vhosts": {vhost: …}, "queues": {vhost: {queue: …}},
/// "exchanges": {vhost: {exchange: …}}}`, each a `message_stats` object; objects whose
/// counters are all 0 here are left out.
pub(crate) fn stats_of_this_node(api: &Api) -> Value {
    use crate::json::{message_stats, CHANNEL_STATS, EXCHANGE_STATS, QUEUE_STATS};
    use serde_json::{json, Map};
    use warren_broker::MessageCounts;
    let moved = |counts: &MessageCounts| counts.fields().iter().any(|(_, v)| *v > 0);
    let stats = |counts: &MessageCounts, key: String, which: &[&str]| {
        message_stats(counts, api.rates.get(&key).as_deref(), which)
    };
    let queue_stats = |counts: &MessageCounts, vhost: &str, queue: &str| {
        message_stats(
            counts,
            api.queue_rates.get(vhost, queue).as_deref(),
            QUEUE_STATS,
        )
    };
    let registry = &api.broker.registry;
    let (mut vhosts, mut queues, mut exchanges) = (Map::new(), Map::new(), Map::new());
    for vhost in api.broker.vhosts() {
        let counts = registry.message_totals(Some(&vhost.name));
        if moved(&counts) {
            let key = rate_key("vhost", &vhost.name, "");
            vhosts.insert(vhost.name.clone(), stats(&counts, key, CHANNEL_STATS));
        }
        // Each object of one kind in the vhost whose counters moved, by name.
        let by_name = |kind: &str, which: &[&str], counted: Vec<(String, MessageCounts)>| {
            let mut in_vhost = Map::new();
            for (name, counts) in counted.into_iter().filter(|(_, c)| moved(c)) {
                let key = rate_key(kind, &vhost.name, &name);
                in_vhost.insert(name, stats(&counts, key, which));
            }
            Value::Object(in_vhost)
        };
        let mut in_vhost = Map::new();
        for q in vhost.queues() {
            let counts = q.stats.snapshot();
            if moved(&counts) {
                let stats = queue_stats(&counts, &vhost.name, &q.name);
                in_vhost.insert(q.name.to_string(), stats);
            }
        }
        queues.insert(vhost.name.clone(), Value::Object(in_vhost));
        let counted = vhost
            .exchanges()
            .iter()
            .map(|x| (x.name.to_string(), x.stats.snapshot()))
            .collect();
        exchanges.insert(
            vhost.name.clone(),
            by_name("exchange", EXCHANGE_STATS, counted),
        );
    }
    let overview = registry.message_totals(None);
    json!({
        "overview": stats(&overview, rate_key("overview", "", ""), CHANNEL_STATS),
        "vhosts": vhosts,
        "queues": queues,
        "exchanges": exchanges,
    })
}

/// Where a queue's, vhost's or the overview's sampled values hold messages, messages_ready
/// and messages_unacknowledged: after the counters of `MessageCounts::fields`.
pub(crate) use crate::queue_rates::QUEUE_TOTALS_COLUMN;

/// A snapshot's counters in `MessageCounts::fields` order.
fn counts_vec(counts: &warren_broker::MessageCounts) -> Vec<u64> {
    counts.fields().iter().map(|(_, v)| *v).collect()
}

/// A vhost's queues or exchanges (`T`), as its part of a list (`list::respond_named`): its
/// rows are the entities, built as JSON only if served.
pub(crate) struct Listed<T> {
    pub vhost: Arc<VHost>,
    of: std::marker::PhantomData<T>,
}

/// The lists of each of `vhosts` (in their order).
pub(crate) fn listed<T>(vhosts: Vec<Arc<VHost>>) -> Vec<Listed<T>> {
    vhosts
        .into_iter()
        .map(|vhost| Listed {
            vhost,
            of: std::marker::PhantomData,
        })
        .collect()
}

/// How a vhost lends out its queues or its exchanges in name order.
pub(crate) trait InVhost: Sized {
    fn read_in_order<R>(
        vhost: &VHost,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<Self>>) -> R,
    ) -> R;
}

impl InVhost for warren_broker::Queue {
    fn read_in_order<R>(
        vhost: &VHost,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<Self>>) -> R,
    ) -> R {
        vhost.read_queues_in_order(read)
    }
}

impl InVhost for warren_broker::Exchange {
    fn read_in_order<R>(
        vhost: &VHost,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<Self>>) -> R,
    ) -> R {
        vhost.read_exchanges_in_order(read)
    }
}

impl<T: InVhost + Named> crate::list::NameOrdered for Listed<T> {
    type Row = Arc<T>;

    fn name(row: &Arc<T>) -> &str {
        row.name().as_str()
    }

    fn read_in_order<R>(&self, read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<T>>) -> R) -> R {
        T::read_in_order(&self.vhost, read)
    }
}
