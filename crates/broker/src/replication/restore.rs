//! Bringing a node's definitions to a metadata snapshot's: what a cluster node does when its
//! metadata member starts from a snapshot, or is sent one because it fell behind the log's
//! purge point.
//!
//! The node's state is changed, not replaced: the difference between what it has and what the
//! snapshot says becomes ops, applied through the one apply path. A queue or exchange that is
//! in both, the same, is left alone (a queue keeps its messages); one that differs is deleted
//! and declared again, since the cluster's definition is the one that counts — except a quorum
//! queue whose group members alone differ (a node forgotten or grown onto it meanwhile): its
//! members are recorded (`QueueSetMembers`), and this node's member of the group keeps its log. Only durable
//! definitions are in a snapshot (`Broker::snapshot`), so transient exchanges and queues are
//! neither created nor removed here.

use crate::broker::Broker;
use crate::definition_op::DefinitionOp;
use crate::definitions::{BindingDefinition, Definitions};
use crate::snapshot::Snapshot;
use std::collections::{HashMap, HashSet};

impl Broker {
    /// Makes this node's definitions the snapshot's (see the module's comment). Ops the
    /// node refuses are logged and skipped: the rest still applies.
    pub fn restore_replicated(&self, snapshot: &[u8]) -> Result<(), String> {
        let target = Snapshot::decode(snapshot).map_err(|e| e.to_string())?;
        let ops = reconcile(&self.snapshot(), &target);
        tracing::info!(
            ops = ops.len(),
            "bringing definitions to the metadata snapshot"
        );
        for op in ops {
            if let Err(e) = self.apply(op) {
                tracing::warn!(code = e.code as u16, text = %e.text, "restoring a metadata snapshot: op refused");
            }
        }
        Ok(())
    }
}

/// The ops that turn `current` into `target`: additions first (vhosts before what lives in
/// them), then removals (bindings before their queues and exchanges, vhosts last).
fn reconcile(current: &Snapshot, target: &Snapshot) -> Vec<DefinitionOp> {
    let mut ops = Vec::new();
    let current_access = current.access.clone().unwrap_or_default();
    let target_access = target.access.clone().unwrap_or_default();

    for v in &target.vhosts {
        ops.push(DefinitionOp::VhostAdd {
            name: v.name.clone(),
            grant_full_to: None,
        });
        ops.push(DefinitionOp::vhost_set_metadata(
            &v.name,
            v.metadata.clone(),
        ));
        ops.push(DefinitionOp::vhost_set_limits(&v.name, v.limits));
        ops.push(DefinitionOp::VhostSetTracing {
            name: v.name.clone(),
            tracing: v.tracing,
        });
    }
    for u in &target_access.users {
        ops.push(DefinitionOp::UserPut {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            hashing_algorithm: u.hashing_algorithm.clone(),
            tags: u.tags.clone(),
        });
        ops.push(DefinitionOp::user_set_limits(&u.name, u.limits));
    }
    for (vhost, user, p) in &target_access.permissions {
        ops.push(DefinitionOp::permission_set(vhost, user, p.clone()));
    }
    for (vhost, user, p) in &target_access.topic_permissions {
        ops.push(DefinitionOp::topic_permission_set(vhost, user, p.clone()));
    }
    for p in &target.parameters {
        ops.push(DefinitionOp::ParameterSet {
            vhost: p.vhost.clone(),
            component: p.component.clone(),
            name: p.name.clone(),
            value_json: p.value_json.clone(),
        });
    }
    for (name, value_json) in &target.global_parameters {
        ops.push(DefinitionOp::GlobalParameterSet {
            name: name.clone(),
            value_json: value_json.clone(),
        });
    }

    let empty = Definitions::default();
    let current_vhosts: HashMap<&str, &Definitions> = current
        .vhosts
        .iter()
        .map(|v| (v.name.as_str(), &v.definitions))
        .collect();
    let target_vhosts: HashSet<&str> = target.vhosts.iter().map(|v| v.name.as_str()).collect();
    let mut removals = Vec::new();
    for v in &target.vhosts {
        let have = current_vhosts
            .get(v.name.as_str())
            .copied()
            .unwrap_or(&empty);
        vhost_ops(&v.name, have, &v.definitions, &mut ops, &mut removals);
    }
    ops.append(&mut removals);

    let kept = |vhost: &str| target_vhosts.contains(vhost);
    for p in &current.parameters {
        let still = target
            .parameters
            .iter()
            .any(|t| (&t.vhost, &t.component, &t.name) == (&p.vhost, &p.component, &p.name));
        if !still && kept(&p.vhost) {
            ops.push(DefinitionOp::ParameterClear {
                vhost: p.vhost.clone(),
                component: p.component.clone(),
                name: p.name.clone(),
            });
        }
    }
    for (name, _) in &current.global_parameters {
        if !target.global_parameters.iter().any(|(t, _)| t == name) {
            ops.push(DefinitionOp::GlobalParameterClear { name: name.clone() });
        }
    }
    for (vhost, user, p) in &current_access.topic_permissions {
        let still = target_access
            .topic_permissions
            .iter()
            .any(|(v, u, t)| (v, u, &t.exchange) == (vhost, user, &p.exchange));
        if !still && kept(vhost) {
            ops.push(DefinitionOp::TopicPermissionClear {
                vhost: vhost.clone(),
                user: user.clone(),
                exchange: Some(p.exchange.clone()),
            });
        }
    }
    for (vhost, user, _) in &current_access.permissions {
        let still = target_access
            .permissions
            .iter()
            .any(|(v, u, _)| (v, u) == (vhost, user));
        if !still && kept(vhost) {
            ops.push(DefinitionOp::PermissionClear {
                vhost: vhost.clone(),
                user: user.clone(),
            });
        }
    }
    for u in &current_access.users {
        if !target_access.users.iter().any(|t| t.name == u.name) {
            ops.push(DefinitionOp::UserDelete {
                name: u.name.clone(),
            });
        }
    }
    for v in &current.vhosts {
        if !kept(&v.name) {
            ops.push(DefinitionOp::VhostDelete {
                name: v.name.clone(),
            });
        }
    }
    ops
}

