//! Integration tests of the public `Store` API: round trips through
//! recovery, torn tails, corruption, rollover and reclamation, the live index
//! (ack → segment), queue scans, queue deletion, definitions, group-commit
//! counters and failure reporting.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use warren_store::segment::segment_path;
use warren_store::{
    Appended, Backend, CrashMode, FaultyBackend, LogPosition, MessageId, QueueId, Recovered, Scan,
    ScannedMessage, Store, StoreError, StoreOptions, StoredMessage, SyncPolicy,
};

fn msg(i: u64) -> StoredMessage {
    StoredMessage::new(
        "amq.topic",
        format!("key.{i}"),
        vec![0x90, 0, 2, i as u8],
        format!("body-{i}-").repeat(20),
    )
}

fn open(backend: &FaultyBackend, opts: StoreOptions) -> (Store, Recovered) {
    Store::open_with_backend(Arc::new(backend.clone()), opts).expect("open")
}

fn small_segments() -> StoreOptions {
    StoreOptions {
        segment_size_bytes: 4096,
        ..StoreOptions::default()
    }
}

/// A store on a fault-injecting disk with 4 KiB segments, one queue "q" and `n` messages
/// appended to it (not yet flushed).
fn one_queue_in_small_segments(n: u64) -> (FaultyBackend, Store, QueueId, Vec<Appended>) {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    let appended = (0..n)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
    (disk, store, q, appended)
}

fn ids(recovered: &Recovered, q: QueueId) -> Vec<u64> {
    // An empty queue is not reported (only the queue table has it).
    recovered
        .queues
        .get(&q)
        .map_or_else(Vec::new, |queue| queue.live.iter().collect())
}

/// The start of the log: before the first record of any segment.
const START: LogPosition = LogPosition {
    segment: 0,
    offset: 0,
};

/// Scans `q` from `from` to the end of the log, `batch` messages at a time.
fn scan_all(
    store: &Store,
    q: QueueId,
    from: LogPosition,
    wanted: &mut dyn FnMut(MessageId) -> bool,
    batch: usize,
) -> Vec<ScannedMessage> {
    let mut out = Vec::new();
    let mut pos = from;
    loop {
        let scan: Scan = store.scan_queue(q, pos, wanted, batch, usize::MAX).unwrap();
        assert!(scan.messages.len() <= batch.max(1));
        assert!(scan.next >= pos, "scan went backwards");
        pos = scan.next;
        out.extend(scan.messages);
        if scan.end_of_log {
            return out;
        }
    }
}

/// The live messages of `q` as recovered: scanned from `first`, filtered by `live`.
fn recovered_messages(store: &Store, recovered: &Recovered, q: QueueId) -> Vec<ScannedMessage> {
    let queue = &recovered.queues[&q];
    let Some(first) = queue.first else {
        assert!(queue.live.is_empty());
        return Vec::new();
    };
    let live = queue.live.clone();
    let got = scan_all(store, q, first, &mut |id| live.contains(id.0), 1000);
    assert_eq!(
        got.iter().map(|m| m.id.0).collect::<Vec<_>>(),
        queue.live.iter().collect::<Vec<_>>()
    );
    assert_eq!(
        got.iter().map(|m| m.message.body.len() as u64).sum::<u64>(),
        queue.live_body_bytes
    );
    got
}

fn segment_files(backend: &FaultyBackend) -> Vec<String> {
    let mut names = backend.list("msgs").unwrap();
    names.sort();
    names
}

#[test]
fn publish_ack_recover_on_real_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(recovered.queues.is_empty());
    let q = store.register_queue("orders").unwrap();
    assert_eq!(store.register_queue("orders").unwrap(), q, "idempotent");
    let mut appended = Vec::new();
    for i in 0..100 {
        appended.push(store.append(&[q], &msg(i)).unwrap());
    }
    for a in appended.iter().step_by(2) {
        store.ack(q, a.id).unwrap();
    }
    store.flush().unwrap();
    assert_eq!(store.read(&appended[7].location).unwrap(), msg(7));
    store.close().unwrap();

    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let queue = &recovered.queues[&q];
    assert_eq!(queue.name, "orders");
    let expect: Vec<u64> = appended.iter().skip(1).step_by(2).map(|a| a.id.0).collect();
    assert_eq!(ids(&recovered, q), expect);
    assert_eq!(queue.first, Some(appended[1].location.position()));
    let messages = recovered_messages(&store, &recovered, q);
    assert_eq!(messages.len(), 50);
    for m in &messages {
        let i = m.id.0 - appended[0].id.0;
        assert_eq!(m.message, msg(i));
        assert_eq!(m.location, appended[i as usize].location);
        assert_eq!(store.read(&m.location).unwrap(), msg(i));
    }
    // Ids keep increasing across restarts.
    let next = store.append(&[q], &msg(1000)).unwrap();
    assert!(next.id > appended.last().unwrap().id);
}

