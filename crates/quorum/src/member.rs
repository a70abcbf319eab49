//! A cluster member as the metadata group's membership records it, and a change of that
//! membership: plain data the network, the wire format and the metadata group share.

use crate::types::NodeId;
use openraft::BasicNode;
use serde::{Deserialize, Serialize};

/// A cluster member as the metadata group's membership records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// The node name (`--node-name`).
    pub name: String,
    /// Where its cluster port is reached, `HOST:PORT`.
    pub addr: String,
    /// The incarnation it joined with (drawn when its data directory was new): a peer of this
    /// id with another one is a reset node and is refused (see `handshake`). 0: unknown (a
    /// member recorded before incarnations existed), never refused for a difference.
    #[serde(default)]
    pub incarnation: u64,
}

impl MemberInfo {
    /// Kept in openraft's `BasicNode::addr` as `"ADDR NAME INCARNATION"` (none contains
    /// whitespace; older records lack the incarnation).
    pub fn to_node(&self) -> BasicNode {
        BasicNode::new(format!("{} {} {}", self.addr, self.name, self.incarnation))
    }

    pub fn from_node(node: &BasicNode) -> MemberInfo {
        let mut parts = node.addr.split(' ');
        let addr = parts.next().unwrap_or_default().to_string();
        let name = parts.next().unwrap_or_default().to_string();
        let incarnation = parts.next().and_then(|i| i.parse().ok()).unwrap_or(0);
        MemberInfo {
            name,
            addr,
            incarnation,
        }
    }
}

/// A membership change, carried to the leader when asked of a follower.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberChange {
    /// Adds a node: a learner first, a voter once it caught up.
    Add {
        node: NodeId,
        info: MemberInfo,
    },
    Remove {
        node: NodeId,
    },
}
