//! Where a new quorum queue's Raft group runs: which cluster nodes are its members, chosen once
//! by the node that declares it and carried in the declaration (`DefinitionOp::QueueDeclare`'s
//! `members`), so every node applying the declaration agrees.
//!
//! As RabbitMQ 3.10 (`rabbit_quorum_queue:declare`): the size is `x-quorum-initial-group-size`,
//! by default 3 (`quorum_cluster_size`), capped at the cluster's size; the declaring node is
//! a member (listed first: it initializes the group). RabbitMQ picks the others at random;
//! Warren picks them deterministically to spread the load: running nodes before stopped ones,
//! then the nodes with the fewest groups, then the lowest id.

use std::collections::HashMap;
use warren_codec::FieldTable;
use warren_quorum::types::NodeId;

/// RabbitMQ's default replica count for a quorum queue (`quorum_cluster_size`).
pub const DEFAULT_INITIAL_GROUP_SIZE: usize = 3;

/// The group size a declaration asks for; None when its argument is not a positive integer
/// (the declaration is then refused where it is applied, with RabbitMQ's text).
pub fn initial_group_size(arguments: &FieldTable) -> Option<usize> {
    match arguments.get("x-quorum-initial-group-size") {
        None => Some(DEFAULT_INITIAL_GROUP_SIZE),
        Some(v) => v
            .as_integer()
            .filter(|n| *n > 0)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

/// One node the group may be placed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub node: NodeId,
    pub running: bool,
}

/// The members of a new group of `size` among `nodes`: `own` first (when it is one of them),
/// then the others in the order the module's comment gives. `groups` counts the groups each
/// node is already a member of.
pub fn choose_members(
    own: NodeId,
    nodes: &[Candidate],
    groups: &HashMap<NodeId, usize>,
    size: usize,
) -> Vec<NodeId> {
    let mut members = Vec::with_capacity(size);
    if nodes.iter().any(|c| c.node == own) {
        members.push(own);
    }
    let mut others: Vec<&Candidate> = nodes.iter().filter(|c| c.node != own).collect();
    others.sort_by_key(|c| {
        (
            !c.running,
            groups.get(&c.node).copied().unwrap_or(0),
            c.node,
        )
    });
    others.dedup_by_key(|c| c.node);
    for candidate in others {
        if members.len() >= size {
            break;
        }
        members.push(candidate.node);
    }
    members.truncate(size);
    members
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_codec::FieldValue;

    fn up(node: NodeId) -> Candidate {
        Candidate {
            node,
            running: true,
        }
    }

    #[test]
    fn the_declaring_node_first_then_the_least_loaded() {
        let nodes = [up(1), up(2), up(3), up(4)];
        let groups = HashMap::from([(1, 5), (2, 3), (3, 1), (4, 1)]);
        assert_eq!(choose_members(2, &nodes, &groups, 3), vec![2, 3, 4]);
        assert_eq!(choose_members(2, &nodes, &groups, 1), vec![2]);
        assert_eq!(choose_members(4, &nodes, &groups, 2), vec![4, 3]);
    }

    #[test]
    fn capped_at_the_cluster_size_and_stopped_nodes_last() {
        let nodes = [
            up(1),
            Candidate {
                node: 2,
                running: false,
            },
            up(3),
        ];
        assert_eq!(choose_members(1, &nodes, &HashMap::new(), 2), vec![1, 3]);
        assert_eq!(choose_members(1, &nodes, &HashMap::new(), 7), vec![1, 3, 2]);
    }

    #[test]
    fn the_size_is_rabbitmqs() {
        assert_eq!(initial_group_size(&FieldTable::new()), Some(3));
        let sized = |v: FieldValue| {
            let mut t = FieldTable::new();
            t.insert("x-quorum-initial-group-size", v);
            initial_group_size(&t)
        };
        assert_eq!(sized(FieldValue::I32(5)), Some(5));
        assert_eq!(sized(FieldValue::I64(1)), Some(1));
        assert_eq!(sized(FieldValue::I32(0)), None);
        assert_eq!(sized(FieldValue::I32(-2)), None);
        assert_eq!(sized(FieldValue::string("3")), None);
    }
}
