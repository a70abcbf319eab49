//! Property test of the durability contract over the crash-simulating
//! `FaultyBackend`: random publish (to 1..=3 queues) / confirm / consume /
//! ack / stall-fsync / crash-and-recover / clean-restart sequences.
//!
//! Checked after every recovery:
//! - a persistent message whose publish was durable (confirmed) and that was
//!   not acked is present in every queue it was routed to (`live` set), and
//!   scanning the queue from `first` with `wanted = live.contains` returns
//!   exactly the live set, in id order, byte-for-byte identical (and so does
//!   `read(location)`); `live_body_bytes` is the sum of those bodies;
//! - an ack that was durable is never undone (the message does not come back
//!   in that queue); an ack that was not yet durable may be undone
//!   (a duplicate, never a loss);
//! - nothing is recovered that was never published, and transient messages
//!   never come back;
//! - message ids keep increasing across restarts (above every id that
//!   recovery saw; the id of a publish lost in the crash may be reused).
//!
//! Between restarts, `Scan` ops check that `scan_queue` returns every
//! un-acked message of a queue (transient ones included), in order and intact.
//!
//! `Traffic` ops publish and ack many messages on one queue while the
//! messages published by `Publish` stay unacked until a `Consume` + `Ack`
//! (possibly never): long-lived messages pin their segments while later
//! segments die, so the writer carries ACKs forward (docs/STORAGE.md §5) and
//! crashes hit every stage of it. The run checks that carrying did happen.
//!
//! `DiskFull`, `FailSync` and `FreeSpace` ops make writes fail (`ENOSPC`, cut
//! short) and fsyncs fail (`EIO`, losing the data, later fsyncs succeeding
//! without it), so batches fail at every stage too (docs/STORAGE.md §11). A
//! record whose batch failed is settled as failed and must never be reported
//! durable; a failed PUBLISH leaves the store's index (an ack of it is
//! `UnknownMessage`) and may come back after a crash only if the crash beat
//! the writer's cleanup (its publisher was nacked: at least once), intact; a
//! failed ACK counts as not durable. Opening must work on a full disk. The run
//! checks that failures did happen.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{TestError, TestRunner};
use warren_store::{
    CrashMode, DurableState, FaultyBackend, LogPosition, MessageId, Outcome, QueueId, Recovered,
    RecoveredQueue, ScannedMessage, Store, StoreError, StoreOptions, StoredMessage,
};

