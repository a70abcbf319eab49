//! The [`Store`] handle: the public API over the in-memory index, the
//! pending group-commit buffer and the writer thread.
//!
//! Concurrency model: one mutex (`Shared::log`) guards the log head — the
//! pending buffer, sequence/message-id counters, the reserved end of the
//! active segment, and the live-reference index. Callers encode records into
//! the pending buffer while holding it (a memcpy, no I/O, no allocation once
//! the buffer has grown); the writer thread (writer.rs) swaps the buffer out
//! and does all segment I/O without it. Queue-table changes are serialised
//! by a second mutex (`Shared::meta`) and are synchronous (fsync'd) because
//! they are rare.
//!
//! Invariants:
//! - Bytes enter the pending buffer in the same order as their sequence
//!   numbers, message ids and reserved offsets, so "durable up to seq S" means
//!   every record with seq ≤ S is on disk.
//! - `LogState::queues` holds exactly the (queue, message) references that
//!   are published and not acked (one id set per queue); `SegmentInfo::live_refs`
//!   counts them per segment, and `LogState::bases` maps an id to its segment
//!   (index.rs).
//! - Every ACK appended to a segment records, in that segment's
//!   `SegmentInfo::acks_into`, the older segment holding the acked PUBLISH;
//!   ACKs carried forward by the writer (writer.rs) do too, but leave the
//!   index alone (their references are already dead).
//! - Records are settled in sequence order, each durable or failed
//!   (durable.rs); a failed batch takes everything pending with it
//!   (failure.rs), so `LogState::durable_seq` is a plain watermark and the
//!   failed ones are a few ranges.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use roaring::RoaringTreemap;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::{watch, Notify};
use tracing::error;

use crate::backend::{Backend, BackendFile, FsBackend};
use crate::durable::{DurableState, FailedPublishes, Outcome};
use crate::error::{Result, StoreError};
use crate::index::{add_base, refs_per_segment, segment_of, Bases};
use crate::live_refs::LiveRefs;
use crate::lock::DirLock;
use crate::meta::Metadata;
use crate::metadata_sync::MetadataSync;
use crate::reader::{RecordReader, READ_CHUNK_BYTES};
use crate::record::{
    decode, encode_ack, encode_delivery_count, encode_publish, publish_record_bytes,
    validate_publish, Decoded, ACK_RECORD_BYTES, DELIVERY_COUNT_RECORD_BYTES,
};
use crate::recovery::{recover, Carry, SegmentInfo};
use crate::segment::{encode_header, SegmentHeader, SEGMENT_HEADER_BYTES};
use crate::types::{
    Appended, Location, LogPosition, MessageId, QueueId, Recovered, Scan, ScannedMessage,
    StoreOptions, StoreStats, StoredDefinitions, StoredMessage, SyncPolicy,
};
use crate::writer;

/// A run of the pending buffer destined for one segment. The run ends where
/// the next chunk starts (or at the end of the buffer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk {
    pub segment: u32,
    pub start: usize,
    /// The writer must create this segment file (its header is the first
    /// bytes of the run).
    pub new_segment: bool,
}

/// The log head, guarded by `Shared::log`.
pub(crate) struct LogState {
    /// Encoded records (and new-segment headers) not yet taken by the writer.
    pub buf: Vec<u8>,
    pub chunks: Vec<Chunk>,
    pub records_pending: u64,
    /// Sequence number of the next record. Sequences start at 1, so a
    /// durable sequence of 0 means "nothing yet".
    pub next_seq: u64,
    pub next_message_id: u64,
    pub active_segment: u32,
    /// Reserved end of the active segment (including pending bytes).
    pub active_offset_bytes: u64,
    /// No segment takes appends: the store was just opened, or a failed batch
    /// sealed the one that did (failure.rs). The next record starts segment
    /// `last_segment + 1`; until then `active_segment` is the sealed segment
    /// written last (0 if none), and `active_offset_bytes` its end.
    pub needs_segment: bool,
    /// Highest segment number ever used, on disk or given up when creating it
    /// failed: numbers are never reused.
    pub last_segment: u32,
    pub segments: BTreeMap<u32, SegmentInfo>,
    /// The registered queues, and of those holding messages, the ids of their live ones.
    pub queues: LiveRefs,
    /// The newest DELIVERY_COUNT record of each live reference that has one (§3.5): its
    /// count and the segment it is in. That segment counts the record in its `live_refs`
    /// (a pin) until the reference is acked or a newer count replaces it. Only messages
    /// whose delivery failed are here.
    pub delivery_counts: HashMap<(QueueId, u64), (u32, u32)>,
    /// Base message id → segment, for every segment in `segments`.
    pub bases: Bases,
    /// Some segment may have become reclaimable; the writer re-checks.
    pub reclaim_dirty: bool,
    /// Every record with a sequence number ≤ this is settled: durable, or
    /// failed (`Shared::durable_tx` names the failed ones).
    pub durable_seq: u64,
    /// `next_message_id` as of the last durable batch: the PUBLISH records of
    /// smaller ids are durable (or failed earlier and left the index then).
    pub durable_next_message_id: u64,
    /// Everything before (segment, offset) has been written by the writer.
    pub written_to: (u32, u64),
    /// Set while a write or fsync failure keeps the store from writing: why.
    /// Appends are refused meanwhile; acks are taken (failure.rs).
    pub outage: Option<Arc<str>>,
    pub shutdown: bool,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub records_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub batches: AtomicU64,
    pub fsyncs: AtomicU64,
    pub segments_created: AtomicU64,
    pub segments_removed: AtomicU64,
    pub segments_carried: AtomicU64,
    pub acks_carried: AtomicU64,
}

