//! An in-memory [`Backend`] that can simulate a machine crash, for tests.
//!
//! Model: every file (inode) keeps its current bytes and the bytes as of its
//! last `sync`; every directory keeps its current names and the names as of
//! its last `sync_dir`. [`FaultyBackend::crash`] reverts names to their synced
//! state and each surviving file to its synced bytes plus a [`CrashMode`]-
//! dependent part of the unsynced tail, then returns a fresh view of the
//! "rebooted" disk. Every handle and view from before the crash fails all
//! later calls, as if its process had died.
//!
//! Invariant: a file's unsynced data is modelled as a tail appended after its
//! synced bytes; a file that was shrunk (truncate) and not synced since simply
//! reverts to its synced bytes on crash.
//!
//! I/O failures: [`FaultyBackend::set_capacity_bytes`] makes the disk full
//! (an append past the capacity writes what fits, then fails with `ENOSPC`, as
//! a real `write` does), and [`FaultyBackend::fail_syncs`] makes file syncs fail
//! with `EIO` the way Linux does ("fsyncgate"): the dirty data of the failed
//! sync is dropped from the disk's point of view (it reads back as zeros after a
//! crash) while this process still reads it, and later syncs of that file
//! succeed without ever writing it.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::{parent_dir, Backend, BackendFile};

/// What happens to data written after the last `sync` when the machine
/// crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only the process died (`kill -9`): the OS still has every write.
    KeepUnsynced,
    /// Everything after the last sync is lost.
    DropUnsynced,
    /// A random prefix of the unsynced tail survives (torn write).
    Torn,
    /// A random prefix survives and one random bit of it is flipped.
    BitFlip,
}

#[derive(Debug, Default, Clone)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
    /// Bytes whose sync failed (`fail_syncs`): a later sync persists them as
    /// zeros, the way a kernel that dropped the dirty pages does.
    lost: Option<std::ops::Range<usize>>,
}

impl Inode {
    /// What a sync makes durable: the data, minus what an earlier failed sync
    /// lost.
    fn persist(&mut self) {
        self.synced = self.data.clone();
        if let Some(lost) = &self.lost {
            let end = lost.end.min(self.synced.len());
            if lost.start < end {
                self.synced[lost.start..end].fill(0);
            }
        }
    }
}

#[derive(Debug)]
struct Disk {
    generation: u64,
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    names: HashMap<String, u64>,
    durable_names: HashMap<String, u64>,
    rng_state: u64,
    fail_io: bool,
    /// While set, `sync` blocks (until cleared or a crash): lets a test crash
    /// the machine while a batch is written but not yet durable.
    stall_syncs: bool,
    /// Set `stall_syncs` once this many more syncs have succeeded.
    stall_after: Option<u64>,
    syncs: u64,
    /// Total bytes the files that have a name may hold (`None`: unlimited).
    capacity_bytes: Option<u64>,
    /// This many more file syncs fail with `EIO`.
    failing_syncs: u64,
}

impl Disk {
    /// splitmix64: deterministic per seed, no dependency needed.
    fn next_random(&mut self) -> u64 {
        self.rng_state = self.rng_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Bytes held by the files that have a name (an unlinked file frees its
    /// space at once: the store drops its handles before removing a file).
    fn used_bytes(&self) -> u64 {
        let mut inodes: Vec<u64> = self.names.values().copied().collect();
        inodes.sort_unstable();
        inodes.dedup();
        inodes
            .iter()
            .filter_map(|ino| self.inodes.get(ino))
            .map(|inode| inode.data.len() as u64)
            .sum()
    }

    fn check(&self, generation: u64) -> io::Result<()> {
        if generation != self.generation {
            return Err(io::Error::other("simulated crash: handle is dead"));
        }
        if self.fail_io {
            return Err(io::Error::other("simulated I/O error"));
        }
        Ok(())
    }
}

/// In-memory crash-simulating backend. Cloning gives another handle to the
/// same disk and generation.
#[derive(Clone)]
pub struct FaultyBackend {
    disk: Arc<DiskCell>,
    generation: u64,
}

/// The disk plus a condvar that wakes stalled syncs.
struct DiskCell {
    state: Mutex<Disk>,
    unstall: Condvar,
}

impl DiskCell {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Disk> {
        self.state.lock()
    }
}

impl std::fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyBackend")
            .field("generation", &self.generation)
            .finish()
    }
}

impl Default for FaultyBackend {
    fn default() -> Self {
        Self::new(0)
    }
}

