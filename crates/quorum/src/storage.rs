//! openraft storage for one group: its log lives in the node's shared [`Wal`], its state
//! machine is a [`GroupMachine`] — the queue [`QueueState`] for a queue group, the application's
//! metadata machine for the metadata group — with snapshots in a file of the group's own.
//!
//! A snapshot is written (temporary file, fsync, rename) before openraft purges the log it
//! covers, so after a crash the state machine restarts from the snapshot and the log replays
//! from there up to the saved commit mark. Committed commands' effects go out on a channel; the
//! owner of the group acts on them when it leads.

use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    StorageIOError,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

use crate::backend::{LogBackend, SnapshotDir, SnapshotStore};
use crate::machine::{Command, Effect, QueueConfig, QueueState, Reply};
use crate::types::{
    GroupId, LogEntry, LogId, QueueRaft, SnapshotMeta, StorageError, StoredMembership, Vote,
};
use crate::wal::{Completion, Wal, WalError};

fn wal_error(verb: ErrorVerb, e: WalError) -> StorageError {
    StorageError::from_io_error(ErrorSubject::Logs, verb, io::Error::other(e.to_string()))
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
    ) -> Result<Vec<LogEntry>, StorageError> {
        Ok(self.wal.entries(self.group, range))
    }
}

impl<L: LogBackend> RaftLogStorage<QueueRaft> for GroupLogStore<L> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<QueueRaft>, StorageError> {
        let (last_purged_log_id, last_log_id) = self.wal.log_state(self.group);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.wal
            .save_vote(self.group, *vote)
            .await
            .map_err(|e| wal_error(ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.wal.vote(self.group))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.wal
            .save_committed(self.group, committed)
            .map_err(|e| wal_error(ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.wal.committed(self.group))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<QueueRaft>,
    ) -> Result<(), StorageError>
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
            .map_err(|e| wal_error(ErrorVerb::Write, e))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.wal
            .truncate(self.group, log_id.index)
            .map_err(|e| wal_error(ErrorVerb::Delete, e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.wal
            .purge(self.group, log_id)
            .map_err(|e| wal_error(ErrorVerb::Delete, e))
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
pub trait GroupMachine: Send + 'static {
    /// Applies one committed command (`log_id` is its log position, `now_ms` the proposer's
    /// clock); returns the proposer's answer and the effects the leader acts on.
    fn apply(&mut self, log_id: LogId, now_ms: u64, command: Command) -> (Reply, Vec<Effect>);
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
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
}

struct MachineInner<M> {
    machine: M,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    current: Option<SnapshotFile>,
}

/// The replicated state of one group, shared between openraft and its owner.
pub struct GroupStateMachine<M> {
    inner: Arc<Mutex<MachineInner<M>>>,
    snapshots: Arc<dyn SnapshotStore>,
    group: GroupId,
    /// Serialises snapshot writes (openraft builds snapshots in a task of their own, so a build
    /// and an install can overlap) and remembers the newest written, which is never replaced by
    /// an older one.
    persisted: Arc<Mutex<Option<LogId>>>,
    effects: Option<UnboundedSender<Applied>>,
}

/// A queue group's state machine.
pub type QueueStateMachine = GroupStateMachine<QueueState>;

impl<M> Clone for GroupStateMachine<M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            snapshots: self.snapshots.clone(),
            group: self.group,
            persisted: self.persisted.clone(),
            effects: self.effects.clone(),
        }
    }
}

impl QueueStateMachine {
    /// Opens the group's state machine from its last snapshot in `snapshot_dir`, or empty with
    /// `config`.
    pub fn open(
        snapshot_dir: &Path,
        group: GroupId,
        config: QueueConfig,
        effects: Option<UnboundedSender<Applied>>,
    ) -> io::Result<Self> {
        Self::open_in(
            Arc::new(SnapshotDir::open(snapshot_dir)?),
            group,
            config,
            effects,
        )
    }

    /// Opens the group's state machine from its last snapshot in `snapshots`, or empty with
    /// `config`.
    pub fn open_in(
        snapshots: Arc<dyn SnapshotStore>,
        group: GroupId,
        config: QueueConfig,
        effects: Option<UnboundedSender<Applied>>,
    ) -> io::Result<Self> {
        Self::open_machine(snapshots, group, QueueState::new(config), effects)
    }