/// State shared by every handle and the writer thread.
pub(crate) struct Shared {
    pub backend: Arc<dyn Backend>,
    pub opts: StoreOptions,
    pub log: Mutex<LogState>,
    /// Wakes the writer: buffer non-empty, reclaim needed, shutdown.
    pub work_cv: Condvar,
    /// Wakes blocked producers when the writer took the buffer.
    pub space_cv: Condvar,
    /// Same, for async producers.
    pub space_notify: Notify,
    /// Wakes blocking durability waiters and readers.
    pub durable_cv: Condvar,
    /// Settled records, for async waiters. Updated under the log lock, so a
    /// waiter woken by `durable_cv` finds it current.
    pub durable_tx: watch::Sender<DurableState>,
    /// Where the messages of failed PUBLISH records are reported, if anyone
    /// asked (`Store::failed_publishes`).
    pub failed_publishes_tx: Mutex<Option<UnboundedSender<FailedPublishes>>>,
    pub files: Mutex<HashMap<u32, Arc<dyn BackendFile>>>,
    pub stats: Counters,
    pub meta: Mutex<Metadata>,
    /// Which metadata writes are fsync'd (`metadata_sync.rs`).
    pub metadata_sync: MetadataSync,
}

/// `Store::sync_metadata`, for the writer thread too: fsyncs the journal files written since
/// the last sync (none under `SyncPolicy::Never`: written is durable there, as for messages);
/// a failure leaves the journals to write snapshots at their next change.
pub(crate) fn sync_metadata(shared: &Shared, ticket: u64) -> Result<()> {
    shared.metadata_sync.sync(ticket, || {
        let files = shared.meta.lock().take_unsynced();
        if shared.opts.sync == SyncPolicy::Never {
            return Ok(());
        }
        shared
            .stats
            .fsyncs
            .fetch_add(files.len() as u64, Ordering::Relaxed);
        // A declare writes both journals (queue table and definitions): fsync'd side by
        // side, a sync costs one fsync's latency, not two (measured here: 2.9 ms against
        // 6.2-8.8 ms one after the other).
        let synced = match files.as_slice() {
            [first, second] => std::thread::scope(|scope| {
                let second = scope.spawn(|| second.sync());
                let first = first.sync();
                first.and(
                    second
                        .join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("fsync thread panicked"))),
                )
            }),
            _ => files.iter().try_for_each(|file| file.sync()),
        };
        if let Err(e) = synced {
            shared.meta.lock().sync_failed();
            return Err(StoreError::from(e));
        }
        Ok(())
    })
}

/// Appends need a store that is open and can write now.
fn check_writable(st: &LogState) -> Result<()> {
    check_open(st)?;
    match &st.outage {
        Some(why) => Err(StoreError::Unavailable(why.to_string())),
        None => Ok(()),
    }
}

/// Acks and reads need an open store (acks are taken during an outage).
fn check_open(st: &LogState) -> Result<()> {
    if st.shutdown {
        return Err(StoreError::Failed("store closed".into()));
    }
    Ok(())
}

/// Makes room for a `framed`-byte record in the active segment, rolling over
/// to a new segment if it would end past the segment size (or if no segment
/// takes appends), and makes sure the pending buffer has a chunk for the
/// active segment.
fn place(st: &mut LogState, framed: usize, segment_size_bytes: u64) {
    let header = SEGMENT_HEADER_BYTES as u64;
    if st.needs_segment
        || (st.active_offset_bytes > header
            && st.active_offset_bytes + framed as u64 > segment_size_bytes)
    {
        roll_over(st);
    } else if st.chunks.is_empty() {
        st.chunks.push(Chunk {
            segment: st.active_segment,
            start: st.buf.len(),
            new_segment: false,
        });
    }
}

/// Seals the active segment at its reserved end (unless it is sealed already)
/// and starts segment `last_segment + 1`: its header goes into the pending
/// buffer (the writer creates the file), based at the next message id. The
/// caller holds the log lock.
pub(crate) fn roll_over(st: &mut LogState) {
    if !st.needs_segment {
        let base_message_id = st.next_message_id;
        let sealed_end = st.active_offset_bytes;
        if let Some(info) = st.segments.get_mut(&st.active_segment) {
            info.end_bytes = sealed_end;
            info.end_message_id = base_message_id;
        }
        // The sealed segment may already be fully acked.
        st.reclaim_dirty = true;
    }
    start_segment(st);
}

fn start_segment(st: &mut LogState) {
    let header = SEGMENT_HEADER_BYTES as u64;
    let segment = st.last_segment.saturating_add(1);
    let base_message_id = st.next_message_id;
    st.chunks.push(Chunk {
        segment,
        start: st.buf.len(),
        new_segment: true,
    });
    encode_header(
        &mut st.buf,
        SegmentHeader {
            segment,
            base_message_id,
        },
    );
    st.active_segment = segment;
    st.last_segment = segment;
    st.active_offset_bytes = header;
    st.needs_segment = false;
    let info = SegmentInfo {
        base_message_id,
        end_bytes: header,
        ..SegmentInfo::default()
    };
    add_base(&mut st.bases, segment, &info);
    st.segments.insert(segment, info);
}

