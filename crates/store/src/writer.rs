//! The group-commit writer thread (docs/STORAGE.md §7).
//!
//! One thread owns all segment writes. It repeatedly takes the whole pending
//! buffer (swapping in its spare, so neither buffer is reallocated), writes it
//! with one `append` per segment touched, `fdatasync`s once per touched file,
//! and then publishes the batch's last sequence number as durable. Whatever
//! producers append while a batch is being synced becomes the next batch,
//! which is what amortises one fsync over many records.
//!
//! After a batch it removes reclaimable segments, in ascending order, with a
//! directory fsync after each removal (§5).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{error, warn};

use crate::backend::BackendFile;
use crate::index::forget_base;
use crate::recovery::reclaimable;
use crate::segment::{segment_path, SEGMENT_DIR};
use crate::store::{Chunk, Shared};
use crate::types::SyncPolicy;

/// Body of the writer thread; returns when the store shuts down (after
/// flushing everything pending) or after a fatal I/O error.
pub fn run(shared: Arc<Shared>) {
    let mut spare_buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut spare_chunks: Vec<Chunk> = Vec::new();
    loop {
        // Take a batch.
        let (records, last_seq, written_to, candidates) = {
            let mut st = shared.log.lock();
            while st.buf.is_empty() && !st.reclaim_dirty && !st.shutdown && st.failed.is_none() {
                shared.work_cv.wait(&mut st);
            }
            if st.failed.is_some() || (st.shutdown && st.buf.is_empty()) {
                return;
            }
            std::mem::swap(&mut st.buf, &mut spare_buf);
            std::mem::swap(&mut st.chunks, &mut spare_chunks);
            let records = std::mem::take(&mut st.records_pending);
            let last_seq = st.next_seq - 1;
            let written_to = (st.active_segment, st.active_offset_bytes);
            let candidates = if st.reclaim_dirty {
                st.reclaim_dirty = false;
                // Every segment below the active one is complete once this
                // batch is written.
                reclaimable(&st.segments, st.active_segment)
            } else {
                Vec::new()
            };
            (records, last_seq, written_to, candidates)
        };
        shared.space_cv.notify_all();
        shared.space_notify.notify_waiters();

        if !spare_buf.is_empty() {
            if let Err(e) = write_batch(&shared, &spare_buf, &spare_chunks) {
                error!("store writer failed, no further writes will be made durable: {e}");
                shared.fail(format!("writer I/O error: {e}"));
                return;
            }
            let stats = &shared.stats;
            stats.records_written.fetch_add(records, Ordering::Relaxed);
            stats
                .bytes_written
                .fetch_add(spare_buf.len() as u64, Ordering::Relaxed);
            stats.batches.fetch_add(1, Ordering::Relaxed);
            {
                let mut st = shared.log.lock();
                st.durable_seq = last_seq;
                st.written_to = written_to;
            }
            shared.durable_cv.notify_all();
            shared.durable_tx.send_modify(|d| d.seq = last_seq);
        }
        spare_buf.clear();
        spare_chunks.clear();

        for segment in candidates {
            if let Err(e) = remove_segment(&shared, segment) {
                // Later candidates may depend on this one: stop here. The
                // next reclamation pass (next ack that frees a segment)
                // retries; no busy loop on a persistent error.
                warn!(segment, "could not remove reclaimable segment: {e}");
                break;
            }
        }
    }
}

fn write_batch(shared: &Shared, buf: &[u8], chunks: &[Chunk]) -> std::io::Result<()> {
    let mut touched: Vec<Arc<dyn BackendFile>> = Vec::with_capacity(chunks.len());
    let mut created = false;
    for (i, chunk) in chunks.iter().enumerate() {
        let end = chunks.get(i + 1).map_or(buf.len(), |next| next.start);
        let file = if chunk.new_segment {
            let file = shared.backend.open(&segment_path(chunk.segment), true)?;
            shared.files.lock().insert(chunk.segment, file.clone());
            shared
                .stats
                .segments_created
                .fetch_add(1, Ordering::Relaxed);
            created = true;
            file
        } else {
            shared
                .files
                .lock()
                .get(&chunk.segment)
                .cloned()
                .ok_or_else(|| {
                    std::io::Error::other(format!("segment {} not open", chunk.segment))
                })?
        };
        file.append(&buf[chunk.start..end])?;
        touched.push(file);
    }
    if shared.opts.sync == SyncPolicy::Always {
        for file in &touched {
            file.sync()?;
            shared.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        if created {
            shared.backend.sync_dir(SEGMENT_DIR)?;
        }
    }
    Ok(())
}

fn remove_segment(shared: &Shared, segment: u32) -> std::io::Result<()> {
    shared.files.lock().remove(&segment);
    match shared.backend.remove(&segment_path(segment)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    shared.backend.sync_dir(SEGMENT_DIR)?;
    {
        let mut st = shared.log.lock();
        if let Some(info) = st.segments.remove(&segment) {
            forget_base(&mut st.bases, segment, &info);
        }
    }
    shared
        .stats
        .segments_removed
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}
