//! Where a new classic queue lives in a cluster: its home node, chosen by the node that
//! proposes the declaration and carried in the op (`DefinitionOp::QueueDeclare::home`) so
//! every node agrees. RabbitMQ's queue leader locator, from the declaration's arguments and
//! the policy that applies to the queue:
//!
//! - `queue-leader-locator` (policy key) and `x-queue-leader-locator` (argument), RabbitMQ
//!   3.10+: `client-local` (the default: the node the client is connected to) or `balanced`
//!   (the running node serving the fewest queues); the deprecated `random` and
//!   `least-leaders` are `balanced`, as `rabbit_queue_location:leader_locator0` maps them.
//!   The policy wins over the argument (`args_policy_lookup` with the policy's value);
//! - else the 3.x `x-queue-master-locator` (argument) and `queue-master-locator` (policy
//!   key), in that order (3.x's `rabbit_queue_master_location_misc:get_location`: argument,
//!   then policy), mapped as RabbitMQ maps them onto the two above: `client-local` stays,
//!   `min-masters` and `random` become `balanced`.
//!
//! Unknown values fall back to `client-local` (policies never hold one: validation refuses
//! it with RabbitMQ's text).

use crate::broker::Broker;
use crate::policy::{AppliedPolicies, EntityKind};
use std::collections::HashMap;
use warren_codec::{FieldTable, FieldValue};

/// The two locators RabbitMQ 3.10+ knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locator {
    ClientLocal,
    Balanced,
}

fn text(arguments: &FieldTable, key: &str) -> Option<String> {
    match arguments.get(key)? {
        FieldValue::LongStr(s) => Some(String::from_utf8_lossy(s.as_ref()).into_owned()),
        _ => None,
    }
}

fn policy_text(policies: &AppliedPolicies, key: &str) -> Option<String> {
    policies.get(key)?.as_str().map(str::to_owned)
}

/// The locator a declaration asks for, with the policies that apply to its queue (see the
/// module's comment for the precedence).
pub fn locator(arguments: &FieldTable, policies: &AppliedPolicies) -> Locator {
    let leader = policy_text(policies, "queue-leader-locator")
        .or_else(|| text(arguments, "x-queue-leader-locator"));
    if let Some(leader) = leader {
        return match leader.as_str() {
            "balanced" | "random" | "least-leaders" => Locator::Balanced,
            _ => Locator::ClientLocal,
        };
    }
    let master = text(arguments, "x-queue-master-locator")
        .or_else(|| policy_text(policies, "queue-master-locator"));
    match master.as_deref() {
        Some("min-masters") | Some("random") => Locator::Balanced,
        _ => Locator::ClientLocal,
    }
}

impl Broker {
    /// The home node for a new queue `queue` of `vhost` declared on this node with
    /// `arguments`; None on a single node (the queue is this node's, as ever).
    pub fn queue_home(&self, vhost: &str, queue: &str, arguments: &FieldTable) -> Option<String> {
        let cluster = self.cluster()?;
        let me = self.node_name().to_owned();
        let policies = self
            .vhost(vhost)
            .map(|v| v.applied_policies(EntityKind::Queue, queue))
            .unwrap_or_default();
        if locator(arguments, &policies) == Locator::ClientLocal {
            return Some(me);
        }
        // Balanced: the running member (this node, or one with a live forwarding link)
        // serving the fewest queues; ties go to the lowest name, for a stable answer.
        let mut served: HashMap<String, usize> = HashMap::new();
        served.insert(me.clone(), 0);
        for (_, info) in cluster.metadata().members() {
            if info.name != me
                && self
                    .forward_peers()
                    .get(&info.name)
                    .is_some_and(|p| p.is_up())
            {
                served.insert(info.name, 0);
            }
        }
        for vhost in self.vhosts() {
            for queue in vhost.queues() {
                let node = queue.home_node().unwrap_or(me.as_str());
                if let Some(n) = served.get_mut(node) {
                    *n += 1;
                }
            }
        }
        served
            .into_iter()
            .min_by(|(a, n), (b, m)| n.cmp(m).then_with(|| a.cmp(b)))
            .map(|(node, _)| node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, PolicyKind};
    use std::sync::Arc;

    fn arguments(entries: &[(&str, &str)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in entries {
            t.insert(*k, FieldValue::string(*v));
        }
        t
    }

    fn policy(definition: serde_json::Value) -> AppliedPolicies {
        let p = Policy::new(PolicyKind::Policy, "/", "p", ".*", "queues", 0, definition).unwrap();
        AppliedPolicies {
            policy: Some(Arc::new(p)),
            operator_policy: None,
        }
    }

    #[test]
    fn the_leader_locator_policy_wins_over_the_argument() {
        let none = AppliedPolicies::default();
        let balanced = policy(serde_json::json!({"queue-leader-locator": "balanced"}));
        let local = policy(serde_json::json!({"queue-leader-locator": "client-local"}));
        let arg_balanced = arguments(&[("x-queue-leader-locator", "balanced")]);
        assert_eq!(locator(&FieldTable::new(), &none), Locator::ClientLocal);
        assert_eq!(locator(&arg_balanced, &none), Locator::Balanced);
        assert_eq!(locator(&FieldTable::new(), &balanced), Locator::Balanced);
        assert_eq!(locator(&arg_balanced, &local), Locator::ClientLocal);
        // The deprecated values are `balanced`, as RabbitMQ maps them.
        for old in ["random", "least-leaders"] {
            let p = policy(serde_json::json!({ "queue-leader-locator": old }));
            assert_eq!(locator(&FieldTable::new(), &p), Locator::Balanced, "{old}");
        }
    }

    #[test]
    fn the_master_locator_argument_wins_over_its_policy_and_yields_to_the_leader_locator() {
        let min_masters = policy(serde_json::json!({"queue-master-locator": "min-masters"}));
        let local = arguments(&[("x-queue-master-locator", "client-local")]);
        assert_eq!(locator(&FieldTable::new(), &min_masters), Locator::Balanced);
        assert_eq!(locator(&local, &min_masters), Locator::ClientLocal);
        let random = arguments(&[("x-queue-master-locator", "random")]);
        assert_eq!(
            locator(&random, &AppliedPolicies::default()),
            Locator::Balanced
        );
        let leader_local = arguments(&[
            ("x-queue-leader-locator", "client-local"),
            ("x-queue-master-locator", "min-masters"),
        ]);
        assert_eq!(locator(&leader_local, &min_masters), Locator::ClientLocal);
        let leader_policy = policy(serde_json::json!({
            "queue-leader-locator": "balanced",
            "queue-master-locator": "client-local",
        }));
        assert_eq!(locator(&local, &leader_policy), Locator::Balanced);
    }
}