    /// Reads the queue state (every replica has one; only the leader's is current).
    pub fn with_queue<T>(&self, read: impl FnOnce(&QueueState) -> T) -> T {
        read(&self.inner.lock().machine)
    }
}

impl<M: GroupMachine> GroupStateMachine<M> {
    /// Opens the group's state machine from its last snapshot in `snapshots` (restored into
    /// `empty`), or as `empty` when it has none.
    pub fn open_machine(
        snapshots: Arc<dyn SnapshotStore>,
        group: GroupId,
        empty: M,
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
        })
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

    /// Writes the snapshot file unless a newer one is already written; says whether it wrote.
    fn persist(&self, file: &SnapshotFile) -> io::Result<bool> {
        let mut persisted = self.persisted.lock();
        if persisted.is_some() && *persisted >= file.meta.last_log_id {
            return Ok(false);
        }
        let bytes = bincode::serialize(file).map_err(io::Error::other)?;
        self.snapshots.store(self.group, &bytes)?;
        *persisted = file.meta.last_log_id;
        Ok(true)
    }
}

fn snapshot_error(meta: Option<&SnapshotMeta>, verb: ErrorVerb, e: io::Error) -> StorageError {
    StorageError::IO {
        source: StorageIOError::new(
            ErrorSubject::Snapshot(meta.map(|m| m.signature())),
            verb,
            &e,
        ),
    }
}

impl<M: GroupMachine> RaftSnapshotBuilder<QueueRaft> for GroupStateMachine<M> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<QueueRaft>, StorageError> {
        let file = {
            let inner = self.inner.lock();
            let snapshot_id = match inner.last_applied {
                Some(id) => format!("{}-{}", id.leader_id.term, id.index),
                None => "empty".to_string(),
            };
            SnapshotFile {
                meta: SnapshotMeta {
                    last_log_id: inner.last_applied,
                    last_membership: inner.membership.clone(),
                    snapshot_id,
                },
                data: inner.machine.snapshot(),
            }
        };
        // Durable before openraft purges the log entries it covers.
        let written = self
            .persist(&file)
            .map_err(|e| snapshot_error(Some(&file.meta), ErrorVerb::Write, e))?;
        let snapshot = Snapshot {
            meta: file.meta.clone(),
            snapshot: Box::new(file.data.clone()),
        };
        if written {
            self.inner.lock().current = Some(file);
        }
        Ok(snapshot)
    }
}

impl<M: GroupMachine> RaftStateMachine<QueueRaft> for GroupStateMachine<M> {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = LogEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        let mut inner = self.inner.lock();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => replies.push(Reply::Ok),
                EntryPayload::Normal(proposal) => {
                    let (reply, effects) =
                        inner
                            .machine
                            .apply(entry.log_id, proposal.now_ms, proposal.command);
                    if let Some(sender) = &self.effects {
                        if !effects.is_empty() {
                            // The owner may be gone (shutting down); effects are then moot.
                            let _ = sender.send(Applied {
                                log_id: entry.log_id,
                                effects,
                            });
                        }
                    }
                    replies.push(reply);
                }
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                    replies.push(Reply::Ok);
                }
            }
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Vec<u8>>, StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Vec<u8>>,
    ) -> Result<(), StorageError> {
        // Restored before it is written: a snapshot that does not decode is refused, not kept.
        self.inner.lock().machine.restore(&snapshot).map_err(|e| {
            snapshot_error(
                Some(meta),
                ErrorVerb::Read,
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })?;
        let file = SnapshotFile {
            meta: meta.clone(),
            data: *snapshot,
        };
        let written = self
            .persist(&file)
            .map_err(|e| snapshot_error(Some(meta), ErrorVerb::Write, e))?;
        let mut inner = self.inner.lock();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        if written {
            inner.current = Some(file);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<QueueRaft>>, StorageError> {
        Ok(self.inner.lock().current.as_ref().map(|file| Snapshot {
            meta: file.meta.clone(),
            snapshot: Box::new(file.data.clone()),
        }))
    }
}
