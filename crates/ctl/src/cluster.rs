//! `cluster_status`, `add_cluster_node` and `forget_cluster_node`, over /api/cluster/*, and
//! `grow_quorum_queues` (rabbitmq-queues grow), over /api/queues/quorum/replicas/on/*/grow.
//! `cluster_status` keeps `rabbitmqctl cluster_status`'s first sections (Basics with the
//! cluster name, Disk Nodes, Running Nodes, as RabbitMQ 3.10 prints them)
//! and adds the metadata group's: its leader and term, and per member whether the failure
//! detector sees it up, its matched log index and its lag behind the leader.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::output::Format;
use crate::Context;
use serde_json::{json, Value};
use std::fmt::Write as _;

pub fn cluster_status(ctx: &Context) -> Result<(), CtlError> {
    let status = match ctx.api.get("/api/cluster/status") {
        Ok(status) => status,
        // RabbitMQ's management API has no such view (rabbitmqctl asks the node itself).
        Err(e) if e.status() == Some(404) => {
            return Err(CtlError::new(
                ExitCode::Unavailable,
                "cluster_status needs Warren's /api/cluster/status, which this API does not \
                 have (against RabbitMQ, use rabbitmqctl cluster_status)",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    if ctx.style.format == Format::Json {
        println!("{status}");
    } else {
        let cluster_name = ctx.api.get("/api/cluster-name")?;
        print!("{}", status_text(&status, &cluster_name["name"]));
    }
    Ok(())
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn status_text(status: &Value, cluster_name: &Value) -> String {
    let members = status["members"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "Cluster status of node {} ...", text(&status["node"]));
    let _ = writeln!(out, "Basics\n\nCluster name: {}", text(cluster_name));
    let _ = writeln!(out, "\nDisk Nodes\n");
    for member in &members {
        let _ = writeln!(out, "{}", text(&member["name"]));
    }
    let _ = writeln!(out, "\nRunning Nodes\n");
    for member in members.iter().filter(|m| m["running"] == json!(true)) {
        let _ = writeln!(out, "{}", text(&member["name"]));
    }
    let _ = writeln!(out, "\nMetadata Raft group\n");
    let _ = writeln!(out, "Leader: {}", text(&status["leader"]));
    let _ = writeln!(out, "Term: {}", text(&status["term"]));
    let _ = writeln!(out, "This node: {}", text(&status["state"]));
    let _ = writeln!(
        out,
        "Last log index: {}, applied: {}",
        text(&status["last_log_index"]),
        text(&status["last_applied_index"])
    );
    let _ = writeln!(out, "\nMembers\n");
    for member in &members {
        let _ = writeln!(
            out,
            "{} at {}: {}, {}{}, matched index {}, lag {}",
            text(&member["name"]),
            text(&member["address"]),
            if member["running"] == json!(true) {
                "up"
            } else {
                "down"
            },
            if member["voter"] == json!(true) {
                "voter"
            } else {
                "learner"
            },
            if member["leader"] == json!(true) {
                ", leader"
            } else {
                ""
            },
            text(&member["matched_index"]),
            text(&member["lag"]),
        );
    }
    out
}

pub fn add_cluster_node(ctx: &Context, name: &str, address: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Adding node {name} at {address} to the cluster ..."
    ));
    ctx.api
        .post_text(
            "/api/cluster/nodes",
            json!({"name": name, "address": address}).to_string(),
        )
        .map(drop)
        .map_err(Into::into)
}

pub fn forget_cluster_node(ctx: &Context, name: &str) -> Result<(), CtlError> {
    ctx.style
        .banner(&format!("Removing node {name} from the cluster"));
    ctx.api
        .delete(&format!("/api/cluster/nodes/{}", segment(name)), &[])
        .map_err(Into::into)
}

pub fn grow_quorum_queues(ctx: &Context, name: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Growing quorum queues: adding {name} to every quorum queue below its size ..."
    ));
    let answer = ctx.api.post_text(
        &format!("/api/queues/quorum/replicas/on/{}/grow", segment(name)),
        String::new(),
    )?;
    let changes: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
    let mut failed = 0;
    for change in changes.as_array().into_iter().flatten() {
        let field = |key: &str| change.get(key).and_then(Value::as_str).unwrap_or_default();
        if field("result") != "ok" {
            failed += 1;
        }
        println!("{}\t{}\t{}", field("vhost"), field("name"), field("result"));
    }
    if failed > 0 {
        return Err(CtlError::new(
            crate::exit::ExitCode::Unavailable,
            format!("{failed} quorum queue(s) could not be grown onto {name}"),
        ));
    }
    Ok(())
}
