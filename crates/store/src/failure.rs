//! What a failed write or fsync does to the log (docs/STORAGE.md §11).
//!
//! When the writer cannot write or sync a batch (`ENOSPC`, `EIO`), every
//! record that is not durable yet fails: the batch, and everything appended
//! behind it. After a failed fsync the kernel may have dropped the dirty pages
//! and will not report it again ("fsyncgate"), so nothing written since the
//! last good sync can be trusted, and nothing of it is ever reported durable.
//! Concretely, under the log lock:
//!
//! - the failed records are settled as failed (publisher confirms become
//!   nacks) and the store enters an *outage*: appends are refused until a
//!   write succeeds again (the writer retries, writer.rs);
//! - the segment the failed batch continued is sealed at the end of its
//!   durable part (and its file cut back to it, best effort); segments the
//!   failed records created are dropped (and their files removed, best
//!   effort). The next record starts a new segment, so offsets handed out
//!   for failed records are never reused;
//! - a failed PUBLISH leaves the live index (its message is not on disk) and
//!   is reported to the `failed_publishes` subscriber;
//! - a failed ACK of a durable PUBLISH is appended again (the consumer did
//!   ack; once space returns the ACK is written, so the message does not come
//!   back after a restart); carried ACKs that failed are carried again later.

use std::sync::Arc;

use tracing::warn;

use crate::backend::BackendFile;
use crate::durable::FailedPublishes;
use crate::index::{forget_base, segment_of};
use crate::record::{decode, frame_bytes_at, Decoded};
use crate::recovery::Carry;
use crate::segment::{segment_path, SEGMENT_DIR, SEGMENT_HEADER_BYTES};
use crate::store::{append_ack_record, Chunk, Shared};
use crate::types::{MessageId, QueueId, SyncPolicy};

/// Files a failure leaves to clean up, outside the log lock.
#[derive(Default)]
pub(crate) struct Abandoned {
    /// The sealed segment's file and the end of its durable part.
    cut: Option<(u32, Arc<dyn BackendFile>, u64)>,
    /// Segments created by failed records.
    remove: Vec<u32>,
}

/// Settles every record that is not durable as failed (the writer's failed
/// `batch`, and the pending buffer) and puts the log in the state described in
/// the module docs; `why` becomes the outage. With `retry_acks` (not at
/// shutdown) the failed ACKs of durable PUBLISH records are appended again.
/// Wakes every waiter.
pub(crate) fn fail_unwritten(
    shared: &Shared,
    batch: &[u8],
    batch_chunks: &[Chunk],
    why: &str,
    retry_acks: bool,
) -> Abandoned {
    let reporting = shared.failed_publishes_tx.lock().clone();
    let mut report = FailedPublishes::default();
    let mut abandoned = Abandoned::default();
    {
        let mut st = shared.log.lock();
        let mut pending = std::mem::take(&mut st.buf);
        let pending_chunks = std::mem::take(&mut st.chunks);
        st.records_pending = 0;
        let first_failed_seq = st.durable_seq + 1;
        let last_failed_seq = st.next_seq - 1;
        // PUBLISH ids below this are durable; the failed ones are at or above.
        let durable_ids_end = st.durable_next_message_id;
        let (sealed, durable_end) = st.written_to;
        let runs = [(batch, batch_chunks), (&pending[..], &pending_chunks[..])];

        for (_, chunks) in runs {
            for chunk in chunks.iter().filter(|c| c.new_segment) {
                if let Some(info) = st.segments.remove(&chunk.segment) {
                    forget_base(&mut st.bases, chunk.segment, &info);
                }
                shared.files.lock().remove(&chunk.segment);
                abandoned.remove.push(chunk.segment);
            }
        }
        let mut acks: Vec<(QueueId, MessageId)> = Vec::new();
        let mut touched_sealed = false;
        for (buf, chunks) in runs {
            for_each_record(buf, chunks, |segment, record| match record {
                Decoded::Publish(view) => {
                    for queue in view.queues() {
                        if !st.queues.remove(queue, view.id.0) {
                            continue;
                        }
                        if let Some(info) = st.segments.get_mut(&segment) {
                            info.live_refs = info.live_refs.saturating_sub(1);
                        }
                        if reporting.is_some() {
                            let size = u32::try_from(view.body_len()).unwrap_or(u32::MAX);
                            report
                                .queues
                                .entry(queue)
                                .or_default()
                                .push((view.id, size));
                        }
                    }
                }
                Decoded::Ack { queue, id } => {
                    if id.0 < durable_ids_end {
                        acks.push((queue, id));
                    }
                }
                Decoded::DeliveryCount { queue, id, .. } => {
                    // Not retried: the count falls back to what is on disk (an earlier
                    // record whose pin is gone, or none), as after a crash.
                    if matches!(st.delivery_counts.get(&(queue, id.0)), Some((_, s)) if *s == segment)
                    {
                        st.delivery_counts.remove(&(queue, id.0));
                        crate::store::unpin(&mut st, segment);
                    }
                }
            });
            touched_sealed |= chunks.iter().any(|c| !c.new_segment && c.segment == sealed);
        }

        // Seal what was written last at its durable end; the next record
        // starts a new segment.
        if let Some(info) = st.segments.get_mut(&sealed) {
            info.end_bytes = durable_end;
            info.end_message_id = info.end_message_id.min(durable_ids_end);
        }
        st.active_segment = sealed;
        st.active_offset_bytes = durable_end;
        st.needs_segment = true;
        if touched_sealed {
            if let Some(file) = shared.files.lock().get(&sealed).cloned() {
                abandoned.cut = Some((sealed, file, durable_end));
            }
        }
        // Carried ACKs that failed must be carried again before their
        // segment may go.
        for info in st.segments.values_mut() {
            if matches!(info.carry, Carry::Pending { seq } if seq >= first_failed_seq) {
                info.carry = Carry::NotYet;
            }
        }
        st.reclaim_dirty = true;
        st.durable_seq = last_failed_seq;
        let why: Arc<str> = Arc::from(why);
        st.outage = Some(why.clone());
        shared.durable_tx.send_modify(|d| {
            d.seq = last_failed_seq;
            Arc::make_mut(&mut d.failed).add(first_failed_seq, last_failed_seq);
            d.outage = Some(why);
        });

        pending.clear();
        st.buf = pending;
        if retry_acks {
            acks.sort_unstable();
            acks.dedup();
            let segment_size = shared.opts.segment_size_bytes;
            for (queue, id) in acks {
                let dead = st.queues.is_dead(queue, id.0);
                let home = segment_of(&st.bases, id.0)
                    .filter(|s| st.segments.get(s).is_some_and(|i| id.0 < i.end_message_id));
                if let (true, Some(home)) = (dead, home) {
                    append_ack_record(&mut st, segment_size, queue, id, home);
                }
            }
        }
    }
    shared.durable_cv.notify_all();
    shared.space_cv.notify_all();
    shared.space_notify.notify_waiters();
    if let Some(tx) = reporting {
        if !report.queues.is_empty() {
            let _ = tx.send(report);
        }
    }
    abandoned
}