#[test]
fn a_directory_can_be_opened_by_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(matches!(
        Store::open(dir.path(), StoreOptions::default()),
        Err(StoreError::Locked(_))
    ));
    store.close().unwrap();
    Store::open(dir.path(), StoreOptions::default()).unwrap();
}

fn all(_: MessageId) -> bool {
    true
}

fn sized(i: u64, body_len: usize) -> StoredMessage {
    StoredMessage {
        published_at_ms: 1_700_000_000_000 + i,
        ..StoredMessage::new(
            "ex",
            format!("rk.{i}"),
            vec![i as u8],
            vec![i as u8; body_len],
        )
    }
}

/// Waits (bounded) until `cond` holds; reclamation runs on the writer thread.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..400 {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

#[test]
fn recovery_returns_live_sets_body_bytes_and_first_positions() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let a = store.register_queue("a").unwrap();
    let b = store.register_queue("b").unwrap();
    let empty = store.register_queue("empty").unwrap();
    let mut expect_bytes = [0u64; 2];
    let mut expect_ids: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut expect_first: [Option<LogPosition>; 2] = [None, None];
    for i in 0..200u64 {
        let routes: &[QueueId] = match i % 3 {
            0 => &[a],
            1 => &[b],
            _ => &[a, b],
        };
        let transient = i % 7 == 0;
        let message = StoredMessage {
            transient,
            ..sized(i, (i as usize * 37) % 900)
        };
        let appended = store.append(routes, &message).unwrap();
        for (k, q) in [a, b].into_iter().enumerate() {
            if !routes.contains(&q) {
                continue;
            }
            // The first 20 messages of each queue are acked.
            if i < 20 {
                store.ack(q, appended.id).unwrap();
            } else if !transient {
                expect_bytes[k] += message.body.len() as u64;
                expect_ids[k].push(appended.id.0);
                expect_first[k].get_or_insert(appended.location.position());
            }
        }
    }
    store.close().unwrap();

    let (store, recovered) = open(&disk, small_segments());
    for (k, q) in [a, b].into_iter().enumerate() {
        let queue = &recovered.queues[&q];
        assert_eq!(ids(&recovered, q), expect_ids[k], "queue {k}");
        assert_eq!(queue.live_body_bytes, expect_bytes[k], "queue {k}");
        assert_eq!(queue.first, expect_first[k], "queue {k}");
        let messages = recovered_messages(&store, &recovered, q);
        assert!(messages.iter().all(|m| !m.message.transient));
        for m in &messages {
            let i = m.message.published_at_ms - 1_700_000_000_000;
            assert_eq!(m.message, sized(i, (i as usize * 37) % 900));
        }
    }
    // An empty queue is registered and reported by nothing else: its recovery costs nothing.
    assert!(!recovered.queues.contains_key(&empty));
    assert!(store.queue_ids().contains(&empty));
    // The store's own index is the recovered sets: acks work, once.
    let id = MessageId(expect_ids[0][0]);
    store.ack(a, id).unwrap();
    assert!(matches!(
        store.ack(a, id),
        Err(StoreError::UnknownMessage(..))
    ));
    let live = expect_ids[0].len() + expect_ids[1].len() - 1;
    assert_eq!(store.stats().live_references, live as u64);
}

#[test]
fn transient_messages_are_scanned_but_not_recovered() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    let persistent = store.append(&[q], &sized(1, 100)).unwrap();
    let transient_msg = StoredMessage {
        transient: true,
        ..sized(2, 100)
    };
    // Enough transient messages to fill segments of their own.
    let transient: Vec<_> = (0..100)
        .map(|_| store.append(&[q], &transient_msg).unwrap())
        .collect();
    store.flush().unwrap();
    assert_eq!(
        store.stats().live_references,
        101,
        "transient ones are live"
    );
    let scanned = scan_all(&store, q, START, &mut all, 1000);
    assert_eq!(scanned.len(), 101);
    assert_eq!(scanned[0].message, sized(1, 100));
    assert!(scanned[1..].iter().all(|m| m.message == transient_msg));
    // Acked like any other message.
    store.ack(q, transient[0].id).unwrap();
    store.close().unwrap();

    let (store, recovered) = open(&disk, small_segments());
    assert_eq!(ids(&recovered, q), vec![persistent.id.0]);
    assert_eq!(recovered.queues[&q].live_body_bytes, 100);
    assert!(
        recovered.report.segments_removed > 0,
        "segments holding only transient messages are reclaimed: {:?}",
        recovered.report
    );
    assert_eq!(store.stats().live_references, 1);
    assert!(matches!(
        store.ack(q, transient[1].id),
        Err(StoreError::UnknownMessage(..))
    ));
}