impl FaultyBackend {
    /// An empty disk; `seed` drives torn lengths and flipped bits.
    pub fn new(seed: u64) -> Self {
        FaultyBackend {
            disk: Arc::new(DiskCell {
                state: Mutex::new(Disk {
                    generation: 0,
                    next_inode: 1,
                    inodes: HashMap::new(),
                    names: HashMap::new(),
                    durable_names: HashMap::new(),
                    rng_state: seed,
                    fail_io: false,
                    stall_syncs: false,
                    stall_after: None,
                    syncs: 0,
                    capacity_bytes: None,
                    failing_syncs: 0,
                }),
                unstall: Condvar::new(),
            }),
            generation: 0,
        }
    }

    /// Simulates a crash and reboot; returns the backend to reopen the store
    /// with. This view and all its files are dead afterwards.
    pub fn crash(&self, mode: CrashMode) -> FaultyBackend {
        let mut disk = self.disk.lock();
        disk.generation += 1;
        disk.fail_io = false;
        disk.stall_syncs = false;
        disk.stall_after = None;
        disk.failing_syncs = 0;
        self.disk.unstall.notify_all();
        let names = disk.durable_names.clone();
        let mut survivors: Vec<u64> = names.values().copied().collect();
        survivors.sort_unstable();
        survivors.dedup();
        let mut inodes = HashMap::new();
        for ino in survivors {
            let Some(mut inode) = disk.inodes.remove(&ino) else {
                continue;
            };
            let tail: Vec<u8> = if inode.data.starts_with(&inode.synced) {
                inode.data[inode.synced.len()..].to_vec()
            } else {
                Vec::new()
            };
            let kept_tail = match mode {
                CrashMode::KeepUnsynced => tail,
                CrashMode::DropUnsynced => Vec::new(),
                CrashMode::Torn | CrashMode::BitFlip => {
                    let keep = (disk.next_random() % (tail.len() as u64 + 1)) as usize;
                    let mut kept = tail[..keep].to_vec();
                    if mode == CrashMode::BitFlip && !kept.is_empty() {
                        let bit = (disk.next_random() % (kept.len() as u64 * 8)) as usize;
                        kept[bit / 8] ^= 1 << (bit % 8);
                    }
                    kept
                }
            };
            if inode.data.starts_with(&inode.synced) {
                inode.data.truncate(inode.synced.len());
            } else {
                inode.data = inode.synced.clone();
            }
            inode.data.extend_from_slice(&kept_tail);
            inode.synced = inode.data.clone();
            inode.lost = None;
            inodes.insert(ino, inode);
        }
        disk.inodes = inodes;
        disk.names = names;
        FaultyBackend {
            disk: self.disk.clone(),
            generation: disk.generation,
        }
    }

    /// Makes every later call fail with an I/O error (until the next crash).
    pub fn set_fail_io(&self, fail: bool) {
        self.disk.lock().fail_io = fail;
    }

    /// Current bytes of a file (test inspection), `None` if absent.
    pub fn file_bytes(&self, path: &str) -> Option<Vec<u8>> {
        let disk = self.disk.lock();
        let ino = disk.names.get(path)?;
        disk.inodes.get(ino).map(|i| i.data.clone())
    }

    /// Overwrites bytes of a file in place, durably (simulates media
    /// corruption).
    pub fn corrupt(&self, path: &str, offset: usize, bytes: &[u8]) {
        let mut disk = self.disk.lock();
        let Some(ino) = disk.names.get(path).copied() else {
            return;
        };
        if let Some(inode) = disk.inodes.get_mut(&ino) {
            let end = (offset + bytes.len()).min(inode.data.len());
            if offset < end {
                inode.data[offset..end].copy_from_slice(&bytes[..end - offset]);
                inode.synced = inode.data.clone();
            }
        }
    }

    /// While `stall` is set, every file `sync` blocks (until cleared or a
    /// crash, after which it fails like any dead handle).
    pub fn set_stall_syncs(&self, stall: bool) {
        let mut disk = self.disk.lock();
        disk.stall_syncs = stall;
        disk.stall_after = None;
        self.disk.unstall.notify_all();
    }

    /// Lets the next `n` file syncs succeed, then stalls every later one as
    /// [`FaultyBackend::set_stall_syncs`] does: crashes a store between two
    /// given batches without racing its writer.
    pub fn stall_syncs_after(&self, n: u64) {
        let mut disk = self.disk.lock();
        disk.stall_syncs = n == 0;
        disk.stall_after = (n > 0).then_some(n);
    }

    /// Whether syncs are stalled now (set directly or by
    /// [`FaultyBackend::stall_syncs_after`]).
    pub fn syncs_stalled(&self) -> bool {
        self.disk.lock().stall_syncs
    }

    /// Number of successful file `sync` calls so far.
    pub fn sync_count(&self) -> u64 {
        self.disk.lock().syncs
    }