/// Calls `f(segment, record)` for every record of `buf`, split into `chunks`
/// as the pending buffer is (a new segment's chunk starts with its header).
fn for_each_record(buf: &[u8], chunks: &[Chunk], mut f: impl FnMut(u32, Decoded<'_>)) {
    for (i, chunk) in chunks.iter().enumerate() {
        let end = chunks.get(i + 1).map_or(buf.len(), |next| next.start);
        let header = if chunk.new_segment {
            SEGMENT_HEADER_BYTES
        } else {
            0
        };
        let run = &buf[chunk.start..end];
        let mut offset = header.min(run.len());
        while offset < run.len() {
            // Encoded by this process: it always decodes.
            let Ok(framed) = frame_bytes_at(run, offset) else {
                break;
            };
            let Ok(record) = decode(&run[offset..offset + framed]) else {
                break;
            };
            f(chunk.segment, record);
            offset += framed;
        }
    }
}

/// Best effort, after `fail_unwritten`: cuts the sealed segment back to its
/// durable end and removes the files of segments the failed records created,
/// so a restart cannot bring their records back. If this fails too, such
/// records may come back after a restart (they are valid records whose
/// publishers got nacks: at-least-once allows it), or recovery drops them as
/// a corrupt tail; either way nothing the store confirmed is lost.
pub(crate) fn clean_up(shared: &Shared, abandoned: Abandoned) {
    if let Some((segment, file, end)) = abandoned.cut {
        let cut = file.truncate(end).and_then(|()| match shared.opts.sync {
            SyncPolicy::Always => file.sync(),
            SyncPolicy::Never => Ok(()),
        });
        if let Err(e) = cut {
            warn!(
                segment,
                end, "could not cut the failed tail off a segment: {e}"
            );
        }
    }
    if abandoned.remove.is_empty() {
        return;
    }
    for segment in &abandoned.remove {
        match shared.backend.remove(&segment_path(*segment)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                warn!(
                    segment,
                    "could not remove a segment whose creation failed: {e}"
                );
            }
            _ => {}
        }
    }
    if let Err(e) = shared.backend.sync_dir(SEGMENT_DIR) {
        warn!("could not sync the segment directory after a failure: {e}");
    }
}