#[test]
fn acks_find_their_segment_across_rollovers() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    let small = |i: u64| sized(i, 100);
    // A: many segments of publishes.
    let a: Vec<_> = (0..400)
        .map(|i| store.append(&[q], &small(i)).unwrap())
        .collect();
    // Acking all of A fills segments that hold only acks (their base id is the
    // base of the next segment that holds publishes: a tie in the base map).
    for x in &a {
        store.ack(q, x.id).unwrap();
    }
    // B: publishes after the ack-only segments.
    let b: Vec<_> = (400..700)
        .map(|i| store.append(&[q], &small(i)).unwrap())
        .collect();
    let last_a = a.last().unwrap().location.segment;
    let first_b = b[0].location.segment;
    assert!(
        first_b > last_a + 1,
        "ack-only segments between {last_a} and {first_b}"
    );
    // Ack B in a scattered order, keeping every 10th.
    let mut order: Vec<usize> = (0..b.len()).filter(|i| i % 10 != 0).collect();
    order.sort_by_key(|i| (i * 7919) % b.len());
    for i in order {
        store.ack(q, b[i].id).unwrap();
        assert!(matches!(
            store.ack(q, b[i].id),
            Err(StoreError::UnknownMessage(..))
        ));
    }
    let kept: Vec<_> = b.iter().step_by(10).collect();
    assert_eq!(store.stats().live_references, kept.len() as u64);
    // Seal the active segment so reclamation can run everywhere.
    let filler = StoredMessage::new("", "", vec![], vec![0u8; 4000]);
    let f1 = store.append(&[q], &filler).unwrap();
    let f2 = store.append(&[q], &filler).unwrap();
    store.flush().unwrap();
    // Every segment of A and the ack-only ones go; each kept message still pins its own.
    let kept_segments: BTreeSet<u32> = kept.iter().map(|x| x.location.segment).collect();
    assert!(eventually(|| {
        let files = segment_files(&disk);
        (1..first_b).all(|s| !files.contains(&format!("{s:08}.seg")))
    }));
    let files = segment_files(&disk);
    for s in &kept_segments {
        assert!(files.contains(&format!("{s:08}.seg")), "{s} pinned");
    }
    for x in &kept {
        assert_eq!(store.read(&x.location).unwrap(), small(x.id.0 - a[0].id.0));
    }
    store.close().unwrap();

    let (store, recovered) = open(&disk, small_segments());
    let mut expect: Vec<u64> = kept.iter().map(|x| x.id.0).collect();
    expect.extend([f1.id.0, f2.id.0]);
    assert_eq!(ids(&recovered, q), expect);
    assert_eq!(
        recovered_messages(&store, &recovered, q).len(),
        expect.len()
    );
    // Acking the rest after the restart frees everything but the newest segments.
    for id in expect {
        store.ack(q, MessageId(id)).unwrap();
    }
    store.append(&[q], &filler).unwrap();
    store.append(&[q], &filler).unwrap();
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&disk).len() <= 3),
        "{:?}",
        segment_files(&disk)
    );
}

