//! One cluster in every view. What the API lists of connections, channels and consumers,
//! the figures of /api/nodes and the message counters and rates of the overview, vhosts,
//! queues and exchanges are each node's own; the node asked gathers its own and every other
//! running node's, so that every node shows the whole cluster, as RabbitMQ's management
//! plugin does. The questions travel over the cluster's forwarding links
//! (`warren_broker::remote::ask_peers`); this module asks them; `peer_answers.rs`,
//! registered as the node's `PeerAnswers`, answers the other nodes'. A node that does not answer within
//! [`PEER_TIMEOUT`] is left out of that one answer (its connections are not listed, its
//! counters not added), as RabbitMQ leaves out a node that does not answer its stats query.
//!
//! The answers are JSON in the API's own shapes, so a node lists another's connection
//! exactly as that node would, with its `node` field naming where it lives.

use crate::Api;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::time::Duration;
use warren_broker::remote::{ask_peer, ask_peers};

/// How long a node waits for another's part of a view.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Every connection of the node with its channels and their consumers:
/// `[{"connection", "channels": [{"channel", "consumers": [...]}]}]`.
pub(crate) const CONNECTIONS: &str = "mgmt.connections";
/// The node's /api/nodes entry.
pub(crate) const NODE: &str = "mgmt.node";
/// The node's message counters and rates (`stats_of_this_node`).
pub(crate) const STATS: &str = "mgmt.stats";
/// Close the connection named in the body (`{"name", "reason"}`): `{"closed": bool}`.
pub(crate) const CLOSE: &str = "mgmt.close";

/// Every other running node's answer to `topic`, as JSON (nodes that did not answer, or
/// answered something unreadable, left out), with the node's name.
async fn ask_others(api: &Api, topic: &str, body: Bytes) -> Vec<(String, Value)> {
    ask_peers(api.broker.forward_peers(), topic, body, PEER_TIMEOUT)
        .await
        .into_iter()
        .filter_map(|answer| {
            let value = serde_json::from_slice(&answer.body?).ok()?;
            Some((answer.node, value))
        })
        .collect()
}

/// The connection views (`CONNECTIONS`) of every node: this one's (`own`) first.
pub async fn cluster_connections(api: &Api, own: Vec<Value>) -> Vec<Value> {
    let mut views = own;
    for (_, answer) in ask_others(api, CONNECTIONS, Bytes::new()).await {
        if let Value::Array(theirs) = answer {
            views.extend(theirs);
        }
    }
    views
}

/// The /api/nodes entries of the other nodes that answered, by node name.
pub async fn other_nodes(api: &Api) -> Map<String, Value> {
    ask_others(api, NODE, Bytes::new())
        .await
        .into_iter()
        .filter(|(_, node)| node.is_object())
        .collect()
}

/// Asks the node `node` to close its connection `name`: whether it did (false when the
/// node did not answer or has no such connection).
pub async fn close_elsewhere(api: &Api, node: &str, name: &str, reason: &str) -> bool {
    let Some(peer) = api.broker.forward_peers().get(node) else {
        return false;
    };
    let body = Bytes::from(json!({"name": name, "reason": reason}).to_string());
    ask_peer(&peer, CLOSE, body, PEER_TIMEOUT)
        .await
        .and_then(|answer| serde_json::from_slice::<Value>(&answer).ok())
        .is_some_and(|answer| answer["closed"] == true)
}

/// The other nodes' message counters and rates, to add to this node's.
pub struct OtherStats(Vec<Value>);

impl OtherStats {
    pub async fn gather(api: &Api) -> OtherStats {
        OtherStats(
            ask_others(api, STATS, Bytes::new())
                .await
                .into_iter()
                .map(|(_, stats)| stats)
                .collect(),
        )
    }

    /// Adds the other nodes' counters and rates to the overview's `message_stats`.
    pub fn add_to_overview(&self, message_stats: &mut Value) {
        for theirs in &self.0 {
            add_numbers(message_stats, &theirs["overview"]);
        }
    }

    /// Adds the other nodes' counters and rates to each object's `message_stats`: `kind`
    /// is "queues" or "exchanges" (objects named by `vhost` and `name`) or "vhosts" (by
    /// `name`).
    pub fn add_to_objects(&self, kind: &str, objects: &mut [Value]) {
        if self.0.is_empty() {
            return;
        }
        for object in objects {
            let name = object["name"].as_str().unwrap_or_default().to_owned();
            let vhost = object["vhost"].as_str().map(str::to_owned);
            for theirs in &self.0 {
                let stats = match &vhost {
                    Some(vhost) => &theirs[kind][vhost][&name],
                    None => &theirs[kind][&name],
                };
                if !stats.is_null() {
                    add_numbers(&mut object["message_stats"], stats);
                }
            }
        }
    }
}

/// Adds every number of `from` to the same place in `into` (counters and `*_details.rate`
/// alike), taking what `into` lacks.
pub fn add_numbers(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                match into.get_mut(key) {
                    Some(mine) => add_numbers(mine, value),
                    None => {
                        into.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (into @ Value::Number(_), Value::Number(from)) => {
            let sum = match (into.as_u64(), from.as_u64()) {
                (Some(a), Some(b)) => json!(a.saturating_add(b)),
                _ => json!(into.as_f64().unwrap_or(0.0) + from.as_f64().unwrap_or(0.0)),
            };
            *into = sum;
        }
        (into @ Value::Null, from) => *into = from.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_add_up_and_missing_fields_are_taken() {
        let mut mine = json!({"publish": 3, "publish_details": {"rate": 1.5}});
        add_numbers(
            &mut mine,
            &json!({"publish": 4, "publish_details": {"rate": 0.5}, "ack": 2}),
        );
        assert_eq!(
            mine,
            json!({"publish": 7, "publish_details": {"rate": 2.0}, "ack": 2})
        );
    }

    #[test]
    fn objects_get_the_other_nodes_counters_by_vhost_and_name() {
        let others = OtherStats(vec![
            json!({"queues": {"/": {"q": {"publish": 5}}}}),
            json!({"queues": {"/": {"q": {"publish": 1}, "other": {"publish": 9}}}}),
        ]);
        let mut queues = vec![
            json!({"vhost": "/", "name": "q", "message_stats": {"publish": 2}}),
            json!({"vhost": "/", "name": "idle", "message_stats": {}}),
        ];
        others.add_to_objects("queues", &mut queues);
        assert_eq!(queues[0]["message_stats"]["publish"], 8);
        assert_eq!(queues[1]["message_stats"], json!({}));
    }
}
