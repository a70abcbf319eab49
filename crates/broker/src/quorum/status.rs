//! Node ids to node names for the views of a queue's Raft group
//! ([`GroupStatus`], read in `warren_quorum::status` from the member's own metrics): this
//! node's own name, and in a cluster the names the metadata group's membership carries (`Broker::node_names`),
//! with whether the failure detector sees each member up (RabbitMQ's `online`).

use std::collections::HashMap;
pub use warren_quorum::status::{GroupStatus, MemberStatus};
pub use warren_quorum::types::NodeId;

/// Node ids to node names (and whether each node is up), read once per request or scrape.
#[derive(Clone, Debug)]
pub struct NodeNames {
    own: NodeId,
    own_name: String,
    /// Other cluster members: name and whether the failure detector sees them up.
    others: HashMap<NodeId, (String, bool)>,
}

impl NodeNames {
    /// `own` named `own_name`, and the other members with whether each is up.
    pub fn new(
        own: NodeId,
        own_name: String,
        others: HashMap<NodeId, (String, bool)>,
    ) -> NodeNames {
        NodeNames {
            own,
            own_name,
            others,
        }
    }

    /// This node's id in its groups.
    pub fn own_id(&self) -> NodeId {
        self.own
    }

    /// A node's name; a node the membership does not name (forgotten meanwhile) by its id.
    pub fn name(&self, id: NodeId) -> String {
        if id == self.own {
            return self.own_name.clone();
        }
        self.others
            .get(&id)
            .map_or_else(|| format!("node-{id}"), |(name, _)| name.clone())
    }

    /// Whether node `id` runs: this node does; another as the failure detector sees it.
    pub fn is_running(&self, id: NodeId) -> bool {
        id == self.own || self.others.get(&id).is_some_and(|(_, running)| *running)
    }
}