#[test]
fn scan_queue_walks_many_segments_with_interleaved_queues() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let a = store.register_queue("a").unwrap();
    let b = store.register_queue("b").unwrap();
    let mut expect_a = Vec::new();
    let mut expect_b = Vec::new();
    for i in 0..300u64 {
        let routes: &[QueueId] = match i % 3 {
            0 => &[a],
            1 => &[b],
            _ => &[b, a],
        };
        let appended = store.append(routes, &msg(i)).unwrap();
        if routes.contains(&a) {
            expect_a.push((appended.id, appended.location, msg(i)));
        }
        if routes.contains(&b) {
            expect_b.push((appended.id, appended.location, msg(i)));
        }
        if i % 5 == 0 {
            // Acks in between do not disturb scans (they are skipped).
            store.ack(routes[0], appended.id).unwrap();
        }
    }
    store.flush().unwrap();
    let segments: BTreeSet<u32> = expect_a.iter().map(|(_, l, _)| l.segment).collect();
    assert!(segments.len() > 10, "{segments:?}");

    for (q, expect) in [(a, &expect_a), (b, &expect_b)] {
        for batch in [1, 7, 1000] {
            let got = scan_all(&store, q, START, &mut all, batch);
            let got: Vec<_> = got
                .into_iter()
                .map(|m| (m.id, m.location, m.message))
                .collect();
            assert_eq!(&got, expect, "batch {batch}");
        }
    }

    // `wanted` is asked about the queue's messages only, and filters them.
    let mut asked = Vec::new();
    let got = scan_all(
        &store,
        a,
        START,
        &mut |id| {
            asked.push(id);
            id.0 % 2 == 0
        },
        10,
    );
    assert_eq!(
        asked,
        expect_a.iter().map(|(id, _, _)| *id).collect::<Vec<_>>()
    );
    let even: Vec<MessageId> = expect_a
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| id.0 % 2 == 0)
        .collect();
    assert_eq!(got.iter().map(|m| m.id).collect::<Vec<_>>(), even);

    // max_bytes: stop once the bodies reach it; every message comes back once.
    let mut pos = START;
    let mut seen = Vec::new();
    loop {
        let scan = store
            .scan_queue(a, pos, &mut all, usize::MAX, 1000)
            .unwrap();
        let sizes: Vec<usize> = scan.messages.iter().map(|m| m.message.body.len()).collect();
        if !scan.end_of_log {
            assert!(sizes.iter().sum::<usize>() >= 1000);
        }
        if let Some((_, before_last)) = sizes.split_last() {
            assert!(before_last.iter().sum::<usize>() < 1000, "{sizes:?}");
        }
        seen.extend(scan.messages.iter().map(|m| m.id));
        pos = scan.next;
        if scan.end_of_log {
            break;
        }
    }
    assert_eq!(
        seen,
        expect_a.iter().map(|(id, _, _)| *id).collect::<Vec<_>>()
    );
    // Zero limits still return one message.
    let scan = store.scan_queue(a, START, &mut all, 0, 0).unwrap();
    assert_eq!(scan.messages.len(), 1);
    assert!(!scan.end_of_log);
    let loc = scan.messages[0].location;
    assert_eq!(
        scan.next,
        LogPosition {
            segment: loc.segment,
            offset: loc.offset + loc.len
        }
    );
    // Continuing from a message's own position returns it again; from the end
    // of the log, nothing.
    let again = store
        .scan_queue(a, loc.position(), &mut all, 1, usize::MAX)
        .unwrap();
    assert_eq!(again.messages[0].id, scan.messages[0].id);
    let end = scan_all(&store, a, START, &mut |_| false, 10);
    assert!(end.is_empty());
    let last = store.scan_queue(a, START, &mut |_| false, 10, 10).unwrap();
    assert!(last.end_of_log && last.messages.is_empty());
    let at_end = store.scan_queue(a, last.next, &mut all, 10, 10).unwrap();
    assert!(at_end.end_of_log && at_end.messages.is_empty());
    assert_eq!(at_end.next, last.next);
}

#[test]
fn scan_queue_skips_removed_segments() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let early = store.register_queue("early").unwrap();
    let late = store.register_queue("late").unwrap();
    let gone: Vec<_> = (0..60)
        .map(|i| store.append(&[early], &msg(i)).unwrap())
        .collect();
    let kept: Vec<_> = (60..120)
        .map(|i| store.append(&[late], &msg(i)).unwrap())
        .collect();
    for x in &gone {
        store.ack(early, x.id).unwrap();
    }
    store.flush().unwrap();
    let first = gone[0].location.segment;
    assert!(eventually(|| disk
        .file_bytes(&segment_path(first))
        .is_none()));
    // From a position inside a removed segment: on to the next one that exists.
    let got = scan_all(&store, late, gone[5].location.position(), &mut all, 1000);
    assert_eq!(
        got.iter().map(|m| m.id).collect::<Vec<_>>(),
        kept.iter().map(|x| x.id).collect::<Vec<_>>()
    );
    // What is left of the early queue may still be scanned (the store does not
    // consult its index): only what remains on disk comes back.
    let early_left = scan_all(&store, early, START, &mut all, 1000);
    assert!(early_left.len() < gone.len());
}

