//! Small metadata files replaced atomically: the broker's definitions blob
//! and the queue table (docs/STORAGE.md §2), each followed by a journal of the
//! changes since (`journal.rs`, §2.2).
//!
//! Both use one envelope (magic, length, CRC, payload) and one replace
//! protocol: write `<name>.tmp`, fsync it, rename over `<name>`, fsync the
//! directory. A reader sees the complete old or the complete new file.

use std::collections::{BTreeMap, HashMap};

use crate::journal::Journal;

use tracing::error;

use crate::backend::{parent_dir, read_all, Backend, BackendFile};
use crate::error::{Result, StoreError};
use crate::types::QueueId;
use std::sync::Arc;

/// File holding the broker's definitions.
pub const DEFINITIONS_FILE: &str = "definitions.bin";
/// File holding the queue table.
pub const QUEUES_FILE: &str = "queues.bin";
/// Magic of the definitions file.
pub const DEFINITIONS_MAGIC: &[u8; 8] = b"WRNDEFS1";
/// Magic of the queue table file.
pub const QUEUES_MAGIC: &[u8; 8] = b"WRNQUES1";

const ENVELOPE_HEADER_BYTES: usize = 16;

/// Durably replaces `path` with `magic` + `payload`.
pub fn write_atomic(
    backend: &dyn Backend,
    path: &str,
    magic: &[u8; 8],
    payload: &[u8],
) -> Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| StoreError::Invalid("metadata larger than 4 GiB".into()))?;
    // The header and the payload are two appends, not one copied buffer: the definitions
    // blob of a million queues is ~46 MB, and a copy of it was held while it was written.
    let mut header = Vec::with_capacity(ENVELOPE_HEADER_BYTES);
    header.extend_from_slice(magic);
    header.extend_from_slice(&len.to_le_bytes());
    header.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());

    let tmp = format!("{path}.tmp");
    // A stale tmp from an interrupted replace must not be appended to.
    match backend.remove(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let file = backend.open(&tmp, true)?;
    file.append(&header)?;
    file.append(payload)?;
    file.sync()?;
    drop(file);
    backend.rename(&tmp, path)?;
    backend.sync_dir(parent_dir(path))?;
    Ok(())
}

/// Reads the payload of `path`. Absent → `Ok(None)`. Bad magic or CRC is
/// logged at error level and also yields `Ok(None)`: the store never refuses
/// to start.
pub fn read_envelope(
    backend: &dyn Backend,
    path: &str,
    magic: &[u8; 8],
) -> Result<Option<Vec<u8>>> {
    let file = match backend.open(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let buf = read_all(file.as_ref())?;
    match parse_envelope(&buf, magic) {
        Ok(payload) => Ok(Some(payload.to_vec())),
        Err(why) => {
            error!(file = path, "ignoring corrupt metadata file: {why}");
            Ok(None)
        }
    }
}

fn parse_envelope<'a>(buf: &'a [u8], magic: &[u8; 8]) -> std::result::Result<&'a [u8], String> {
    if buf.len() < ENVELOPE_HEADER_BYTES {
        return Err(format!("only {} bytes", buf.len()));
    }
    if &buf[0..8] != magic {
        return Err("bad magic".into());
    }
    let len = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes"));
    let payload = &buf[ENVELOPE_HEADER_BYTES..];
    if payload.len() != len {
        return Err(format!("length {len} but {} payload bytes", payload.len()));
    }
    if crc32fast::hash(payload) != crc {
        return Err("CRC mismatch".into());
    }
    Ok(payload)
}

/// The persisted queue table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueTable {
    /// Next id to hand out; ids are never reused.
    pub next_queue_id: u32,
    /// Registered queues. A name is one allocation shared with `Metadata`'s index by name
    /// (two `String` copies were ~60 bytes a queue more with a million queues).
    pub queues: BTreeMap<QueueId, Arc<str>>,
}

impl QueueTable {
    /// Applies a journaled change; a record that does not parse is logged and skipped.
    fn replay(&mut self, record: &[u8]) {
        let parsed = (|| {
            let kind = *record.first()?;
            let id = QueueId(u32::from_le_bytes(record.get(1..5)?.try_into().ok()?));
            let len = u16::from_le_bytes(record.get(5..7)?.try_into().ok()?) as usize;
            let name = std::str::from_utf8(record.get(7..7 + len)?).ok()?;
            Some((kind, id, name))
        })();
        match parsed {
            Some((REGISTERED, id, name)) => {
                self.next_queue_id = self.next_queue_id.max(id.0.saturating_add(1));
                self.queues.insert(id, Arc::from(name));
            }
            Some((DELETED, id, _)) => {
                self.queues.remove(&id);
            }
            _ => error!("ignoring an unreadable queue table journal record"),
        }
    }