/// Segments below this number are sealed and completely written (reclamation
/// looks only at those): every one below the segment last written, and that
/// one too once it is sealed and written to its end (after a failure, or
/// right after open).
pub(crate) fn complete_below(st: &LogState) -> u32 {
    let (segment, written_end) = st.written_to;
    let sealed = segment < st.active_segment || st.needs_segment;
    let complete = sealed
        && st
            .segments
            .get(&segment)
            .is_none_or(|info| written_end >= info.end_bytes);
    if complete {
        segment.saturating_add(1)
    } else {
        segment
    }
}

/// Re-appends the ACK of `queue`'s reference to `id` (whose PUBLISH is in
/// segment `target`), carried forward from a dead segment about to be
/// removed (docs/STORAGE.md §5), or written again after its batch failed
/// (failure.rs). Like [`Store::ack`] minus the index update
/// (the reference is already dead, `live_refs` already counts it out) and
/// minus back-pressure; records the dependency of the segment it lands in on
/// `target`. Returns its sequence number. The caller holds the log lock.
pub(crate) fn append_carried_ack(
    st: &mut LogState,
    segment_size_bytes: u64,
    queue: QueueId,
    id: MessageId,
    target: u32,
) -> u64 {
    let seq = append_ack_record(st, segment_size_bytes, queue, id, target);
    debug_assert!(target < st.active_segment, "carried ACKs point backwards");
    seq
}

/// Encodes an ACK record into the pending buffer and records that the segment it lands
/// in now holds an ACK into `target` (the segment of the acked PUBLISH), unless that is
/// the same segment. Returns its sequence number. The caller holds the log lock.
pub(crate) fn append_ack_record(
    st: &mut LogState,
    segment_size_bytes: u64,
    queue: QueueId,
    id: MessageId,
    target: u32,
) -> u64 {
    place(st, ACK_RECORD_BYTES, segment_size_bytes);
    let seq = st.next_seq;
    st.next_seq += 1;
    encode_ack(&mut st.buf, queue, id);
    st.active_offset_bytes += ACK_RECORD_BYTES as u64;
    st.records_pending += 1;
    let active = st.active_segment;
    if target != active {
        if let Some(info) = st.segments.get_mut(&active) {
            info.acks_into.insert(target);
        }
    }
    seq
}

/// Drops the pin a DELIVERY_COUNT record held on its segment (§3.5); the segment may now
/// be reclaimable. The caller holds the log lock.
pub(crate) fn unpin(st: &mut LogState, segment: u32) {
    let active = st.active_segment;
    if let Some(info) = st.segments.get_mut(&segment) {
        info.live_refs = info.live_refs.saturating_sub(1);
        if info.live_refs == 0 && segment != active {
            st.reclaim_dirty = true;
        }
    }
}

/// Where `scan_queue` goes next, decided under the log lock.
enum Located {
    /// Read `[at, limit)` of segment `at.segment`: written, and non-empty.
    Read { at: LogPosition, limit: u64 },
    /// Everything written at or after this position has been examined.
    WrittenEnd(LogPosition),
}

/// First record position of `segment`.
fn segment_start(segment: u32) -> LogPosition {
    LogPosition {
        segment,
        offset: SEGMENT_HEADER_BYTES as u32,
    }
}

/// The position just past a record of `segment` ending at `end`. (A record
/// ending beyond u32 offsets filled its segment alone: continue at the next.)
fn position_after(segment: u32, end: u64) -> LogPosition {
    match u32::try_from(end) {
        Ok(offset) => LogPosition { segment, offset },
        Err(_) => segment_start(segment.saturating_add(1)),
    }
}

/// Normalises `pos` to a managed segment (removed and skipped ones are passed
/// over, and the end of a completely written sealed segment continues at the
/// next one) and says how far that segment has been written.
fn locate(st: &LogState, mut pos: LogPosition) -> Located {
    loop {
        let Some((&segment, info)) = st.segments.range(pos.segment..).next() else {
            return Located::WrittenEnd(pos);
        };
        if segment != pos.segment {
            pos = segment_start(segment);
        }
        pos.offset = pos.offset.max(SEGMENT_HEADER_BYTES as u32);
        let (w_segment, w_end) = st.written_to;
        let (limit, complete) = match segment.cmp(&w_segment) {
            std::cmp::Ordering::Less => (info.end_bytes, true),
            std::cmp::Ordering::Equal => (w_end, false),
            std::cmp::Ordering::Greater => (SEGMENT_HEADER_BYTES as u64, false),
        };
        if u64::from(pos.offset) < limit {
            return Located::Read { at: pos, limit };
        }
        if !complete {
            return Located::WrittenEnd(pos);
        }
        match segment.checked_add(1) {
            Some(next) => pos = segment_start(next),
            None => return Located::WrittenEnd(pos),
        }
    }
}