/// One vhost's exchanges, queues, bindings and policies: declarations into `ops`, removals
/// (of what `have` has and `want` has not, or has otherwise) into `removals`.
fn vhost_ops(
    vhost: &str,
    have: &Definitions,
    want: &Definitions,
    ops: &mut Vec<DefinitionOp>,
    removals: &mut Vec<DefinitionOp>,
) {
    // Removals of what differs go first, so the declarations below find the names free.
    let exchange_delete = |name: &str| DefinitionOp::ExchangeDelete {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
        if_unused: false,
    };
    let queue_delete = |name: &str| DefinitionOp::QueueDelete {
        vhost: vhost.to_owned(),
        name: name.to_owned(),
        connection: 0,
    };
    let exchange_name = |e: &crate::definitions::ExchangeDefinition| e.name.to_string();
    let queue_name = |q: &crate::definitions::QueueDefinition| q.name.to_string();
    deletions(
        &have.exchanges,
        &want.exchanges,
        exchange_name,
        exchange_delete,
        ops,
        removals,
    );
    // A quorum queue whose group's members changed (a node forgotten or grown onto it) is
    // the same queue: its members are recorded, never the queue deleted and declared again
    // (that would remove this node's member of the group and its log).
    let mut have_queues = have.queues.clone();
    for h in &mut have_queues {
        let changed = want.queues.iter().find(|w| {
            w.name == h.name
                && w.members != h.members
                && **w
                    == crate::definitions::QueueDefinition {
                        members: w.members.clone(),
                        ..h.clone()
                    }
        });
        if let Some(members) = changed.map(|w| w.members.clone()) {
            ops.push(DefinitionOp::QueueSetMembers {
                vhost: vhost.to_owned(),
                name: h.name.to_string(),
                members: members.clone(),
            });
            h.members = members;
        }
    }
    deletions(
        &have_queues,
        &want.queues,
        queue_name,
        queue_delete,
        ops,
        removals,
    );
    for e in &want.exchanges {
        ops.push(DefinitionOp::ExchangeDeclare {
            vhost: vhost.to_owned(),
            name: e.name.to_string(),
            kind: e.kind.clone(),
            durable: true,
            auto_delete: e.auto_delete,
            internal: e.internal,
            arguments: e.arguments.clone(),
        });
    }
    for q in &want.queues {
        ops.push(DefinitionOp::QueueDeclare {
            vhost: vhost.to_owned(),
            name: q.name.to_string(),
            server_named: false,
            durable: true,
            exclusive: false,
            auto_delete: q.auto_delete,
            arguments: q.arguments.clone(),
            connection: 0,
            members: q.members.clone(),
            home: q.home.clone(),
        });
    }
    for b in &want.bindings {
        ops.push(binding_op(vhost, b, true));
    }
    for p in &want.policies {
        ops.push(DefinitionOp::policy_set(p));
    }
    for b in &have.bindings {
        if !want.bindings.contains(b) {
            removals.insert(0, binding_op(vhost, b, false));
        }
    }
    for p in &have.policies {
        if !want
            .policies
            .iter()
            .any(|w| (w.kind, &w.name) == (p.kind, &p.name))
        {
            removals.push(DefinitionOp::PolicyClear {
                list: crate::definition_op::PolicyList::of(p.kind),
                vhost: vhost.to_owned(),
                name: p.name.clone(),
            });
        }
    }
}