    /// Payload bytes (docs/STORAGE.md §2).
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        buf.extend_from_slice(&self.next_queue_id.to_le_bytes());
        buf.extend_from_slice(&(self.queues.len() as u32).to_le_bytes());
        for (id, name) in &self.queues {
            buf.extend_from_slice(&id.0.to_le_bytes());
            buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
            buf.extend_from_slice(name.as_bytes());
        }
        buf
    }

    /// Parses payload bytes; `Err` on any inconsistency.
    pub fn decode(buf: &[u8]) -> std::result::Result<Self, String> {
        let mut pos = 0usize;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            let slice = buf.get(pos..pos + n).ok_or("queue table truncated")?;
            pos += n;
            Ok(slice)
        };
        let next_queue_id = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
        let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
        let mut queues = BTreeMap::new();
        for _ in 0..count {
            let id = QueueId(u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")));
            let len = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
            let name: Arc<str> = std::str::from_utf8(take(len)?)
                .map_err(|_| "queue name not UTF-8".to_string())?
                .into();
            if id.0 >= next_queue_id {
                return Err(format!("queue id {} >= next id {next_queue_id}", id.0));
            }
            queues.insert(id, name);
        }
        if pos != buf.len() {
            return Err("trailing bytes in queue table".into());
        }
        Ok(QueueTable {
            next_queue_id,
            queues,
        })
    }
}

/// A queue table change as its journal keeps it: kind, queue id, name (register only).
const REGISTERED: u8 = 1;
const DELETED: u8 = 2;

fn table_change(kind: u8, id: QueueId, name: &str) -> Vec<u8> {
    let mut record = Vec::with_capacity(7 + name.len());
    record.push(kind);
    record.extend_from_slice(&id.0.to_le_bytes());
    record.extend_from_slice(&(name.len() as u16).to_le_bytes());
    record.extend_from_slice(name.as_bytes());
    record
}

/// The store's metadata: the queue table (with an index by name) and the two journals, kept
/// under one lock so that their files are written one change at a time.
pub struct Metadata {
    pub table: QueueTable,
    /// The table's queues by name (the same `Arc`s).
    names: HashMap<Arc<str>, QueueId>,
    table_journal: Journal,
    definitions_journal: Journal,
}

/// What the metadata files held at open.
pub struct LoadedMetadata {
    pub metadata: Metadata,
    /// The definitions snapshot and the changes journaled after it, in order.
    pub definitions: Option<Vec<u8>>,
    pub definitions_changes: Vec<Vec<u8>>,
}

impl Metadata {
    /// Loads both files and their journals (a corrupt file is logged and read as absent).
    pub fn load(backend: &dyn Backend) -> Result<LoadedMetadata> {
        let table_bytes = read_envelope(backend, QUEUES_FILE, QUEUES_MAGIC)?;
        let mut table = match &table_bytes {
            None => QueueTable::default(),
            Some(payload) => QueueTable::decode(payload).unwrap_or_else(|why| {
                error!("ignoring corrupt queue table: {why}");
                QueueTable::default()
            }),
        };
        let (table_journal, changes) = Journal::open(backend, QUEUES_FILE, table_bytes.as_deref())?;
        for change in changes {
            table.replay(&change);
        }
        let names = table
            .queues
            .iter()
            .map(|(id, name)| (name.clone(), *id))
            .collect();
        let definitions = read_envelope(backend, DEFINITIONS_FILE, DEFINITIONS_MAGIC)?;
        let (definitions_journal, definitions_changes) =
            Journal::open(backend, DEFINITIONS_FILE, definitions.as_deref())?;
        Ok(LoadedMetadata {
            metadata: Metadata {
                table,
                names,
                table_journal,
                definitions_journal,
            },
            definitions,
            definitions_changes,
        })
    }

    /// Id of a registered queue name.
    pub fn find(&self, name: &str) -> Option<QueueId> {
        self.names.get(name).copied()
    }

    /// Registers `name` under a new id: a journal record (durable once synced,
    /// `metadata_sync.rs`), or a new table when the journal has outgrown it.
    pub fn register(&mut self, backend: &dyn Backend, name: &str) -> Result<QueueId> {
        let id = QueueId(self.table.next_queue_id);
        let next_queue_id = self
            .table
            .next_queue_id
            .checked_add(1)
            .ok_or_else(|| StoreError::Invalid("queue ids exhausted".into()))?;
        let record = table_change(REGISTERED, id, name);
        let name: Arc<str> = Arc::from(name);
        self.change_table(backend, record, |table| {
            table.next_queue_id = next_queue_id;
            table.queues.insert(id, name.clone());
        })?;
        self.names.insert(name, id);
        Ok(id)
    }

    /// Removes a registered queue (as `register`, durable once synced).
    pub fn delete(&mut self, backend: &dyn Backend, id: QueueId) -> Result<()> {
        let record = table_change(DELETED, id, "");
        let mut name = None;
        self.change_table(backend, record, |table| {
            name = table.queues.remove(&id);
        })?;
        if let Some(name) = name {
            self.names.remove(&*name);
        }
        Ok(())
    }

