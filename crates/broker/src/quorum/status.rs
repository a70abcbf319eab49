//! Node ids to node names for the views of a queue's Raft group
//! ([`GroupStatus`], read in `warren_quorum::status` from the member's own metrics): this
//! node's own name, and in a cluster the names the metadata group's membership carries,
//! with whether the failure detector sees each member up (RabbitMQ's `online`).

use std::collections::HashMap;
pub use warren_quorum::status::{GroupStatus, MemberStatus};
pub use warren_quorum::types::NodeId;

use crate::Broker;

/// Node ids to node names (and whether each node is up), read once per request or scrape.
#[derive(Clone, Debug)]
pub struct NodeNames {
    own: NodeId,
    own_name: String,
    /// Other cluster members: name and whether the failure detector sees them up.
    others: HashMap<NodeId, (String, bool)>,
}

impl NodeNames {
    /// The names `broker` knows: its own, and in a cluster every member's.
    pub fn of(broker: &Broker) -> NodeNames {
        match broker.cluster() {
            Some(cluster) => NodeNames {
                own: cluster.id(),
                own_name: cluster.name().to_owned(),
                others: cluster
                    .status()
                    .members
                    .into_iter()
                    .filter(|member| member.id != cluster.id())
                    .map(|member| (member.id, (member.name, member.running)))
                    .collect(),
            },
            None => NodeNames {
                own: broker
                    .quorum()
                    .map_or(super::LOCAL_NODE_ID, |host| host.node_id()),
                own_name: broker.node_name().to_owned(),
                others: HashMap::new(),
            },
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