#[test]
fn scan_queue_skips_the_rest_of_a_corrupt_segment() {
    let (disk, store, q, appended) = one_queue_in_small_segments(40);
    store.flush().unwrap();
    let bad = appended[2].location;
    disk.corrupt(
        &segment_path(bad.segment),
        bad.offset as usize + 60,
        b"\xff",
    );
    let got: Vec<MessageId> = scan_all(&store, q, START, &mut all, 1000)
        .iter()
        .map(|m| m.id)
        .collect();
    let expect: Vec<MessageId> = appended
        .iter()
        .filter(|x| x.location.segment != bad.segment || x.location.offset < bad.offset)
        .map(|x| x.id)
        .collect();
    assert!(expect.len() < appended.len() - 1);
    assert_eq!(got, expect);
}

#[test]
fn scan_queue_waits_for_records_pending_with_the_writer() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    let first = store.append(&[q], &msg(0)).unwrap();
    store.flush().unwrap();
    let scan = store
        .scan_queue(q, START, &mut all, 10, usize::MAX)
        .unwrap();
    assert_eq!(scan.messages.len(), 1);
    assert!(scan.end_of_log);
    let end = scan.next;
    assert_eq!(end.offset, first.location.offset + first.location.len);

    // The next batch is written but its fsync stalls: not readable yet.
    disk.set_stall_syncs(true);
    let second = store.append(&[q], &msg(1)).unwrap();
    // Messages found before the pending part are returned without waiting.
    let scan = store
        .scan_queue(q, START, &mut all, 10, usize::MAX)
        .unwrap();
    assert_eq!(scan.messages.len(), 1);
    assert!(!scan.end_of_log, "records are pending");
    assert_eq!(scan.next, end);
    // Nothing found before them: wait for the writer.
    let scanner = {
        let store = store.clone();
        std::thread::spawn(move || store.scan_queue(q, end, &mut all, 10, usize::MAX))
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !scanner.is_finished(),
        "scan must wait for the pending batch"
    );
    disk.set_stall_syncs(false);
    let scan = scanner.join().unwrap().unwrap();
    assert_eq!(scan.messages.len(), 1);
    assert_eq!(scan.messages[0].id, second.id);
    assert_eq!(scan.messages[0].message, msg(1));
    assert!(scan.end_of_log);
}

#[test]
fn scan_queue_reads_records_larger_than_its_chunk_and_cut_by_chunk_ends() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    let other = store.register_queue("other").unwrap();
    // The scan reads 1 MiB chunks: these records straddle chunk ends, and one
    // is three chunks long.
    let sizes = [
        10usize, 300_000, 700_000, 1_048_576, 3_000_000, 5, 999_999, 250_000, 0, 1_500_000,
    ];
    let mut expect = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let m = sized(i as u64, *size);
        let appended = store.append(&[q], &m).unwrap();
        expect.push((appended.id, m));
        store
            .append(&[other], &sized(100 + i as u64, 123_457))
            .unwrap();
    }
    store.flush().unwrap();
    for batch in [1, 3, 100] {
        let got: Vec<_> = scan_all(&store, q, START, &mut all, batch)
            .into_iter()
            .map(|m| (m.id, m.message))
            .collect();
        assert_eq!(got, expect, "batch {batch}");
    }
    store.close().unwrap();
    let (store, recovered) = open(&disk, StoreOptions::default());
    assert_eq!(
        recovered.queues[&q].live_body_bytes,
        sizes.iter().sum::<usize>() as u64
    );
    let got: Vec<_> = recovered_messages(&store, &recovered, q)
        .into_iter()
        .map(|m| (m.id, m.message))
        .collect();
    assert_eq!(got, expect);
}

#[test]
fn delete_queue_counts_references_per_segment() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let a = store.register_queue("a").unwrap();
    let b = store.register_queue("b").unwrap();
    let mut a_ids = Vec::new();
    for i in 0..200u64 {
        let routes: &[QueueId] = if i % 2 == 0 { &[a, b] } else { &[a] };
        a_ids.push(store.append(routes, &msg(i)).unwrap().id);
    }
    store.flush().unwrap();
    assert_eq!(store.stats().live_references, 300);
    store.delete_queue(b).unwrap();
    assert_eq!(store.stats().live_references, 200);
    assert!(matches!(
        store.ack(b, a_ids[0]),
        Err(StoreError::UnknownQueue(_))
    ));
    assert!(matches!(
        store.delete_queue(b),
        Err(StoreError::UnknownQueue(_))
    ));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(store.stats().segments_removed, 0, "a still holds them");
    // Ack half of a, delete a: every segment is free.
    for id in a_ids.iter().step_by(2) {
        store.ack(a, *id).unwrap();
    }
    store.delete_queue(a).unwrap();
    assert_eq!(store.stats().live_references, 0);
    store
        .append(&[store.register_queue("c").unwrap()], &msg(0))
        .unwrap();
    let filler = StoredMessage::new("", "", vec![], vec![0u8; 4000]);
    let c = store.register_queue("c").unwrap();
    store.append(&[c], &filler).unwrap();
    store.append(&[c], &filler).unwrap();
    store.flush().unwrap();
    assert!(
        eventually(|| segment_files(&disk).len() <= 3),
        "{:?}",
        segment_files(&disk)
    );
    store.close().unwrap();
    let (_store, recovered) = open(&disk, small_segments());
    assert_eq!(recovered.queues.len(), 1);
    assert_eq!(recovered.queues[&c].live.len(), 3);
}

