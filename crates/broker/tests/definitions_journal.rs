//! Durable definitions after many changes and a restart: the definitions journal (queue,
//! exchange and binding changes as records after the blob, docs/STORAGE.md §2.2)
//! interleaved with whole-blob writes and journal compaction brings back exactly what was
//! declared, deletes and their bindings included; a crash while a change is being written
//! loses nothing acknowledged before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use warren_broker::broker::Broker;
use warren_broker::definitions::Definitions;
use warren_broker::vhost::{ExchangeDeclaration, QueueDeclaration, VHost};
use warren_codec::{FieldTable, ShortStr};
use warren_store::{Backend, CrashMode, FaultyBackend, Store, StoreOptions};

fn boot(disk: &Arc<FaultyBackend>) -> (Store, Arc<Broker>) {
    let backend: Arc<dyn Backend> = disk.clone();
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(usize::MAX, Some(store.clone()));
    broker.recover(recovered);
    (store, broker)
}

fn declare(v: &Arc<VHost>, name: &str, auto_delete: bool) {
    v.declare_queue(
        QueueDeclaration {
            name: ShortStr::from(name),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete,
            arguments: FieldTable::new(),
        },
        1,
    )
    .unwrap();
}

fn declare_exchange(v: &Arc<VHost>, name: &str, kind: &str) {
    v.declare_exchange(ExchangeDeclaration {
        name: ShortStr::from(name),
        kind: kind.into(),
        passive: false,
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    })
    .unwrap();
}

/// The durable definitions of vhost `/`, as a restart must bring them back.
fn durable(broker: &Broker) -> Definitions {
    let mut defs = broker.vhost("/").unwrap().durable_definitions();
    defs.bindings
        .sort_by(|a, b| (&a.source, &a.destination).cmp(&(&b.source, &b.destination)));
    defs
}

#[test]
fn a_restart_brings_back_exactly_the_definitions_after_many_changes() {
    let disk = Arc::new(FaultyBackend::new(11));
    let (store, broker) = boot(&disk);
    let v = broker.vhost("/").unwrap();
    // Whole-blob writes up to 10,000, then enough queue records (~60 bytes each) that the
    // journal outgrows its 1 MiB floor and the blob, so that a compaction falls in between.
    for i in 0..24_000 {
        declare(&v, &format!("q{i}"), false);
        if i % 3 == 0 {
            v.delete_queue(&format!("q{}", i / 2), false, false, 1)
                .unwrap();
        }
        if i % 5000 == 0 && i <= 10_000 {
            // Whole-blob writes in between: an exchange and bindings, one to a queue that
            // is deleted later (its binding goes with it) and is then declared again.
            let name = format!("x{i}");
            declare_exchange(&v, &name, "direct");
            for q in [format!("q{i}"), format!("q{}", i + 1)] {
                declare(&v, &q, false);
                v.bind_queue(&q, &name, "k".into(), FieldTable::new(), 1)
                    .unwrap();
            }
        }
    }
    v.delete_queue("q5001", false, false, 1).unwrap();
    declare(&v, "q5001", true);
    // Bindings as journal records too: a topic exchange bound to 1,000 queues, every third
    // unbound again, an exchange-to-exchange binding, and a queue deleted with its binding.
    declare_exchange(&v, "t", "topic");
    for i in 0..1000 {
        let (q, key) = (format!("q{}", 12_000 + i), format!("a.{}.#", i % 10));
        v.bind_queue(&q, "t", key.as_str().into(), FieldTable::new(), 1)
            .unwrap();
        if i % 3 == 0 {
            v.unbind_queue(&q, "t", key.as_str().into(), FieldTable::new(), 1)
                .unwrap();
        }
    }
    v.bind_exchange("t", "x0", "k".into(), FieldTable::new())
        .unwrap();
    v.delete_queue("q12001", false, false, 1).unwrap();
    let expected = durable(&broker);
    assert_eq!(
        expected.bindings.iter().filter(|b| b.source == "t").count(),
        1000 - 334 - 1
    );
    assert!(expected
        .bindings
        .iter()
        .any(|b| b.to_exchange && b.source == "x0"));
    assert!(expected.queues.len() > 10_000);
    assert!(
        expected.bindings.iter().all(|b| b.destination != "q5001"),
        "the binding went with its queue"
    );
    assert!(expected.bindings.iter().any(|b| b.destination == "q5000"));
    drop((v, broker));
    drop(store);
    // Every change was durable before it returned: a crash that loses whatever was not
    // synced loses none of them.
    for mode in [CrashMode::DropUnsynced, CrashMode::Torn] {
        let after = Arc::new(disk.crash(mode));
        let (_store, broker) = boot(&after);
        assert_eq!(durable(&broker), expected, "{mode:?}");
    }
    // And a restart after a restart (recovery wrote the blob whole) too.
    let after = Arc::new(disk.crash(CrashMode::KeepUnsynced));
    let (_store, broker) = boot(&after);
    drop(broker);
    let (_store, broker) = boot(&Arc::new(after.crash(CrashMode::KeepUnsynced)));
    assert_eq!(durable(&broker), expected);
}

#[test]
fn a_crash_while_a_declare_is_written_keeps_every_declare_acknowledged_before_it() {
    let disk = Arc::new(FaultyBackend::new(12));
    let (store, broker) = boot(&disk);
    let v = broker.vhost("/").unwrap();
    for i in 0..200 {
        declare(&v, &format!("q{i}"), false);
        if i % 4 == 0 {
            v.delete_queue(&format!("q{}", i / 2), false, false, 1)
                .unwrap();
        }
    }
    let acknowledged: BTreeSet<ShortStr> = durable(&broker)
        .queues
        .into_iter()
        .map(|q| q.name)
        .collect();
    // The next declare's journal append reaches the disk but its fsync never returns.
    disk.set_stall_syncs(true);
    let writer = {
        let v = v.clone();
        std::thread::spawn(move || declare(&v, "in-flight", false))
    };
    std::thread::sleep(Duration::from_millis(200));
    for mode in [CrashMode::DropUnsynced, CrashMode::Torn, CrashMode::BitFlip] {
        let (_store, recovered) = boot(&Arc::new(disk.crash(mode)));
        let mut names: BTreeSet<ShortStr> = durable(&recovered)
            .queues
            .into_iter()
            .map(|q| q.name)
            .collect();
        // The declare never answered: it may or may not have made it.
        names.remove("in-flight");
        assert_eq!(names, acknowledged, "{mode:?}");
    }
    disk.set_stall_syncs(false);
    let _ = writer.join();
    drop((v, broker, store));
}
