//! A metadata file's change journal (docs/STORAGE.md §2.2): `<name>.log` beside `<name>`,
//! holding the changes made since `<name>` was last replaced, so that one change costs a
//! record (and a share of a grouped fsync, `metadata_sync.rs`) instead of a rewrite of the
//! whole file.
//!
//! Why: the queue table and the definitions blob were rewritten whole for every durable
//! declare and delete, so declaring N queues wrote O(N²) bytes (one pika client: 336
//! declares/s for the first 4,000 queues, 39/s at 16,000). Now the file is a snapshot, the
//! journal the changes after it; a reader applies them in order. Once the journal has grown
//! past the snapshot (and a floor), the owner writes a new snapshot, which starts an empty
//! journal: every change is written about twice in all, whatever the number of entries.
//!
//! The journal names its snapshot by the snapshot's length and CRC. A crash between writing a
//! new snapshot and starting its journal leaves the old journal, which then names another
//! snapshot and is ignored (the new snapshot holds all it said). A torn last record (a crash
//! mid-append) ends the journal there and is cut off; nothing after a bad record is read.

use crate::backend::{parent_dir, read_all, Backend, BackendFile};
use crate::error::{Result, StoreError};
use std::sync::Arc;
use tracing::warn;

/// Magic at the start of every journal file.
pub const JOURNAL_MAGIC: &[u8; 8] = b"WRNJRNL1";
/// Magic, snapshot length (u32), snapshot CRC (u32).
const HEADER_BYTES: usize = 16;
/// Length (u32) and CRC (u32) before each record's payload.
const RECORD_HEADER_BYTES: usize = 8;
/// A journal this small is never worth a new snapshot.
pub const COMPACT_FLOOR_BYTES: u64 = 1 << 20;

/// The journal of one metadata file, open for appends.
pub struct Journal {
    path: String,
    /// None until the first append after an open (opening writes nothing: a store opens on a
    /// full disk) or after a new snapshot.
    file: Option<Arc<dyn BackendFile>>,
    /// Length and CRC of the snapshot the journal follows.
    snapshot: (u32, u32),
    /// Bytes of records in the journal file.
    records_bytes: u64,
    /// The snapshot's length, to judge when a new one is due.
    snapshot_bytes: u64,
    /// An append failed: where it left the file is unknown, so nothing more is appended
    /// until a new snapshot (which holds every change) starts a new journal.
    failed: bool,
    /// Records were appended since the last `take_unsynced` (`metadata_sync.rs` fsyncs them).
    unsynced: bool,
}

impl Journal {
    /// The journal path of metadata file `file`.
    pub fn path_for(file: &str) -> String {
        format!("{file}.log")
    }

    /// Reads the journal that follows `snapshot` (the payload of the metadata file, None when
    /// it is absent): its records in order. A journal that follows another snapshot, or none,
    /// yields nothing; a torn or corrupt record ends it and is cut off.
    pub fn open(
        backend: &dyn Backend,
        file: &str,
        snapshot: Option<&[u8]>,
    ) -> Result<(Journal, Vec<Vec<u8>>)> {
        let snapshot_key = key_of(snapshot.unwrap_or_default())?;
        let path = Self::path_for(file);
        let mut journal = Journal {
            path: path.clone(),
            file: None,
            snapshot: snapshot_key,
            records_bytes: 0,
            snapshot_bytes: snapshot.map_or(0, |s| s.len() as u64),
            failed: false,
            unsynced: false,
        };
        let handle = match backend.open(&path, false) {
            Ok(handle) => handle,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((journal, Vec::new())),
            Err(e) => return Err(e.into()),
        };
        let bytes = read_all(handle.as_ref())?;
        if bytes.len() < HEADER_BYTES
            || &bytes[..8] != JOURNAL_MAGIC
            || (u32_at(&bytes, 8), u32_at(&bytes, 12)) != snapshot_key
        {
            // Written before the snapshot was last replaced (or never finished): the
            // snapshot holds everything it said. Replaced at the first append.
            return Ok((journal, Vec::new()));
        }
        let mut records = Vec::new();
        let mut pos = HEADER_BYTES;
        while let Some(header) = bytes.get(pos..pos + RECORD_HEADER_BYTES) {
            let len = u32_at(header, 0) as usize;
            let crc = u32_at(header, 4);
            let start = pos + RECORD_HEADER_BYTES;
            match bytes.get(start..start + len) {
                Some(payload) if crc32fast::hash(payload) == crc => {
                    records.push(payload.to_vec());
                    pos = start + len;
                }
                _ => break,
            }
        }
        if pos < bytes.len() {
            warn!(
                file = %path,
                dropped_bytes = bytes.len() - pos,
                records = records.len(),
                "journal ends in a torn or corrupt record; cutting it off"
            );
            handle.truncate(pos as u64)?;
            handle.sync()?;
        }
        journal.records_bytes = (pos - HEADER_BYTES) as u64;
        journal.file = Some(handle);
        Ok((journal, records))
    }

