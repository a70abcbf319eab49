//! A node's log, chosen when the node starts: the [`Wal`] on disk (every real node), or the
//! [`MemLog`] of a deterministic simulation (the broker's cluster simulation runs whole
//! brokers over it). One `match` per call, no dynamic dispatch: the append path stays as
//! direct as with the WAL alone.

use std::ops::RangeBounds;
use std::sync::Arc;

use crate::backend::LogBackend;
use crate::memlog::MemLog;
use crate::types::{GroupId, LogEntry, LogId, Vote};
use crate::wal::{Completion, Wal, WalError};

pub enum NodeLog {
    Disk(Arc<Wal>),
    Memory(Arc<MemLog>),
}

impl NodeLog {
    /// The WAL, on a node whose log is on disk.
    pub fn wal(&self) -> Option<&Arc<Wal>> {
        match self {
            NodeLog::Disk(wal) => Some(wal),
            NodeLog::Memory(_) => None,
        }
    }
}

impl LogBackend for NodeLog {
    fn append(
        &self,
        group: GroupId,
        entries: Vec<LogEntry>,
        completion: Completion,
    ) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => log.append(group, entries, completion),
            NodeLog::Memory(log) => log.append(group, entries, completion),
        }
    }

    fn truncate(&self, group: GroupId, since: u64) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => LogBackend::truncate(&**log, group, since),
            NodeLog::Memory(log) => log.truncate(group, since),
        }
    }

    fn purge(&self, group: GroupId, upto: LogId) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => LogBackend::purge(&**log, group, upto),
            NodeLog::Memory(log) => log.purge(group, upto),
        }
    }

    async fn save_vote(&self, group: GroupId, vote: Vote) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => log.save_vote(group, vote).await,
            NodeLog::Memory(log) => LogBackend::save_vote(&**log, group, vote).await,
        }
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => log.drop_group(group).await,
            NodeLog::Memory(log) => LogBackend::drop_group(&**log, group).await,
        }
    }

    fn save_committed(&self, group: GroupId, committed: Option<LogId>) -> Result<(), WalError> {
        match self {
            NodeLog::Disk(log) => log.save_committed(group, committed),
            NodeLog::Memory(log) => log.save_committed(group, committed),
        }
    }

    fn vote(&self, group: GroupId) -> Option<Vote> {
        match self {
            NodeLog::Disk(log) => log.vote(group),
            NodeLog::Memory(log) => log.vote(group),
        }
    }

    fn committed(&self, group: GroupId) -> Option<LogId> {
        match self {
            NodeLog::Disk(log) => log.committed(group),
            NodeLog::Memory(log) => log.committed(group),
        }
    }

    fn log_state(&self, group: GroupId) -> (Option<LogId>, Option<LogId>) {
        match self {
            NodeLog::Disk(log) => log.log_state(group),
            NodeLog::Memory(log) => log.log_state(group),
        }
    }

    fn entries(&self, group: GroupId, range: impl RangeBounds<u64>) -> Vec<LogEntry> {
        match self {
            NodeLog::Disk(log) => log.entries(group, range),
            NodeLog::Memory(log) => log.entries(group, range),
        }
    }

    fn close(&self) {
        match self {
            NodeLog::Disk(log) => log.close(),
            NodeLog::Memory(log) => log.close(),
        }
    }
}
