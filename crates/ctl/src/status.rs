//! `status`: the node's versions, uptime, alarms, memory, file descriptors, disk, totals and
//! listeners, in the sections and wording of `rabbitmqctl status`, from /api/overview,
//! /api/nodes and /api/vhosts. Fields a broker does not report are left out, not invented.

use crate::exit::CtlError;
use crate::output::Format;
use crate::Context;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// What `status` shows, gathered from the API.
struct Status {
    overview: Value,
    /// This node's entry in /api/nodes (Null if the API has none).
    node: Value,
    vhost_count: usize,
}

pub fn status(ctx: &Context) -> Result<(), CtlError> {
    let overview = ctx.api.get("/api/overview")?;
    let node_name = overview.get("node").and_then(Value::as_str).unwrap_or("");
    let nodes = ctx.api.get("/api/nodes")?;
    let node = nodes
        .as_array()
        .and_then(|nodes| {
            nodes
                .iter()
                .find(|n| n.get("name").and_then(Value::as_str) == Some(node_name))
                .or(nodes.first())
        })
        .cloned()
        .unwrap_or(Value::Null);
    let vhosts = ctx.api.get("/api/vhosts")?;
    let status = Status {
        overview,
        node,
        vhost_count: vhosts.as_array().map_or(0, Vec::len),
    };
    if ctx.style.format == Format::Json {
        println!("{}", status.to_json());
    } else {
        print!("{}", status.to_text());
    }
    Ok(())
}

impl Status {
    fn overview(&self, field: &str) -> Option<&Value> {
        self.overview.get(field).filter(|v| !v.is_null())
    }

    fn node(&self, field: &str) -> Option<&Value> {
        self.node.get(field).filter(|v| !v.is_null())
    }

    fn totals(&self, field: &str) -> Option<&Value> {
        self.overview
            .get("object_totals")
            .and_then(|t| t.get(field))
            .filter(|v| !v.is_null())
    }

    /// The alarms in force, by rabbitmqctl's names for them.
    fn alarms(&self) -> Vec<&'static str> {
        let mut alarms = Vec::new();
        if self.node("mem_alarm") == Some(&Value::Bool(true)) {
            alarms.push("memory");
        }
        if self.node("disk_free_alarm") == Some(&Value::Bool(true)) {
            alarms.push("disk");
        }
        alarms
    }

    fn listeners(&self) -> Vec<Value> {
        self.overview("listeners")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// rabbitmqctl's `status --formatter json` keys, where the API has the value.
    fn to_json(&self) -> Value {
        let mut out = Map::new();
        let mut put = |key: &str, value: Option<&Value>| {
            if let Some(value) = value {
                out.insert(key.to_owned(), value.clone());
            }
        };
        put("node", self.overview("node"));
        put("product_name", self.overview("product_name"));
        put("product_version", self.overview("product_version"));
        put("rabbitmq_version", self.overview("rabbitmq_version"));
        put("erlang_version", self.overview("erlang_version"));
        put("pid", self.node("os_pid"));
        let uptime_s = self
            .node("uptime")
            .and_then(Value::as_u64)
            .map(|ms| json!(ms / 1000));
        put("uptime", uptime_s.as_ref());
        put("disk_free", self.node("disk_free"));
        put("disk_free_limit", self.node("disk_free_limit"));
        put("vm_memory_high_watermark_limit", self.node("mem_limit"));
        let alarms = json!(self.alarms());
        put("alarms", Some(&alarms));
        let memory = json!({"total": {"rss": self.node("mem_used")}});
        put("memory", self.node("mem_used").map(|_| &memory));
        let fds = json!({
            "total_used": self.node("fd_used"),
            "total_limit": self.node("fd_total"),
            "sockets_used": self.node("sockets_used"),
            "sockets_limit": self.node("sockets_total"),
        });
        put("file_descriptors", self.node("fd_used").map(|_| &fds));
        let totals = json!({
            "connection_count": self.totals("connections"),
            "queue_count": self.totals("queues"),
            "virtual_host_count": self.vhost_count,
        });
        put("totals", Some(&totals));
        let listeners = json!(self.listeners());
        put("listeners", Some(&listeners));
        Value::Object(out)
    }

    fn to_text(&self) -> String {
        let mut out = String::new();
        let text = |v: Option<&Value>| v.map(crate::output::cell);
        let node = text(self.overview("node")).unwrap_or_default();
        let _ = writeln!(out, "Status of node {node} ...");
        out.push_str("Runtime\n\n");
        let mut line = |label: &str, value: Option<String>| {
            if let Some(value) = value {
                let _ = writeln!(out, "{label}: {value}");
            }
        };
        line("OS PID", text(self.node("os_pid")));
        line(
            "Uptime (seconds)",
            self.node("uptime")
                .and_then(Value::as_u64)
                .map(|ms| (ms / 1000).to_string()),
        );
        line("Product name", text(self.overview("product_name")));
        line("Product version", text(self.overview("product_version")));
        line("RabbitMQ version", text(self.overview("rabbitmq_version")));
        line("Node name", Some(node.clone()));
        line(
            "Erlang configuration",
            text(self.overview("erlang_version")),
        );

        out.push_str("\nAlarms\n\n");
        let alarms = self.alarms();
        if alarms.is_empty() {
            out.push_str("(none)\n");
        }
        for alarm in alarms {
            let _ = writeln!(out, "{alarm} alarm is in effect");
        }

        if let Some(used) = self.node("mem_used").and_then(Value::as_u64) {
            out.push_str("\nMemory\n\n");
            let _ = writeln!(out, "Total memory used: {} gb", gigabytes(used));
            if let Some(limit) = self.node("mem_limit").and_then(Value::as_u64) {
                let _ = writeln!(
                    out,
                    "Memory high watermark setting: computed to: {} gb",
                    gigabytes(limit)
                );
            }
        }

        if let (Some(used), Some(total)) = (self.node("fd_used"), self.node("fd_total")) {
            out.push_str("\nFile Descriptors\n\n");
            let _ = writeln!(out, "Total: {used}, limit: {total}");
            if let (Some(used), Some(total)) =
                (self.node("sockets_used"), self.node("sockets_total"))
            {
                let _ = writeln!(out, "Sockets: {used}, limit: {total}");
            }
        }

        if let Some(free) = self.node("disk_free").and_then(Value::as_u64) {
            out.push_str("\nFree Disk Space\n\n");
            if let Some(limit) = self.node("disk_free_limit").and_then(Value::as_u64) {
                let _ = writeln!(
                    out,
                    "Low free disk space watermark: {} gb",
                    gigabytes(limit)
                );
            }
            let _ = writeln!(out, "Free disk space: {} gb", gigabytes(free));
        }

        out.push_str("\nTotals\n\n");
        if let Some(connections) = self.totals("connections") {
            let _ = writeln!(out, "Connection count: {connections}");
        }
        if let Some(queues) = self.totals("queues") {
            let _ = writeln!(out, "Queue count: {queues}");
        }
        let _ = writeln!(out, "Virtual host count: {}", self.vhost_count);

        out.push_str("\nListeners\n\n");
        for listener in self.listeners() {
            let field = |name: &str| {
                listener
                    .get(name)
                    .map(crate::output::cell)
                    .unwrap_or_default()
            };
            let _ = writeln!(
                out,
                "Interface: {}, port: {}, protocol: {}",
                field("ip_address"),
                field("port"),
                field("protocol")
            );
        }
        out
    }
}