#[test]
fn multi_queue_message_is_stored_once_and_acked_per_queue() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let a = store.register_queue("a").unwrap();
    let b = store.register_queue("b").unwrap();
    let c = store.register_queue("c").unwrap();
    let before = store.stats().bytes_written;
    let big = StoredMessage::new("", "", vec![], vec![1u8; 10_000]);
    let appended = store.append(&[a, b, c], &big).unwrap();
    store.flush().unwrap();
    let written = store.stats().bytes_written - before;
    assert!(written < 10_100, "body written once, wrote {written} bytes");
    store.ack(a, appended.id).unwrap();
    assert!(matches!(
        store.ack(a, appended.id),
        Err(StoreError::UnknownMessage(..))
    ));
    store.ack(c, appended.id).unwrap();
    store.close().unwrap();

    let (store, recovered) = open(&disk, StoreOptions::default());
    assert_eq!(ids(&recovered, a), Vec::<u64>::new());
    assert_eq!(ids(&recovered, b), vec![appended.id.0]);
    assert_eq!(ids(&recovered, c), Vec::<u64>::new());
    let messages = recovered_messages(&store, &recovered, b);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].message, big);
    assert_eq!(store.read(&messages[0].location).unwrap(), big);
    assert_eq!(recovered.queues[&b].live_body_bytes, 10_000);
}

#[test]
fn torn_tail_is_truncated_and_reported() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    for i in 0..5 {
        store.append(&[q], &msg(i)).unwrap();
    }
    store.close().unwrap();
    let last = segment_files(&disk).pop().unwrap();
    let path = format!("msgs/{last}");
    let clean_len = disk.file_bytes(&path).unwrap().len();
    // Half of a sixth record, as a crash mid-write would leave it.
    let mut record = Vec::new();
    warren_store::record::encode_publish(&mut record, MessageId(999), &[q], &msg(5));
    let file = disk.open(&path, false).unwrap();
    file.append(&record[..record.len() / 2]).unwrap();
    file.sync().unwrap();

    let (_store, recovered) = open(&disk, StoreOptions::default());
    assert_eq!(recovered.report.truncated_bytes, (record.len() / 2) as u64);
    assert_eq!(recovered.queues[&q].live.len(), 5);
    assert_eq!(disk.file_bytes(&path).unwrap().len(), clean_len, "tail cut");
}

