//! Policies, connections, queues and definitions: set_policy, clear_policy,
//! close_connection, purge_queue, export_definitions, import_definitions.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::{delete_or, missing_in_vhost, require_vhost, Context};
use serde_json::{json, Value};
use std::io::{Read, Write};

fn policy_path(vhost: &str, name: &str) -> String {
    format!("/api/policies/{}/{}", segment(vhost), segment(name))
}

pub fn set_policy(
    ctx: &Context,
    name: &str,
    pattern: &str,
    definition: &str,
    priority: i64,
    apply_to: &str,
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Setting policy \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with priority \"{priority}\" for vhost \"{vhost}\" ..."
    ));
    let definition = parse_definition(definition)?;
    let body = json!({
        "pattern": pattern,
        "definition": definition,
        "priority": priority,
        "apply-to": apply_to,
    });
    match ctx.api.put(&policy_path(vhost, name), &body) {
        Err(e) if e.status() == Some(404) => {
            require_vhost(ctx, vhost)?;
            Err(e.into())
        }
        // A definition RabbitMQ's validation refuses: 69 from rabbitmqctl, not 65.
        Err(e) if e.status() == Some(400) => Err(CtlError::new(
            ExitCode::Unavailable,
            CtlError::from(e).message,
        )),
        other => Ok(other?),
    }
}

/// A policy definition must be a JSON object; caught here, before the API, with the JSON
/// parser's own explanation (rabbitmqctl 3.10.8: "JSON decoding error", 69).
fn parse_definition(definition: &str) -> Result<Value, CtlError> {
    match serde_json::from_str::<Value>(definition) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(_) => Err(CtlError::new(
            ExitCode::Unavailable,
            "the policy definition must be a JSON object, e.g. '{\"max-length\":1000}'",
        )),
        Err(e) => Err(CtlError::new(
            ExitCode::Unavailable,
            format!("the policy definition is not valid JSON: {e}"),
        )),
    }
}

pub fn clear_policy(ctx: &Context, name: &str) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Clearing policy \"{name}\" on vhost \"{vhost}\" ..."
    ));
    // In a vhost that is not there too: 69, "Parameter does not exist" (rabbitmqctl 3.10.8).
    delete_or(ctx, &policy_path(vhost, name), &[], || {
        CtlError::new(
            ExitCode::Unavailable,
            format!("policy \"{name}\" does not exist in vhost \"{vhost}\""),
        )
    })
}

pub fn close_connection(
    ctx: &Context,
    connection: &str,
    explanation: &str,
) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Closing connection {connection}, reason: {explanation}..."
    ));
    let path = format!("/api/connections/{}", segment(connection));
    delete_or(ctx, &path, &[("X-Reason", explanation)], || {
        CtlError::new(
            ExitCode::Unavailable,
            format!(
                "connection \"{connection}\" does not exist (list_connections name shows the names)"
            ),
        )
    })
}

/// rabbitmqctl close_all_connections: each connection of the vhost (of the node with
/// `global`) is closed through the API with the reason, up to `limit` (0: all).
pub fn close_all_connections(
    ctx: &Context,
    explanation: &str,
    global: bool,
    limit: usize,
    delay: std::time::Duration,
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    let node = match global {
        true => ctx.api.get("/api/overview")?["node"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        false => String::new(),
    };
    ctx.style.banner(&match (global, limit) {
        (true, _) => format!(
            "Closing all connections to node {node} (across all vhosts), reason: {explanation}..."
        ),
        (false, 0) => format!("Closing all connections in vhost {vhost}, reason: {explanation}..."),
        (false, n) => format!("Closing {n} connections in vhost {vhost}, reason: {explanation}..."),
    });
    let listed = match global {
        true => ctx.api.get("/api/connections")?,
        // A vhost that is not there has no connections to close (rabbitmqctl: 0).
        false => match ctx
            .api
            .get(&format!("/api/vhosts/{}/connections", segment(vhost)))
        {
            Err(e) if e.status() == Some(404) => Value::Array(Vec::new()),
            other => other?,
        },
    };
    let names: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(|n| n.as_str()))
        .take(if limit == 0 || global {
            usize::MAX
        } else {
            limit
        })
        .collect();
    let mut closed = 0;
    for (i, name) in names.iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        match ctx.api.delete(
            &format!("/api/connections/{}", segment(name)),
            &[("X-Reason", explanation)],
        ) {
            Ok(()) => closed += 1,
            // Gone meanwhile: nothing left to close.
            Err(e) if e.status() == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
    }
    println!("Closed {closed} connections");
    Ok(())
}

