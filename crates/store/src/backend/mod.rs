//! The file-I/O seam. Everything the store does to disk goes through
//! [`Backend`] and [`BackendFile`], so tests can swap the real filesystem
//! ([`FsBackend`]) for an in-memory one that simulates crashes
//! ([`FaultyBackend`]).
//!
//! Paths are relative, `/`-separated and never contain `..` (for example
//! `msgs/00000001.seg`); the backend maps them under its root. Files are
//! append-only from the store's point of view (plus `truncate` to cut a torn
//! tail), which is what lets the faulty backend model "data since the last
//! sync" precisely.

mod faulty;
mod fs;

use std::io;
use std::sync::Arc;

pub use faulty::{CrashMode, FaultyBackend};
pub use fs::FsBackend;

/// A directory of files.
pub trait Backend: Send + Sync + 'static {
    /// Opens `path`, creating it empty if `create` is set and it is missing.
    /// Creation is durable only after [`Backend::sync_dir`] of its directory.
    fn open(&self, path: &str, create: bool) -> io::Result<Arc<dyn BackendFile>>;
    /// Creates directory `dir` (and parents) if missing.
    fn create_dir_all(&self, dir: &str) -> io::Result<()>;
    /// File names (not paths) in directory `dir`; an absent dir is empty.
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    /// Removes a file; durable only after `sync_dir`.
    fn remove(&self, path: &str) -> io::Result<()>;
    /// Atomically replaces `to` with `from`; durable only after `sync_dir`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes creations, removals and renames in `dir` durable.
    fn sync_dir(&self, dir: &str) -> io::Result<()>;
}

/// An open file.
pub trait BackendFile: Send + Sync {
    /// Appends `data` at the end of the file (one write call).
    fn append(&self, data: &[u8]) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Reads exactly `buf.len()` bytes at `offset`; `UnexpectedEof` if the
    /// file is shorter.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Current length in bytes.
    fn len_bytes(&self) -> io::Result<u64>;
    /// Shrinks the file to `len_bytes`.
    fn truncate(&self, len_bytes: u64) -> io::Result<()>;
}

/// Reads a whole file into memory.
pub fn read_all(file: &dyn BackendFile) -> io::Result<Vec<u8>> {
    let len = file.len_bytes()?;
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large"))?;
    let mut buf = vec![0u8; len];
    file.read_at(0, &mut buf)?;
    Ok(buf)
}

/// Parent directory of a relative path (`""` for a top-level file).
pub fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}
