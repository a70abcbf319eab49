//! Two brokers joined by an in-process replicator: one shared, ordered log that each node
//! applies in order on its own task (node B after an artificial delay per entry), as the
//! metadata Raft group will. A change made through either node ends up on both, identical;
//! conflicting declares resolve the same way on both; a refusal reaches the proposer.

use super::*;
use crate::broker::Broker;
use crate::definition_op::{DefinitionOp, Outcome};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use warren_codec::FieldTable;

/// The shared log: its entries, and their count for appliers to wait on.
struct Log {
    entries: Mutex<Vec<Vec<u8>>>,
    length: watch::Sender<usize>,
}

/// One node's end: submitting appends to the log and waits for this node's applier to
/// reach the entry and hand back what applying it answered.
struct InProcess {
    log: Arc<Log>,
    waiting: Arc<Mutex<HashMap<usize, oneshot::Sender<Vec<u8>>>>>,
}

impl Replicator for InProcess {
    fn submit(&self, op: Vec<u8>) -> Submitted {
        let (tx, rx) = oneshot::channel();
        {
            let mut entries = self.log.entries.lock();
            // Registered before the entry can be applied.
            self.waiting.lock().insert(entries.len(), tx);
            entries.push(op);
            self.log.length.send_replace(entries.len());
        }
        Box::pin(async move {
            rx.await
                .map_err(|_| ReplicationError("the node stopped applying".into()))
        })
    }
}

/// A broker on the shared log, applying every entry in order (after `delay` each).
/// The node keeps durable queues in an in-memory store, so that they are in its snapshot.
fn node(log: &Arc<Log>, delay: Duration) -> (Arc<Broker>, watch::Receiver<usize>) {
    use warren_store::{Backend, FaultyBackend, Store, StoreOptions};
    let backend: Arc<dyn Backend> = Arc::new(FaultyBackend::new(3));
    let (store, _) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(usize::MAX, Some(store));
    let waiting = Arc::new(Mutex::new(HashMap::new()));
    broker.set_replicator(Arc::new(InProcess {
        log: log.clone(),
        waiting: waiting.clone(),
    }));
    let (applied_tx, applied_rx) = watch::channel(0usize);
    let mut length = log.length.subscribe();
    let applier = broker.clone();
    let log = log.clone();
    tokio::spawn(async move {
        let mut next = 0;
        loop {
            while next < *length.borrow_and_update() {
                tokio::time::sleep(delay).await;
                let entry = log.entries.lock()[next].clone();
                let result = applier.apply_replicated(&entry);
                if let Some(waiter) = waiting.lock().remove(&next) {
                    let _ = waiter.send(result);
                }
                next += 1;
                applied_tx.send_replace(next);
            }
            if length.changed().await.is_err() {
                return;
            }
        }
    });
    (broker, applied_rx)
}

/// Two nodes on one log. Each broker was born with its own guest (its own salt): the
/// cluster's guest is made through the log, as a cluster's first node would seed it.
async fn cluster() -> (Arc<Log>, [(Arc<Broker>, watch::Receiver<usize>); 2]) {
    let (length, _) = watch::channel(0);
    let log = Arc::new(Log {
        entries: Mutex::new(Vec::new()),
        length,
    });
    let a = node(&log, Duration::ZERO);
    let b = node(&log, Duration::from_millis(20));
    for op in a.0.seed_ops("guest", "guest", "/") {
        a.0.change(op).result().await.unwrap();
    }
    (log, [a, b])
}

/// Waits (10 s at most) until a node has applied the whole log.
async fn caught_up(log: &Log, applied: &mut watch::Receiver<usize>) {
    let want = log.entries.lock().len();
    tokio::time::timeout(Duration::from_secs(10), applied.wait_for(|n| *n >= want))
        .await
        .expect("the node applies the log within 10 s")
        .expect("the applier runs");
}