/// A node setting through one of Warren's own paths, /api/nodes/NODE/`setting`: prints
/// `banner` (given the node's name) and PUTs `body`. RabbitMQ's API has no such path (404):
/// then the error says that `command` needs Warren's API.
fn put_node_setting(
    ctx: &Context,
    command: &str,
    setting: &str,
    banner: impl FnOnce(&str) -> String,
    body: &serde_json::Value,
) -> Result<(), CtlError> {
    let node = ctx.api.get("/api/overview")?["node"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ctx.style.banner(&banner(&node));
    let path = format!("/api/nodes/{}/{setting}", segment(&node));
    match ctx.api.put(&path, body) {
        Err(e) if e.status() == Some(404) => Err(CtlError::new(
            ExitCode::Unavailable,
            format!("{command} needs Warren's API (against RabbitMQ, use rabbitmqctl)"),
        )),
        other => Ok(other?),
    }
}

/// rabbitmqctl stop_app (`running` false) / start_app (true), through Warren's
/// PUT /api/nodes/NODE/app, which answers once the AMQP side has stopped or started.
pub fn switch_app(ctx: &Context, running: bool) -> Result<(), CtlError> {
    let (command, banner): (_, fn(&str) -> String) = match running {
        true => ("start_app", |node| format!("Starting node {node} ...")),
        false => ("stop_app", |node| {
            format!("Stopping rabbit application on node {node} ...")
        }),
    };
    put_node_setting(ctx, command, "app", banner, &json!({ "running": running }))
}

/// rabbitmqctl set_vm_memory_high_watermark: `FRACTION` (0.0–1.0 of the machine's memory) or
/// `absolute VALUE` (bytes, or with rabbitmqctl's units: k kiB M MiB G GiB kB MB GB), through
/// Warren's PUT /api/nodes/NODE/memory-high-watermark.
pub fn set_vm_memory_high_watermark(ctx: &Context, args: &[String]) -> Result<(), CtlError> {
    let (body, shown) = match args {
        [absolute, value] if absolute == "absolute" => {
            let bytes = absolute_bytes(value).ok_or_else(|| {
                CtlError::new(
                    ExitCode::DataErr,
                    format!("'{value}': the threshold should be an integer with optional units (k, kiB, M, MiB, G, GiB, kB, MB, GB)"),
                )
            })?;
            (json!({"bytes": bytes}), format!("{value} bytes"))
        }
        [fraction] => match fraction.parse::<f64>() {
            Ok(f) if (0.0..=1.0).contains(&f) => (json!({"fraction": f}), fraction.clone()),
            _ => {
                return Err(CtlError::new(
                    ExitCode::DataErr,
                    "The threshold should be a fraction between 0.0 and 1.0",
                ))
            }
        },
        _ => {
            return Err(CtlError::usage(
                "set_vm_memory_high_watermark <fraction> | absolute <value>",
            ))
        }
    };
    put_node_setting(
        ctx,
        "set_vm_memory_high_watermark",
        "memory-high-watermark",
        |node| format!("Setting memory threshold on {node} to {shown} ..."),
        &body,
    )
}

/// rabbitmqctl set_disk_free_limit: bytes, or a value with rabbitmqctl's units, through
/// Warren's PUT /api/nodes/NODE/disk-free-limit.
pub fn set_disk_free_limit(ctx: &Context, limit: &str) -> Result<(), CtlError> {
    let bytes = absolute_bytes(limit).ok_or_else(|| {
        CtlError::new(
            ExitCode::DataErr,
            format!("'{limit}': the limit should be an integer with optional units (k, kiB, M, MiB, G, GiB, kB, MB, GB)"),
        )
    })?;
    put_node_setting(
        ctx,
        "set_disk_free_limit",
        "disk-free-limit",
        |node| format!("Setting disk free limit on {node} to {limit} bytes ..."),
        &json!({ "bytes": bytes }),
    )
}

/// rabbitmqctl's absolute memory value: an integer and one of its units (none: bytes).
fn absolute_bytes(value: &str) -> Option<u64> {
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match unit {
        "" => 1,
        "k" | "kiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

pub fn purge_queue(ctx: &Context, queue: &str) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style
        .banner(&format!("Purging queue '{queue}' in vhost '{vhost}' ..."));
    let path = format!("/api/queues/{}/{}/contents", segment(vhost), segment(queue));
    delete_or(ctx, &path, &[], || {
        let missing = format!("queue '{queue}' does not exist in vhost '{vhost}'");
        missing_in_vhost(ctx, vhost, missing)
    })
}

/// rabbitmqctl delete_queue: its banner, the API's DELETE (with `if-empty` / `if-unused`),
/// and rabbitmqctl's result line with the ready messages the queue held. A missing queue
/// and a refused condition are rabbitmqctl's usage errors (64).
pub fn delete_queue(
    ctx: &Context,
    queue: &str,
    if_empty: bool,
    if_unused: bool,
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    let conditions: Vec<&str> = [
        (if_empty, "if queue is empty "),
        (if_unused, "if queue is unused "),
    ]
    .into_iter()
    .filter_map(|(set, words)| set.then_some(words))
    .collect();
    ctx.style.banner(&format!(
        "Deleting queue '{queue}' on vhost '{vhost}' {}...",
        conditions.join("and ")
    ));
    let path = format!("/api/queues/{}/{}", segment(vhost), segment(queue));
    let ready = match ctx.api.get(&path) {
        Ok(info) => info["messages_ready"].as_u64().unwrap_or(0),
        Err(e) if e.status() == Some(404) => {
            return Err(CtlError::new(ExitCode::Usage, "Queue not found"))
        }
        Err(e) => return Err(e.into()),
    };
    let mut query = Vec::new();
    if if_empty {
        query.push("if-empty=true");
    }
    if if_unused {
        query.push("if-unused=true");
    }
    let path = match query.is_empty() {
        true => path,
        false => format!("{path}?{}", query.join("&")),
    };
    match ctx.api.delete(&path, &[]) {
        Err(e) if e.status() == Some(404) => Err(CtlError::new(ExitCode::Usage, "Queue not found")),
        Err(e) if e.status() == Some(400) && if_empty && ready > 0 => {
            Err(CtlError::new(ExitCode::Usage, "Queue is not empty"))
        }
        Err(e) if e.status() == Some(400) && if_unused => {
            Err(CtlError::new(ExitCode::Usage, "Queue is in use"))
        }
        Err(e) => Err(e.into()),
        Ok(_) => {
            println!("Queue was successfully deleted with {ready} ready messages");
            Ok(())
        }
    }
}

/// "-" means stdout (export) or stdin (import), as in rabbitmqctl.
const STDIO: &str = "-";

pub fn export_definitions(ctx: &Context, path: &str) -> Result<(), CtlError> {
    if path != STDIO {
        ctx.style.banner(&format!(
            "Exporting definitions in JSON to a file at \"{path}\" ..."
        ));
    }
    // Written as the API sent it: what is imported later is exactly what was exported.
    let definitions = ctx.api.get_text("/api/definitions")?;
    let written = if path == STDIO {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(definitions.as_bytes())
            .and_then(|()| stdout.write_all(b"\n"))
    } else {
        std::fs::write(path, definitions.as_bytes())
    };
    written.map_err(|e| CtlError::new(ExitCode::DataErr, format!("writing {path}: {e}")))
}

pub fn import_definitions(ctx: &Context, path: &str) -> Result<(), CtlError> {
    let what = if path == STDIO {
        "standard input".to_owned()
    } else {
        format!("a file at \"{path}\"")
    };
    ctx.style
        .banner(&format!("Importing definitions in JSON from {what} ..."));
    let mut text = String::new();
    let read = if path == STDIO {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| CtlError::new(ExitCode::DataErr, format!("reading {path}: {e}")))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(_)) => {}
        Ok(_) => {
            return Err(CtlError::new(
                ExitCode::DataErr,
                format!("{path}: definitions must be a JSON object"),
            ))
        }
        Err(e) => {
            return Err(CtlError::new(
                ExitCode::DataErr,
                format!("{path} is not valid JSON: {e}"),
            ))
        }
    }
    let answer = ctx.api.post_text("/api/definitions", text)?;
    // Warren answers 200 {"skipped": [why, …]} when it left entries out (RabbitMQ: 204).
    let skipped = serde_json::from_str::<Value>(&answer).ok();
    let skipped = skipped.as_ref().and_then(|a| a.get("skipped")?.as_array());
    for why in skipped.into_iter().flatten().filter_map(Value::as_str) {
        eprintln!("Warning: not imported: {why}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_definitions_must_be_json_objects() {
        assert_eq!(
            parse_definition(r#"{"max-length": 10}"#).unwrap(),
            json!({"max-length": 10})
        );
        // rabbitmqctl 3.10.8 exits 69 for both.
        let err = parse_definition("{bad").unwrap_err();
        assert_eq!(err.code, ExitCode::Unavailable);
        assert!(err.message.contains("not valid JSON"));
        assert_eq!(
            parse_definition("[1]").unwrap_err().code,
            ExitCode::Unavailable
        );
    }

    #[test]
    fn absolute_values_take_rabbitmqctls_units() {
        assert_eq!(absolute_bytes("1000000"), Some(1_000_000));
        assert_eq!(absolute_bytes("1GB"), Some(1_000_000_000));
        assert_eq!(absolute_bytes("512MiB"), Some(512 << 20));
        assert_eq!(absolute_bytes("2k"), Some(2048));
        assert_eq!(absolute_bytes("1.5GB"), None);
        assert_eq!(absolute_bytes("10TB"), None);
        assert_eq!(absolute_bytes(""), None);
    }
}
