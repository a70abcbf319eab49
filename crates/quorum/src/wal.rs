//! The node-wide shared write-ahead log: one set of segment files holds the Raft logs of every
//! queue group on the node, each record tagged with its group id.
//!
//! Callers (the groups' log stores) submit records; the in-memory view of each group's log is
//! updated at submission, so openraft can read and replicate entries before they are flushed.
//! A single writer thread takes everything submitted since its last flush, writes it and calls
//! `fsync` once: one fsync covers every group's appends in that batch (group commit), and
//! completion callbacks run only after it. This is what makes 10,000 queues on one disk cheap.
//!
//! Files are `<seq>.wal` (hex), records framed as `len u32 | crc32 u32 | bincode payload`.
//! When the current segment passes `segment_bytes` it is sealed and a new one started. Space is
//! reclaimed by checkpointing: once the files hold more than twice the live data (entries not yet
//! purged after a snapshot, votes, commit marks) and at least `compact_min_bytes`, the writer
//! writes the live state into a fresh segment (via a temporary file and an atomic rename) that
//! begins with a `Reset` record, and deletes the older segments. Recovery replays the segments
//! in order; a torn tail of the newest segment (a crash mid-write) is cut off.
//!
//! A write or fsync that fails (`ENOSPC` on a full disk, `EIO`) is an outage, not the end: the
//! batch is kept (its completions wait, so nothing of it is reported durable), the current
//! segment is cut back to its durable length and opened again, and the writer tries again
//! with a growing pause (up to [`OUTAGE_RETRY_MAX`]) until a write and its fsync succeed —
//! as RabbitMQ's WAL is restarted by its supervisor. The groups see a slow disk, never an
//! error (openraft stops a group for good on a storage error), and carry on once space is
//! back. Rewriting the bytes after the durable length and syncing them again is safe after a
//! failed fsync too: the cut drops the pages whose write-back failed, and the rewrite makes
//! them dirty again.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use openraft::storage::IOFlushed;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::backend::LogBackend;
use crate::types::{GroupId, LogEntry, LogId, QueueRaft, Vote};

/// Sizing of the write-ahead log.
#[derive(Clone, Debug)]
pub struct WalOptions {
    /// A segment is sealed (and a new one started) once it is this large.
    pub segment_bytes: u64,
    /// Checkpointing is not worth it below this many bytes on disk.
    pub compact_min_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 * 1024 * 1024,
            compact_min_bytes: 256 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("write-ahead log I/O: {0}")]
    Io(String),
    #[error("write-ahead log is closed")]
    Closed,
}

/// The longest pause between attempts to write while the disk refuses writes.
const OUTAGE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(1);
const OUTAGE_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Counters for tests and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    pub records: u64,
    pub fsyncs: u64,
    pub checkpoints: u64,
    pub disk_bytes: u64,
    pub segments: u64,
}

/// What to notify once a submitted record is durable.
pub enum Completion {
    /// openraft's append callback.
    Flushed(IOFlushed<QueueRaft>),
    /// A waiting caller (votes must be durable before the vote is answered).
    Notify(tokio::sync::oneshot::Sender<Result<(), String>>),
}

