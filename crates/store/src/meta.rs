//! Small metadata files replaced atomically: the broker's definitions blob
//! and the queue table (docs/STORAGE.md §2), each followed by a journal of the
//! changes since (`journal.rs`, §2.2).
//!
//! Both use one envelope (magic, length, CRC, payload) and one replace
//! protocol: write `<name>.tmp`, fsync it, rename over `<name>`, fsync the
//! directory. A reader sees the complete old or the complete new file.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

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
    /// Registered queues, each name one allocation (`Arc`: a table snapshot's clone copies
    /// the tree, not the names).
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
    names: NameIndex,
    table_journal: Journal,
    definitions_journal: Journal,
}

/// The queue table's ids by name: a hash table of ids, hashed by the name the table holds
/// for each and compared through it. A map from a name to its id kept a 24-byte slot (and,
/// before, its own copy of the name) per queue, ~52 bytes a queue with a million queues
/// once the table's doubling is counted; an id is 4. A lookup reads the table's tree for
/// each candidate (usually one): only declares and deletes look up.
struct NameIndex {
    ids: HashTable<QueueId>,
    hasher: RandomState,
}

impl NameIndex {
    fn of(table: &QueueTable) -> NameIndex {
        let mut index = NameIndex {
            ids: HashTable::with_capacity(table.queues.len()),
            hasher: RandomState::new(),
        };
        for id in table.queues.keys() {
            index.insert(table, *id);
        }
        index
    }

    fn hash_of(hasher: &RandomState, table: &QueueTable, id: QueueId) -> u64 {
        hasher.hash_one(table.queues.get(&id).map_or("", |name| &**name))
    }

    fn find(&self, table: &QueueTable, name: &str) -> Option<QueueId> {
        let named = |id: &QueueId| table.queues.get(id).is_some_and(|n| &**n == name);
        self.ids.find(self.hasher.hash_one(name), named).copied()
    }

    /// Adds `id`, already in `table` under its name.
    fn insert(&mut self, table: &QueueTable, id: QueueId) {
        let hasher = &self.hasher;
        let hash = Self::hash_of(hasher, table, id);
        self.ids
            .insert_unique(hash, id, |other| Self::hash_of(hasher, table, *other));
    }

    /// Removes `id`, still in `table` under its name.
    fn remove(&mut self, table: &QueueTable, id: QueueId) {
        let hash = Self::hash_of(&self.hasher, table, id);
        if let Ok(entry) = self.ids.find_entry(hash, |other| *other == id) {
            entry.remove();
        }
    }
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
        let names = NameIndex::of(&table);
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
        self.names.find(&self.table, name)
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
        self.change_table(backend, record, |table| {
            table.next_queue_id = next_queue_id;
            table.queues.insert(id, Arc::from(name));
        })?;
        self.names.insert(&self.table, id);
        Ok(id)
    }

    /// Removes a registered queue (as `register`, durable once synced).
    pub fn delete(&mut self, backend: &dyn Backend, id: QueueId) -> Result<()> {
        let record = table_change(DELETED, id, "");
        // Out of the index first: it finds ids through their names in the table.
        self.names.remove(&self.table, id);
        if let Err(e) = self.change_table(backend, record, |table| {
            table.queues.remove(&id);
        }) {
            self.names.insert(&self.table, id);
            return Err(e);
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
    fn queues_are_found_by_name_after_registers_deletes_and_a_reload() {
        let disk = FaultyBackend::new(1);
        let mut meta = Metadata::load(&disk).unwrap().metadata;
        let names: Vec<String> = (0..2_000).map(|i| format!("q-{i}")).collect();
        let ids: Vec<QueueId> = names
            .iter()
            .map(|name| meta.register(&disk, name).unwrap())
            .collect();
        for (id, name) in ids.iter().zip(&names).filter(|(id, _)| id.0 % 3 == 0) {
            meta.delete(&disk, *id).unwrap();
            assert_eq!(meta.find(name), None, "{name} deleted");
        }
        let again = meta.register(&disk, "q-0").unwrap();
        assert!(!ids.contains(&again), "ids are never reused");
        let check = |meta: &Metadata| {
            for (id, name) in ids.iter().zip(&names) {
                let expected = match name.as_str() {
                    "q-0" => Some(again),
                    _ if id.0 % 3 == 0 => None,
                    _ => Some(*id),
                };
                assert_eq!(meta.find(name), expected, "{name}");
            }
            assert_eq!(meta.find("q-absent"), None);
        };
        check(&meta);
        drop(meta);
        check(&Metadata::load(&disk).unwrap().metadata);
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
