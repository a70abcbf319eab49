//! The runtime-parameter components Warren acts on rather than only keeps: policies
//! (`policy`, listed apart under "policies" as RabbitMQ does), operator policies
//! (`operator_policy`, listed among "parameters") and vhost limits (`vhost-limits`).

use serde_json::{json, Value};
use warren_broker::policy::{Policy, PolicyKind};
use warren_broker::VHost;

pub const POLICY: &str = "policy";
pub const OPERATOR_POLICY: &str = "operator_policy";
pub const VHOST_LIMITS: &str = "vhost-limits";
pub const MAX_CONNECTIONS: &str = "max-connections";
pub const MAX_QUEUES: &str = "max-queues";

/// The vhost's policies as the "policies" section lists them.
pub fn policies(vhost: &VHost) -> Vec<Value> {
    vhost.policies().iter().map(Policy::to_json).collect()
}

/// The vhost's operator policies as RabbitMQ lists them among the runtime parameters.
pub fn operator_policies(vhost: &VHost) -> Vec<Value> {
    vhost
        .operator_policies()
        .iter()
        .map(|p| {
            json!({
                "vhost": p.vhost, "component": OPERATOR_POLICY, "name": p.name,
                "value": {
                    "pattern": p.pattern, "definition": p.definition,
                    "priority": p.priority, "apply-to": p.apply_to.as_str(),
                },
            })
        })
        .collect()
}

/// A checked policy from a definitions entry (`pattern`, `definition`, optional `priority`
/// and `apply-to`), with RabbitMQ's validation texts.
pub fn policy(kind: PolicyKind, vhost: &str, name: &str, body: &Value) -> Result<Policy, String> {
    Policy::from_json(kind, vhost, name, body)
        .map_err(|e| format!("{e} (vhost: \"{vhost}\" key: \"{name}\")"))
}