impl Completion {
    pub(crate) fn complete(self, result: &Result<(), String>) {
        match self {
            Completion::Flushed(callback) => {
                callback.io_completed(result.clone().map_err(io::Error::other))
            }
            Completion::Notify(sender) => {
                // The waiter may have given up; nothing to do then.
                let _ = sender.send(result.clone());
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(crate) enum Record<'a> {
    Append {
        group: GroupId,
        entries: Cow<'a, [LogEntry]>,
    },
    /// Deletes the group's entries from `since` on (a new leader overwrote them).
    Truncate {
        group: GroupId,
        since: u64,
    },
    /// Deletes the group's entries up to `upto` (a snapshot covers them).
    Purge {
        group: GroupId,
        upto: LogId,
    },
    Vote {
        group: GroupId,
        vote: Vote,
    },
    Committed {
        group: GroupId,
        committed: Option<LogId>,
    },
    DropGroup {
        group: GroupId,
    },
    /// First record of a checkpoint segment: everything replayed before it is superseded.
    Reset,
}

/// One group's log as replayed from disk and updated by submissions.
#[derive(Clone, Default)]
pub(crate) struct GroupLog {
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    /// index → (entry, encoded size)
    entries: BTreeMap<u64, (LogEntry, u64)>,
    live_bytes: u64,
}

impl GroupLog {
    fn append(&mut self, entries: &[LogEntry]) {
        let purged_index = self.last_purged.map(|id| id.index);
        for entry in entries {
            if purged_index.is_some_and(|purged| entry.log_id.index <= purged) {
                continue;
            }
            // An append always extends the log; anything at or after its index is stale.
            self.truncate(entry.log_id.index);
            let size = bincode::serialized_size(entry).unwrap_or(0);
            self.live_bytes += size;
            self.entries
                .insert(entry.log_id.index, (entry.clone(), size));
        }
    }

    fn truncate(&mut self, since: u64) {
        let removed = self.entries.split_off(&since);
        self.live_bytes -= removed.values().map(|(_, size)| size).sum::<u64>();
    }

    fn purge(&mut self, upto: LogId) {
        if self.last_purged.is_some_and(|purged| purged >= upto) {
            return;
        }
        let kept = self.entries.split_off(&(upto.index + 1));
        let removed = std::mem::replace(&mut self.entries, kept);
        self.live_bytes -= removed.values().map(|(_, size)| size).sum::<u64>();
        self.last_purged = Some(upto);
    }

    pub(crate) fn vote(&self) -> Option<Vote> {
        self.vote
    }

    pub(crate) fn committed(&self) -> Option<LogId> {
        self.committed
    }

    /// `(last purged, last present)` log ids.
    pub(crate) fn log_state(&self) -> (Option<LogId>, Option<LogId>) {
        let last = self
            .entries
            .values()
            .next_back()
            .map(|(entry, _)| entry.log_id)
            .or(self.last_purged);
        (self.last_purged, last)
    }

    pub(crate) fn entries(&self, range: impl RangeBounds<u64>) -> Vec<LogEntry> {
        self.entries
            .range(range)
            .map(|(_, (entry, _))| entry.clone())
            .collect()
    }
}

#[derive(Default)]
struct State {
    groups: HashMap<GroupId, GroupLog>,
    pending: Vec<(Vec<u8>, Option<Completion>)>,
    closing: bool,
    /// Holds the writer back so a test can see many submissions share one fsync.
    paused: bool,
}

pub(crate) fn apply(groups: &mut HashMap<GroupId, GroupLog>, record: &Record<'_>) {
    match record {
        Record::Append { group, entries } => groups.entry(*group).or_default().append(entries),
        Record::Truncate { group, since } => groups.entry(*group).or_default().truncate(*since),
        Record::Purge { group, upto } => groups.entry(*group).or_default().purge(*upto),
        Record::Vote { group, vote } => groups.entry(*group).or_default().vote = Some(*vote),
        Record::Committed { group, committed } => {
            groups.entry(*group).or_default().committed = *committed
        }
        Record::DropGroup { group } => {
            groups.remove(group);
        }
        Record::Reset => groups.clear(),
    }
}

pub(crate) fn frame(record: &Record<'_>) -> Vec<u8> {
    // Encoding owned in-memory values into a Vec cannot fail.
    let payload = bincode::serialize(record).unwrap_or_default();
    let mut framed = Vec::with_capacity(payload.len() + 8);
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    framed.extend_from_slice(&payload);
    framed
}

struct Shared {
    /// Test hook: this many next writes fail with `ENOSPC` after writing half their bytes.
    fail_writes: std::sync::atomic::AtomicU32,
    dir: PathBuf,
    options: WalOptions,
    state: Mutex<State>,
    wake: Condvar,
    records: AtomicU64,
    fsyncs: AtomicU64,
    checkpoints: AtomicU64,
    disk_bytes: AtomicU64,
    segments: AtomicU64,
}

/// The shared write-ahead log of one node. Cheap to share: wrap it in an `Arc`.
pub struct Wal {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Wal {
    /// Opens (recovering) or creates the log in `dir`.
    pub fn open(dir: &Path, options: WalOptions) -> io::Result<Arc<Wal>> {
        fs::create_dir_all(dir)?;
        let mut segment_seqs = Vec::new();
        for dirent in fs::read_dir(dir)? {
            let path = dirent?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".wal.tmp") {
                // An unfinished checkpoint: the segments it would have replaced are still there.
                fs::remove_file(&path)?;
            } else if let Some(seq) = name
                .strip_suffix(".wal")
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            {
                segment_seqs.push(seq);
            }
        }
        segment_seqs.sort_unstable();

        let mut groups = HashMap::new();
        let mut segments = Vec::new();
        for (i, seq) in segment_seqs.iter().enumerate() {
            let path = segment_path(dir, *seq);
            let bytes = fs::read(&path)?;
            let good = replay(&bytes, &mut groups);
            if good < bytes.len() {
                if i + 1 < segment_seqs.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{} is corrupt at byte {good}", path.display()),
                    ));
                }
                tracing::warn!(
                    path = %path.display(),
                    kept = good,
                    dropped = bytes.len() - good,
                    "cutting a torn tail off the write-ahead log"
                );
                let file = OpenOptions::new().write(true).open(&path)?;
                file.set_len(good as u64)?;
                file.sync_all()?;
            }
            segments.push((*seq, good as u64));
        }
        let current = match segments.last() {
            Some((seq, _)) => OpenOptions::new()
                .append(true)
                .open(segment_path(dir, *seq))?,
            None => {
                let file = create_segment(dir, 1)?;
                segments.push((1, 0));
                file
            }
        };

        let shared = Arc::new(Shared {
            fail_writes: Default::default(),
            dir: dir.to_path_buf(),
            options,
            state: Mutex::new(State {
                groups,
                ..State::default()
            }),
            wake: Condvar::new(),
            records: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            disk_bytes: AtomicU64::new(segments.iter().map(|(_, len)| len).sum()),
            segments: AtomicU64::new(segments.len() as u64),
        });
        let writer = Writer {
            shared: shared.clone(),
            segments,
            current,
            outage: None,
        };
        let handle = std::thread::Builder::new()
            .name("quorum-wal".into())
            .spawn(move || writer.run())?;
        Ok(Arc::new(Wal {
            shared,
            writer: Mutex::new(Some(handle)),
        }))
    }

