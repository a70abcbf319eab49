//! Where a new classic queue lives in a cluster: its home node, chosen by the node that
//! proposes the declaration and carried in the op (`DefinitionOp::QueueDeclare::home`) so
//! every node agrees. RabbitMQ's queue leader locator, from the declaration's arguments:
//!
//! - `x-queue-leader-locator`: `client-local` (the default: the node the client is
//!   connected to) or `balanced` (the running node serving the fewest queues);
//! - the 3.x `x-queue-master-locator`, mapped as RabbitMQ maps it onto those two:
//!   `client-local` stays, `min-masters` and `random` become `balanced`.
//!
//! Unknown values fall back to `client-local`.

use crate::broker::Broker;
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

/// The locator a declaration asks for.
pub fn locator(arguments: &FieldTable) -> Locator {
    if let Some(leader) = text(arguments, "x-queue-leader-locator") {
        return match leader.as_str() {
            "balanced" => Locator::Balanced,
            _ => Locator::ClientLocal,
        };
    }
    match text(arguments, "x-queue-master-locator").as_deref() {
        Some("min-masters") | Some("random") => Locator::Balanced,
        _ => Locator::ClientLocal,
    }
}

impl Broker {
    /// The home node for a new queue declared on this node with `arguments`; None on a
    /// single node (the queue is this node's, as ever).
    pub fn queue_home(&self, arguments: &FieldTable) -> Option<String> {
        let cluster = self.cluster()?;
        let me = self.node_name().to_owned();
        if locator(arguments) == Locator::ClientLocal {
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
                let node = queue.remote().map_or(me.as_str(), |r| r.node());
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
