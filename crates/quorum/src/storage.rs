//! openraft storage for one group: its log lives in the node's shared [`Wal`], its state
//! machine is a [`GroupMachine`] — the queue [`QueueState`] for a queue group, the application's
//! metadata machine for the metadata group — with snapshots in a file of the group's own.
//!
//! A snapshot is written (temporary file, fsync, rename) before openraft purges the log it
//! covers, so after a crash the state machine restarts from the snapshot and the log replays
//! from there up to the saved commit mark. Committed commands' effects go out on a channel; the
//! owner of the group acts on them when it leads.

use std::any::Any;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, IOFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, RaftSnapshotBuilder};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

use crate::backend::{LogBackend, SnapshotDir, SnapshotStore};
use crate::machine::{Command, Effect, QueueConfig, QueueState, Reply};
use crate::types::{
    GroupId, LogEntry, LogId, QueueRaft, Snapshot, SnapshotMeta, StoredMembership, Vote,
};
use crate::wal::{Completion, Wal, WalError};

/// A group's Raft member: every group's state machine is a `GroupStateMachine`, so queue
/// groups and the metadata group share this one type (and one registry).
pub type Raft = openraft::Raft<QueueRaft, GroupStateMachine>;

fn wal_error(e: WalError) -> io::Error {
    io::Error::other(e.to_string())
}

/// One group's view of the node's log (the shared [`Wal`] unless told otherwise); cheap to
/// clone (it is also the log reader).
pub struct GroupLogStore<L: LogBackend = Wal> {
    wal: Arc<L>,
    group: GroupId,
}

impl<L: LogBackend> Clone for GroupLogStore<L> {
    fn clone(&self) -> Self {
        Self {
            wal: self.wal.clone(),
            group: self.group,
        }
    }
}

impl<L: LogBackend> GroupLogStore<L> {
    pub fn new(wal: Arc<L>, group: GroupId) -> Self {
        Self { wal, group }
    }
}

impl<L: LogBackend> RaftLogReader<QueueRaft> for GroupLogStore<L> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, io::Error> {
        Ok(self.wal.entries(self.group, range))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.wal.vote(self.group))
    }
}

impl<L: LogBackend> RaftLogStorage<QueueRaft> for GroupLogStore<L> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<QueueRaft>, io::Error> {
        let (last_purged_log_id, last_log_id) = self.wal.log_state(self.group);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.wal
            .save_vote(self.group, *vote)
            .await
            .map_err(wal_error)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.wal
            .save_committed(self.group, committed)
            .map_err(wal_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.wal.committed(self.group))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<QueueRaft>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = LogEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.wal
            .append(
                self.group,
                entries.into_iter().collect(),
                Completion::Flushed(callback),
            )
            .map_err(wal_error)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let since = last_log_id.map_or(0, |log_id| log_id.index + 1);
        self.wal.truncate(self.group, since).map_err(wal_error)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.wal.purge(self.group, log_id).map_err(wal_error)
    }
}

/// Effects of one applied log entry, in log order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub log_id: LogId,
    pub effects: Vec<Effect>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// What a group replicates: commands applied in log order on every member, and the whole
/// state as snapshot bytes (written before the log it covers is purged, sent whole to a member
/// that fell behind the purge).
pub trait GroupMachine: Any + Send + 'static {
    /// Applies one committed command (`log_id` is its log position, `now_ms` the proposer's
    /// clock); returns the proposer's answer and the effects the leader acts on.
    fn apply(&mut self, log_id: LogId, now_ms: u64, command: Command) -> (Reply, Vec<Effect>);
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
    /// The machine itself, for its owner to read it as its own type.
    fn as_any(&self) -> &dyn Any;
}

impl GroupMachine for QueueState {
    fn apply(&mut self, _log_id: LogId, now_ms: u64, command: Command) -> (Reply, Vec<Effect>) {
        QueueState::apply(self, now_ms, command)
    }

