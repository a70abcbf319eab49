//! What a group's openraft storage needs from the node's disk: a [`LogBackend`] holding every
//! group's Raft log (the shared [`crate::wal::Wal`] on a real node, [`crate::memlog::MemLog`]
//! in the deterministic simulation) and a [`SnapshotStore`] for the groups' state-machine
//! snapshots ([`SnapshotDir`], a file per group, on a real node).
//!
//! The log store and the state machine in [`crate::storage`] are written once against these
//! traits, so the simulation exercises the same openraft glue as production. The log backend is
//! a generic parameter (no dynamic dispatch on the append path); snapshots are rare and go
//! through a trait object.

use std::fs;
use std::future::Future;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};

use crate::types::{GroupId, LogEntry, LogId, Vote};
use crate::wal::{Completion, WalError};

/// A node-wide log holding the Raft logs of all its groups. Reads see every submitted write at
/// once; writes become durable later, in submission order, and say so through their
/// [`Completion`] (appends) or by returning (votes).
pub trait LogBackend: Send + Sync + 'static {
    /// Appends entries to a group's log; `completion` fires once they are durable.
    fn append(
        &self,
        group: GroupId,
        entries: Vec<LogEntry>,
        completion: Completion,
    ) -> Result<(), WalError>;

    /// Deletes a group's entries from index `since` on (durable with the next flush).
    fn truncate(&self, group: GroupId, since: u64) -> Result<(), WalError>;

    /// Deletes a group's entries up to and including `upto` (durable with the next flush).
    fn purge(&self, group: GroupId, upto: LogId) -> Result<(), WalError>;

    /// Records a group's vote; resolves once it is durable.
    fn save_vote(
        &self,
        group: GroupId,
        vote: Vote,
    ) -> impl Future<Output = Result<(), WalError>> + Send;

    /// Forgets a group entirely (its queue was deleted); resolves once that is durable.
    fn drop_group(&self, group: GroupId) -> impl Future<Output = Result<(), WalError>> + Send;

    /// Records how far a group's log is known committed (durable with the next flush).
    fn save_committed(&self, group: GroupId, committed: Option<LogId>) -> Result<(), WalError>;

    fn vote(&self, group: GroupId) -> Option<Vote>;

    fn committed(&self, group: GroupId) -> Option<LogId>;

    /// `(last purged, last present)` log ids of a group.
    fn log_state(&self, group: GroupId) -> (Option<LogId>, Option<LogId>);

    /// The group's entries whose index falls in `range`.
    fn entries(&self, group: GroupId, range: impl RangeBounds<u64>) -> Vec<LogEntry>;

    /// Makes what was submitted durable and refuses further writes.
    fn close(&self);
}

/// Where groups keep their latest state-machine snapshot (one per group, replaced whole).
pub trait SnapshotStore: Send + Sync + 'static {
    /// The group's snapshot, if it has one.
    fn load(&self, group: GroupId) -> io::Result<Option<Vec<u8>>>;

    /// Replaces the group's snapshot; durable (and atomic) once this returns.
    fn store(&self, group: GroupId, bytes: &[u8]) -> io::Result<()>;

    /// Forgets the group's snapshot (its queue was deleted).
    fn remove(&self, group: GroupId) -> io::Result<()>;
}

/// Snapshots as files `<group>.snapshot` in a directory, replaced by writing a temporary file,
/// fsyncing it and renaming it over the old one.
pub struct SnapshotDir {
    dir: PathBuf,
}

impl SnapshotDir {
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, group: GroupId) -> PathBuf {
        self.dir.join(format!("{group:016x}.snapshot"))
    }
}

impl SnapshotStore for SnapshotDir {
    fn load(&self, group: GroupId) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(group)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn store(&self, group: GroupId, bytes: &[u8]) -> io::Result<()> {
        let path = self.path(group);
        let tmp = path.with_extension("snapshot.tmp");
        fs::write(&tmp, bytes)?;
        fs::File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, &path)?;
        fs::File::open(&self.dir)?.sync_all()
    }

    fn remove(&self, group: GroupId) -> io::Result<()> {
        match fs::remove_file(self.path(group)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