    fn submit(&self, record: Record<'_>, completion: Option<Completion>) -> Result<(), WalError> {
        let framed = frame(&record);
        let mut state = self.shared.state.lock();
        if state.closing {
            drop(state);
            if let Some(completion) = completion {
                completion.complete(&Err(WalError::Closed.to_string()));
            }
            return Err(WalError::Closed);
        }
        apply(&mut state.groups, &record);
        state.pending.push((framed, completion));
        self.shared.wake.notify_one();
        Ok(())
    }

    async fn submit_and_wait(&self, record: Record<'_>) -> Result<(), WalError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.submit(record, Some(Completion::Notify(sender)))?;
        match receiver.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(WalError::Io(e)),
            Err(_) => Err(WalError::Closed),
        }
    }

    /// Appends entries to a group's log; `completion` fires once they are on disk.
    pub fn append(
        &self,
        group: GroupId,
        entries: Vec<LogEntry>,
        completion: Completion,
    ) -> Result<(), WalError> {
        self.submit(
            Record::Append {
                group,
                entries: Cow::Owned(entries),
            },
            Some(completion),
        )
    }

    /// Deletes a group's entries from index `since` on.
    pub fn truncate(&self, group: GroupId, since: u64) -> Result<(), WalError> {
        self.submit(Record::Truncate { group, since }, None)
    }

    /// Deletes a group's entries up to and including `upto`.
    pub fn purge(&self, group: GroupId, upto: LogId) -> Result<(), WalError> {
        self.submit(Record::Purge { group, upto }, None)
    }

    /// Records a group's vote and returns once it is durable.
    pub async fn save_vote(&self, group: GroupId, vote: Vote) -> Result<(), WalError> {
        self.submit_and_wait(Record::Vote { group, vote }).await
    }

    /// Records how far a group's log is known committed (durable with the next batch).
    pub fn save_committed(&self, group: GroupId, committed: Option<LogId>) -> Result<(), WalError> {
        self.submit(Record::Committed { group, committed }, None)
    }

    /// Forgets a group entirely (its queue was deleted); durable once this returns.
    pub async fn drop_group(&self, group: GroupId) -> Result<(), WalError> {
        self.submit_and_wait(Record::DropGroup { group }).await
    }

    pub fn vote(&self, group: GroupId) -> Option<Vote> {
        self.shared.state.lock().groups.get(&group)?.vote()
    }

    pub fn committed(&self, group: GroupId) -> Option<LogId> {
        self.shared.state.lock().groups.get(&group)?.committed()
    }

    /// `(last purged, last present)` log ids of a group.
    pub fn log_state(&self, group: GroupId) -> (Option<LogId>, Option<LogId>) {
        let state = self.shared.state.lock();
        state
            .groups
            .get(&group)
            .map(GroupLog::log_state)
            .unwrap_or((None, None))
    }

    /// The group's entries whose index falls in `range`.
    pub fn entries(&self, group: GroupId, range: impl RangeBounds<u64>) -> Vec<LogEntry> {
        let state = self.shared.state.lock();
        match state.groups.get(&group) {
            Some(log) => log.entries(range),
            None => Vec::new(),
        }
    }

    /// Groups that have anything in the log.
    pub fn groups(&self) -> Vec<GroupId> {
        let mut groups: Vec<GroupId> = self.shared.state.lock().groups.keys().copied().collect();
        groups.sort_unstable();
        groups
    }

    pub fn stats(&self) -> WalStats {
        WalStats {
            records: self.shared.records.load(Ordering::Relaxed),
            fsyncs: self.shared.fsyncs.load(Ordering::Relaxed),
            checkpoints: self.shared.checkpoints.load(Ordering::Relaxed),
            disk_bytes: self.shared.disk_bytes.load(Ordering::Relaxed),
            segments: self.shared.segments.load(Ordering::Relaxed),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Flushes what was submitted, stops the writer and refuses further writes.
    pub fn close(&self) {
        self.shared.state.lock().closing = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
    }

    /// Makes the next `count` writes fail as on a full disk (half their bytes written, then
    /// `ENOSPC`): for tests of the outage path.
    #[doc(hidden)]
    pub fn fail_next_writes(&self, count: u32) {
        self.shared.fail_writes.store(count, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn set_paused(&self, paused: bool) {
        self.shared.state.lock().paused = paused;
        self.shared.wake.notify_all();
    }
}

impl LogBackend for Wal {
    fn append(
        &self,
        group: GroupId,
        entries: Vec<LogEntry>,
        completion: Completion,
    ) -> Result<(), WalError> {
        Wal::append(self, group, entries, completion)
    }

    fn truncate(&self, group: GroupId, since: u64) -> Result<(), WalError> {
        Wal::truncate(self, group, since)
    }

    fn purge(&self, group: GroupId, upto: LogId) -> Result<(), WalError> {
        Wal::purge(self, group, upto)
    }

    async fn save_vote(&self, group: GroupId, vote: Vote) -> Result<(), WalError> {
        Wal::save_vote(self, group, vote).await
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), WalError> {
        Wal::drop_group(self, group).await
    }

    fn save_committed(&self, group: GroupId, committed: Option<LogId>) -> Result<(), WalError> {
        Wal::save_committed(self, group, committed)
    }

    fn vote(&self, group: GroupId) -> Option<Vote> {
        Wal::vote(self, group)
    }

    fn committed(&self, group: GroupId) -> Option<LogId> {
        Wal::committed(self, group)
    }

    fn log_state(&self, group: GroupId) -> (Option<LogId>, Option<LogId>) {
        Wal::log_state(self, group)
    }

    fn entries(&self, group: GroupId, range: impl RangeBounds<u64>) -> Vec<LogEntry> {
        Wal::entries(self, group, range)
    }

    fn close(&self) {
        Wal::close(self)
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.wal"))
}

fn create_segment(dir: &Path, seq: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(segment_path(dir, seq))?;
    sync_dir(dir)?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Applies the complete records of one segment; returns how many bytes were good.
pub(crate) fn replay(bytes: &[u8], groups: &mut HashMap<GroupId, GroupLog>) -> usize {
    let mut offset = 0;
    while bytes.len() - offset >= 8 {
        let len = u32::from_le_bytes([
            bytes[offset],
            bytes[offset + 1],
            bytes[offset + 2],
            bytes[offset + 3],
        ]) as usize;
        let crc = u32::from_le_bytes([
            bytes[offset + 4],
            bytes[offset + 5],
            bytes[offset + 6],
            bytes[offset + 7],
        ]);
        let Some(payload) = bytes.get(offset + 8..offset + 8 + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Ok(record) = bincode::deserialize::<Record<'_>>(payload) else {
            break;
        };
        apply(groups, &record);
        offset += 8 + len;
    }
    offset
}

struct Writer {
    shared: Arc<Shared>,
    /// (seq, length) of every segment on disk, oldest first; the last is `current`. A length
    /// is what was written and fsync'd: it grows only when a batch is durable.
    segments: Vec<(u64, u64)>,
    current: File,
    /// Set while writes fail: since when, and the pause before the next attempt.
    outage: Option<(std::time::Instant, std::time::Duration)>,
}

impl Writer {
    fn run(mut self) {
        loop {
            let (batch, checkpoint) = {
                let mut state = self.shared.state.lock();
                while (state.pending.is_empty() || state.paused) && !state.closing {
                    self.shared.wake.wait(&mut state);
                }
                if state.pending.is_empty() {
                    return;
                }
                let batch = std::mem::take(&mut state.pending);
                // Taken under the same lock as the batch, the copy of the groups includes
                // exactly the submissions in the batch, so the checkpoint replaces them.
                let checkpoint = self.wants_checkpoint(&state).then(|| state.groups.clone());
                (batch, checkpoint)
            };
            let count = batch.len() as u64;
            let result = match (self.outage.is_some(), checkpoint) {
                (true, _) => self.repair().and_then(|()| self.write_batch(&batch)),
                (false, Some(groups)) => self.checkpoint(groups),
                (false, None) => self.write_batch(&batch),
            };
            self.shared.disk_bytes.store(
                self.segments.iter().map(|(_, len)| len).sum(),
                Ordering::Relaxed,
            );
            self.shared
                .segments
                .store(self.segments.len() as u64, Ordering::Relaxed);
            if let Err(e) = result {
                if !self.wait_out_failure(e, batch) {
                    return;
                }
                continue;
            }
            if let Some((since, _)) = self.outage.take() {
                tracing::warn!(
                    after_ms = since.elapsed().as_millis() as u64,
                    "write-ahead log writes again"
                );
            }
            self.shared.records.fetch_add(count, Ordering::Relaxed);
            for (_, completion) in batch {
                if let Some(completion) = completion {
                    completion.complete(&Ok(()));
                }
            }
        }
    }

    /// A write failed: the batch goes back ahead of what was submitted since (nothing of it
    /// is reported durable), and the writer pauses before trying again. False when the log is
    /// closing meanwhile: every waiting completion then fails, and the writer ends.
    fn wait_out_failure(
        &mut self,
        error: io::Error,
        mut batch: Vec<(Vec<u8>, Option<Completion>)>,
    ) -> bool {
        let pause = match self.outage {
            None => {
                tracing::error!(error = %error, "write-ahead log write failed; keeping the batch and trying again until the disk takes it");
                OUTAGE_RETRY_MIN
            }
            Some((_, pause)) => {
                tracing::debug!(error = %error, "write-ahead log write failed again");
                (pause * 2).min(OUTAGE_RETRY_MAX)
            }
        };
        let since = self.outage.map_or_else(std::time::Instant::now, |(s, _)| s);
        self.outage = Some((since, pause));
        let mut state = self.shared.state.lock();
        batch.append(&mut state.pending);
        state.pending = batch;
        // The pause is kept even as submissions wake the condvar: a busy node must not retry
        // a full disk on every append.
        let deadline = std::time::Instant::now() + pause;
        while !state.closing
            && !self
                .shared
                .wake
                .wait_until(&mut state, deadline)
                .timed_out()
        {}
        if !state.closing {
            return true;
        }
        let waiting = std::mem::take(&mut state.pending);
        drop(state);
        let result = Err(format!(
            "write-ahead log closed while writes failed: {error}"
        ));
        for (_, completion) in waiting {
            if let Some(completion) = completion {
                completion.complete(&result);
            }
        }
        false
    }

    /// Cuts the current segment back to its durable length (what a failed write left after it
    /// goes) and opens it again, so the next write continues from there.
    fn repair(&mut self) -> io::Result<()> {
        let Some(&(seq, durable)) = self.segments.last() else {
            return Ok(());
        };
        let path = segment_path(&self.shared.dir, seq);
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(durable)?;
        file.sync_all()?;
        drop(file);
        // A checkpoint's rename may be what failed to sync.
        sync_dir(&self.shared.dir)?;
        self.current = OpenOptions::new().append(true).open(&path)?;
        Ok(())
    }

    fn current_len(&self) -> u64 {
        self.segments.last().map(|(_, len)| *len).unwrap_or(0)
    }

    /// Checkpoint when the current segment is full and the files hold mostly dead records.
    fn wants_checkpoint(&self, state: &State) -> bool {
        if self.current_len() < self.shared.options.segment_bytes {
            return false;
        }
        let disk: u64 = self.segments.iter().map(|(_, len)| len).sum();
        let live: u64 = state
            .groups
            .values()
            .map(|g| g.live_bytes + 64)
            .sum::<u64>();
        disk >= self.shared.options.compact_min_bytes && disk > 2 * live
    }

    fn write_batch(&mut self, batch: &[(Vec<u8>, Option<Completion>)]) -> io::Result<()> {
        if self.current_len() >= self.shared.options.segment_bytes {
            let seq = self.segments.last().map(|(seq, _)| seq + 1).unwrap_or(1);
            self.current = create_segment(&self.shared.dir, seq)?;
            self.segments.push((seq, 0));
        }
        let mut buffer = Vec::with_capacity(batch.iter().map(|(f, _)| f.len()).sum());
        for (framed, _) in batch {
            buffer.extend_from_slice(framed);
        }
        let injected =
            self.shared
                .fail_writes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if injected.is_ok() {
            self.current.write_all(&buffer[..buffer.len() / 2])?;
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.current.write_all(&buffer)?;
        self.current.sync_data()?;
        self.shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        if let Some((_, len)) = self.segments.last_mut() {
            *len += buffer.len() as u64;
        }
        Ok(())
    }

    /// Writes the live state as a new segment and deletes every older one.
    fn checkpoint(&mut self, groups: HashMap<GroupId, GroupLog>) -> io::Result<()> {
        let dir = self.shared.dir.clone();
        let seq = self.segments.last().map(|(seq, _)| seq + 1).unwrap_or(1);
        let final_path = segment_path(&dir, seq);
        let tmp_path = final_path.with_extension("wal.tmp");
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp_path)?;
        let mut buffer = frame(&Record::Reset);
        let mut ids: Vec<&GroupId> = groups.keys().collect();
        ids.sort_unstable();
        for group in ids {
            let log = &groups[group];
            let group = *group;
            if let Some(vote) = log.vote {
                buffer.extend(frame(&Record::Vote { group, vote }));
            }
            if let Some(upto) = log.last_purged {
                buffer.extend(frame(&Record::Purge { group, upto }));
            }
            buffer.extend(frame(&Record::Committed {
                group,
                committed: log.committed,
            }));
            let entries: Vec<LogEntry> = log.entries.values().map(|(e, _)| e.clone()).collect();
            for chunk in entries.chunks(1024) {
                buffer.extend(frame(&Record::Append {
                    group,
                    entries: Cow::Borrowed(chunk),
                }));
            }
        }
        let written = file.write_all(&buffer).and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = written {
            // Nothing replaced yet: the older segments still hold everything.
            let _ = fs::remove_file(&tmp_path);
            return Err(e);
        }
        // Opened before the rename (the handle follows the file), so that once the rename is
        // done nothing can fail before the checkpoint is the current segment.
        let current = match OpenOptions::new().append(true).open(&tmp_path) {
            Ok(file) => file,
            Err(e) => {
                let _ = fs::remove_file(&tmp_path);
                return Err(e);
            }
        };
        fs::rename(&tmp_path, &final_path)?;
        // From here the checkpoint is the log (it begins with `Reset`, so older segments left
        // behind are superseded on replay): later writes must go to it, whatever fails next.
        let older = std::mem::replace(&mut self.segments, vec![(seq, buffer.len() as u64)]);
        self.current = current;
        // Should this fail, the batch is written again after `repair`, which syncs the
        // directory first: nothing is reported durable before the rename is.
        sync_dir(&dir)?;
        self.shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.shared.checkpoints.fetch_add(1, Ordering::Relaxed);
        for (old, _) in older {
            if let Err(e) = fs::remove_file(segment_path(&dir, old)) {
                tracing::warn!(error = %e, segment = old, "could not remove a segment a checkpoint replaced");
            }
        }
        if let Err(e) = sync_dir(&dir) {
            tracing::warn!(error = %e, "could not sync the log directory after removing segments");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Command;
    use crate::types::Proposal;
    use openraft::EntryPayload;

    fn entry(term: u64, index: u64, body: &str) -> LogEntry {
        LogEntry {
            log_id: openraft::testing::log_id::<QueueRaft>(term, 1, index),
            payload: EntryPayload::Normal(Proposal {
                now_ms: 0,
                command: Command::Enqueue {
                    publisher: None,
                    body: bytes::Bytes::copy_from_slice(body.as_bytes()),
                    ttl_ms: None,
                },
            }),
        }
    }

    async fn append(wal: &Wal, group: GroupId, entries: Vec<LogEntry>) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        wal.append(group, entries, Completion::Notify(sender))
            .expect("submitted");
        receiver.await.expect("completed").expect("durable");
    }

    fn indexes(wal: &Wal, group: GroupId) -> Vec<u64> {
        wal.entries(group, ..)
            .iter()
            .map(|e| e.log_id.index)
            .collect()
    }

    #[tokio::test]
    async fn groups_share_the_log_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let wal = Wal::open(dir.path(), WalOptions::default()).expect("open");
            append(&wal, 1, vec![entry(1, 1, "a"), entry(1, 2, "b")]).await;
            append(&wal, 2, vec![entry(1, 1, "x")]).await;
            append(&wal, 1, vec![entry(1, 3, "c")]).await;
            wal.truncate(1, 3).expect("truncate");
            append(&wal, 1, vec![entry(2, 3, "c2")]).await;
            wal.save_vote(2, Vote::new(5, 3)).await.expect("vote");
            wal.purge(1, openraft::testing::log_id::<QueueRaft>(1, 1, 1))
                .expect("purge");
            wal.close();
        }
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("reopen");
        assert_eq!(wal.groups(), vec![1, 2]);
        assert_eq!(indexes(&wal, 1), vec![2, 3]);
        assert_eq!(wal.entries(1, 3..)[0].log_id.leader_id.term, 2);
        assert_eq!(wal.vote(2), Some(Vote::new(5, 3)));
        let (purged, last) = wal.log_state(1);
        assert_eq!(purged.map(|id| id.index), Some(1));
        assert_eq!(last.map(|id| id.index), Some(3));
        assert_eq!(wal.log_state(2).1.map(|id| id.index), Some(1));
    }

    #[tokio::test]
    async fn one_fsync_covers_every_group_in_a_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("open");
        wal.set_paused(true);
        let mut waiting = Vec::new();
        for group in 0..50u64 {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            wal.append(group, vec![entry(1, 1, "m")], Completion::Notify(sender))
                .expect("submitted");
            waiting.push(receiver);
        }
        // Appends are readable before they are flushed (the leader replicates them meanwhile).
        assert_eq!(indexes(&wal, 49), vec![1]);
        wal.set_paused(false);
        for receiver in waiting {
            receiver.await.expect("completed").expect("durable");
        }
        let stats = wal.stats();
        assert_eq!(stats.records, 50);
        assert_eq!(stats.fsyncs, 1);
    }

    /// A full disk is an outage: appends made meanwhile are not reported durable until a
    /// write succeeds again, nothing is refused, and the log reads back whole and uncorrupted
    /// (the half-written batches were cut off before the retry).
    #[tokio::test]
    async fn failed_writes_are_retried_until_the_disk_takes_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let wal = Wal::open(dir.path(), WalOptions::default()).expect("open");
            append(&wal, 5, vec![entry(1, 1, "a")]).await;
            wal.fail_next_writes(3);
            let (sender, mut receiver) = tokio::sync::oneshot::channel();
            wal.append(5, vec![entry(1, 2, "b")], Completion::Notify(sender))
                .expect("accepted during the outage");
            // Three failures: 50 + 100 + 200 ms of pauses before the write that succeeds.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            assert!(
                receiver.try_recv().is_err(),
                "reported durable during the outage"
            );
            append(&wal, 5, vec![entry(1, 3, "c")]).await;
            receiver
                .await
                .expect("completed")
                .expect("durable once written");
            assert_eq!(wal.shared.fail_writes.load(Ordering::Relaxed), 0);
            wal.close();
        }
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("reopen");
        assert_eq!(indexes(&wal, 5), vec![1, 2, 3]);
    }

    /// Closing during an outage fails what waits (never hangs, never reports it durable).
    #[tokio::test]
    async fn closing_during_an_outage_fails_what_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("open");
        wal.fail_next_writes(u32::MAX);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        wal.append(5, vec![entry(1, 1, "a")], Completion::Notify(sender))
            .expect("accepted");
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
        wal.close();
        assert!(receiver.await.expect("completed").is_err());
        drop(wal);
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("reopen");
        assert!(indexes(&wal, 5).is_empty());
    }

    #[tokio::test]
    async fn torn_tail_is_cut_off_on_recovery() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let wal = Wal::open(dir.path(), WalOptions::default()).expect("open");
            append(&wal, 7, vec![entry(1, 1, "a"), entry(1, 2, "b")]).await;
            append(&wal, 7, vec![entry(1, 3, "c")]).await;
            wal.close();
        }
        let path = segment_path(dir.path(), 1);
        let full = fs::read(&path).expect("read");
        // Cut the last record in half, as a crash mid-write would.
        fs::write(&path, &full[..full.len() - 5]).expect("write");
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("reopen");
        assert_eq!(indexes(&wal, 7), vec![1, 2]);
        append(&wal, 7, vec![entry(1, 3, "c")]).await;
        wal.close();
        let wal = Wal::open(dir.path(), WalOptions::default()).expect("reopen again");
        assert_eq!(indexes(&wal, 7), vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn checkpoints_keep_the_files_bounded_by_live_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = WalOptions {
            segment_bytes: 4 * 1024,
            compact_min_bytes: 8 * 1024,
        };
        let body = "x".repeat(200);
        {
            let wal = Wal::open(dir.path(), options.clone()).expect("open");
            for index in 1..=300u64 {
                // Both groups' appends go out together and share the flush.
                tokio::join!(
                    append(&wal, 3, vec![entry(1, index, &body)]),
                    append(&wal, 4, vec![entry(1, index, &body)])
                );
                // As snapshots would: group 3 keeps a window of 10 entries, group 4 of 40.
                if index > 10 {
                    wal.purge(3, openraft::testing::log_id::<QueueRaft>(1, 1, index - 10))
                        .expect("purge");
                }
                if index > 40 {
                    wal.purge(4, openraft::testing::log_id::<QueueRaft>(1, 1, index - 40))
                        .expect("purge");
                }
                let stats = wal.stats();
                assert!(
                    stats.disk_bytes < 64 * 1024,
                    "log grew to {} bytes at {index}",
                    stats.disk_bytes
                );
            }
            assert!(wal.stats().checkpoints > 5);
            wal.close();
        }
        let wal = Wal::open(dir.path(), options).expect("reopen");
        assert_eq!(indexes(&wal, 3), (291..=300).collect::<Vec<_>>());
        assert_eq!(indexes(&wal, 4), (261..=300).collect::<Vec<_>>());
    }
}
