//! Carrying ACKs forward (docs/STORAGE.md §5): a message that stays unacked
//! forever pins its own segment only, not every later segment through the
//! chain of ACK dependencies; and carrying never resurrects an acked message
//! or loses an unacked one across crashes.

use std::sync::Arc;
use std::time::Duration;

use warren_store::{
    Backend, CrashMode, FaultyBackend, MessageId, QueueId, Recovered, Store, StoreOptions,
    StoredMessage,
};

fn open(backend: &FaultyBackend) -> (Store, Recovered) {
    let opts = StoreOptions {
        segment_size_bytes: 4096,
        ..StoreOptions::default()
    };
    Store::open_with_backend(Arc::new(backend.clone()), opts).expect("open")
}

fn sized(i: u64, body_len: usize) -> StoredMessage {
    StoredMessage::new(
        "ex",
        format!("rk.{i}"),
        vec![i as u8],
        vec![i as u8; body_len],
    )
}

fn segment_files(backend: &FaultyBackend) -> usize {
    backend.list("msgs").unwrap().len()
}

/// Waits (bounded) until `cond` holds; reclamation runs on the writer thread.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Publishes `rounds` rounds of 5 messages to `q`, acking each round's
/// messages one round later (so ACKs often land in a later segment than their
/// message). Returns the ids of the last round, still unacked.
fn traffic(store: &Store, q: QueueId, rounds: u64, mut check: impl FnMut(u64)) -> Vec<MessageId> {
    let mut previous: Vec<MessageId> = Vec::new();
    for round in 0..rounds {
        let current: Vec<MessageId> = (0..5)
            .map(|i| store.append(&[q], &sized(round * 5 + i, 200)).unwrap().id)
            .collect();
        for id in previous.drain(..) {
            store.ack(q, id).unwrap();
        }
        previous = current;
        check(round);
    }
    previous
}

/// Segments the store may legitimately keep in this scenario: the stuck
/// message's own, the one or two holding the carried ACKs and the last round,
/// and the active one.
const BOUND: usize = 6;

#[test]
fn a_long_unacked_message_does_not_pin_every_later_segment() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let stuck = store.append(&[q], &sized(u64::MAX, 100)).unwrap();
    let disk2 = disk.clone();
    let store2 = store.clone();
    let last = traffic(&store, q, 400, |round| {
        if round % 50 == 49 {
            store2.flush().unwrap();
            assert!(
                eventually(|| segment_files(&disk2) <= BOUND),
                "round {round}: {} segment files, {:?}",
                segment_files(&disk2),
                store2.stats()
            );
        }
    });
    assert!(store.stats().segments_created > 50, "{:?}", store.stats());
    store.close().unwrap();
    let (_store, recovered) = open(&disk);
    let mut expect: Vec<u64> = last.iter().map(|id| id.0).collect();
    expect.insert(0, stuck.id.0);
    assert_eq!(recovered.queues[&q].live.iter().collect::<Vec<_>>(), expect);
}

fn live(recovered: &Recovered, q: QueueId) -> Vec<u64> {
    // An empty queue is not reported (only the queue table has it).
    recovered
        .queues
        .get(&q)
        .map_or_else(Vec::new, |queue| queue.live.iter().collect())
}