    fn snapshot(&self) -> Vec<u8> {
        self.to_snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        *self = QueueState::from_snapshot(snapshot).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct MachineInner {
    machine: Box<dyn GroupMachine>,
    /// The last entry whose command is reflected in `machine` (applied, or covered by the
    /// snapshot it was restored from).
    last_applied: Option<LogId>,
    /// The membership as of `last_applied`.
    membership: StoredMembership,
    /// The newest snapshot written (what `get_current_snapshot` answers).
    current: Option<SnapshotFile>,
}

/// The replicated state of one group, shared between openraft and its owner.
///
/// What openraft 0.10 requires of it, and how it is met:
///
/// - `applied_state` reports exactly what `machine` reflects: `last_applied` and the
///   membership move together with every applied entry and every installed snapshot, under
///   one lock, so a reader never sees a state and a position that do not belong together.
/// - `install_snapshot` replaces the whole state with the snapshot's and takes its position
///   and membership from the snapshot's meta; the snapshot is written before this returns and
///   is what `get_current_snapshot` answers from then on. A snapshot that is not newer than
///   what the machine already reflects would move the machine back while openraft counts the
///   entries in between as applied — they would never be applied again and this member would
///   diverge — so it is refused with the state kept (openraft itself never sends one; this is
///   the guarantee, not a path that is expected to run).
/// - An entry at or before `last_applied` is already reflected in the state and is not applied
///   again, for the same reason.
/// - A snapshot is written (file, fsync, rename) before `build_snapshot` returns, so it is
///   durable before openraft purges the log entries it covers; a write never replaces a newer
///   snapshot with an older one (a build and an install can overlap).
/// - A snapshot write that fails (a full disk, a failing one) is tried again until it succeeds
///   (`persist_until_written`), as the write-ahead log's writes are: openraft stops a group for
///   good on a storage error, which would leave the node's member dead until the node
///   restarts (a metadata group with one member short for the rest of its life). The member's
///   state machine waits meanwhile, as a node whose disk is full stalls, and goes on once
///   space is back.
#[derive(Clone)]
pub struct GroupStateMachine {
    inner: Arc<Mutex<MachineInner>>,
    snapshots: Arc<dyn SnapshotStore>,
    group: GroupId,
    /// Serialises snapshot writes and remembers the newest written, which is never replaced by
    /// an older one.
    persisted: Arc<Mutex<Option<LogId>>>,
    effects: Option<UnboundedSender<Applied>>,
    /// Told after every batch of applied entries and every installed snapshot (see
    /// [`GroupStateMachine::on_applied`]).
    applied_hook: Arc<OnceLock<AppliedHook>>,
}

/// What the owner of a group runs when its state moved (see
/// [`GroupStateMachine::on_applied`]).
pub type AppliedHook = Box<dyn Fn() + Send + Sync>;

impl GroupStateMachine {
    /// Opens a queue group's state machine from its last snapshot in `snapshot_dir`, or empty
    /// with `config`.
    pub fn open(
        snapshot_dir: &Path,
        group: GroupId,
        config: QueueConfig,
        effects: Option<UnboundedSender<Applied>>,
    ) -> io::Result<Self> {
        Self::open_queue(
            Arc::new(SnapshotDir::open(snapshot_dir)?),
            group,
            config,
            effects,
        )
    }

    /// Opens a queue group's state machine from its last snapshot in `snapshots`, or empty
    /// with `config`.
    pub fn open_queue(
        snapshots: Arc<dyn SnapshotStore>,
        group: GroupId,
        config: QueueConfig,
        effects: Option<UnboundedSender<Applied>>,
    ) -> io::Result<Self> {
        Self::open_machine(snapshots, group, Box::new(QueueState::new(config)), effects)
    }

    /// Opens the group's state machine from its last snapshot in `snapshots` (restored into
    /// `empty`), or as `empty` when it has none.
    pub fn open_machine(
        snapshots: Arc<dyn SnapshotStore>,
        group: GroupId,
        empty: Box<dyn GroupMachine>,
        effects: Option<UnboundedSender<Applied>>,
    ) -> io::Result<Self> {
        let mut inner = MachineInner {
            machine: empty,
            last_applied: None,
            membership: StoredMembership::default(),
            current: None,
        };
        if let Some(bytes) = snapshots.load(group)? {
            let file: SnapshotFile = bincode::deserialize(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            inner
                .machine
                .restore(&file.data)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            inner.last_applied = file.meta.last_log_id;
            inner.membership = file.meta.last_membership.clone();
            inner.current = Some(file);
        }
        let persisted = inner.last_applied;
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
            snapshots,
            group,
            persisted: Arc::new(Mutex::new(persisted)),
            effects,
            applied_hook: Arc::default(),
        })
    }

    /// Reads the queue state (every replica has one; only the leader's is current).
    ///
    /// # Panics
    ///
    /// On the machine of a group that is not a queue (the metadata group's).
    /// Runs `hook` after every batch of entries applied from now on (committed commands, on
    /// whichever member) and every snapshot installed: the moments the state's counts can
    /// move. The owner marks what readers show of the state from there, instead of those
    /// readers polling every idle group. Set once; a second hook is ignored.
    pub fn on_applied(&self, hook: AppliedHook) {
        let _ = self.applied_hook.set(hook);
    }

    fn applied(&self) {
        if let Some(hook) = self.applied_hook.get() {
            hook();
        }
    }

    pub fn with_queue<T>(&self, read: impl FnOnce(&QueueState) -> T) -> T {
        let inner = self.inner.lock();
        let queue = inner
            .machine
            .as_any()
            .downcast_ref::<QueueState>()
            .expect("a queue group's machine is a QueueState");
        read(queue)
    }

    pub fn last_applied(&self) -> Option<LogId> {
        self.inner.lock().last_applied
    }

    /// The membership as of the last applied entry.
    pub fn membership(&self) -> StoredMembership {
        self.inner.lock().membership.clone()
    }

    /// Removes the group's snapshot file (the queue was deleted).
    pub fn delete_snapshot(&self) -> io::Result<()> {
        self.snapshots.remove(self.group)
    }

    /// Writes the snapshot file unless a newer one is already written, trying again after
    /// [`SNAPSHOT_RETRY_PAUSE`] for as long as the write fails; says whether it wrote. Err only
    /// for a snapshot that does not encode, which no retry mends.
    async fn persist_until_written(&self, file: &SnapshotFile) -> io::Result<bool> {
        let bytes =
            bincode::serialize(file).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut failing_since: Option<std::time::Instant> = None;
        loop {
            match self.persist(file.meta.last_log_id, &bytes) {
                Ok(written) => {
                    if let Some(since) = failing_since {
                        tracing::warn!(
                            group = self.group,
                            failing_ms = since.elapsed().as_millis() as u64,
                            "group snapshot written again"
                        );
                    }
                    return Ok(written);
                }
                Err(error) => {
                    if failing_since.is_none() {
                        tracing::error!(
                            group = self.group,
                            error = %error,
                            "writing the group's snapshot failed; trying again until the disk takes it"
                        );
                        failing_since = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(SNAPSHOT_RETRY_PAUSE).await;
                }
            }
        }
    }

    /// One attempt at writing the encoded snapshot of `last_log_id`, unless a newer one is
    /// already written; whether it wrote.
    fn persist(&self, last_log_id: Option<LogId>, bytes: &[u8]) -> io::Result<bool> {
        let mut persisted = self.persisted.lock();
        if persisted.is_some() && *persisted >= last_log_id {
            return Ok(false);
        }
        self.snapshots.store(self.group, bytes)?;
        *persisted = last_log_id;
        Ok(true)
    }
}

/// The pause between attempts at a snapshot write that failed.
const SNAPSHOT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether the state at `applied` already covers the log up to `upto` (positions compared: the
/// committed log is the same on every member).
fn is_reflected(upto: Option<LogId>, applied: Option<LogId>) -> bool {
    match (upto, applied) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(upto), Some(applied)) => upto.index <= applied.index,
    }
}

fn to_snapshot(file: &SnapshotFile) -> Snapshot {
    Snapshot {
        meta: file.meta.clone(),
        snapshot: file.data.clone(),
    }
}

impl RaftSnapshotBuilder<QueueRaft> for GroupStateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let file = {
            let inner = self.inner.lock();
            SnapshotFile {
                meta: SnapshotMeta {
                    last_log_id: inner.last_applied,
                    last_membership: inner.membership.clone(),
                },
                data: inner.machine.snapshot(),
            }
        };
        // Durable before openraft purges the log entries it covers.
        let written = self.persist_until_written(&file).await?;
        tracing::debug!(group = self.group, meta = %file.meta, written, "snapshot built");
        let snapshot = to_snapshot(&file);
        if written {
            let mut inner = self.inner.lock();
            // An install that finished meanwhile wrote a newer one and made it current.
            if inner.current.as_ref().map(|c| c.meta.last_log_id) < Some(file.meta.last_log_id) {
                inner.current = Some(file);
            }
        }
        Ok(snapshot)
    }
}