    /// Limits the bytes all named files may hold together (`None`: no limit).
    /// An append that does not fit writes what fits and fails with `ENOSPC`;
    /// removing or truncating files frees space. Survives crashes.
    pub fn set_capacity_bytes(&self, capacity: Option<u64>) {
        self.disk.lock().capacity_bytes = capacity;
    }

    /// Bytes the named files hold now.
    pub fn used_bytes(&self) -> u64 {
        self.disk.lock().used_bytes()
    }

    /// Makes the next `n` file syncs fail with `EIO`, losing the data they
    /// should have made durable (see the module docs).
    pub fn fail_syncs(&self, n: u64) {
        self.disk.lock().failing_syncs = n;
    }
}

struct FaultyFile {
    disk: Arc<DiskCell>,
    generation: u64,
    inode: u64,
}

impl FaultyFile {
    fn with_inode<T>(&self, f: impl FnOnce(&mut Inode) -> io::Result<T>) -> io::Result<T> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        let inode = disk
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("inode vanished"))?;
        f(inode)
    }
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{path}: no such file"))
}

impl Backend for FaultyBackend {
    fn open(&self, path: &str, create: bool) -> io::Result<Arc<dyn BackendFile>> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        let inode = match disk.names.get(path) {
            Some(ino) => *ino,
            None if create => {
                let ino = disk.next_inode;
                disk.next_inode += 1;
                disk.inodes.insert(ino, Inode::default());
                disk.names.insert(path.to_string(), ino);
                ino
            }
            None => return Err(not_found(path)),
        };
        Ok(Arc::new(FaultyFile {
            disk: self.disk.clone(),
            generation: self.generation,
            inode,
        }))
    }

    fn create_dir_all(&self, _dir: &str) -> io::Result<()> {
        // Directories are implicit (path prefixes) and always durable.
        self.disk.lock().check(self.generation)
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let disk = self.disk.lock();
        disk.check(self.generation)?;
        Ok(disk
            .names
            .keys()
            .filter(|name| parent_dir(name) == dir)
            .map(|name| name.rsplit('/').next().unwrap_or(name).to_string())
            .collect())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        disk.names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        let ino = disk.names.remove(from).ok_or_else(|| not_found(from))?;
        disk.names.insert(to.to_string(), ino);
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        disk.durable_names.retain(|name, _| parent_dir(name) != dir);
        let current: Vec<(String, u64)> = disk
            .names
            .iter()
            .filter(|(name, _)| parent_dir(name) == dir)
            .map(|(name, ino)| (name.clone(), *ino))
            .collect();
        disk.durable_names.extend(current);
        Ok(())
    }
}

/// `ENOSPC`, as the kernel reports a full disk.
fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28)
}

/// `EIO`, as the kernel reports a failed writeback.
fn io_error() -> io::Error {
    io::Error::from_raw_os_error(5)
}

