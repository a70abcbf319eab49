//! `VHost::route_keys` across exchange-to-exchange bindings: each queue once however many
//! paths reach it, cycles walked once, and the alternate exchange of an exchange deeper in
//! the graph taking what that exchange could not route.

use crate::connection_id::ConnectionId;
use crate::memory::MemoryMonitor;
use crate::{ExchangeDeclaration, QueueDeclaration, VHost};
use std::sync::Arc;
use warren_codec::{FieldTable, FieldValue, ShortStr};

pub(super) const CONN: ConnectionId = 1;

/// A vhost of its own, without a store (the firehose's tests use it too).
pub(super) fn vhost() -> Arc<VHost> {
    VHost::new(
        "/",
        Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
        None,
        Arc::default(),
    )
}

fn exchange(v: &Arc<VHost>, name: &str, kind: &str, arguments: FieldTable) {
    v.declare_exchange(ExchangeDeclaration {
        name: name.into(),
        kind: kind.into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments,
    })
    .unwrap();
}

pub(super) fn queue(v: &Arc<VHost>, name: &str) {
    v.declare_queue(
        QueueDeclaration {
            name: name.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
        CONN,
    )
    .unwrap();
}

fn routed(v: &Arc<VHost>, exchange: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    v.route(&v.exchange(exchange).unwrap(), key, None, &mut out);
    out.iter().map(|q| q.name.to_string()).collect()
}

#[test]
fn cycles_and_second_paths_reach_each_queue_once() {
    let v = vhost();
    exchange(&v, "a", "fanout", FieldTable::new());
    exchange(&v, "b", "fanout", FieldTable::new());
    queue(&v, "q1");
    queue(&v, "q2");
    v.bind_exchange("b", "a", ShortStr::from(""), FieldTable::new())
        .unwrap();
    v.bind_exchange("a", "b", ShortStr::from(""), FieldTable::new())
        .unwrap();
    v.bind_queue("q1", "a", "".into(), FieldTable::new(), CONN)
        .unwrap();
    v.bind_queue("q1", "b", "".into(), FieldTable::new(), CONN)
        .unwrap();
    v.bind_queue("q2", "b", "".into(), FieldTable::new(), CONN)
        .unwrap();
    assert_eq!(routed(&v, "a", "k"), ["q1", "q2"]);
    assert_eq!(routed(&v, "b", "k"), ["q1", "q2"]);
}

#[test]
fn a_hop_target_that_routes_nothing_uses_its_alternate_exchange() {
    let v = vhost();
    let with_ae: FieldTable = [(
        ShortStr::from("alternate-exchange"),
        FieldValue::string("ae"),
    )]
    .into_iter()
    .collect();
    exchange(&v, "entry", "direct", FieldTable::new());
    exchange(&v, "inner", "direct", with_ae);
    exchange(&v, "ae", "fanout", FieldTable::new());
    queue(&v, "direct-hit");
    queue(&v, "caught");
    v.bind_exchange("inner", "entry", ShortStr::from("k"), FieldTable::new())
        .unwrap();
    v.bind_queue(
        "direct-hit",
        "inner",
        "k-only-here".into(),
        FieldTable::new(),
        CONN,
    )
    .unwrap();
    v.bind_queue("caught", "ae", "".into(), FieldTable::new(), CONN)
        .unwrap();
    // entry → inner by "k"; inner has no "k" binding, so its alternate exchange takes it.
    assert_eq!(routed(&v, "entry", "k"), ["caught"]);
    // entry has no alternate exchange and nothing bound for this key.
    assert!(routed(&v, "entry", "other").is_empty());
    assert_eq!(routed(&v, "inner", "k-only-here"), ["direct-hit"]);
}