/// Deletions of what `have` has and `want` has not (into `removals`, after the additions) or
/// has otherwise (into `ops` now, before it is declared again).
fn deletions<T: PartialEq>(
    have: &[T],
    want: &[T],
    name: impl Fn(&T) -> String,
    delete: impl Fn(&str) -> DefinitionOp,
    ops: &mut Vec<DefinitionOp>,
    removals: &mut Vec<DefinitionOp>,
) {
    for item in have {
        let named = name(item);
        match want.iter().find(|w| name(w) == named) {
            Some(w) if w == item => {}
            Some(_) => ops.push(delete(&named)),
            None => removals.push(delete(&named)),
        }
    }
}

fn binding_op(vhost: &str, b: &BindingDefinition, bind: bool) -> DefinitionOp {
    let (vhost, source, destination) = (
        vhost.to_owned(),
        b.source.to_string(),
        b.destination.to_string(),
    );
    let (routing_key, arguments) = (b.routing_key.to_string(), b.arguments.clone());
    match (b.to_exchange, bind) {
        (true, true) => DefinitionOp::ExchangeBind {
            vhost,
            destination,
            source,
            routing_key,
            arguments,
        },
        (true, false) => DefinitionOp::ExchangeUnbind {
            vhost,
            destination,
            source,
            routing_key,
            arguments,
        },
        (false, true) => DefinitionOp::QueueBind {
            vhost,
            queue: destination,
            exchange: source,
            routing_key,
            arguments,
            connection: 0,
        },
        (false, false) => DefinitionOp::QueueUnbind {
            vhost,
            queue: destination,
            exchange: source,
            routing_key,
            arguments,
            connection: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Permission;
    use std::sync::Arc;
    use warren_codec::{FieldTable, FieldValue};

    /// A snapshot of vhost `/` holding quorum queue `qq` with group `members`.
    fn with_quorum_queue(members: Vec<u64>) -> Snapshot {
        let mut arguments = FieldTable::new();
        arguments.insert("x-queue-type", FieldValue::LongStr("quorum".into()));
        Snapshot {
            vhosts: vec![crate::snapshot::VHostSnapshot {
                name: "/".into(),
                metadata: Default::default(),
                limits: Default::default(),
                tracing: false,
                definitions: Definitions {
                    queues: vec![crate::definitions::QueueDefinition {
                        name: "qq".into(),
                        auto_delete: false,
                        arguments,
                        members,
                        home: None,
                    }],
                    ..Definitions::default()
                },
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_quorum_queues_new_members_are_recorded_not_the_queue_declared_again() {
        let ops = reconcile(
            &with_quorum_queue(vec![1, 2, 3]),
            &with_quorum_queue(vec![1, 3, 4]),
        );
        let recorded = DefinitionOp::QueueSetMembers {
            vhost: "/".into(),
            name: "qq".into(),
            members: vec![1, 3, 4],
        };
        assert!(ops.contains(&recorded), "{ops:?}");
        assert!(
            !ops.iter()
                .any(|op| matches!(op, DefinitionOp::QueueDelete { .. })),
            "{ops:?}"
        );
        // Nothing changed: nothing recorded.
        let same = reconcile(
            &with_quorum_queue(vec![1, 2, 3]),
            &with_quorum_queue(vec![1, 2, 3]),
        );
        assert!(
            !same
                .iter()
                .any(|op| matches!(op, DefinitionOp::QueueSetMembers { .. })),
            "{same:?}"
        );
    }

    fn broker() -> Arc<Broker> {
        broker_on(Arc::new(warren_store::FaultyBackend::new(7)), "warren@here")
    }

    /// A broker named `node` over `disk`, recovered from what the disk holds.
    fn broker_on(disk: Arc<warren_store::FaultyBackend>, node: &str) -> Arc<Broker> {
        use warren_store::{Backend, Store, StoreOptions};
        let backend: Arc<dyn Backend> = disk;
        let (store, recovered) =
            Store::open_with_backend(backend, StoreOptions::default()).unwrap();
        let broker = Broker::new(usize::MAX, Some(store));
        broker.name_node(node);
        broker.recover(recovered);
        broker
    }

    fn homed(name: &str, home: &str) -> DefinitionOp {
        let mut op = queue(name, None);
        let DefinitionOp::QueueDeclare { home: h, .. } = &mut op else {
            unreachable!("queue() makes a QueueDeclare")
        };
        *h = Some(home.into());
        op
    }

    /// Where a node's queue `name` in "/" is served: None here, else the node forwarded to.
    fn served_by(broker: &Broker, name: &str) -> Option<String> {
        let q = broker
            .vhost("/")
            .unwrap()
            .queue(name)
            .expect("queue missing");
        q.home_node().map(str::to_owned)
    }

    /// A classic queue's home survives a snapshot install and a restart from the stored
    /// definitions: the node installing a snapshot holds a forwarding record for another
    /// node's queue (not a local copy), serves its own, and comes back the same way.
    #[test]
    fn a_snapshot_and_a_restart_keep_where_each_classic_queue_is_served() {
        // What a snapshot taken on another node of the cluster says.
        let source = broker();
        apply(
            &source,
            vec![
                homed("on-other", "warren@other"),
                homed("on-here", "warren@here"),
                exchange("x1", "direct"),
                bind("x1", "on-other", "k"),
            ],
        );
        let snapshot = source.snapshot();
        let on_other = snapshot.vhosts[0]
            .definitions
            .queues
            .iter()
            .find(|q| q.name.as_str() == "on-other")
            .unwrap();
        assert_eq!(on_other.home.as_deref(), Some("warren@other"));

        let disk = Arc::new(warren_store::FaultyBackend::new(9));
        let node = broker_on(disk.clone(), "warren@here");
        node.restore_replicated(&snapshot.encode()).unwrap();
        assert_eq!(
            served_by(&node, "on-other").as_deref(),
            Some("warren@other")
        );
        assert_eq!(served_by(&node, "on-here"), None);
        assert!(
            node.vhost("/")
                .unwrap()
                .queue("on-here")
                .unwrap()
                .stored
                .is_some(),
            "the queue homed here is a real durable queue"
        );
        // Installing the same snapshot again leaves the record alone.
        let record = node.vhost("/").unwrap().queue("on-other").unwrap();
        node.restore_replicated(&snapshot.encode()).unwrap();
        assert!(Arc::ptr_eq(
            &record,
            &node.vhost("/").unwrap().queue("on-other").unwrap()
        ));

        // Restarted from its stored definitions, the node still forwards, bindings and all.
        drop(record);
        node.store().unwrap().clone().close().unwrap();
        drop(node);
        let restarted = broker_on(disk, "warren@here");
        assert_eq!(
            served_by(&restarted, "on-other").as_deref(),
            Some("warren@other")
        );
        assert_eq!(served_by(&restarted, "on-here"), None);
        let bound = restarted
            .vhost("/")
            .unwrap()
            .exchange("x1")
            .unwrap()
            .bindings()
            .iter()
            .any(|b| b.destination.name().as_str() == "on-other");
        assert!(bound, "the record's binding came back");
    }

    fn apply(broker: &Broker, ops: Vec<DefinitionOp>) {
        for op in ops {
            broker
                .apply(op.clone())
                .unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
        }
    }

    fn vhost(name: &str) -> DefinitionOp {
        DefinitionOp::VhostAdd {
            name: name.into(),
            grant_full_to: None,
        }
    }

    fn user(name: &str, tag: &str) -> DefinitionOp {
        DefinitionOp::UserPut {
            name: name.into(),
            password_hash: crate::access::Hashing::Sha256.hash(name),
            hashing_algorithm: crate::access::SHA256.into(),
            tags: vec![tag.into()],
        }
    }

    fn exchange(name: &str, kind: &str) -> DefinitionOp {
        DefinitionOp::ExchangeDeclare {
            vhost: "/".into(),
            name: name.into(),
            kind: kind.into(),
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::default(),
        }
    }

    fn queue(name: &str, max_length: Option<i32>) -> DefinitionOp {
        let mut arguments = FieldTable::default();
        if let Some(n) = max_length {
            arguments.insert("x-max-length", FieldValue::I32(n));
        }
        DefinitionOp::declare_named_queue("/", name, true, false, arguments)
    }

    fn bind(exchange: &str, queue: &str, key: &str) -> DefinitionOp {
        DefinitionOp::QueueBind {
            vhost: "/".into(),
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: key.into(),
            arguments: FieldTable::default(),
            connection: 0,
        }
    }

    /// A node whose definitions differ every way from the snapshot's (missing, extra and
    /// changed vhosts, users, permissions, exchanges, queues, bindings, parameters) ends with
    /// exactly the snapshot's, and a queue that is the same in both is the same queue
    /// (its messages stay).
    #[test]
    fn a_node_is_brought_to_the_snapshots_definitions() {
        let source = broker();
        apply(
            &source,
            vec![
                vhost("/"),
                vhost("va"),
                user("u1", "administrator"),
                user("u2", "monitoring"),
                DefinitionOp::permission_set("va", "u1", Permission::full()),
                exchange("x1", "topic"),
                queue("q-same", None),
                queue("q-args", Some(5)),
                bind("x1", "q-same", "k"),
                DefinitionOp::GlobalParameterSet {
                    name: "cluster_name".into(),
                    value_json: "\"one\"".into(),
                },
            ],
        );
        let node = broker();
        apply(
            &node,
            vec![
                vhost("/"),
                vhost("vb"),
                user("u1", "management"),
                user("u3", "monitoring"),
                DefinitionOp::permission_set("vb", "u3", Permission::full()),
                exchange("x1", "fanout"),
                queue("q-same", None),
                queue("q-args", Some(7)),
                queue("q-extra", None),
                bind("x1", "q-extra", ""),
                DefinitionOp::GlobalParameterSet {
                    name: "other".into(),
                    value_json: "1".into(),
                },
            ],
        );
        let same_before = node.vhost("/").unwrap().queue("q-same").unwrap();

        node.restore_replicated(&source.snapshot().encode())
            .unwrap();

        assert_eq!(node.snapshot(), source.snapshot());
        let same_after = node.vhost("/").unwrap().queue("q-same").unwrap();
        assert!(
            Arc::ptr_eq(&same_before, &same_after),
            "q-same was recreated"
        );
        // Restoring the same snapshot again changes nothing.
        node.restore_replicated(&source.snapshot().encode())
            .unwrap();
        assert_eq!(node.snapshot(), source.snapshot());
    }
}