#[test]
fn crashes_after_carrying_never_resurrect_acked_messages() {
    for (seed, mode) in [
        (1, CrashMode::DropUnsynced),
        (2, CrashMode::Torn),
        (3, CrashMode::BitFlip),
        (4, CrashMode::Torn),
        (5, CrashMode::BitFlip),
    ] {
        let disk = FaultyBackend::new(seed);
        let (store, _) = open(&disk);
        let q = store.register_queue("q").unwrap();
        let stuck = store.append(&[q], &sized(u64::MAX, 100)).unwrap().id;
        let first = store.append(&[q], &sized(0, 100)).unwrap().id;
        // Everything up to `settled` is durably acked, except the last round.
        let settled = traffic(&store, q, 150, |_| {});
        store.ack(q, first).unwrap();
        store.flush().unwrap();
        assert!(
            eventually(|| segment_files(&disk) <= BOUND),
            "{mode:?}: {} files",
            segment_files(&disk)
        );
        assert!(store.stats().acks_carried > 0, "{:?}", store.stats());
        let durable_max = settled.iter().max().unwrap().0;
        // More traffic, not waited for, crash in the middle of it.
        traffic(&store, q, 40, |_| {});
        let after = disk.crash(mode);
        drop(store);
        let (store, recovered) = open(&after);
        let got = live(&recovered, q);
        assert!(got.contains(&stuck.0), "{mode:?}: lost the unacked message");
        for id in &settled {
            assert!(got.contains(&id.0), "{mode:?}: lost confirmed {id:?}");
        }
        for id in &got {
            assert!(
                *id == stuck.0 || settled.contains(&MessageId(*id)) || *id > durable_max,
                "{mode:?}: durably acked message {id} came back"
            );
        }
        // Carrying goes on from the recovered state: more traffic stays bounded
        // and a second crash still resurrects nothing.
        for id in got.iter().filter(|id| **id != stuck.0) {
            store.ack(q, MessageId(*id)).unwrap();
        }
        let last = traffic(&store, q, 150, |_| {});
        store.flush().unwrap();
        assert!(
            eventually(|| segment_files(&after) <= BOUND),
            "{mode:?} after recovery: {} files",
            segment_files(&after)
        );
        let again = after.crash(CrashMode::DropUnsynced);
        drop(store);
        let (_store, recovered) = open(&again);
        let mut expect: Vec<u64> = last.iter().map(|id| id.0).collect();
        expect.insert(0, stuck.0);
        assert_eq!(live(&recovered, q), expect, "{mode:?}, second crash");
    }
}

/// The writer carries a dead segment's ACKs, and the machine crashes after
/// they were written but before their fsync: the dead segment must still be
/// on disk, and nothing it acked may come back.
#[test]
fn a_crash_before_the_carried_acks_are_durable_keeps_the_dead_segment() {
    for (seed, mode) in [
        (1, CrashMode::DropUnsynced),
        (2, CrashMode::Torn),
        (3, CrashMode::BitFlip),
        (4, CrashMode::KeepUnsynced),
    ] {
        let disk = FaultyBackend::new(seed);
        let (store, _) = open(&disk);
        let q = store.register_queue("q").unwrap();
        let big = |i| sized(i, 3900);
        // Segment A: stuck (live for good) and a.
        let stuck = store.append(&[q], &sized(1, 100)).unwrap();
        let a = store.append(&[q], &sized(2, 100)).unwrap();
        // Segment B: b, then the ack of a (into A).
        let b = store.append(&[q], &big(3)).unwrap();
        store.ack(q, a.id).unwrap();
        // Segment C: c. B is sealed and still has b live.
        let c = store.append(&[q], &big(4)).unwrap();
        store.flush().unwrap();
        let seg_b = warren_store::segment::segment_path(b.location.segment);
        let seg_c = warren_store::segment::segment_path(c.location.segment);
        assert_ne!(stuck.location.segment, b.location.segment);
        assert_ne!(b.location.segment, c.location.segment);
        assert_eq!(a.location.segment, stuck.location.segment);
        let c_len = disk.file_bytes(&seg_c).unwrap().len();
        // Let the writer finish the reclamation pass after that batch: a pass
        // still running when b is acked would carry B at once, in the same
        // batch as the ack of b (safe, but not the case under test).
        std::thread::sleep(Duration::from_millis(200));

        // The batch holding the ack of b syncs; the next one (the carried
        // ack of a) stalls in its fsync.
        disk.stall_syncs_after(1);
        store.ack(q, b.id).unwrap();
        let written = eventually(|| {
            disk.file_bytes(&seg_c).unwrap().len() == c_len + 2 * 21 && disk.syncs_stalled()
        });
        if !written {
            let stats = store.stats();
            let _ = disk.crash(mode);
            panic!("{mode:?}: carried ACK not written: {stats:?}");
        }
        // Give a wrong implementation time to remove B.
        std::thread::sleep(Duration::from_millis(20));
        let stats = store.stats();
        let b_present = disk.file_bytes(&seg_b).is_some();
        // Crash first: the writer is stalled, a failed assertion would hang
        // in the store's drop.
        let after = disk.crash(mode);
        drop(store);
        assert_eq!(stats.acks_carried, 1, "{mode:?}: {stats:?}");
        assert!(
            stats.durable_seq < 7,
            "{mode:?}: carried ACK durable: {stats:?}"
        );
        assert!(
            b_present,
            "{mode:?}: B removed before its carried ACK was durable"
        );
        assert!(after.file_bytes(&seg_b).is_some(), "{mode:?}: B lost");
        let (store, recovered) = open(&after);
        assert_eq!(
            live(&recovered, q),
            vec![stuck.id.0, c.id.0],
            "{mode:?}: a and b were durably acked"
        );
        // The recovered store carries B again and removes it.
        assert!(
            eventually(|| after.file_bytes(&seg_b).is_none()),
            "{mode:?}: B not reclaimed after recovery"
        );
        assert!(store.stats().acks_carried >= 1);
        store.close().unwrap();
        let again = after.crash(CrashMode::DropUnsynced);
        let (_store, recovered) = open(&again);
        assert_eq!(live(&recovered, q), vec![stuck.id.0, c.id.0], "{mode:?}");
    }
}

