//! Integration tests of the public `Store` API: round trips through
//! recovery, torn tails, corruption, rollover and reclamation, queue
//! deletion, definitions, group-commit counters and failure reporting.

use std::sync::Arc;

use warren_store::segment::segment_path;
use warren_store::{
    Backend, CrashMode, FaultyBackend, MessageId, QueueId, Recovered, Store, StoreError,
    StoreOptions, StoredMessage, SyncPolicy,
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

fn ids(recovered: &Recovered, q: QueueId) -> Vec<u64> {
    recovered.queues[&q]
        .messages
        .iter()
        .map(|m| m.id.0)
        .collect()
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
    for m in &queue.messages {
        let i = m.id.0 - appended[0].id.0;
        assert_eq!(store.read(&m.location).unwrap(), msg(i));
        assert!(m.message.is_none(), "bodies not loaded by default");
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

#[test]
fn recover_bodies_returns_full_messages() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    for i in 0..10 {
        store.append(&[q], &msg(i)).unwrap();
    }
    store.close().unwrap();
    let opts = StoreOptions {
        recover_bodies: true,
        ..StoreOptions::default()
    };
    let (_store, recovered) = open(&disk, opts);
    let bodies: Vec<StoredMessage> = recovered.queues[&q]
        .messages
        .iter()
        .map(|m| m.message.clone().unwrap())
        .collect();
    assert_eq!(bodies, (0..10).map(msg).collect::<Vec<_>>());
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
    let loc = recovered.queues[&b].messages[0].location;
    assert_eq!(store.read(&loc).unwrap(), big);
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
    assert_eq!(recovered.queues[&q].messages.len(), 5);
    assert_eq!(disk.file_bytes(&path).unwrap().len(), clean_len, "tail cut");
}

#[test]
fn corrupt_record_in_sealed_segment_skips_rest_of_it_but_starts() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    let appended: Vec<_> = (0..40)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
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
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, small_segments());
    let q = store.register_queue("q").unwrap();
    let appended: Vec<_> = (0..100)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
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
    assert_eq!(recovered.queues[&q].messages.len(), 2);
}

#[test]
fn ack_records_pin_their_segment_while_the_acked_segment_lives() {
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
    // Seal B.
    store.append(&[q], &big).unwrap();
    store.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    store.close().unwrap();
    assert!(
        disk.file_bytes(&segment_path(z.location.segment)).is_some(),
        "B holds the ack of y, which lives in still-present A"
    );
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
    assert_eq!(store.load_definitions().unwrap().unwrap(), b"{\"v\":2}");
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
async fn writer_io_error_fails_waiters_and_later_appends() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk, StoreOptions::default());
    let q = store.register_queue("q").unwrap();
    let ok = store.append(&[q], &msg(0)).unwrap();
    store.wait_durable(ok.seq).await.unwrap();
    disk.set_fail_io(true);
    let doomed = store.append(&[q], &msg(1)).unwrap();
    assert!(matches!(
        store.wait_durable(doomed.seq).await,
        Err(StoreError::Failed(_))
    ));
    assert!(matches!(
        store.append(&[q], &msg(2)),
        Err(StoreError::Failed(_))
    ));
    assert!(store.close().is_err());
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