fn exchange(name: &str, kind: &str) -> DefinitionOp {
    DefinitionOp::ExchangeDeclare {
        vhost: "/".into(),
        name: name.into(),
        kind: kind.into(),
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }
}

fn queue(name: &str, durable: bool, exclusive: bool) -> DefinitionOp {
    DefinitionOp::QueueDeclare {
        vhost: "/".into(),
        name: name.into(),
        server_named: false,
        durable,
        exclusive,
        auto_delete: false,
        arguments: FieldTable::new(),
        connection: 7,
        members: Vec::new(),
        home: None,
    }
}

#[tokio::test]
async fn a_change_through_one_node_appears_on_both_identical() {
    let (log, [(a, mut a_applied), (b, mut b_applied)]) = cluster().await;
    let ops = [
        DefinitionOp::VhostAdd {
            name: "v".into(),
            grant_full_to: Some("guest".into()),
        },
        DefinitionOp::UserPut {
            name: "u".into(),
            password_hash: crate::access::Hashing::Sha256.hash("pw"),
            hashing_algorithm: crate::access::SHA256.into(),
            tags: vec!["management".into()],
        },
        DefinitionOp::PolicySet {
            list: crate::PolicyList::Policy,
            vhost: "/".into(),
            name: "p".into(),
            body_json: r#"{"pattern":"^q","definition":{"max-length":5}}"#.into(),
        },
        exchange("x", "topic"),
        queue("q", true, false),
        DefinitionOp::QueueBind {
            vhost: "/".into(),
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "a.#".into(),
            arguments: FieldTable::new(),
            connection: 7,
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        // Alternate the proposing node: either one's changes reach both.
        let proposer = if i % 2 == 0 { &a } else { &b };
        let change = proposer.change(op);
        assert!(
            matches!(change, Change::Pending(_)),
            "replicated: {change:?}"
        );
        assert!(change.result().await.is_ok());
    }
    caught_up(&log, &mut a_applied).await;
    caught_up(&log, &mut b_applied).await;
    let snapshot = a.snapshot();
    assert_eq!(snapshot, b.snapshot());
    let root = snapshot.vhosts.iter().find(|v| v.name == "/").unwrap();
    assert_eq!(root.definitions.bindings.len(), 1);
    assert_eq!(root.definitions.policies.len(), 1);
    assert!(b.vhost("v").is_some() && b.access.permission("v", "guest").is_some());
    assert!(b.access.authenticate("u", "pw").is_ok(), "the same hash");
    // The policy took effect on each node's own queue.
    let q = b.vhost("/").unwrap().queue("q").unwrap();
    assert_eq!(
        q.policies().policy.map(|p| p.name.clone()),
        Some("p".into())
    );
}

#[tokio::test]
async fn concurrent_conflicting_declares_resolve_the_same_way_on_both() {
    let (log, [(a, mut a_applied), (b, mut b_applied)]) = cluster().await;
    for round in 0..10 {
        let name = format!("x{round}");
        // Each round another node proposes first: the log's order, not the node, decides.
        let (on_a, on_b) = if round % 2 == 0 {
            let on_a = a.change(exchange(&name, "direct"));
            (on_a, b.change(exchange(&name, "fanout")))
        } else {
            let on_b = b.change(exchange(&name, "fanout"));
            (a.change(exchange(&name, "direct")), on_b)
        };
        let (ra, rb) = tokio::join!(on_a.result(), on_b.result());
        // Exactly one wins; the other is told the winner's type.
        assert_ne!(ra.is_ok(), rb.is_ok(), "{ra:?} {rb:?}");
        let refused = ra.clone().err().or(rb.clone().err()).unwrap();
        assert_eq!(refused.code, warren_codec::ReplyCode::PreconditionFailed);
        assert!(
            refused.text.starts_with("inequivalent arg 'type'"),
            "{}",
            refused.text
        );
    }
    caught_up(&log, &mut a_applied).await;
    caught_up(&log, &mut b_applied).await;
    assert_eq!(a.snapshot(), b.snapshot());
    for round in 0..10 {
        let name = format!("x{round}");
        let kind_on = |n: &Arc<Broker>| n.vhost("/").unwrap().exchange(&name).unwrap().kind;
        assert_eq!(kind_on(&a), kind_on(&b));
        let first = if round % 2 == 0 { "direct" } else { "fanout" };
        assert_eq!(kind_on(&a).as_str(), first, "the first proposed wins");
    }
}

#[tokio::test]
async fn a_refusal_reaches_the_proposer_and_changes_nothing() {
    let (log, [(a, mut a_applied), (b, mut b_applied)]) = cluster().await;
    a.change(queue("q", true, false)).result().await.unwrap();
    // Proposed through the slow node, refused by the log's order on both.
    let refused = b
        .change(queue("q", false, false))
        .result()
        .await
        .unwrap_err();
    assert_eq!(
        refused.reply_text(),
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': received 'false' but current is 'true'"
    );
    caught_up(&log, &mut a_applied).await;
    caught_up(&log, &mut b_applied).await;
    assert_eq!(a.snapshot(), b.snapshot());
    assert!(b.vhost("/").unwrap().queue("q").unwrap().durable);
}

#[tokio::test]
async fn exclusive_queues_stay_on_their_node() {
    let (log, [(a, _), (b, mut b_applied)]) = cluster().await;
    let declared = a.change(queue("mine", false, true));
    let Change::Done(Ok(Outcome::QueueDeclared { name, .. })) = declared else {
        panic!("an exclusive queue is declared locally: {declared:?}");
    };
    assert_eq!(name, "mine");
    let bind = DefinitionOp::QueueBind {
        vhost: "/".into(),
        queue: "mine".into(),
        exchange: "amq.direct".into(),
        routing_key: "k".into(),
        arguments: FieldTable::new(),
        connection: 7,
    };
    assert!(matches!(a.change(bind), Change::Done(Ok(_))));
    // Something replicated after it, to know B has seen everything A proposed.
    a.change(exchange("after", "direct"))
        .result()
        .await
        .unwrap();
    caught_up(&log, &mut b_applied).await;
    assert!(b.vhost("/").unwrap().exchange("after").is_some());
    assert!(b.vhost("/").unwrap().queue("mine").is_none());
    assert!(a.vhost("/").unwrap().queue("mine").is_some());
}

#[tokio::test]
async fn without_a_replicator_a_change_is_done_at_once() {
    let broker = Broker::new(usize::MAX, None);
    let change = broker.change(exchange("x", "direct"));
    assert!(
        matches!(change, Change::Done(Ok(Outcome::Put { created: true }))),
        "{change:?}"
    );
    assert!(broker.vhost("/").unwrap().exchange("x").is_some());
}

#[tokio::test]
async fn an_unused_auto_delete_queue_goes_from_every_node() {
    let (log, [(a, mut a_applied), (b, mut b_applied)]) = cluster().await;
    let declare = DefinitionOp::QueueDeclare {
        vhost: "/".into(),
        name: "temp".into(),
        server_named: false,
        durable: true,
        exclusive: false,
        auto_delete: true,
        arguments: FieldTable::new(),
        connection: 7,
        members: Vec::new(),
        home: None,
    };
    a.change(declare).result().await.unwrap();
    caught_up(&log, &mut b_applied).await;
    assert!(b.vhost("/").unwrap().queue("temp").is_some());
    let vhost = a.vhost("/").unwrap();
    let queue = vhost.queue("temp").unwrap();
    a.delete_unused_queue(&vhost, &queue);
    // Proposed at once; applied by each node in its turn.
    caught_up(&log, &mut a_applied).await;
    caught_up(&log, &mut b_applied).await;
    assert!(a.vhost("/").unwrap().queue("temp").is_none());
    assert!(b.vhost("/").unwrap().queue("temp").is_none());
    assert_eq!(a.snapshot(), b.snapshot());
}
