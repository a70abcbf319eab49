//! DELIVERY_COUNT records (docs/STORAGE.md §3.5): a queue's count of failed deliveries
//! of one message survives a restart and a crash once durable, the newest record wins, an
//! ack ends it, and the segment holding a count in force is kept (a pin) while later
//! traffic lets every other dead segment go.

use std::sync::Arc;
use std::time::Duration;

use warren_store::{
    Backend, CrashMode, FaultyBackend, MessageId, QueueId, Store, StoreError, StoreOptions,
    StoredMessage,
};

fn open(backend: &FaultyBackend) -> Store {
    let opts = StoreOptions {
        segment_size_bytes: 4096,
        ..StoreOptions::default()
    };
    Store::open_with_backend(Arc::new(backend.clone()), opts)
        .expect("open")
        .0
}

fn msg(i: u64) -> StoredMessage {
    StoredMessage::new("ex", format!("rk.{i}"), vec![], vec![i as u8; 200])
}

fn segment_files(backend: &FaultyBackend) -> usize {
    backend.list("msgs").unwrap().len()
}

/// Waits (bounded, generously) until `cond` holds; reclamation runs on the writer thread.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Publishes and acks `n` messages to `q` (segments roll and die behind them).
fn traffic(store: &Store, q: QueueId, n: u64) {
    for i in 0..n {
        let id = store.append(&[q], &msg(i)).unwrap().id;
        store.ack(q, id).unwrap();
    }
}

#[test]
fn the_newest_count_survives_a_restart_and_an_ack_ends_it() {
    let disk = FaultyBackend::new(1);
    let store = open(&disk);
    let q = store.register_queue("q").unwrap();
    let other = store.register_queue("other").unwrap();
    let a = store.append(&[q, other], &msg(1)).unwrap().id;
    let b = store.append(&[q], &msg(2)).unwrap().id;
    store.set_delivery_count(q, a, 1).unwrap();
    store.set_delivery_count(q, a, 2).unwrap();
    store.set_delivery_count(q, b, 5).unwrap();
    // Per reference: the other queue's copy of `a` has no count.
    assert_eq!(store.delivery_count(q, a), Some(2));
    assert_eq!(store.delivery_count(other, a), None);
    store.ack(q, b).unwrap();
    assert_eq!(store.delivery_count(q, b), None);
    assert!(matches!(
        store.set_delivery_count(q, b, 6),
        Err(StoreError::UnknownMessage(..))
    ));
    assert_eq!(store.stats().live_references, 2, "pins are not references");
    store.close().unwrap();

    let store = open(&disk);
    assert_eq!(store.delivery_count(q, a), Some(2));
    assert_eq!(store.delivery_count(other, a), None);
    assert_eq!(store.delivery_count(q, b), None);
    store.ack(q, a).unwrap();
    store.close().unwrap();
    let store = open(&disk);
    assert_eq!(store.delivery_count(q, a), None);
    assert_eq!(store.delivery_count(other, a), None);
}

#[test]
fn a_count_in_force_keeps_its_segment_and_lets_it_go_once_acked() {
    let disk = FaultyBackend::new(2);
    let store = open(&disk);
    let q = store.register_queue("q").unwrap();
    let stuck = store.append(&[q], &msg(0)).unwrap().id;
    traffic(&store, q, 100);
    // The count lands in a later segment than the message: that segment must stay.
    store.set_delivery_count(q, stuck, 3).unwrap();
    traffic(&store, q, 400);
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&disk) <= 8),
        "{} segment files, {:?}",
        segment_files(&disk),
        store.stats()
    );
    let after = disk.crash(CrashMode::DropUnsynced);
    drop(store);
    let store = open(&after);
    assert_eq!(store.delivery_count(q, stuck), Some(3));
    // Acked, nothing pins the two segments any more.
    store.ack(q, stuck).unwrap();
    traffic(&store, q, 100);
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&after) <= 3),
        "{} segment files, {:?}",
        segment_files(&after),
        store.stats()
    );
    let again = after.crash(CrashMode::DropUnsynced);
    drop(store);
    let store = open(&again);
    assert_eq!(store.delivery_count(q, stuck), None);
    assert_eq!(store.stats().live_references, 0);
}

#[test]
fn deleting_the_queue_drops_its_counts() {
    let disk = FaultyBackend::new(3);
    let store = open(&disk);
    let q = store.register_queue("q").unwrap();
    let id = store.append(&[q], &msg(0)).unwrap().id;
    store.set_delivery_count(q, id, 1).unwrap();
    store.delete_queue(q).unwrap();
    assert_eq!(store.delivery_count(q, id), None);
    assert!(store.set_delivery_count(q, MessageId(id.0), 2).is_err());
    traffic(&store, store.register_queue("next").unwrap(), 200);
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&disk) <= 3),
        "{} segment files, {:?}",
        segment_files(&disk),
        store.stats()
    );
}
