//! Write and fsync failures (docs/STORAGE.md §11) on the fault-injecting disk: a full disk
//! (`ENOSPC`, writes cut short) and a failed fsync (`EIO`, with the dirty data lost and
//! later fsyncs succeeding without it, as on Linux). A failure fails exactly the records
//! that are not durable, at once; appends are refused while the writer retries and work
//! again, without a restart, once the disk takes writes; nothing that failed comes back
//! after a restart and nothing that was durable is lost; a store opens on a full disk.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_store::{
    Appended, CrashMode, FaultyBackend, LogPosition, MessageId, QueueId, Recovered, Store,
    StoreError, StoreOptions, StoredMessage,
};

fn opts() -> StoreOptions {
    StoreOptions {
        segment_size_bytes: 16 * 1024,
        ..StoreOptions::default()
    }
}

fn open(disk: &FaultyBackend) -> (Store, Recovered) {
    Store::open_with_backend(Arc::new(disk.clone()), opts()).expect("open")
}

fn msg(i: u64) -> StoredMessage {
    StoredMessage::new("ex", format!("rk.{i}"), vec![], vec![i as u8; 1000])
}

fn live(recovered: &Recovered, q: QueueId) -> Vec<u64> {
    // An empty queue is not reported (only the queue table has it).
    recovered
        .queues
        .get(&q)
        .map_or_else(Vec::new, |queue| queue.live.iter().collect())
}

/// Appends until `Ok`, for at most 3 s (the writer retries every 100–500 ms).
async fn append_once_writable(store: &Store, q: QueueId, m: &StoredMessage) -> Appended {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match store.append(&[q], m) {
            Ok(a) => return a,
            Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => panic!("the store did not take appends again: {e}"),
        }
    }
}

/// Every message of `q` a scan from the start of the log returns.
fn scan_ids(store: &Store, q: QueueId) -> Vec<u64> {
    let scan = store
        .scan_queue(
            q,
            LogPosition::default(),
            &mut |_| true,
            usize::MAX,
            usize::MAX,
        )
        .unwrap();
    assert!(scan.end_of_log);
    scan.messages.iter().map(|m| m.id.0).collect()
}

