//! The real filesystem backend: `std::fs` plus `fdatasync`/directory fsync.
//!
//! Files are opened with `O_APPEND` so `append` is one `write` syscall per
//! call; reads use positional `pread`, so readers never disturb the writer.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Backend, BackendFile};

/// Files under a root directory on the real filesystem.
#[derive(Debug, Clone)]
pub struct FsBackend {
    root: PathBuf,
}

impl FsBackend {
    /// A backend rooted at `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsBackend { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

struct FsFile {
    file: File,
}

impl Backend for FsBackend {
    fn open(&self, path: &str, create: bool) -> io::Result<Arc<dyn BackendFile>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .open(self.path(path))?;
        Ok(Arc::new(FsFile { file }))
    }

    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        fs::create_dir_all(self.path(dir))
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(self.path(dir)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Ok(name) = entry.file_name().into_string() {
                    names.push(name);
                }
            }
        }
        Ok(names)
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        fs::remove_file(self.path(path))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        File::open(self.path(dir))?.sync_all()
    }
}

impl BackendFile for FsFile {
    fn append(&self, data: &[u8]) -> io::Result<()> {
        (&self.file).write_all(data)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)
    }
}