    /// Writes `change` (its record journaled, or the changed table written whole) and only
    /// then applies it to the table in memory.
    fn change_table(
        &mut self,
        backend: &dyn Backend,
        record: Vec<u8>,
        change: impl FnOnce(&mut QueueTable),
    ) -> Result<()> {
        if self.table_journal.wants_snapshot() {
            let mut next = self.table.clone();
            change(&mut next);
            let payload = next.encode();
            write_atomic(backend, QUEUES_FILE, QUEUES_MAGIC, &payload)?;
            self.table = next;
            // The table is durable; a journal that fails to restart is retried next time.
            if let Err(e) = self.table_journal.snapshot_written(backend, &payload) {
                error!(error = %e, "starting the queue table's journal failed");
            }
            return Ok(());
        }
        self.table_journal.append(backend, &[record])?;
        change(&mut self.table);
        Ok(())
    }

    /// The journal files appended to since the last call, for `metadata_sync.rs` to fsync.
    pub fn take_unsynced(&mut self) -> Vec<Arc<dyn BackendFile>> {
        [&mut self.table_journal, &mut self.definitions_journal]
            .into_iter()
            .filter_map(|journal| journal.take_unsynced())
            .collect()
    }

    /// Syncing the journals failed: both write a snapshot at their next change.
    pub fn sync_failed(&mut self) {
        self.table_journal.sync_failed();
        self.definitions_journal.sync_failed();
    }

    /// Durably replaces the definitions blob; its journal starts afresh.
    pub fn save_definitions(&mut self, backend: &dyn Backend, bytes: &[u8]) -> Result<()> {
        write_atomic(backend, DEFINITIONS_FILE, DEFINITIONS_MAGIC, bytes)?;
        self.definitions_journal.snapshot_written(backend, bytes)
    }

    /// Journals definitions changes (one write, synced later), or, when the journal has outgrown the blob
    /// (or an append failed), writes the blob `snapshot` builds instead, which holds them.
    pub fn append_definitions(
        &mut self,
        backend: &dyn Backend,
        changes: &[Vec<u8>],
        snapshot: &dyn Fn() -> Vec<u8>,
    ) -> Result<()> {
        if self.definitions_journal.wants_snapshot() {
            return self.save_definitions(backend, &snapshot());
        }
        self.definitions_journal.append(backend, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{CrashMode, FaultyBackend};

    #[test]
    fn definitions_replace_is_atomic_across_crashes() {
        let disk = FaultyBackend::new(5);
        write_atomic(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC, b"v1").unwrap();
        // Complete replace: the new version survives any crash.
        write_atomic(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC, b"v2").unwrap();
        let disk = disk.crash(CrashMode::Torn);
        assert_eq!(
            read_envelope(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC).unwrap(),
            Some(b"v2".to_vec())
        );
        // Interrupted replace (tmp written, not renamed): the old version.
        let tmp = disk.open("definitions.bin.tmp", true).unwrap();
        tmp.append(b"WRNDEFS1 partial").unwrap();
        for mode in [CrashMode::KeepUnsynced, CrashMode::Torn, CrashMode::BitFlip] {
            let after = disk.crash(mode);
            assert_eq!(
                read_envelope(&after, DEFINITIONS_FILE, DEFINITIONS_MAGIC).unwrap(),
                Some(b"v2".to_vec())
            );
        }
    }

    #[test]
    fn stale_tmp_is_replaced_not_appended() {
        let disk = FaultyBackend::new(1);
        let tmp = disk.open("definitions.bin.tmp", true).unwrap();
        tmp.append(b"garbage").unwrap();
        write_atomic(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC, b"fresh").unwrap();
        assert_eq!(
            read_envelope(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC).unwrap(),
            Some(b"fresh".to_vec())
        );
    }

    #[test]
    fn corrupt_envelope_reads_as_absent() {
        let disk = FaultyBackend::new(1);
        write_atomic(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC, b"payload").unwrap();
        disk.corrupt(DEFINITIONS_FILE, 17, b"X");
        assert_eq!(
            read_envelope(&disk, DEFINITIONS_FILE, DEFINITIONS_MAGIC).unwrap(),
            None
        );
    }

    #[test]
    fn queue_table_round_trip() {
        let mut table = QueueTable {
            next_queue_id: 10,
            ..Default::default()
        };
        table.queues.insert(QueueId(3), "orders".into());
        table.queues.insert(QueueId(9), "üñí".into());
        let decoded = QueueTable::decode(&table.encode()).unwrap();
        assert_eq!(decoded, table);
        let mut bad = table.encode();
        bad.truncate(bad.len() - 1);
        assert!(QueueTable::decode(&bad).is_err());
    }
}