impl BackendFile for FaultyFile {
    fn append(&self, data: &[u8]) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check(self.generation)?;
        let room = match disk.capacity_bytes {
            Some(capacity) => capacity.saturating_sub(disk.used_bytes()),
            None => u64::MAX,
        };
        let fits = usize::try_from(room).unwrap_or(usize::MAX).min(data.len());
        let inode = disk
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("inode vanished"))?;
        inode.data.extend_from_slice(&data[..fits]);
        if fits < data.len() {
            return Err(no_space());
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.disk.lock();
        while disk.stall_syncs && disk.generation == self.generation {
            self.disk.unstall.wait(&mut disk);
        }
        disk.check(self.generation)?;
        let failing = disk.failing_syncs > 0;
        if failing {
            disk.failing_syncs -= 1;
        }
        let inode = disk
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("inode vanished"))?;
        if failing {
            // The kernel drops the dirty pages and reports the error once:
            // the disk keeps zeros where they were, and the next sync will
            // not write them either.
            let start = inode.synced.len().min(inode.data.len());
            let end = inode.data.len();
            inode.lost = Some(match inode.lost.take() {
                Some(lost) => lost.start.min(start)..end.max(lost.end),
                None => start..end,
            });
            inode.persist();
            return Err(io_error());
        }
        inode.persist();
        disk.syncs += 1;
        if let Some(n) = disk.stall_after {
            if n <= 1 {
                disk.stall_after = None;
                disk.stall_syncs = true;
            } else {
                disk.stall_after = Some(n - 1);
            }
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with_inode(|inode| {
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            let src = start
                .checked_add(buf.len())
                .and_then(|end| inode.data.get(start..end))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    fn len_bytes(&self) -> io::Result<u64> {
        self.with_inode(|inode| Ok(inode.data.len() as u64))
    }

    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        self.with_inode(|inode| {
            let len = usize::try_from(len_bytes).map_err(io::Error::other)?;
            inode.data.truncate(len);
            if let Some(lost) = &inode.lost {
                // Cutting the lost bytes off is how a store gets rid of them.
                inode.lost = (lost.start < len).then(|| lost.start..lost.end.min(len));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(backend: &FaultyBackend, path: &str, data: &[u8]) -> Arc<dyn BackendFile> {
        let file = backend.open(path, true).unwrap();
        file.append(data).unwrap();
        file
    }

    #[test]
    fn unsynced_name_is_lost_on_crash() {
        let disk = FaultyBackend::new(1);
        let file = write(&disk, "d/a", b"hello");
        file.sync().unwrap();
        let after = disk.crash(CrashMode::KeepUnsynced);
        assert!(after.file_bytes("d/a").is_none(), "dir was never synced");
    }

    #[test]
    fn crash_modes_treat_the_unsynced_tail() {
        for mode in [
            CrashMode::KeepUnsynced,
            CrashMode::DropUnsynced,
            CrashMode::Torn,
            CrashMode::BitFlip,
        ] {
            let disk = FaultyBackend::new(7);
            let file = write(&disk, "a", b"durable");
            file.sync().unwrap();
            disk.sync_dir("").unwrap();
            file.append(b"-volatile-tail").unwrap();
            let after = disk.crash(mode);
            let bytes = after.file_bytes("a").unwrap();
            assert!(bytes.starts_with(b"durable"), "{mode:?}");
            match mode {
                CrashMode::KeepUnsynced => assert_eq!(bytes, b"durable-volatile-tail"),
                CrashMode::DropUnsynced => assert_eq!(bytes, b"durable"),
                CrashMode::Torn => assert!(b"durable-volatile-tail".starts_with(&bytes)),
                CrashMode::BitFlip => assert!(bytes.len() <= 21),
            }
            // Old handles are dead.
            assert!(file.append(b"x").is_err());
            assert!(disk.list("").is_err());
        }
    }

    #[test]
    fn a_full_disk_writes_what_fits_then_fails_with_enospc() {
        let disk = FaultyBackend::new(5);
        disk.set_capacity_bytes(Some(10));
        let file = write(&disk, "a", b"12345678");
        let err = file.append(b"abcd").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(disk.file_bytes("a").unwrap(), b"12345678ab");
        // Freeing space (truncate, or removing a file) lets writes go on.
        file.truncate(8).unwrap();
        file.append(b"xy").unwrap();
        disk.remove("a").unwrap();
        assert_eq!(disk.used_bytes(), 0);
    }

    /// File "a" holding "durable" (synced) and "-lost", whose sync just failed.
    fn after_a_failed_sync() -> (FaultyBackend, Arc<dyn BackendFile>) {
        let disk = FaultyBackend::new(6);
        let file = write(&disk, "a", b"durable");
        file.sync().unwrap();
        disk.sync_dir("").unwrap();
        file.append(b"-lost").unwrap();
        disk.fail_syncs(1);
        assert_eq!(file.sync().unwrap_err().raw_os_error(), Some(5));
        (disk, file)
    }

    #[test]
    fn a_failed_sync_loses_its_data_and_later_syncs_do_not_bring_it_back() {
        let (disk, file) = after_a_failed_sync();
        // This process still reads it back, and the next sync "succeeds".
        assert_eq!(disk.file_bytes("a").unwrap(), b"durable-lost");
        file.append(b"+later").unwrap();
        file.sync().unwrap();
        let after = disk.crash(CrashMode::KeepUnsynced);
        assert_eq!(after.file_bytes("a").unwrap(), b"durable\0\0\0\0\0+later");

        // Truncating the lost bytes away (and syncing) leaves a clean file.
        let (disk, file) = after_a_failed_sync();
        file.truncate(7).unwrap();
        file.append(b"+again").unwrap();
        file.sync().unwrap();
        let after = disk.crash(CrashMode::DropUnsynced);
        assert_eq!(after.file_bytes("a").unwrap(), b"durable+again");
    }

    #[test]
    fn rename_is_durable_only_after_sync_dir() {
        let disk = FaultyBackend::new(3);
        let file = write(&disk, "old", b"1");
        file.sync().unwrap();
        disk.sync_dir("").unwrap();
        let tmp = write(&disk, "new.tmp", b"2");
        tmp.sync().unwrap();
        disk.rename("new.tmp", "old").unwrap();
        let after = disk.crash(CrashMode::DropUnsynced);
        assert_eq!(after.file_bytes("old").unwrap(), b"1");
    }
}
