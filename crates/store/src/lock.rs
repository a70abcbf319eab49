//! Exclusive lock on a data directory, so two processes (or two `Store`s in
//! one process) never append to the same segments.
//!
//! `flock(LOCK_EX | LOCK_NB)` on `<dir>/LOCK`: the kernel drops the lock when
//! the holder exits, so a `kill -9` never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{Result, StoreError};

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Held for the lifetime of the store; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist) or fails with [`StoreError::Locked`].
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        // SAFETY: plain syscall on a file descriptor we own for the call's
        // duration.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Err(StoreError::Locked(path));
            }
            return Err(err.into());
        }
        Ok(DirLock { _file: file })
    }
}
