//! An in-memory disk for the deterministic simulation: [`MemDisk`] is what survives a crash
//! (the bytes of the log that were flushed, and the snapshots), [`MemLog`] is one boot of a
//! node's log over it, a [`LogBackend`] like the shared [`crate::wal::Wal`].
//!
//! It keeps the WAL's logic and format, not a copy of them: records are framed and replayed by
//! the WAL's own code and reads come from the same per-group view. What differs is who writes:
//! instead of a writer thread calling `fsync`, the simulation calls [`MemLog::flush`] when its
//! seeded schedule says the disk is done, and [`MemDisk::power_loss`] ends a boot with only a
//! prefix of the unflushed bytes on "disk" (possibly a torn record, cut off at the next boot as
//! the WAL does). Completions fire only on flush, so openraft learns an entry is durable exactly
//! when it would survive a crash.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::backend::{LogBackend, SnapshotStore};
use crate::types::{GroupId, LogEntry, LogId, Vote};
use crate::wal::{self, Completion, GroupLog, Record, WalError};

#[derive(Default)]
struct DiskContents {
    /// The log's durable bytes: frames as the WAL writes them.
    log: Vec<u8>,
    snapshots: BTreeMap<GroupId, Vec<u8>>,
    flushes: u64,
    /// The boot writing to this disk now.
    current: Weak<MemLog>,
}

/// What a node keeps across crashes.
#[derive(Default)]
pub struct MemDisk {
    contents: Mutex<DiskContents>,
}

impl MemDisk {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The node loses power: its log refuses further writes, of the bytes submitted and not
    /// flushed only the first `reached_disk(unflushed bytes)` stay (a write in progress may have
    /// got that far), and no pending completion fires.
    pub fn power_loss(&self, reached_disk: impl FnOnce(usize) -> usize) {
        let log = self.contents.lock().current.upgrade();
        let Some(log) = log else { return };
        let unflushed: Vec<u8> = {
            let mut state = log.state.lock();
            state.closed = true;
            std::mem::take(&mut state.pending)
                .into_iter()
                .flat_map(|(framed, _dropped_completion)| framed)
                .collect()
        };
        let kept = reached_disk(unflushed.len()).min(unflushed.len());
        self.contents
            .lock()
            .log
            .extend_from_slice(&unflushed[..kept]);
    }

    /// Bytes of the log on "disk".
    pub fn log_bytes(&self) -> usize {
        self.contents.lock().log.len()
    }

    /// How many flushes (fsyncs) the disk has seen over all boots.
    pub fn flushes(&self) -> u64 {
        self.contents.lock().flushes
    }
}

impl SnapshotStore for MemDisk {
    fn load(&self, group: GroupId) -> io::Result<Option<Vec<u8>>> {
        Ok(self.contents.lock().snapshots.get(&group).cloned())
    }

    // A snapshot is written through (the file version fsyncs before it returns).
    fn store(&self, group: GroupId, bytes: &[u8]) -> io::Result<()> {
        self.contents.lock().snapshots.insert(group, bytes.to_vec());
        Ok(())
    }

    fn remove(&self, group: GroupId) -> io::Result<()> {
        self.contents.lock().snapshots.remove(&group);
        Ok(())
    }
}

#[derive(Default)]
struct LogState {
    groups: HashMap<GroupId, GroupLog>,
    pending: Vec<(Vec<u8>, Option<Completion>)>,
    closed: bool,
}

/// One boot of a node's log over a [`MemDisk`].
pub struct MemLog {
    disk: Arc<MemDisk>,
    state: Mutex<LogState>,
    submitted: tokio::sync::Notify,
}

impl MemLog {
    /// Boots from what the disk holds, cutting off a torn last record as the WAL's recovery
    /// does. The previous boot, if any, must have ended with [`MemDisk::power_loss`].
    pub fn recover(disk: Arc<MemDisk>) -> Arc<Self> {
        let mut groups = HashMap::new();
        {
            let mut contents = disk.contents.lock();
            let good = wal::replay(&contents.log, &mut groups);
            contents.log.truncate(good);
        }
        let log = Arc::new(Self {
            disk: disk.clone(),
            state: Mutex::new(LogState {
                groups,
                ..LogState::default()
            }),
            submitted: tokio::sync::Notify::new(),
        });
        disk.contents.lock().current = Arc::downgrade(&log);
        log
    }