const QUEUES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    /// Publish to the queues whose bits are set in the mask (1..=7).
    Publish {
        mask: u8,
        body_len: usize,
        transient: bool,
    },
    /// Wait until the n-th (mod count) outstanding publish is durable.
    Confirm(usize),
    /// Deliver the oldest ready message of a queue.
    Consume(usize),
    /// Ack the n-th (mod count) delivered message of a queue.
    Ack(usize, usize),
    /// `rounds` rounds on one queue: publish two persistent messages, deliver
    /// them and ack the previous round's two (the last two stay delivered).
    Traffic {
        queue: usize,
        rounds: usize,
        body_len: usize,
    },
    /// Scan a queue for its un-acked messages, from the start of the log.
    Scan(usize),
    /// Make fsyncs block, after this many more succeed, so the next crash
    /// hits a written-but-unsynced batch (with a later start, possibly one of
    /// carried ACKs).
    StallSyncs(u64),
    /// Crash the machine and recover.
    Crash(CrashMode),
    /// Close cleanly and reopen.
    Restart,
    /// Let the disk take only this many more bytes (`ENOSPC` after that).
    DiskFull(u64),
    /// Make the next file fsync fail with `EIO`.
    FailSync,
    /// Lift the disk's size limit.
    FreeSpace,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let mode = prop_oneof![
        Just(CrashMode::KeepUnsynced),
        Just(CrashMode::DropUnsynced),
        Just(CrashMode::Torn),
        Just(CrashMode::BitFlip),
    ];
    prop_oneof![
        10 => (1u8..=7, 0usize..700, proptest::bool::weighted(0.25)).prop_map(
            |(mask, body_len, transient)| Op::Publish { mask, body_len, transient }
        ),
        4 => any::<usize>().prop_map(Op::Confirm),
        5 => (0..QUEUES).prop_map(Op::Consume),
        5 => ((0..QUEUES), any::<usize>()).prop_map(|(q, n)| Op::Ack(q, n)),
        3 => ((0..QUEUES), 1usize..=25, 0usize..400).prop_map(|(queue, rounds, body_len)| {
            Op::Traffic { queue, rounds, body_len }
        }),
        2 => (0..QUEUES).prop_map(Op::Scan),
        1 => (0u64..4).prop_map(Op::StallSyncs),
        2 => mode.prop_map(Op::Crash),
        1 => Just(Op::Restart),
        1 => (0u64..6000).prop_map(Op::DiskFull),
        1 => Just(Op::FailSync),
        2 => Just(Op::FreeSpace),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefState {
    Ready,
    Delivered,
    /// Acked in the current epoch with this sequence number.
    Acked(u64),
    /// The PUBLISH failed: not in the store; back after a crash at most.
    Failed,
}

#[derive(Debug)]
struct ModelMessage {
    msg: StoredMessage,
    /// Sequence number in the current epoch; `None` once known durable.
    pending_seq: Option<u64>,
    refs: BTreeMap<usize, RefState>,
}

struct Harness {
    backend: FaultyBackend,
    store: Option<Store>,
    queue_ids: [QueueId; QUEUES],
    messages: BTreeMap<MessageId, ModelMessage>,
    max_id_seen: Option<MessageId>,
    stalled: bool,
    /// Bytes appended since syncs stalled: they pile up in the pending buffer,
    /// and an append that would take it past `max_pending_bytes` would block
    /// for good.
    stalled_bytes: usize,
    next_body: u64,
}

/// Keeps the pending buffer of a stalled store below `max_pending_bytes`
/// (64 KiB), with room for one carry of ACKs the writer may add.
const STALLED_BYTES_LIMIT: usize = 56 * 1024;

/// Carrying done over the whole run (checked to be non-zero).
static SEGMENTS_CARRIED: AtomicU64 = AtomicU64::new(0);
static ACKS_CARRIED: AtomicU64 = AtomicU64::new(0);
/// Publishes that failed, and failed ones that came back after a crash.
static PUBLISHES_FAILED: AtomicU64 = AtomicU64::new(0);
static FAILED_CAME_BACK: AtomicU64 = AtomicU64::new(0);

fn opts() -> StoreOptions {
    StoreOptions {
        segment_size_bytes: 4096, // many rollovers and reclamations
        max_pending_bytes: 64 * 1024,
        ..StoreOptions::default()
    }
}

impl Harness {
    fn new(seed: u64) -> Self {
        let backend = FaultyBackend::new(seed);
        let (store, _) = Store::open_with_backend(Arc::new(backend.clone()), opts()).unwrap();
        let queue_ids = [0, 1, 2].map(|i| store.register_queue(&format!("q{i}")).unwrap());
        // As the broker does before it answers the declares: the queues are durable even
        // with no message in them.
        store.sync_metadata(store.metadata_ticket()).unwrap();
        Harness {
            backend,
            store: Some(store),
            queue_ids,
            messages: BTreeMap::new(),
            max_id_seen: None,
            stalled: false,
            stalled_bytes: 0,
            next_body: 0,
        }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store open")
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Publish {
                mask,
                body_len,
                transient,
            } => {
                let queues: Vec<usize> = (0..QUEUES).filter(|q| mask & (1 << q) != 0).collect();
                self.publish(queues, body_len, transient)?;
            }
            Op::Confirm(n) => {
                if self.stalled {
                    return Ok(()); // would block until a crash
                }
                let pending: Vec<u64> = self
                    .messages
                    .values()
                    .filter_map(|m| m.pending_seq)
                    .collect();
                if !pending.is_empty() {
                    let seq = pending[n % pending.len()];
                    match self.store().wait_durable_blocking(seq) {
                        Ok(()) => self.mark_durable(seq),
                        Err(StoreError::Unavailable(_)) => {}
                        Err(e) => return Err(TestCaseError::fail(format!("confirm: {e}"))),
                    }
                    let state = self.store().durable_state();
                    self.settle(&state);
                    prop_assert!(
                        self.messages.values().all(|m| m.pending_seq != Some(seq)),
                        "a waited-for record is settled"
                    );
                }
            }
            Op::Consume(q) => {
                let first_ready = self
                    .messages
                    .values_mut()
                    .filter_map(|m| m.refs.get_mut(&q))
                    .find(|s| **s == RefState::Ready);
                if let Some(state) = first_ready {
                    *state = RefState::Delivered;
                }
            }
            Op::Ack(q, n) => {
                let delivered: Vec<MessageId> = self
                    .messages
                    .iter()
                    .filter(|(_, m)| m.refs.get(&q) == Some(&RefState::Delivered))
                    .map(|(id, _)| *id)
                    .collect();
                if !delivered.is_empty() {
                    self.ack(q, delivered[n % delivered.len()])?;
                }
            }
            Op::Traffic {
                queue,
                rounds,
                body_len,
            } => {
                let mut previous: Vec<MessageId> = Vec::new();
                for _ in 0..rounds {
                    let mut current = Vec::new();
                    for _ in 0..2 {
                        let Some(id) = self.publish(vec![queue], body_len, false)? else {
                            break;
                        };
                        let state = self.messages.get_mut(&id).unwrap().refs.get_mut(&queue);
                        *state.unwrap() = RefState::Delivered;
                        current.push(id);
                    }
                    for id in previous.drain(..) {
                        self.ack(queue, id)?;
                    }
                    previous = current;
                }
            }
            Op::Scan(q) => {
                if self.stalled {
                    return Ok(()); // pending records would never be written
                }
                // Settle every publish first, so the model knows which failed.
                if let Some(seq) = self.messages.values().filter_map(|m| m.pending_seq).max() {
                    let _ = self.store().wait_durable_blocking(seq);
                }
                let state = self.store().durable_state();
                self.settle(&state);
                let expect: Vec<MessageId> = self
                    .messages
                    .iter()
                    .filter(|(_, m)| {
                        matches!(m.refs.get(&q), Some(RefState::Ready | RefState::Delivered))
                    })
                    .map(|(id, _)| *id)
                    .collect();
                let wanted = expect.clone();
                let start = LogPosition::default();
                let got = scan_all(self.store(), self.queue_ids[q], start, &mut |id| {
                    wanted.binary_search(&id).is_ok()
                });
                let got_ids: Vec<MessageId> = got.iter().map(|m| m.id).collect();
                prop_assert_eq!(&got_ids, &expect, "scan of queue {} before restart", q);
                for m in &got {
                    prop_assert_eq!(&m.message, &self.messages[&m.id].msg, "altered (scan)");
                }
            }
            Op::StallSyncs(after) => {
                if !self.stalled {
                    self.backend.stall_syncs_after(after);
                    self.stalled = true;
                    self.stalled_bytes = 0;
                }
            }
            Op::Crash(mode) => {
                // What is settled now is final: durable or failed.
                let state = self.store().durable_state();
                self.count_carried();
                self.settle(&state);
                let acked_durable = |seq: u64| state.outcome(seq) == Outcome::Durable;
                let after = self.backend.crash(mode);
                drop(self.store.take()); // the dead process
                self.backend = after;
                self.stalled = false;
                self.reopen_and_check(&acked_durable)?;
            }
            Op::Restart => {
                self.backend.set_stall_syncs(false);
                self.stalled = false;
                self.count_carried();
                let store = self.store.take().unwrap();
                let view = store.clone();
                // During an outage, closing gives up what it cannot write.
                match store.close() {
                    Ok(()) | Err(StoreError::Unavailable(_)) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("close: {e}"))),
                }
                let state = view.durable_state();
                drop(view);
                prop_assert!(
                    self.messages
                        .values()
                        .all(|m| m.pending_seq.is_none_or(|s| s <= state.seq)),
                    "close settles everything"
                );
                self.settle(&state);
                let acked_durable = |seq: u64| state.outcome(seq) == Outcome::Durable;
                self.reopen_and_check(&acked_durable)?;
            }
            Op::DiskFull(extra) => {
                let used = self.backend.used_bytes();
                self.backend.set_capacity_bytes(Some(used + extra));
            }
            Op::FailSync => self.backend.fail_syncs(1),
            Op::FreeSpace => self.backend.set_capacity_bytes(None),
        }
        Ok(())
    }

    /// Records what the store settled: durable publishes are confirmed, failed
    /// ones leave the model's queues (they may only come back after a crash).
    fn settle(&mut self, state: &DurableState) {
        for m in self.messages.values_mut() {
            let Some(seq) = m.pending_seq else {
                continue;
            };
            match state.outcome(seq) {
                Outcome::Pending => {}
                Outcome::Durable => m.pending_seq = None,
                Outcome::Failed => {
                    m.pending_seq = None;
                    PUBLISHES_FAILED.fetch_add(1, Ordering::Relaxed);
                    for s in m.refs.values_mut() {
                        *s = RefState::Failed;
                    }
                }
            }
        }
    }

    /// Publishes a persistent or transient message to `queues`; `None` if
    /// syncs are stalled and the pending buffer has no room left for it.
    fn publish(
        &mut self,
        queues: Vec<usize>,
        body_len: usize,
        transient: bool,
    ) -> Result<Option<MessageId>, TestCaseError> {
        if self.stalled {
            // Framed size, rounded up (exchange, routing key, properties).
            let bytes = body_len + 100;
            if self.stalled_bytes + bytes > STALLED_BYTES_LIMIT {
                return Ok(None);
            }
        }
        let ids: Vec<QueueId> = queues.iter().map(|q| self.queue_ids[*q]).collect();
        self.next_body += 1;
        let n = self.next_body;
        let body: Vec<u8> = (0..body_len).map(|i| (n as usize * 31 + i) as u8).collect();
        let msg = StoredMessage {
            published_at_ms: n * 1000,
            transient,
            ..StoredMessage::new(
                format!("ex{}", n % 3),
                format!("rk.{n}"),
                n.to_le_bytes().to_vec(),
                body,
            )
        };
        let appended = match self.store().append(&ids, &msg) {
            Ok(appended) => appended,
            // A write failed: the store refuses appends until a retry succeeds.
            Err(StoreError::Unavailable(_)) => return Ok(None),
            Err(e) => return Err(TestCaseError::fail(format!("append: {e}"))),
        };
        if self.stalled {
            self.stalled_bytes += body_len + 100;
        }
        if let Some(max) = self.max_id_seen {
            prop_assert!(appended.id > max, "message ids must increase");
        }
        self.max_id_seen = Some(appended.id);
        self.messages.insert(
            appended.id,
            ModelMessage {
                msg,
                pending_seq: Some(appended.seq),
                refs: queues.into_iter().map(|q| (q, RefState::Ready)).collect(),
            },
        );
        Ok(Some(appended.id))
    }

    /// Acks queue `q`'s reference to `id` (delivered).
    fn ack(&mut self, q: usize, id: MessageId) -> Result<(), TestCaseError> {
        if self.stalled {
            self.stalled_bytes += 21; // acks never block, but fill the buffer
        }
        let state = match self.store().ack(self.queue_ids[q], id) {
            Ok(seq) => RefState::Acked(seq),
            // Its PUBLISH failed (the model may not know yet): nothing to ack.
            Err(StoreError::UnknownMessage(..)) => {
                let seq = self.messages[&id].pending_seq;
                let outcome = seq.map(|s| self.store().durable_state().outcome(s));
                prop_assert_eq!(
                    outcome,
                    Some(Outcome::Failed),
                    "ack of a live reference refused"
                );
                RefState::Failed
            }
            Err(e) => return Err(TestCaseError::fail(format!("ack: {e}"))),
        };
        self.messages.get_mut(&id).unwrap().refs.insert(q, state);
        Ok(())
    }

    fn count_carried(&self) {
        let stats = self.store().stats();
        SEGMENTS_CARRIED.fetch_add(stats.segments_carried, Ordering::Relaxed);
        ACKS_CARRIED.fetch_add(stats.acks_carried, Ordering::Relaxed);
    }

    fn mark_durable(&mut self, seq: u64) {
        for m in self.messages.values_mut() {
            if m.pending_seq.is_some_and(|s| s <= seq) {
                m.pending_seq = None;
            }
        }
    }

    fn reopen_and_check(&mut self, ack_durable: &dyn Fn(u64) -> bool) -> Result<(), TestCaseError> {
        let (store, recovered) =
            Store::open_with_backend(Arc::new(self.backend.clone()), opts()).unwrap();
        self.check(&store, &recovered, ack_durable)?;
        self.store = Some(store);
        Ok(())
    }

    fn check(
        &mut self,
        store: &Store,
        recovered: &Recovered,
        ack_durable: &dyn Fn(u64) -> bool,
    ) -> Result<(), TestCaseError> {
        let mut present: HashMap<(usize, MessageId), ()> = HashMap::new();
        for (q, qid) in self.queue_ids.iter().enumerate() {
            prop_assert!(
                store.queue_ids().contains(qid),
                "registered queue recovered"
            );
            // A queue with no live messages is not reported (§6): as an empty one.
            let empty = RecoveredQueue {
                name: format!("q{q}"),
                ..RecoveredQueue::default()
            };
            let queue = recovered.queues.get(qid).unwrap_or(&empty);
            prop_assert!(!queue.live.is_empty() || queue.first.is_none());
            prop_assert_eq!(&queue.name, &format!("q{q}"));
            let scanned = match queue.first {
                Some(first) => {
                    let live = &queue.live;
                    scan_all(store, *qid, first, &mut |id| live.contains(id.0))
                }
                None => {
                    prop_assert!(queue.live.is_empty(), "live messages but no first position");
                    Vec::new()
                }
            };
            // Exactly the live set, in id order, starting at `first`.
            let scanned_ids: Vec<u64> = scanned.iter().map(|m| m.id.0).collect();
            let live_ids: Vec<u64> = queue.live.iter().collect();
            prop_assert_eq!(
                &scanned_ids,
                &live_ids,
                "scan from first vs live set, queue {}",
                q
            );
            if let Some(m) = scanned.first() {
                prop_assert_eq!(Some(m.location.position()), queue.first);
            }
            let bytes: u64 = scanned.iter().map(|m| m.message.body.len() as u64).sum();
            prop_assert_eq!(
                bytes,
                queue.live_body_bytes,
                "live_body_bytes of queue {}",
                q
            );
            for m in &scanned {
                let Some(model) = self.messages.get(&m.id) else {
                    return Err(TestCaseError::fail(format!("phantom message {:?}", m.id)));
                };
                prop_assert!(model.refs.contains_key(&q), "message present in a queue it was never sent to, or came back after its ack was recovered");
                prop_assert!(
                    !model.msg.transient,
                    "transient message {:?} came back",
                    m.id
                );
                prop_assert_eq!(&m.message, &model.msg, "altered (scan)");
                prop_assert_eq!(
                    &store.read(&m.location).unwrap(),
                    &model.msg,
                    "altered (read)"
                );
                if model.refs[&q] == RefState::Failed {
                    FAILED_CAME_BACK.fetch_add(1, Ordering::Relaxed);
                }
                if let RefState::Acked(seq) = model.refs[&q] {
                    prop_assert!(
                        !ack_durable(seq),
                        "durably acked message {:?} came back",
                        m.id
                    );
                }
                present.insert((q, m.id), ());
            }
        }
        for (id, model) in &self.messages {
            for (q, state) in &model.refs {
                let must_survive = model.pending_seq.is_none()
                    && !model.msg.transient
                    && !matches!(state, RefState::Acked(_) | RefState::Failed);
                if must_survive {
                    prop_assert!(
                        present.contains_key(&(*q, *id)),
                        "confirmed, un-acked message {:?} lost from queue {}",
                        id,
                        q
                    );
                }
            }
        }
        // New epoch: whatever came back is durable and ready again.
        self.messages.retain(|id, model| {
            model.refs.retain(|q, state| {
                let keep = present.contains_key(&(*q, *id));
                *state = RefState::Ready;
                keep
            });
            model.pending_seq = None;
            !model.refs.is_empty()
        });
        // Ids of publishes lost in the crash may be handed out again (nothing
        // on disk refers to them); ids must exceed everything recovered.
        self.max_id_seen = self.messages.keys().next_back().copied();
        Ok(())
    }
}