    /// Appends `records` (one write): they survive a crash of the process at once, a crash of
    /// the machine once the file `take_unsynced` hands out next is fsync'd.
    pub fn append(&mut self, backend: &dyn Backend, records: &[Vec<u8>]) -> Result<()> {
        if self.failed {
            return Err(StoreError::Invalid(
                "an earlier journal append failed: a snapshot is due first".into(),
            ));
        }
        if self.file.is_none() {
            self.file = Some(self.start(backend)?);
        }
        let mut buf =
            Vec::with_capacity(records.iter().map(|r| r.len() + RECORD_HEADER_BYTES).sum());
        for record in records {
            let len = u32::try_from(record.len())
                .map_err(|_| StoreError::Invalid("journal record larger than 4 GiB".into()))?;
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&crc32fast::hash(record).to_le_bytes());
            buf.extend_from_slice(record);
        }
        let file = self.file.as_ref().expect("started above");
        if let Err(e) = file.append(&buf) {
            self.file = None;
            self.failed = true;
            return Err(e.into());
        }
        self.unsynced = true;
        self.records_bytes += buf.len() as u64;
        Ok(())
    }

    /// The file appended to since the last call, to fsync (outside the metadata lock).
    pub fn take_unsynced(&mut self) -> Option<Arc<dyn BackendFile>> {
        if !std::mem::take(&mut self.unsynced) {
            return None;
        }
        self.file.clone()
    }

    /// An fsync of what was appended failed: the records may be lost, so the next change
    /// writes a snapshot (which holds them) instead of appending.
    pub fn sync_failed(&mut self) {
        self.file = None;
        self.failed = true;
    }

    /// Whether the owner should write a new snapshot (then `snapshot_written`): the journal
    /// outgrew the snapshot and the floor, or an append failed.
    pub fn wants_snapshot(&self) -> bool {
        self.failed || self.records_bytes > COMPACT_FLOOR_BYTES.max(self.snapshot_bytes)
    }

    /// The owner replaced the metadata file with `snapshot` (durably): the journal starts
    /// afresh, empty, following it.
    pub fn snapshot_written(&mut self, backend: &dyn Backend, snapshot: &[u8]) -> Result<()> {
        self.snapshot = key_of(snapshot)?;
        self.snapshot_bytes = snapshot.len() as u64;
        self.records_bytes = 0;
        self.file = None;
        // The snapshot (fsync'd) holds what the old journal's unsynced records said.
        self.unsynced = false;
        self.file = Some(self.start(backend)?);
        self.failed = false;
        Ok(())
    }

    /// A new, empty journal file following the current snapshot, replacing the old one
    /// atomically (the old one may follow a snapshot that is gone).
    fn start(&mut self, backend: &dyn Backend) -> Result<Arc<dyn BackendFile>> {
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(JOURNAL_MAGIC);
        header.extend_from_slice(&self.snapshot.0.to_le_bytes());
        header.extend_from_slice(&self.snapshot.1.to_le_bytes());
        let tmp = format!("{}.tmp", self.path);
        match backend.remove(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let file = backend.open(&tmp, true)?;
        file.append(&header)?;
        file.sync()?;
        drop(file);
        backend.rename(&tmp, &self.path)?;
        backend.sync_dir(parent_dir(&self.path))?;
        self.records_bytes = 0;
        Ok(backend.open(&self.path, false)?)
    }
}