/// A dead segment whose needed ACKs would take more than half of it is not
/// carried (that would only rewrite it); it goes once what it acks into goes.
#[test]
fn a_segment_made_of_needed_acks_is_not_carried() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let stuck = store.append(&[q], &sized(0, 0)).unwrap();
    let small: Vec<_> = (1..60)
        .map(|i| store.append(&[q], &sized(i, 0)).unwrap())
        .collect();
    assert!(small
        .iter()
        .all(|m| m.location.segment == stuck.location.segment));
    // Segment B: a big message, then the acks of the small ones (into A).
    let b = store.append(&[q], &sized(100, 2000)).unwrap();
    assert_ne!(b.location.segment, stuck.location.segment);
    for m in &small {
        store.ack(q, m.id).unwrap();
    }
    store.ack(q, b.id).unwrap();
    // Seal B: dead, 59 needed ACKs (1239 bytes) in ~3.3 KB: carried.
    store.append(&[q], &sized(101, 3900)).unwrap();
    store.flush().unwrap();
    let seg_b = warren_store::segment::segment_path(b.location.segment);
    assert!(eventually(|| disk.file_bytes(&seg_b).is_none()));
    let stats = store.stats();
    assert_eq!(stats.acks_carried, 59, "{stats:?}");
    // The carried ACKs now are most of a segment of their own: seal it with
    // nothing else live in it; it must stay rather than be carried again and
    // again.
    let filler = store.append(&[q], &sized(102, 3900)).unwrap();
    store.ack(q, filler.id).unwrap();
    store.append(&[q], &sized(103, 3900)).unwrap();
    store.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let stats = store.stats();
    assert_eq!(stats.acks_carried, 59, "carried again: {stats:?}");
    assert!(stats.segments_created < 10, "{stats:?}");
    // Acking the stuck message frees everything but the live tail.
    store.ack(q, stuck.id).unwrap();
    store.append(&[q], &sized(104, 3900)).unwrap();
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&disk) <= 3),
        "{}",
        segment_files(&disk)
    );
    store.close().unwrap();
    let (_store, recovered) = open(&disk.crash(CrashMode::DropUnsynced));
    assert_eq!(live(&recovered, q).len(), 3);
}