/// Bytes as rabbitmqctl shows them: gigabytes with up to four decimals.
fn gigabytes(bytes: u64) -> String {
    let gb = bytes as f64 / 1e9;
    let rounded = (gb * 10_000.0).round() / 10_000.0;
    rounded.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Status {
        Status {
            overview: json!({
                "node": "warren@host", "product_name": "Warren", "product_version": "0.1.0",
                "object_totals": {"connections": 2, "queues": 5},
                "listeners": [{"node": "warren@host", "protocol": "amqp", "ip_address": "::", "port": 5672}],
            }),
            node: json!({"name": "warren@host", "uptime": 61_500, "mem_used": 136_500_000u64,
                         "mem_limit": 10_110_605_721u64, "mem_alarm": false, "disk_free_alarm": true,
                         "disk_free": 72_774_021_120u64, "disk_free_limit": 50_000_000}),
            vhost_count: 3,
        }
    }

    #[test]
    fn text_has_rabbitmqctls_sections_and_leaves_out_what_the_api_lacks() {
        let text = sample().to_text();
        assert!(text.starts_with("Status of node warren@host ...\n"));
        assert!(text.contains("Uptime (seconds): 61\n"));
        assert!(text.contains("Product name: Warren\n"));
        assert!(!text.contains("RabbitMQ version"));
        assert!(!text.contains("OS PID"));
        assert!(text.contains("disk alarm is in effect\n"));
        assert!(text.contains("Total memory used: 0.1365 gb\n"));
        assert!(text.contains("Free disk space: 72.774 gb\n"));
        assert!(text.contains("Connection count: 2\nQueue count: 5\nVirtual host count: 3\n"));
        assert!(text.contains("Interface: ::, port: 5672, protocol: amqp\n"));
    }

    #[test]
    fn json_uses_rabbitmqctls_keys() {
        let json = sample().to_json();
        assert_eq!(json["uptime"], json!(61));
        assert_eq!(json["alarms"], json!(["disk"]));
        assert_eq!(json["totals"]["virtual_host_count"], json!(3));
        assert_eq!(json["listeners"][0]["port"], json!(5672));
        assert!(json.get("pid").is_none());
    }
}
