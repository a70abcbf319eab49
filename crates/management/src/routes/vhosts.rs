//! /api/vhosts: every vhost the user sees (monitoring users all, others those they have
//! permissions in) with its message totals and rates, and one (administrators).

use super::node::queue_totals;
use super::{queues, rate_key};
use crate::auth::Identity;
use crate::cluster_view::OtherStats;
use crate::error::{ApiError, ApiResult};
use crate::json::{message_stats, CHANNEL_STATS};
use crate::list::{respond, respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::Extension;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::{VHost, VHostMetadata};

fn vhost_json(api: &Api, vhost: &VHost) -> Value {
    let rates = api.rates.get(&rate_key("vhost", &vhost.name, ""));
    let (totals, _) = queues::vhost_totals(vhost);
    let counts = api.broker.registry.message_totals(Some(&vhost.name));
    let VHostMetadata { description, tags } = vhost.metadata();
    // RabbitMQ describes the default vhost so when it makes it.
    let description = match (vhost.name.as_str(), description.is_empty()) {
        ("/", true) => "Default virtual host".to_owned(),
        _ => description,
    };
    let mut body = json!({
        "name": vhost.name,
        "description": description,
        "tags": tags,
        "metadata": {"description": description, "tags": tags},
        "default_queue_type": "classic",
        "tracing": vhost.tracing(),
        "cluster_state": cluster_state(api),
        "message_stats": message_stats(&counts, rates.as_deref(), CHANNEL_STATS),
    });
    if let (Value::Object(b), Value::Object(t)) =
        (&mut body, queue_totals(totals, rates.as_deref()))
    {
        b.extend(t);
    }
    body
}

/// Every node and whether it runs (RabbitMQ's vhost `cluster_state`: "running" or
/// "nodedown").
fn cluster_state(api: &Api) -> Value {
    let mut state = serde_json::Map::new();
    state.insert(api.node.clone(), json!("running"));
    if let Some(cluster) = api.broker.cluster() {
        for member in cluster.status().members {
            let running = member.running || member.name == api.node;
            state.insert(
                member.name,
                json!(if running { "running" } else { "nodedown" }),
            );
        }
    }
    Value::Object(state)
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let mut items: Vec<Value> = api
        .seen_vhosts(&who)
        .iter()
        .map(|v| vhost_json(&api, v))
        .collect();
    OtherStats::gather(&api)
        .await
        .add_to_objects("vhosts", &mut items);
    respond(items, &query)
}

/// One vhost: administrators only, as RabbitMQ 3.10 (others see it in the list).
pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_admin()?;
    let vhost = api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let mut items = [vhost_json(&api, &vhost)];
    OtherStats::gather(&api)
        .await
        .add_to_objects("vhosts", &mut items);
    let [body] = items;
    Ok(respond_one(body, &query))
}