fn key_of(snapshot: &[u8]) -> Result<(u32, u32)> {
    let len = u32::try_from(snapshot.len())
        .map_err(|_| StoreError::Invalid("metadata larger than 4 GiB".into()))?;
    Ok((len, crc32fast::hash(snapshot)))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{CrashMode, FaultyBackend};

    fn records(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("change {i}").into_bytes()).collect()
    }

    #[test]
    fn records_come_back_in_order_after_a_crash() {
        let disk = FaultyBackend::new(1);
        let (mut journal, none) = Journal::open(&disk, "m.bin", Some(b"base")).unwrap();
        assert!(none.is_empty());
        journal.append(&disk, &records(3)).unwrap();
        journal.append(&disk, &records(5)[3..]).unwrap();
        journal.take_unsynced().expect("appended").sync().unwrap();
        assert!(journal.take_unsynced().is_none(), "synced already");
        for mode in [CrashMode::KeepUnsynced, CrashMode::Torn, CrashMode::BitFlip] {
            let after = disk.crash(mode);
            let (_, back) = Journal::open(&after, "m.bin", Some(b"base")).unwrap();
            assert_eq!(back, records(5), "{mode:?}");
        }
    }

    #[test]
    fn records_not_synced_yet_survive_a_process_crash_and_may_be_lost_in_a_machine_crash() {
        let disk = FaultyBackend::new(4);
        let (mut journal, _) = Journal::open(&disk, "m.bin", None).unwrap();
        journal.append(&disk, &records(2)).unwrap();
        journal.take_unsynced().expect("appended").sync().unwrap();
        journal.append(&disk, &records(4)[2..]).unwrap();
        let (_, back) = Journal::open(&disk.crash(CrashMode::KeepUnsynced), "m.bin", None).unwrap();
        assert_eq!(back, records(4), "a process crash keeps what was written");
        for mode in [CrashMode::DropUnsynced, CrashMode::Torn, CrashMode::BitFlip] {
            let (_, back) = Journal::open(&disk.crash(mode), "m.bin", None).unwrap();
            assert!(
                back.len() >= 2 && back[..] == records(4)[..back.len()],
                "{mode:?}: the synced records, then a prefix of the rest: {back:?}"
            );
        }
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_appends_go_on_after_it() {
        let disk = FaultyBackend::new(2);
        let (mut journal, _) = Journal::open(&disk, "m.bin", None).unwrap();
        journal.append(&disk, &records(2)).unwrap();
        let file = disk.open("m.bin.log", false).unwrap();
        file.append(&[9, 0, 0, 0, 1, 2]).unwrap();
        file.sync().unwrap();
        let (mut journal, back) = Journal::open(&disk, "m.bin", None).unwrap();
        assert_eq!(back, records(2));
        journal.append(&disk, &records(3)[2..]).unwrap();
        let (_, back) = Journal::open(&disk, "m.bin", None).unwrap();
        assert_eq!(back, records(3));
    }

    #[test]
    fn a_journal_of_another_snapshot_is_ignored() {
        let disk = FaultyBackend::new(3);
        let (mut journal, _) = Journal::open(&disk, "m.bin", Some(b"old")).unwrap();
        journal.append(&disk, &records(2)).unwrap();
        // The snapshot was replaced, and the crash came before the journal was restarted.
        let (mut journal, back) = Journal::open(&disk, "m.bin", Some(b"new")).unwrap();
        assert!(back.is_empty());
        journal.append(&disk, &records(1)).unwrap();
        let (_, back) = Journal::open(&disk, "m.bin", Some(b"new")).unwrap();
        assert_eq!(back, records(1), "the stale records are gone");
        journal.snapshot_written(&disk, b"newer").unwrap();
        let (_, back) = Journal::open(&disk, "m.bin", Some(b"newer")).unwrap();
        assert!(back.is_empty());
    }
}