#[tokio::test]
async fn a_full_disk_fails_what_is_not_durable_and_the_store_resumes_when_space_returns() {
    let disk = FaultyBackend::new(1);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    disk.set_capacity_bytes(Some(disk.used_bytes() + 40_000));

    // One at a time until the disk is full: every confirm before it holds.
    let mut durable = Vec::new();
    let failed = loop {
        let a = store.append(&[q], &msg(durable.len() as u64)).unwrap();
        let started = Instant::now();
        match store.wait_durable(a.seq).await {
            Ok(()) => durable.push(a),
            Err(StoreError::Unavailable(_)) => {
                // Failed, not left waiting for the disk (generous: a loaded CI machine).
                assert!(started.elapsed() < Duration::from_secs(5));
                break a;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(durable.len() > 20, "{} durable", durable.len());
    // The store refuses appends at once while it cannot write.
    let started = Instant::now();
    assert!(matches!(
        store.append(&[q], &msg(999)),
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(store.durable_state().outage.is_some());
    // The failed message is not in the log; a scan does not wait for it.
    assert_eq!(
        scan_ids(&store, q),
        durable.iter().map(|a| a.id.0).collect::<Vec<_>>()
    );
    assert!(store.read(&failed.location).is_err());
    assert!(matches!(
        store.ack(q, failed.id),
        Err(StoreError::UnknownMessage(..))
    ));
    // Consumers keep working: acks are taken during the outage, and a scan does not wait
    // for them (they are pending until the writer's retry succeeds).
    for a in &durable[..5] {
        store.ack(q, a.id).unwrap();
    }
    let started = Instant::now();
    assert_eq!(scan_ids(&store, q).len(), durable.len());
    assert!(started.elapsed() < Duration::from_secs(2));

    // Space returns: the writer's retry ends the outage without a restart.
    disk.set_capacity_bytes(None);
    let again = append_once_writable(&store, q, &msg(1000)).await;
    store.wait_durable(again.seq).await.unwrap();
    assert!(store.durable_state().outage.is_none());
    assert!(again.id > failed.id, "ids are never handed out twice");

    // A restart finds exactly what was durable and not acked: the failed record does not
    // come back, and the acks taken during the outage were written.
    store.flush().unwrap();
    drop(store);
    let after = disk.crash(CrashMode::KeepUnsynced);
    let (_store, recovered) = open(&after);
    let mut expect: Vec<u64> = durable[5..].iter().map(|a| a.id.0).collect();
    expect.push(again.id.0);
    assert_eq!(live(&recovered, q), expect);
}

#[tokio::test]
async fn pipelined_records_fail_from_the_failed_batch_on_and_the_rest_stay_durable() {
    let disk = FaultyBackend::new(2);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let mut failures = store.failed_publishes();
    let mut appended: Vec<Appended> = (0..5)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
    store.flush().unwrap();
    disk.set_capacity_bytes(Some(disk.used_bytes() + 30_000));
    // Without waiting: many records per batch. Appends stop being taken once the outage
    // starts.
    appended.extend((5..100).map_while(|i| store.append(&[q], &msg(i)).ok()));
    let mut outcomes = Vec::new();
    for a in &appended {
        outcomes.push(store.wait_durable(a.seq).await.is_ok());
    }
    // Settled in order: a durable prefix, then failures only.
    let durable = outcomes.iter().take_while(|ok| **ok).count();
    assert!(
        durable >= 5 && durable < appended.len(),
        "{durable} durable"
    );
    assert!(outcomes[durable..].iter().all(|ok| !ok));
    // The subscriber learns exactly which messages failed, with their sizes.
    let report = failures.recv().await.unwrap();
    let reported: Vec<(MessageId, u32)> = report.queues[&q].clone();
    let expect: Vec<(MessageId, u32)> = appended[durable..].iter().map(|a| (a.id, 1000)).collect();
    assert_eq!(reported, expect);
    disk.set_capacity_bytes(None);
    let again = append_once_writable(&store, q, &msg(500)).await;
    store.wait_durable(again.seq).await.unwrap();
    store.close().unwrap();
    let (_store, recovered) = open(&disk);
    let mut expect: Vec<u64> = appended[..durable].iter().map(|a| a.id.0).collect();
    expect.push(again.id.0);
    assert_eq!(live(&recovered, q), expect);
}

#[tokio::test]
async fn a_failed_fsync_is_never_reported_durable_and_its_records_do_not_come_back() {
    for mode in [
        CrashMode::KeepUnsynced,
        CrashMode::DropUnsynced,
        CrashMode::Torn,
    ] {
        let disk = FaultyBackend::new(3);
        let (store, _) = open(&disk);
        let q = store.register_queue("q").unwrap();
        let before: Vec<Appended> = (0..3)
            .map(|i| store.append(&[q], &msg(i)).unwrap())
            .collect();
        store.flush().unwrap();
        // The next fsync fails: the kernel drops its dirty pages and a later fsync of the
        // same file would succeed without them.
        disk.fail_syncs(1);
        let lost = store.append(&[q], &msg(3)).unwrap();
        assert!(matches!(
            store.wait_durable(lost.seq).await,
            Err(StoreError::Unavailable(_))
        ));
        // The writer's retry succeeds (the sync works again); later records are durable.
        let after_lost = append_once_writable(&store, q, &msg(4)).await;
        store.wait_durable(after_lost.seq).await.unwrap();
        assert_ne!(
            after_lost.location.segment, lost.location.segment,
            "a failed segment takes no more appends"
        );
        let later: Vec<Appended> = (5..40)
            .map(|i| store.append(&[q], &msg(i)).unwrap())
            .collect();
        store.flush().unwrap();

        drop(store);
        let after = disk.crash(mode);
        let (store, recovered) = open(&after);
        let mut expect: Vec<u64> = before.iter().map(|a| a.id.0).collect();
        expect.push(after_lost.id.0);
        expect.extend(later.iter().map(|a| a.id.0));
        assert_eq!(live(&recovered, q), expect, "{mode:?}");
        assert_eq!(scan_ids(&store, q), expect, "{mode:?}");
        assert_eq!(
            recovered.report.skipped_bytes, 0,
            "{mode:?}: no garbage left"
        );
    }
}

#[tokio::test]
async fn an_ack_whose_batch_failed_is_written_again_once_the_disk_works() {
    let disk = FaultyBackend::new(4);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let kept = store.append(&[q], &msg(0)).unwrap();
    let acked = store.append(&[q], &msg(1)).unwrap();
    store.flush().unwrap();
    disk.fail_syncs(1);
    let ack_seq = store.ack(q, acked.id).unwrap();
    assert!(
        store.wait_durable(ack_seq).await.is_err(),
        "its batch failed"
    );
    // Without writing it again, the consumer's ack would be lost and the message would
    // come back after a restart.
    let probe = append_once_writable(&store, q, &msg(2)).await;
    store.wait_durable(probe.seq).await.unwrap();
    store.flush().unwrap();
    drop(store);
    let after = disk.crash(CrashMode::DropUnsynced);
    let (_store, recovered) = open(&after);
    assert_eq!(live(&recovered, q), vec![kept.id.0, probe.id.0]);
}

#[tokio::test]
async fn a_store_opens_on_a_full_disk_and_writes_again_once_acks_free_segments() {
    let disk = FaultyBackend::new(5);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let stored: Vec<Appended> = (0..60)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
    store.close().unwrap();
    let segments: BTreeSet<u32> = stored.iter().map(|a| a.location.segment).collect();
    assert!(segments.len() > 2, "{segments:?}");

    // Not one byte free: opening must not need any.
    disk.set_capacity_bytes(Some(disk.used_bytes()));
    let (store, recovered) = open(&disk);
    assert_eq!(live(&recovered, q).len(), 60);
    assert_eq!(scan_ids(&store, q).len(), 60);
    // The first append fails on the full disk; then appends are refused.
    let first = store.append(&[q], &msg(100)).unwrap();
    assert!(store.wait_durable(first.seq).await.is_err());
    assert!(matches!(
        store.append(&[q], &msg(101)),
        Err(StoreError::Unavailable(_))
    ));
    // A consumer takes and acks everything: dead segments go even during the outage,
    // which frees the space the writer's retry needs.
    for a in &stored {
        store.ack(q, a.id).unwrap();
    }
    let again = append_once_writable(&store, q, &msg(102)).await;
    store.wait_durable(again.seq).await.unwrap();
    store.close().unwrap();
    let (_store, recovered) = open(&disk);
    assert_eq!(live(&recovered, q), vec![again.id.0]);
}

#[tokio::test]
async fn a_crash_during_an_outage_keeps_everything_durable() {
    let disk = FaultyBackend::new(6);
    let (store, _) = open(&disk);
    let q = store.register_queue("q").unwrap();
    let durable: Vec<Appended> = (0..10)
        .map(|i| store.append(&[q], &msg(i)).unwrap())
        .collect();
    store.flush().unwrap();
    disk.set_capacity_bytes(Some(disk.used_bytes()));
    let failed = store.append(&[q], &msg(10)).unwrap();
    assert!(store.wait_durable(failed.seq).await.is_err());
    store.ack(q, durable[0].id).unwrap(); // pending until a retry succeeds
                                          // Closing during the outage tries once more, then gives the pending ack up.
    assert!(matches!(store.close(), Err(StoreError::Unavailable(_))));
    for mode in [CrashMode::KeepUnsynced, CrashMode::Torn] {
        let after = disk.crash(mode);
        after.set_capacity_bytes(None);
        let (_store, recovered) = open(&after);
        // The ack never became durable: the message may come back (at least once).
        let expect: Vec<u64> = durable.iter().map(|a| a.id.0).collect();
        assert_eq!(live(&recovered, q), expect, "{mode:?}");
    }
}