#[test]
fn corrupt_record_in_sealed_segment_skips_rest_of_it_but_starts() {
    let (disk, store, q, appended) = one_queue_in_small_segments(40);
    store.close().unwrap();
    let first = appended[0].location;
    let second_in_first_segment = appended[1].location;
    assert_eq!(first.segment, second_in_first_segment.segment);
    // Flip a byte inside the second record's body.
    disk.corrupt(
        &segment_path(first.segment),
        second_in_first_segment.offset as usize + 60,
        b"\xff",
    );

    let (store, recovered) = open(&disk, small_segments());
    assert!(recovered.report.skipped_bytes > 0);
    let got = ids(&recovered, q);
    let lost: Vec<u64> = appended
        .iter()
        .filter(|a| a.location.segment == first.segment)
        .skip(1)
        .map(|a| a.id.0)
        .collect();
    assert!(!lost.is_empty());
    let expect: Vec<u64> = appended
        .iter()
        .map(|a| a.id.0)
        .filter(|id| !lost.contains(id))
        .collect();
    assert_eq!(got, expect, "only the rest of the corrupt segment is lost");
    // Reading the corrupt record reports it instead of panicking.
    assert!(matches!(
        store.read(&second_in_first_segment),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn segments_roll_over_and_are_reclaimed_when_fully_acked() {
    let (disk, store, q, appended) = one_queue_in_small_segments(100);
    store.flush().unwrap();
    let segments_used: std::collections::BTreeSet<u32> =
        appended.iter().map(|a| a.location.segment).collect();
    assert!(segments_used.len() > 5, "rolled over: {segments_used:?}");
    assert!(appended
        .iter()
        .all(|a| a.location.offset as u64 + a.location.len as u64 <= 4096));
    let files_before = segment_files(&disk).len();
    assert!(files_before >= segments_used.len());

    for a in &appended {
        store.ack(q, a.id).unwrap();
    }
    // One more append forces a batch after the acks and seals the segment
    // holding the last acks.
    let filler = StoredMessage::new("", "", vec![], vec![0u8; 4000]);
    store.append(&[q], &filler).unwrap();
    store.append(&[q], &filler).unwrap();
    store.flush().unwrap();
    // Reclamation runs after the batch; give the writer a moment.
    // The removal counter is bumped just after each file goes: wait for both.
    for _ in 0..400 {
        if segment_files(&disk).len() <= 3
            && store.stats().segments_removed >= segments_used.len() as u64
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stats = store.stats();
    assert!(
        stats.segments_removed >= segments_used.len() as u64,
        "{stats:?} used {segments_used:?} files {:?}",
        segment_files(&disk)
    );
    assert!(
        segment_files(&disk).len() <= 3,
        "{:?}",
        segment_files(&disk)
    );
    store.close().unwrap();
    let (_store, recovered) = open(&disk, small_segments());
    assert_eq!(recovered.queues[&q].live.len(), 2);
}

#[test]
fn ack_records_into_a_live_segment_are_carried_before_their_segment_goes() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    // Segment A: x (stays live) and y (acked later, from another segment).
    let x = store.append(&[q], &msg(0)).unwrap();
    let y = store.append(&[q], &msg(1)).unwrap();
    let big = StoredMessage::new("", "", vec![], vec![0u8; 4000]);
    // Segment B: z; then ack y (record in B) and z.
    let z = store.append(&[q], &big).unwrap();
    assert_ne!(z.location.segment, x.location.segment);
    store.ack(q, y.id).unwrap();
    store.ack(q, z.id).unwrap();
    // Seal B: it is dead but holds the ack of y, which lives in still-present
    // A. The writer carries that ack forward, then removes B (§5).
    store.append(&[q], &big).unwrap();
    store.flush().unwrap();
    let b = segment_path(z.location.segment);
    assert!(
        eventually(|| disk.file_bytes(&b).is_none()),
        "B was not removed"
    );
    // The ACK of y must have been carried. When the writer's reclaim pass sees
    // the segment holding the ACKs die before z's segment is gone, the ACK of
    // z is carried too (harmless, its target still existed then): which pass
    // comes first depends on the writer's timing, so both outcomes are valid.
    let stats = store.stats();
    assert!(
        (1..=2).contains(&stats.segments_carried) && (1..=2).contains(&stats.acks_carried),
        "{stats:?}"
    );
    assert!(disk.file_bytes(&segment_path(x.location.segment)).is_some());
    store.close().unwrap();
    for mode in [CrashMode::KeepUnsynced, CrashMode::DropUnsynced] {
        let after = disk.crash(mode);
        let (store, recovered) = open(&after, small_segments());
        let got = ids(&recovered, q);
        assert!(got.contains(&x.id.0));
        assert!(!got.contains(&y.id.0), "acked message came back");
        assert!(!got.contains(&z.id.0), "acked message came back");
        store.close().unwrap();
    }
}

#[test]
fn delete_queue_drops_messages_and_frees_segments() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let keep = store.register_queue("keep").unwrap();
    let gone = store.register_queue("gone").unwrap();
    for i in 0..50 {
        store.append(&[gone], &msg(i)).unwrap();
    }
    let kept = store.append(&[keep], &msg(99)).unwrap();
    store.flush().unwrap();
    store.delete_queue(gone).unwrap();
    assert!(matches!(
        store.append(&[gone], &msg(0)),
        Err(StoreError::UnknownQueue(_))
    ));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(store.stats().segments_removed > 0);
    store.close().unwrap();
    let (store, recovered) = open(&disk, small_segments());
    assert!(!recovered.queues.contains_key(&gone));
    assert_eq!(ids(&recovered, keep), vec![kept.id.0]);
    // Ids are never reused.
    assert!(store.register_queue("gone").unwrap().0 > gone.0);
}

#[test]
fn definitions_survive_restart_and_replace_atomically() {
    let disk = FaultyBackend::new(1);
    let (store, recovered) = open(&disk, StoreOptions::default());
    assert_eq!(recovered.definitions, None);
    store.save_definitions(b"{\"v\":1}").unwrap();
    store.save_definitions(b"{\"v\":2}").unwrap();
    assert_eq!(
        store.load_definitions().unwrap().blob.unwrap(),
        b"{\"v\":2}"
    );
    drop(store);
    let after = disk.crash(CrashMode::Torn);
    let (_store, recovered) = open(&after, StoreOptions::default());
    assert_eq!(recovered.definitions.unwrap(), b"{\"v\":2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_shares_fsyncs_across_concurrent_producers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let q = store.register_queue("q").unwrap();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                let a = store.append_async(&[q], &msg(t * 1000 + i)).await.unwrap();
                store.wait_durable(a.seq).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.records_written, 1600);
    assert!(
        stats.fsyncs < stats.records_written,
        "8 producers should share fsyncs: {stats:?}"
    );
    assert!(store.durable_seq() >= 1600);
}

#[tokio::test]
async fn sync_never_signals_durable_without_fsync() {
    let disk = FaultyBackend::new(1);
    let opts = StoreOptions {
        sync: SyncPolicy::Never,
        ..StoreOptions::default()
    };
    let (store, _) = open(&disk, opts.clone());
    let q = store.register_queue("q").unwrap();
    let syncs_before = disk.sync_count();
    let a = store.append(&[q], &msg(1)).unwrap();
    store.wait_durable(a.seq).await.unwrap();
    assert_eq!(store.stats().fsyncs, 0);
    assert_eq!(disk.sync_count(), syncs_before);
    // A process crash keeps it (page cache); a power loss would not.
    drop(store);
    let after = disk.crash(CrashMode::KeepUnsynced);
    let (_store, recovered) = open(&after, opts);
    assert_eq!(ids(&recovered, q), vec![a.id.0]);
}

#[tokio::test]
async fn writer_io_error_fails_waiters_refuses_appends_and_recovers() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    let ok = store.append(&[q], &msg(0)).unwrap();
    store.wait_durable(ok.seq).await.unwrap();
    disk.set_fail_io(true);
    let doomed = store.append(&[q], &msg(1)).unwrap();
    assert!(matches!(
        store.wait_durable(doomed.seq).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.append(&[q], &msg(2)),
        Err(StoreError::Unavailable(_))
    ));
    // The disk works again: the writer's retry ends the outage by itself.
    disk.set_fail_io(false);
    let mut again = None;
    for _ in 0..200 {
        match store.append(&[q], &msg(3)) {
            Ok(a) => {
                again = Some(a);
                break;
            }
            Err(StoreError::Unavailable(_)) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    let again = again.expect("appends work again within 2 s");
    store.wait_durable(again.seq).await.unwrap();
    store.close().unwrap();
    let (_store, recovered) = open(&disk, StoreOptions::default());
    assert_eq!(ids(&recovered, q), vec![ok.id.0, again.id.0]);
}

#[tokio::test]
async fn back_pressure_bounds_pending_bytes() {
    let disk = FaultyBackend::new(1);
    let opts = StoreOptions {
        max_pending_bytes: 2048,
        ..StoreOptions::default()
    };
    let (store, _) = open(&disk, opts);
    let q = store.register_queue("q").unwrap();
    let mut last = 0;
    for i in 0..500 {
        last = store.append_async(&[q], &msg(i)).await.unwrap().seq;
    }
    store.wait_durable(last).await.unwrap();
    // A message larger than the whole budget still goes through.
    let huge = StoredMessage::new("", "", vec![], vec![0u8; 10_000]);
    let a = store.append(&[q], &huge).unwrap();
    store.wait_durable(a.seq).await.unwrap();
    assert_eq!(store.read(&a.location).unwrap(), huge);
}

#[test]
fn invalid_arguments_are_rejected() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    let long = StoredMessage::new(vec![b'x'; 256], "", vec![], vec![]);
    assert!(matches!(
        store.append(&[q], &long),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.append(&[q, q], &msg(0)),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.append(&[], &msg(0)),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.append(&[QueueId(77)], &msg(0)),
        Err(StoreError::UnknownQueue(_))
    ));
    assert!(matches!(
        store.ack(q, MessageId(12345)),
        Err(StoreError::UnknownMessage(..))
    ));
    let bad = StoreOptions {
        segment_size_bytes: 10,
        ..StoreOptions::default()
    };
    assert!(Store::open_with_backend(Arc::new(disk.clone()), bad).is_err());
}
