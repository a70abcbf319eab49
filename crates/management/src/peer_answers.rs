//! This node's part of the cluster-wide views (`cluster_view.rs`): registered as the node's
//! `PeerAnswers`, it answers the other nodes' questions with the views the routes build of
//! this node alone.

use crate::cluster_view::{CLOSE, CONNECTIONS, NODE, STATS};
use crate::routes::{connection_views, node_json, stats_of_this_node};
use crate::Api;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Weak;
use warren_broker::remote::{AnswerFuture, PeerAnswers};

/// Answers the other nodes' questions with this node's part of a view.
pub struct Answers(pub Weak<Api>);

impl PeerAnswers for Answers {
    fn answer(&self, topic: &str, body: Bytes) -> AnswerFuture {
        let api = self.0.upgrade();
        let topic = topic.to_owned();
        Box::pin(async move {
            let Some(api) = api else {
                return Bytes::new();
            };
            let answer = match topic.as_str() {
                CONNECTIONS => Value::Array(connection_views(&api)),
                NODE => node_json(&api),
                STATS => stats_of_this_node(&api),
                CLOSE => json!({"closed": close_here(&api, &body)}),
                _ => return Bytes::new(),
            };
            Bytes::from(answer.to_string())
        })
    }
}

fn close_here(api: &Api, body: &[u8]) -> bool {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let (Some(name), Some(reason)) = (request["name"].as_str(), request["reason"].as_str()) else {
        return false;
    };
    match api.broker.registry.connection(name) {
        Some(c) => {
            c.request_close(reason.to_owned());
            true
        }
        None => false,
    }
}