impl RaftStateMachine<QueueRaft> for GroupStateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<QueueRaft>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            let reply = {
                let mut inner = self.inner.lock();
                if is_reflected(Some(entry.log_id), inner.last_applied) {
                    tracing::warn!(
                        group = self.group,
                        log_id = %entry.log_id,
                        last_applied = ?inner.last_applied,
                        "an entry the state already reflects was handed over again; not applied twice"
                    );
                    Reply::Ok
                } else {
                    inner.last_applied = Some(entry.log_id);
                    match entry.payload {
                        EntryPayload::Blank => Reply::Ok,
                        EntryPayload::Normal(proposal) => {
                            let (reply, effects) = inner.machine.apply(
                                entry.log_id,
                                proposal.now_ms,
                                proposal.command,
                            );
                            if let Some(sender) = &self.effects {
                                if !effects.is_empty() {
                                    // The owner may be gone (shutting down); effects are then
                                    // moot.
                                    let _ = sender.send(Applied {
                                        log_id: entry.log_id,
                                        effects,
                                    });
                                }
                            }
                            reply
                        }
                        EntryPayload::Membership(membership) => {
                            inner.membership =
                                StoredMembership::new(Some(entry.log_id), membership);
                            Reply::Ok
                        }
                    }
                }
            };
            // Before the answer: whoever the proposer tells finds the state marked moved.
            self.applied();
            // Answered right after applying, as openraft asks (the proposer waits on it).
            if let Some(responder) = responder {
                responder.send(reply);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        {
            let mut inner = self.inner.lock();
            if is_reflected(meta.last_log_id, inner.last_applied) {
                tracing::warn!(
                    group = self.group,
                    snapshot = ?meta.last_log_id,
                    last_applied = ?inner.last_applied,
                    "refused a snapshot older than the applied state"
                );
                return Ok(());
            }
            // Restored before it is written: a snapshot that does not decode is refused, not
            // kept.
            inner
                .machine
                .restore(&snapshot)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
        }
        self.applied();
        let file = SnapshotFile {
            meta: meta.clone(),
            data: snapshot,
        };
        self.persist_until_written(&file).await?;
        self.inner.lock().current = Some(file);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self.inner.lock().current.as_ref().map(to_snapshot))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures_util::stream;

    use super::*;
    use crate::memlog::MemDisk;
    use crate::types::Proposal;

    fn enqueue(index: u64) -> EntryResponder<QueueRaft> {
        let entry = LogEntry {
            log_id: openraft::testing::log_id::<QueueRaft>(1, 1, index),
            payload: EntryPayload::Normal(Proposal {
                now_ms: 0,
                command: Command::Enqueue {
                    publisher: None,
                    body: Bytes::from(format!("message {index}")),
                    ttl_ms: None,
                },
            }),
        };
        (entry, None)
    }

    async fn apply(machine: &mut GroupStateMachine, indexes: impl IntoIterator<Item = u64>) {
        let entries: Vec<_> = indexes.into_iter().map(|i| Ok(enqueue(i))).collect();
        machine.apply(stream::iter(entries)).await.expect("applied");
    }

    fn queue(disk: &Arc<MemDisk>) -> GroupStateMachine {
        GroupStateMachine::open_queue(disk.clone(), 9, QueueConfig::default(), None)
            .expect("opened")
    }

    fn ready(machine: &GroupStateMachine) -> usize {
        machine.with_queue(|q| q.ready_count())
    }

    /// Snapshots kept in memory, the first `failures` writes failing as on a full disk.
    struct FullForAWhile {
        failures: Mutex<u32>,
        stored: Mutex<Option<Vec<u8>>>,
    }

    impl SnapshotStore for FullForAWhile {
        fn load(&self, _group: GroupId) -> io::Result<Option<Vec<u8>>> {
            Ok(self.stored.lock().clone())
        }

        fn store(&self, _group: GroupId, bytes: &[u8]) -> io::Result<()> {
            let mut failures = self.failures.lock();
            if *failures > 0 {
                *failures -= 1;
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            *self.stored.lock() = Some(bytes.to_vec());
            Ok(())
        }

        fn remove(&self, _group: GroupId) -> io::Result<()> {
            *self.stored.lock() = None;
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_snapshot_write_on_a_full_disk_waits_for_space_instead_of_failing() {
        let disk = Arc::new(FullForAWhile {
            failures: Mutex::new(2),
            stored: Mutex::new(None),
        });
        let mut machine =
            GroupStateMachine::open_queue(disk.clone(), 9, QueueConfig::default(), None)
                .expect("opened");
        apply(&mut machine, 1..=3).await;
        // An error would stop the group for good (openraft); the build waits instead.
        let built = machine
            .build_snapshot()
            .await
            .expect("built once the disk took it");
        assert_eq!(built.meta.last_log_id.map(|l| l.index), Some(3));
        assert_eq!(
            *disk.failures.lock(),
            0,
            "every failed write was tried again"
        );
        let reopened = GroupStateMachine::open_queue(disk, 9, QueueConfig::default(), None)
            .expect("reopened from the snapshot written");
        assert_eq!(ready(&reopened), 3);
    }

    #[tokio::test]
    async fn an_installed_snapshot_replaces_the_state_and_an_older_one_is_refused() {
        let mut leader = queue(&MemDisk::new());
        apply(&mut leader, 1..=3).await;
        let newer = leader.build_snapshot().await.expect("built");
        assert_eq!(newer.meta.last_log_id.map(|id| id.index), Some(3));

        let mut older_source = queue(&MemDisk::new());
        apply(&mut older_source, [1]).await;
        let older = older_source.build_snapshot().await.expect("built");

        let disk = MemDisk::new();
        let mut follower = queue(&disk);
        apply(&mut follower, [1]).await;
        follower
            .install_snapshot(&newer.meta, newer.snapshot.clone())
            .await
            .expect("installed");
        assert_eq!(follower.last_applied(), newer.meta.last_log_id);
        assert_eq!(ready(&follower), 3);
        follower.with_queue(|f| leader.with_queue(|l| assert_eq!(f, l)));
        let current = follower.get_current_snapshot().await.expect("read");
        assert_eq!(current.map(|s| s.meta), Some(newer.meta.clone()));

        // Moving back to index 1 would leave entries 2 and 3 applied nowhere.
        follower
            .install_snapshot(&older.meta, older.snapshot.clone())
            .await
            .expect("refused quietly");
        assert_eq!(follower.last_applied(), newer.meta.last_log_id);
        assert_eq!(ready(&follower), 3);

        // An entry the state already reflects is not applied twice; the next one is.
        apply(&mut follower, [3, 4]).await;
        assert_eq!(ready(&follower), 4);
        assert_eq!(follower.last_applied().map(|id| id.index), Some(4));

        // A restart comes back from the installed snapshot.
        let reopened = queue(&disk);
        assert_eq!(reopened.last_applied(), newer.meta.last_log_id);
        assert_eq!(ready(&reopened), 3);
    }

    #[tokio::test]
    async fn a_build_never_replaces_a_newer_snapshot() {
        let disk = MemDisk::new();
        let mut machine = queue(&disk);
        apply(&mut machine, 1..=2).await;
        let mut builder = machine.get_snapshot_builder().await;
        let first = builder.build_snapshot().await.expect("built");
        apply(&mut machine, [3]).await;
        let second = machine.build_snapshot().await.expect("built");
        assert_eq!(second.meta.last_log_id.map(|id| id.index), Some(3));
        // A build answered late with an older state (as a build racing an install can) keeps
        // the newer snapshot both on disk and as the current one.
        let file = SnapshotFile {
            meta: first.meta.clone(),
            data: first.snapshot.clone(),
        };
        assert!(!machine.persist_until_written(&file).await.expect("checked"));
        let current = machine.get_current_snapshot().await.expect("read");
        assert_eq!(current.map(|s| s.meta), Some(second.meta));
        assert_eq!(queue(&disk).last_applied().map(|id| id.index), Some(3));
    }
}