/// Scans `queue` from `from` to the end of the log, in small batches.
fn scan_all(
    store: &Store,
    queue: QueueId,
    from: LogPosition,
    wanted: &mut dyn FnMut(MessageId) -> bool,
) -> Vec<ScannedMessage> {
    let mut out = Vec::new();
    let mut pos = from;
    loop {
        let scan = store.scan_queue(queue, pos, wanted, 5, 2000).unwrap();
        assert!(scan.next >= pos, "scan went backwards");
        pos = scan.next;
        out.extend(scan.messages);
        if scan.end_of_log {
            return out;
        }
    }
}

fn run_case(seed: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut harness = Harness::new(seed);
    for op in ops {
        harness.apply(op)?;
    }
    // Always end with a crash, so every case checks recovery at least once.
    harness.apply(&Op::Crash(CrashMode::Torn))
}

#[test]
fn confirmed_unacked_messages_survive_crashes() {
    let config = ProptestConfig {
        cases: 1000,
        max_shrink_iters: 2000,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        any::<u64>(),
        proptest::collection::vec(op_strategy(), 1..80),
    );
    let result = runner.run(&strategy, |(seed, ops)| run_case(seed, &ops));
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, (seed, ops))) => {
            panic!("{why}\nminimal failing case: seed {seed}, ops {ops:#?}")
        }
        Err(e) => panic!("{e}"),
    }
    // The sequences must exercise carrying (docs/STORAGE.md §5). How much depends on how
    // the writer's batches fall (~1600 segments in release, ~600 in debug on a loaded
    // machine), so the floor only proves it happens often, not how often.
    let segments = SEGMENTS_CARRIED.load(Ordering::Relaxed);
    let acks = ACKS_CARRIED.load(Ordering::Relaxed);
    println!("carried forward: {segments} segments, {acks} ACK records");
    assert!(segments >= 100, "too little carrying: {segments} segments");
    assert!(acks >= 100, "too little carrying: {acks} ACKs");
    let failed = PUBLISHES_FAILED.load(Ordering::Relaxed);
    let came_back = FAILED_CAME_BACK.load(Ordering::Relaxed);
    println!("failed publishes: {failed} ({came_back} came back after a crash)");
    assert!(failed >= 100, "too few failed publishes: {failed}");
}