    /// Submits `record` and resolves once a flush made it durable.
    async fn submit_and_wait(&self, record: Record<'_>) -> Result<(), WalError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.submit(record, Some(Completion::Notify(sender)))?;
        match receiver.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(WalError::Io(e)),
            Err(_) => Err(WalError::Closed),
        }
    }

    /// Resolves once something submitted waits for a flush.
    pub async fn wait_for_writes(&self) {
        loop {
            let notified = self.submitted.notified();
            if !self.state.lock().pending.is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// Writes everything submitted to the disk and "fsyncs": completions fire.
    pub fn flush(&self) {
        let batch = {
            let mut state = self.state.lock();
            if state.closed {
                return;
            }
            std::mem::take(&mut state.pending)
        };
        if batch.is_empty() {
            return;
        }
        {
            let mut contents = self.disk.contents.lock();
            for (framed, _) in &batch {
                contents.log.extend_from_slice(framed);
            }
            contents.flushes += 1;
        }
        for (_, completion) in batch {
            if let Some(completion) = completion {
                completion.complete(&Ok(()));
            }
        }
    }

    fn submit(&self, record: Record<'_>, completion: Option<Completion>) -> Result<(), WalError> {
        let framed = wal::frame(&record);
        let mut state = self.state.lock();
        if state.closed {
            drop(state);
            if let Some(completion) = completion {
                completion.complete(&Err(WalError::Closed.to_string()));
            }
            return Err(WalError::Closed);
        }
        wal::apply(&mut state.groups, &record);
        state.pending.push((framed, completion));
        self.submitted.notify_one();
        Ok(())
    }
}

impl LogBackend for MemLog {
    fn append(
        &self,
        group: GroupId,
        entries: Vec<LogEntry>,
        completion: Completion,
    ) -> Result<(), WalError> {
        self.submit(
            Record::Append {
                group,
                entries: entries.into(),
            },
            Some(completion),
        )
    }

    fn truncate(&self, group: GroupId, since: u64) -> Result<(), WalError> {
        self.submit(Record::Truncate { group, since }, None)
    }

    fn purge(&self, group: GroupId, upto: LogId) -> Result<(), WalError> {
        self.submit(Record::Purge { group, upto }, None)
    }

    async fn save_vote(&self, group: GroupId, vote: Vote) -> Result<(), WalError> {
        self.submit_and_wait(Record::Vote { group, vote }).await
    }

    async fn drop_group(&self, group: GroupId) -> Result<(), WalError> {
        self.submit_and_wait(Record::DropGroup { group }).await
    }

    fn save_committed(&self, group: GroupId, committed: Option<LogId>) -> Result<(), WalError> {
        self.submit(Record::Committed { group, committed }, None)
    }

    fn vote(&self, group: GroupId) -> Option<Vote> {
        self.state.lock().groups.get(&group)?.vote()
    }

    fn committed(&self, group: GroupId) -> Option<LogId> {
        self.state.lock().groups.get(&group)?.committed()
    }

    fn log_state(&self, group: GroupId) -> (Option<LogId>, Option<LogId>) {
        self.state
            .lock()
            .groups
            .get(&group)
            .map(GroupLog::log_state)
            .unwrap_or((None, None))
    }

    fn entries(&self, group: GroupId, range: impl RangeBounds<u64>) -> Vec<LogEntry> {
        match self.state.lock().groups.get(&group) {
            Some(log) => log.entries(range),
            None => Vec::new(),
        }
    }

    fn close(&self) {
        self.flush();
        self.state.lock().closed = true;
    }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use crate::types::QueueRaft;

    use super::*;

    fn vote(term: u64) -> Vote {
        Vote::new(term, 1)
    }

    fn entry(index: u64) -> LogEntry {
        openraft::Entry {
            log_id: openraft::testing::log_id::<QueueRaft>(1, 1, index),
            payload: EntryPayload::Blank,
        }
    }

    fn notify() -> (
        Completion,
        tokio::sync::oneshot::Receiver<Result<(), String>>,
    ) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (Completion::Notify(sender), receiver)
    }

    fn indexes(log: &MemLog) -> Vec<u64> {
        log.entries(7, ..).iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn only_flushed_writes_survive_a_power_loss() {
        let disk = MemDisk::new();
        let log = MemLog::recover(disk.clone());
        let (first, mut first_done) = notify();
        log.append(7, vec![entry(1), entry(2)], first)
            .expect("append");
        assert_eq!(indexes(&log), [1, 2], "readable before it is durable");
        assert!(first_done.try_recv().is_err(), "not durable before a flush");
        log.flush();
        assert_eq!(first_done.try_recv(), Ok(Ok(())));

        let (second, mut second_done) = notify();
        log.append(7, vec![entry(3)], second).expect("append");
        log.save_committed(7, Some(entry(2).log_id))
            .expect("committed");
        disk.power_loss(|_| 0);
        assert!(
            second_done.try_recv().is_err(),
            "an unflushed write never reports durable"
        );
        assert!(log.append(7, vec![entry(4)], notify().0).is_err());

        let rebooted = MemLog::recover(disk.clone());
        assert_eq!(indexes(&rebooted), [1, 2]);
        assert_eq!(rebooted.committed(7), None);
    }

    #[tokio::test]
    async fn a_torn_record_is_cut_off_at_the_next_boot() {
        let disk = MemDisk::new();
        let log = MemLog::recover(disk.clone());
        log.append(7, vec![entry(1)], notify().0).expect("append");
        log.flush();
        let flushed = disk.log_bytes();
        log.append(7, vec![entry(2)], notify().0).expect("append");
        log.append(7, vec![entry(3)], notify().0).expect("append");
        // The write got past the second record but not through the third.
        let mut unflushed = 0;
        disk.power_loss(|bytes| {
            unflushed = bytes;
            bytes - 3
        });
        assert_eq!(disk.log_bytes(), flushed + unflushed - 3);

        let rebooted = MemLog::recover(disk.clone());
        assert_eq!(indexes(&rebooted), [1, 2]);
        assert!(disk.log_bytes() < flushed + unflushed - 3, "torn tail cut");
        // A vote resolves only once flushed, and then survives.
        let rebooted_again = {
            let waiting = tokio::spawn({
                let log = rebooted.clone();
                async move { log.save_vote(7, vote(4)).await }
            });
            rebooted.wait_for_writes().await;
            assert!(!waiting.is_finished());
            rebooted.flush();
            waiting.await.expect("join").expect("vote durable");
            disk.power_loss(|bytes| bytes);
            MemLog::recover(disk.clone())
        };
        assert_eq!(rebooted_again.vote(7), Some(vote(4)));
        assert_eq!(indexes(&rebooted_again), [1, 2]);
    }
}