/// Handle to an open store. Cheap to clone; all clones share one writer.
/// Dropping the last handle flushes pending records and stops the writer.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Directory lock of an `FsBackend` store; released after the writer
    /// has stopped (field order: dropped after `shutdown` in `Drop`).
    dir_lock: Mutex<Option<DirLock>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        self.shared.log.lock().shutdown = true;
        self.shared.work_cv.notify_all();
        self.shared.space_cv.notify_all();
        self.shared.space_notify.notify_waiters();
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Store {
    /// Opens (or creates) the store in `dir` on the real filesystem and
    /// recovers its contents.
    /// Fails with [`StoreError::Locked`] if another store holds `dir`.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<(Store, Recovered)> {
        std::fs::create_dir_all(dir)?;
        let lock = DirLock::acquire(dir)?;
        let (store, recovered) = Self::open_with_backend(Arc::new(FsBackend::new(dir)), opts)?;
        *store.inner.dir_lock.lock() = Some(lock);
        Ok((store, recovered))
    }

    /// Opens the store on any backend (tests use [`crate::FaultyBackend`]).
    pub fn open_with_backend(
        backend: Arc<dyn Backend>,
        opts: StoreOptions,
    ) -> Result<(Store, Recovered)> {
        if !(4096..=u64::from(u32::MAX)).contains(&opts.segment_size_bytes) {
            return Err(StoreError::Invalid(format!(
                "segment_size_bytes {} not in 4096..=u32::MAX",
                opts.segment_size_bytes
            )));
        }
        if opts.max_pending_bytes == 0 {
            return Err(StoreError::Invalid("max_pending_bytes must be > 0".into()));
        }
        let (state, recovered) = recover(backend.as_ref())?;
        let log = LogState {
            buf: Vec::with_capacity(opts.max_pending_bytes.min(1 << 20)),
            chunks: Vec::new(),
            records_pending: 0,
            next_seq: 1,
            next_message_id: state.next_message_id,
            // Open writes nothing: the first record starts a segment, so a
            // store opens on a full disk (§6).
            active_segment: state.last_written,
            active_offset_bytes: state.last_written_end,
            needs_segment: true,
            last_segment: state.last_segment,
            segments: state.segments,
            queues: state.queues,
            delivery_counts: state.delivery_counts,
            bases: state.bases,
            // Recovered segments may be dead but pinned: let the writer
            // carry their ACKs forward (§5).
            reclaim_dirty: true,
            durable_seq: 0,
            durable_next_message_id: state.next_message_id,
            written_to: (state.last_written, state.last_written_end),
            outage: None,
            shutdown: false,
        };
        let stats = Counters::default();
        stats
            .segments_removed
            .store(recovered.report.segments_removed, Ordering::Relaxed);
        let (durable_tx, _) = watch::channel(DurableState::default());
        let shared = Arc::new(Shared {
            backend,
            opts,
            log: Mutex::new(log),
            work_cv: Condvar::new(),
            space_cv: Condvar::new(),
            space_notify: Notify::new(),
            durable_cv: Condvar::new(),
            durable_tx,
            failed_publishes_tx: Mutex::new(None),
            files: Mutex::new(state.files),
            stats,
            meta: Mutex::new(state.metadata),
            metadata_sync: MetadataSync::default(),
        });
        let writer_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name("warren-store-writer".into())
            .spawn(move || writer::run(writer_shared))?;
        let store = Store {
            inner: Arc::new(Inner {
                shared,
                writer: Mutex::new(Some(handle)),
                dir_lock: Mutex::new(None),
            }),
        };
        Ok((store, recovered))
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Returns the id of queue `name`, registering it if it is new: written
    /// before returning, durable once [`Store::sync_metadata`] covers
    /// [`Store::metadata_ticket`] (messages appended to it wait for that by
    /// themselves). Does file I/O (one write, no fsync).
    pub fn register_queue(&self, name: &str) -> Result<QueueId> {
        if name.len() > usize::from(u16::MAX) {
            return Err(StoreError::Invalid(
                "queue name longer than 65535 bytes".into(),
            ));
        }
        let shared = self.shared();
        let mut meta = shared.meta.lock();
        if let Some(id) = meta.find(name) {
            return Ok(id);
        }
        let id = meta.register(shared.backend.as_ref(), name)?;
        shared.metadata_sync.wrote();
        shared.log.lock().queues.register(id);
        Ok(id)
    }

    /// The ticket of the last metadata write (a queue registered or deleted, definitions
    /// saved or journaled): durable once [`Store::metadata_durable`] reaches it.
    pub fn metadata_ticket(&self) -> u64 {
        self.shared().metadata_sync.written()
    }

    /// Every metadata write up to this ticket is fsync'd.
    pub fn metadata_durable(&self) -> u64 {
        self.shared().metadata_sync.durable()
    }

    /// Makes every metadata write up to `ticket` durable, with one fsync per journal for all
    /// the writes made since the last sync (`metadata_sync.rs`). Blocking (fsync): async
    /// code calls it from `spawn_blocking`.
    pub fn sync_metadata(&self, ticket: u64) -> Result<()> {
        sync_metadata(self.shared(), ticket)
    }

    /// Deletes a queue and, logically, all its messages: the queue table's
    /// change is written first (durable with the next metadata sync); its
    /// records are then ignored by recovery and its references no longer pin
    /// segments. Does file I/O (one write, no fsync).
    pub fn delete_queue(&self, queue: QueueId) -> Result<()> {
        let shared = self.shared();
        let mut meta = shared.meta.lock();
        if !meta.table.queues.contains_key(&queue) {
            return Err(StoreError::UnknownQueue(queue));
        }
        meta.delete(shared.backend.as_ref(), queue)?;
        shared.metadata_sync.wrote();
        let mut st = shared.log.lock();
        if let Some(ids) = st.queues.unregister(queue) {
            let mut pins = Vec::new();
            st.delivery_counts.retain(|(q, _), (_, segment)| {
                let keep = *q != queue;
                if !keep {
                    pins.push(*segment);
                }
                keep
            });
            for segment in pins {
                unpin(&mut st, segment);
            }
            // Per-segment counts from ranks: no walk over every id.
            for (segment, count) in refs_per_segment(&ids, &st.bases) {
                if let Some(info) = st.segments.get_mut(&segment) {
                    debug_assert!(info.live_refs >= count, "live_refs underflow");
                    info.live_refs = info.live_refs.saturating_sub(count);
                }
            }
            // ACKs for the deleted queue need no carrying any more.
            for info in st.segments.values_mut() {
                if matches!(info.carry, Carry::NotWorthIt { .. }) {
                    info.carry = Carry::NotYet;
                }
            }
            st.reclaim_dirty = true;
            shared.work_cv.notify_one();
        }
        Ok(())
    }

    /// Ids of the registered queues, ascending.
    pub fn queue_ids(&self) -> Vec<QueueId> {
        self.shared()
            .meta
            .lock()
            .table
            .queues
            .keys()
            .copied()
            .collect()
    }

    /// Registered queues (id, name).
    pub fn queues(&self) -> Vec<(QueueId, String)> {
        let meta = self.shared().meta.lock();
        meta.table
            .queues
            .iter()
            .map(|(id, n)| (*id, n.to_string()))
            .collect()
    }

    /// Appends a PUBLISH record for `msg` routed to `queues` (distinct,
    /// registered). Returns its sequence number, message id and location at
    /// once; the record is durable after `wait_durable(seq)`.
    ///
    /// Never does disk I/O. Blocks only for back-pressure, while more than
    /// `max_pending_bytes` are waiting for the writer; async callers that
    /// must not block use [`Store::append_async`].
    pub fn append(&self, queues: &[QueueId], msg: &StoredMessage) -> Result<Appended> {
        self.append_inner(queues, msg, true)
            .map(|a| a.expect("blocking append always appends"))
    }

    /// Like [`Store::append`] but waits for back-pressure asynchronously.
    pub async fn append_async(&self, queues: &[QueueId], msg: &StoredMessage) -> Result<Appended> {
        loop {
            let notified = self.shared().space_notify.notified();
            tokio::pin!(notified);
            // Register before checking so a wake-up between the check and the
            // await is not lost.
            notified.as_mut().enable();
            if let Some(appended) = self.append_inner(queues, msg, false)? {
                return Ok(appended);
            }
            notified.await;
        }
    }

    /// Returns `Ok(None)` when the buffer is full and `block` is false.
    fn append_inner(
        &self,
        queues: &[QueueId],
        msg: &StoredMessage,
        block: bool,
    ) -> Result<Option<Appended>> {
        validate_publish(queues, msg).map_err(StoreError::Invalid)?;
        for (i, q) in queues.iter().enumerate() {
            if queues[..i].contains(q) {
                return Err(StoreError::Invalid(format!("queue {q:?} listed twice")));
            }
        }
        let framed = publish_record_bytes(queues.len(), msg);
        let shared = self.shared();
        let mut st = shared.log.lock();
        loop {
            check_writable(&st)?;
            if st.buf.is_empty() || st.buf.len() + framed <= shared.opts.max_pending_bytes {
                break;
            }
            if !block {
                return Ok(None);
            }
            shared.space_cv.wait(&mut st);
        }
        if let Some(q) = queues.iter().find(|q| !st.queues.is_registered(**q)) {
            return Err(StoreError::UnknownQueue(*q));
        }
        let was_empty = st.buf.is_empty();
        place(&mut st, framed, shared.opts.segment_size_bytes);
        let id = MessageId(st.next_message_id);
        st.next_message_id += 1;
        let seq = st.next_seq;
        st.next_seq += 1;
        let segment = st.active_segment;
        let location = Location {
            segment,
            offset: st.active_offset_bytes as u32,
            len: framed as u32,
        };
        encode_publish(&mut st.buf, id, queues, msg);
        st.active_offset_bytes += framed as u64;
        st.records_pending += 1;
        let state = &mut *st;
        if let Some(info) = state.segments.get_mut(&segment) {
            info.live_refs += queues.len() as u64;
        }
        for q in queues {
            state.queues.insert(*q, id.0);
        }
        drop(st);
        if was_empty {
            shared.work_cv.notify_one();
        }
        Ok(Some(Appended { seq, id, location }))
    }

    /// Appends an ACK record removing `queue`'s reference to `id`; returns
    /// its sequence number. Acks are never subject to back-pressure (each
    /// reference is acked at most once, so ack bytes are bounded by publish
    /// bytes) and never block. Waiting for an ack's durability is optional:
    /// an un-synced ack lost in a crash only makes the message come back.
    /// Acks are taken during an outage too (they wait for the writer's retry,
    /// and free segments at once): consumers keep working on a full disk.
    /// The reference of a message whose PUBLISH failed is gone already:
    /// `UnknownMessage`, and nothing is written.
    pub fn ack(&self, queue: QueueId, id: MessageId) -> Result<u64> {
        let shared = self.shared();
        let mut st = shared.log.lock();
        check_open(&st)?;
        if !st.queues.is_registered(queue) {
            return Err(StoreError::UnknownQueue(queue));
        }
        if !st.queues.remove(queue, id.0) {
            return Err(StoreError::UnknownMessage(queue, id));
        }
        if let Some((_, pinned)) = st.delivery_counts.remove(&(queue, id.0)) {
            unpin(&mut st, pinned);
        }
        // A live id always has its segment in the base map (index.rs).
        let segment = segment_of(&st.bases, id.0);
        let was_empty = st.buf.is_empty();
        let segment_size_bytes = shared.opts.segment_size_bytes;
        let seq = match segment {
            Some(segment) => append_ack_record(&mut st, segment_size_bytes, queue, id, segment),
            // Unreachable for a consistent index; the ACK is still written.
            None => {
                let active = st.active_segment;
                append_ack_record(&mut st, segment_size_bytes, queue, id, active)
            }
        };
        let active = st.active_segment;
        if let Some(segment) = segment {
            if let Some(info) = st.segments.get_mut(&segment) {
                debug_assert!(info.live_refs > 0, "live_refs underflow");
                info.live_refs = info.live_refs.saturating_sub(1);
                if info.live_refs == 0 && segment != active {
                    st.reclaim_dirty = true;
                }
            }
        }
        drop(st);
        if was_empty {
            shared.work_cv.notify_one();
        }
        Ok(seq)
    }

    /// Appends a DELIVERY_COUNT record (§3.5): `queue`'s copy of `id` has failed `count`
    /// deliveries. The broker writes one only when a delivery of a persistent message ends
    /// as failed (a slow path); it replaces the reference's earlier count. Like an ack it
    /// is never subject to back-pressure and need not be waited for: lost in a crash, the
    /// count after a restart is the one before. `UnknownMessage` if the reference is not
    /// live (nothing is written).
    pub fn set_delivery_count(&self, queue: QueueId, id: MessageId, count: u32) -> Result<u64> {
        let shared = self.shared();
        let mut st = shared.log.lock();
        check_open(&st)?;
        if !st.queues.is_registered(queue) {
            return Err(StoreError::UnknownQueue(queue));
        }
        if !st.queues.contains(queue, id.0) {
            return Err(StoreError::UnknownMessage(queue, id));
        }
        let was_empty = st.buf.is_empty();
        place(
            &mut st,
            DELIVERY_COUNT_RECORD_BYTES,
            shared.opts.segment_size_bytes,
        );
        let seq = st.next_seq;
        st.next_seq += 1;
        encode_delivery_count(&mut st.buf, queue, id, count);
        st.active_offset_bytes += DELIVERY_COUNT_RECORD_BYTES as u64;
        st.records_pending += 1;
        let active = st.active_segment;
        if let Some(info) = st.segments.get_mut(&active) {
            info.live_refs += 1;
        }
        if let Some((_, earlier)) = st.delivery_counts.insert((queue, id.0), (count, active)) {
            unpin(&mut st, earlier);
        }
        drop(st);
        if was_empty {
            shared.work_cv.notify_one();
        }
        Ok(seq)
    }

    /// The delivery-count the store holds for `queue`'s copy of `id` (§3.5): the newest
    /// DELIVERY_COUNT record of the live reference, recovered or written since the open.
    pub fn delivery_count(&self, queue: QueueId, id: MessageId) -> Option<u32> {
        let st = self.shared().log.lock();
        st.delivery_counts
            .get(&(queue, id.0))
            .map(|(count, _)| *count)
    }

    /// Resolves once the record with sequence `seq` is settled: `Ok` if it is
    /// durable (per the sync policy), `Unavailable` if its batch failed (it
    /// never will be). `seq` must have been returned by this store.
    pub async fn wait_durable(&self, seq: u64) -> Result<()> {
        let mut rx = self.shared().durable_tx.subscribe();
        let state = rx
            .wait_for(|d| d.seq >= seq)
            .await
            .map_err(|_| StoreError::Failed("store dropped".into()))?;
        outcome_result(state.outcome(seq))
    }

    /// Blocking version of [`Store::wait_durable`].
    pub fn wait_durable_blocking(&self, seq: u64) -> Result<()> {
        let shared = self.shared();
        let mut st = shared.log.lock();
        while st.durable_seq < seq {
            if st.shutdown && st.buf.is_empty() && st.durable_seq + 1 >= st.next_seq {
                return Err(StoreError::Failed("store closed".into()));
            }
            shared.durable_cv.wait(&mut st);
        }
        // Records fail under this lock, so the watch already names `seq` if
        // it failed (its `seq` may lag behind a success, which is harmless).
        let failed = shared.durable_tx.borrow().failed.contains(seq);
        drop(st);
        outcome_result(if failed {
            Outcome::Failed
        } else {
            Outcome::Durable
        })
    }

    /// Blocks until everything appended so far is settled; `Ok` if the last
    /// record is durable (and with it every earlier one that did not fail).
    pub fn flush(&self) -> Result<()> {
        let seq = self.shared().log.lock().next_seq - 1;
        self.wait_durable_blocking(seq)
    }

    /// A receiver of the settled records, for a task that confirms many
    /// messages at once (`borrow().outcome(seq)` per message).
    pub fn durable_watch(&self) -> watch::Receiver<DurableState> {
        self.shared().durable_tx.subscribe()
    }

    /// The settled records now (a clone: two `Arc`s).
    pub fn durable_state(&self) -> DurableState {
        self.shared().durable_tx.borrow().clone()
    }

    /// Whether the record with sequence number `seq` failed (never durable). A record is
    /// marked failed before the [`Store::failed_publishes`] report that names it is sent.
    pub fn failed(&self, seq: u64) -> bool {
        self.shared().durable_tx.borrow().failed.contains(seq)
    }

    /// Highest settled sequence number (durable unless it failed).
    pub fn durable_seq(&self) -> u64 {
        self.shared().durable_tx.borrow().seq
    }

    /// Subscribes to the messages whose PUBLISH records failed (one
    /// [`FailedPublishes`] per failure), for a broker that must forget the
    /// store ids it keeps of messages on disk only. One subscriber: a new call
    /// replaces the previous one.
    pub fn failed_publishes(&self) -> UnboundedReceiver<FailedPublishes> {
        let (tx, rx) = unbounded_channel();
        *self.shared().failed_publishes_tx.lock() = Some(tx);
        rx
    }

    /// Reads a message back from its location. Blocking: waits until the
    /// record has been written (after its batch's fsync) and reads the file.
    /// A record whose batch failed is `Invalid` (it was never written, or was
    /// cut off), even if its bytes are still in the file.
    pub fn read(&self, location: &Location) -> Result<StoredMessage> {
        let shared = self.shared();
        {
            let mut st = shared.log.lock();
            let end = u64::from(location.offset) + u64::from(location.len);
            let sealed = location.segment < st.active_segment || st.needs_segment;
            match st.segments.get(&location.segment) {
                Some(info) if sealed && end > info.end_bytes => {
                    return Err(StoreError::Corrupt(format!(
                        "{location:?} lies past the valid records of its segment (a corrupt or failed tail)"
                    )));
                }
                None if location.segment <= st.last_segment => {
                    return Err(StoreError::Invalid(format!(
                        "segment {} does not exist",
                        location.segment
                    )));
                }
                _ => {}
            }
            loop {
                let (w_segment, w_end) = st.written_to;
                if location.segment < w_segment || (location.segment == w_segment && end <= w_end) {
                    break;
                }
                check_writable(&st)?;
                let reserved = location.segment < st.active_segment
                    || (location.segment == st.active_segment && end <= st.active_offset_bytes);
                if !reserved {
                    return Err(StoreError::Invalid(format!(
                        "{location:?} was never written"
                    )));
                }
                shared.durable_cv.wait(&mut st);
            }
        }
        let file = shared
            .files
            .lock()
            .get(&location.segment)
            .cloned()
            .ok_or_else(|| {
                StoreError::Invalid(format!("segment {} does not exist", location.segment))
            })?;
        let mut buf = vec![0u8; location.len as usize];
        file.read_at(u64::from(location.offset), &mut buf)?;
        let record = Bytes::from(buf);
        match decode(&record) {
            Ok(Decoded::Publish(view)) => Ok(view.message(&record)),
            Ok(Decoded::Ack { .. } | Decoded::DeliveryCount { .. }) => Err(StoreError::Invalid(
                format!("{location:?} is not a message's record"),
            )),
            Err(e) => Err(StoreError::Corrupt(format!("{location:?}: {e}"))),
        }
    }

    /// Reads a queue's messages back in log order, for a queue that keeps its tail on
    /// disk only (docs/STORAGE.md §4.1). Examines the PUBLISH records at positions
    /// ≥ `from` (segments ascending, removed segments skipped) and returns those routed to
    /// `queue` for which `wanted(id)` is true — the caller's own record of which messages
    /// it has on disk only; the store does not consult its live index here. Stops after
    /// `max_messages` messages or once the bodies returned reach `max_bytes` (at least one
    /// message is returned when any is found). `Scan::next` is just past the last record
    /// examined, so the caller continues from there.
    ///
    /// If nothing is found in the written part of the log while records are still pending
    /// with the writer, waits for the writer and goes on; returns with `end_of_log` once
    /// it has examined everything appended so far. Blocking I/O, reads in large chunks.
    /// Transient records are returned like persistent ones.
    pub fn scan_queue(
        &self,
        queue: QueueId,
        from: LogPosition,
        wanted: &mut dyn FnMut(MessageId) -> bool,
        max_messages: usize,
        max_bytes: usize,
    ) -> Result<Scan> {
        let shared = self.shared();
        let max_messages = max_messages.max(1);
        let mut messages: Vec<ScannedMessage> = Vec::new();
        let mut body_bytes: usize = 0;
        let mut pos = from;
        loop {
            // Under the lock: the next written stretch of the log, or its end.
            let (segment, limit) = {
                let mut st = shared.log.lock();
                loop {
                    match locate(&st, pos) {
                        Located::Read { at, limit } => {
                            pos = at;
                            break (at.segment, limit);
                        }
                        Located::WrittenEnd(at) => {
                            pos = at;
                            let reserved_end = (st.active_segment, st.active_offset_bytes);
                            // Nothing pending can hold a PUBLISH when no
                            // segment takes appends or appends are refused.
                            if (at.segment, u64::from(at.offset)) >= reserved_end
                                || st.needs_segment
                                || st.outage.is_some()
                            {
                                return Ok(Scan {
                                    messages,
                                    next: at,
                                    end_of_log: true,
                                });
                            }
                            if !messages.is_empty() {
                                return Ok(Scan {
                                    messages,
                                    next: at,
                                    end_of_log: false,
                                });
                            }
                            // Records are pending with the writer: wait for its batch.
                            check_open(&st)?;
                            shared.durable_cv.wait(&mut st);
                        }
                    }
                }
            };
            let file = shared.files.lock().get(&segment).cloned();
            let Some(file) = file else {
                // Removed since (nothing in it was live any more).
                pos = segment_start(segment.saturating_add(1));
                continue;
            };
            let mut reader = RecordReader::new(file.as_ref(), limit, READ_CHUNK_BYTES);
            let mut offset = u64::from(pos.offset);
            let mut skip_rest: Option<String> = None;
            while offset < limit {
                let record = match reader.frame(offset) {
                    Ok(Ok(record)) => record,
                    Ok(Err(e)) => {
                        skip_rest = Some(e.to_string());
                        break;
                    }
                    Err(e) => {
                        if shared.log.lock().segments.contains_key(&segment) {
                            return Err(e.into());
                        }
                        // Removed while we read it: nothing in it was live.
                        offset = limit;
                        break;
                    }
                };
                let framed = record.len() as u64;
                match decode(&record) {
                    Ok(Decoded::Publish(view)) => {
                        if view.queues().any(|q| q == queue) && wanted(view.id) {
                            let message = view.message(&record);
                            body_bytes = body_bytes.saturating_add(message.body.len());
                            messages.push(ScannedMessage {
                                id: view.id,
                                location: Location {
                                    segment,
                                    offset: offset as u32,
                                    len: framed as u32,
                                },
                                message,
                            });
                        }
                    }
                    Ok(Decoded::Ack { .. } | Decoded::DeliveryCount { .. }) => {}
                    Err(e) => {
                        skip_rest = Some(e.to_string());
                        break;
                    }
                }
                offset += framed;
                if !messages.is_empty()
                    && (messages.len() >= max_messages || body_bytes >= max_bytes)
                {
                    return Ok(Scan {
                        messages,
                        next: position_after(segment, offset),
                        end_of_log: false,
                    });
                }
            }
            pos = match skip_rest {
                Some(why) => {
                    error!(
                        segment,
                        offset,
                        queue = queue.0,
                        "corrupt record met while scanning a queue, skipping the rest of the segment: {why}"
                    );
                    segment_start(segment.saturating_add(1))
                }
                None => position_after(segment, offset),
            };
        }
    }

    /// Durably replaces the broker's definitions blob (atomic: a crash leaves
    /// the old or the new blob). Blocking (fsync).
    pub fn save_definitions(&self, bytes: &[u8]) -> Result<()> {
        let shared = self.shared();
        let mut meta = shared.meta.lock();
        meta.save_definitions(shared.backend.as_ref(), bytes)?;
        shared.metadata_sync.wrote();
        Ok(())
    }

    /// Records definitions changes made since the blob was saved (one journal append for
    /// all of them, docs/STORAGE.md §2.2; durable once [`Store::sync_metadata`] covers
    /// [`Store::metadata_ticket`]); recovery returns them after the blob, in order. When the
    /// journal has outgrown the blob, the blob `snapshot` builds (which must hold these
    /// changes) is saved instead, durably. Does file I/O.
    pub fn append_definitions(
        &self,
        changes: &[Vec<u8>],
        snapshot: &dyn Fn() -> Vec<u8>,
    ) -> Result<()> {
        let shared = self.shared();
        let mut meta = shared.meta.lock();
        meta.append_definitions(shared.backend.as_ref(), changes, snapshot)?;
        shared.metadata_sync.wrote();
        Ok(())
    }

    /// Reads the definitions blob back (`None` if never saved or corrupt), with the
    /// changes journaled after it.
    pub fn load_definitions(&self) -> Result<StoredDefinitions> {
        let shared = self.shared();
        let _serialise = shared.meta.lock();
        let loaded = Metadata::load(shared.backend.as_ref())?;
        Ok(StoredDefinitions {
            blob: loaded.definitions,
            changes: loaded.definitions_changes,
        })
    }

    /// Counters and gauges.
    pub fn stats(&self) -> StoreStats {
        let shared = self.shared();
        let c = &shared.stats;
        let (segments, live_references, durable_seq) = {
            let st = shared.log.lock();
            let pins = st.delivery_counts.len() as u64;
            let live: u64 = st.segments.values().map(|s| s.live_refs).sum::<u64>() - pins;
            (st.segments.len() as u64, live, st.durable_seq)
        };
        StoreStats {
            records_written: c.records_written.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            segments_created: c.segments_created.load(Ordering::Relaxed),
            segments_removed: c.segments_removed.load(Ordering::Relaxed),
            segments_carried: c.segments_carried.load(Ordering::Relaxed),
            acks_carried: c.acks_carried.load(Ordering::Relaxed),
            segments,
            live_references,
            durable_seq,
        }
    }

    /// Flushes everything pending, stops the writer and reports whether the
    /// store ended healthy (`Unavailable` if it was in an outage: what was
    /// pending then is lost). Other clones of this handle fail from now on.
    pub fn close(self) -> Result<()> {
        self.close_clean(&[])
    }

    /// [`Store::close`], and on a healthy store also writes the clean-shutdown record
    /// (§2.1): per queue, the ids of its live messages that were never delivered, which the
    /// next open reports in [`RecoveredQueue::undelivered`]. Queues left out recover all
    /// their messages as maybe delivered.
    pub fn close_clean(self, undelivered: &[(QueueId, RoaringTreemap)]) -> Result<()> {
        self.inner.shutdown();
        let st = self.shared().log.lock();
        if let Some(why) = &st.outage {
            return Err(StoreError::Unavailable(why.to_string()));
        }
        drop(st);
        if undelivered.is_empty() {
            return Ok(());
        }
        crate::undelivered::write(self.shared().backend.as_ref(), undelivered)
    }
}

fn outcome_result(outcome: Outcome) -> Result<()> {
    match outcome {
        Outcome::Durable => Ok(()),
        Outcome::Failed => Err(StoreError::Unavailable(
            "the record's batch failed to reach the disk".into(),
        )),
        Outcome::Pending => unreachable!("settled records only"),
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Store>();
}
