//! `quorum_status [VHOST] QUEUE`: rabbitmq-queues' `quorum_status` over the management API
//! (the `raft` object Warren adds to one quorum queue's GET /api/queues/{vhost}/{name}).
//!
//! One row per member with rabbitmq-queues' columns (Node Name, Raft State, Log Index, Commit
//! Index, Snapshot Index, Term) and Warren's Matched Index and Lag. RabbitMQ asks every
//! member for its own row; Warren shows the queried node's view without RPCs to the others:
//! its own member in full, another member's Log Index as the matched index the leader knows
//! (on the leader only) and the rest empty. Machine Version is left out (Warren's machine
//! has one version). A missing queue is `not_found`, a classic one refused with RabbitMQ's
//! text, both exit 69 as rabbitmq-queues.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::output;
use crate::Context;
use serde_json::Value;

const HEADERS: &[&str] = &[
    "Node Name",
    "Raft State",
    "Log Index",
    "Commit Index",
    "Snapshot Index",
    "Term",
    "Matched Index",
    "Lag",
];

pub fn quorum_status(ctx: &Context, args: &[String]) -> Result<(), CtlError> {
    let (vhost, queue) = match args {
        [queue] => (ctx.vhost.as_str(), queue.as_str()),
        [vhost, queue] => (vhost.as_str(), queue.as_str()),
        _ => return Err(CtlError::usage("quorum_status takes [VHOST] QUEUE")),
    };
    let path = format!("/api/queues/{}/{}", segment(vhost), segment(queue));
    let found = match ctx.api.get(&path) {
        Ok(found) => found,
        Err(e) if e.status() == Some(404) => {
            crate::require_vhost(ctx, vhost)?;
            return Err(CtlError::new(ExitCode::Unavailable, "not_found"));
        }
        Err(e) => return Err(e.into()),
    };
    ctx.style.banner(&format!(
        "Status of quorum queue {queue} on node {} ...",
        output::cell(&found["node"])
    ));
    if found["type"] != "quorum" {
        let kind = found["type"].as_str().unwrap_or("classic");
        return Err(CtlError::new(
            ExitCode::Unavailable,
            format!("Cannot get quorum status of a {kind} queue"),
        ));
    }
    let raft = &found["raft"];
    // RabbitMQ's management API shows no Raft group (rabbitmq-queues asks the node).
    if raft.is_null() && !is_warren(ctx)? {
        return Err(CtlError::new(
            ExitCode::Unavailable,
            "quorum_status needs Warren's view of the queue's Raft group, which this API \
             does not have (against RabbitMQ, use rabbitmq-queues quorum_status)",
        ));
    }
    if raft.is_null() {
        return Err(CtlError::new(
            ExitCode::Unavailable,
            "the queue's Raft group is still starting on this node",
        ));
    }
    print!("{}", output::render(&ctx.style, HEADERS, &rows(raft)));
    Ok(())
}

/// Whether the API is Warren's (its overview names the product).
fn is_warren(ctx: &Context) -> Result<bool, CtlError> {
    Ok(ctx.api.get("/api/overview")?["product_name"] == "Warren")
}

/// One row per member (see the module comment for what another member's row holds).
fn rows(raft: &Value) -> Vec<Vec<Value>> {
    let members = raft["members"].as_array().cloned().unwrap_or_default();
    members
        .iter()
        .map(|member| {
            let own = member["name"] == raft["node"];
            let (log_index, commit_index, snapshot_index, term) = if own {
                (
                    raft["last_log_index"].clone(),
                    raft["commit_index"].clone(),
                    undefined_if_null(&raft["snapshot_index"]),
                    raft["term"].clone(),
                )
            } else {
                (
                    member["matched_index"].clone(),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                )
            };
            vec![
                member["name"].clone(),
                member["state"].clone(),
                log_index,
                commit_index,
                snapshot_index,
                term,
                member["matched_index"].clone(),
                member["lag"].clone(),
            ]
        })
        .collect()
}

/// rabbitmq-queues prints a member without a snapshot as `undefined`.
fn undefined_if_null(value: &Value) -> Value {
    if value.is_null() {
        Value::String("undefined".into())
    } else {
        value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_queried_member_in_full_and_the_others_as_the_leader_sees_them() {
        let raft = json!({
            "node": "a", "state": "leader", "term": 3, "commit_index": 9,
            "last_log_index": 10, "snapshot_index": null,
            "members": [
                {"name": "a", "state": "leader", "matched_index": 10, "lag": 0},
                {"name": "b", "state": "follower", "matched_index": 7, "lag": 3},
            ],
        });
        assert_eq!(
            rows(&raft),
            vec![
                vec![
                    json!("a"),
                    json!("leader"),
                    json!(10),
                    json!(9),
                    json!("undefined"),
                    json!(3),
                    json!(10),
                    json!(0)
                ],
                vec![
                    json!("b"),
                    json!("follower"),
                    json!(7),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    json!(7),
                    json!(3)
                ],
            ]
        );
    }
}
