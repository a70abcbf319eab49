//! The group-commit writer thread (docs/STORAGE.md §7).
//!
//! One thread owns all segment writes. It repeatedly takes the whole pending
//! buffer (swapping in its spare, so neither buffer is reallocated), writes it
//! with one `append` per segment touched, `fdatasync`s once per touched file,
//! and then publishes the batch's last sequence number as durable. Whatever
//! producers append while a batch is being synced becomes the next batch,
//! which is what amortises one fsync over many records.
//!
//! After a batch (when an ack, a rollover, a queue deletion or a carry asked
//! for it) it runs a reclamation pass over the sealed, completely written
//! segments, in ascending order (§5): a dead segment whose ACK dependencies
//! are gone is removed, with a directory fsync after each removal; a dead
//! segment that still acks into an older, pinned segment has its needed ACK
//! records read back and re-appended ("carried forward"), and is removed in a
//! later pass once those carried ACKs are durable. A pass reads at most one
//! segment, then returns to writing batches.
//!
//! A batch that cannot be written or synced fails with everything pending
//! behind it (failure.rs) and starts an outage: the writer then retries every
//! `RETRY_FIRST`..`RETRY_MAX` (with the pending ACKs, or a new segment's
//! header as a probe), runs reclamation passes meanwhile (acks free segments
//! even on a full disk), and ends the outage with the first batch that
//! succeeds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use crate::backend::BackendFile;
use crate::error::StoreError;
use crate::failure::{clean_up, fail_unwritten};
use crate::index::forget_base;
use crate::reader::{RecordReader, READ_CHUNK_BYTES};
use crate::record::{decode, Decoded, ACK_RECORD_BYTES};
use crate::recovery::Carry;
use crate::segment::{segment_path, SEGMENT_DIR, SEGMENT_HEADER_BYTES};
use crate::store::{
    append_carried_ack, complete_below, roll_over, sync_metadata, Chunk, LogState, Shared,
};
use crate::types::{MessageId, QueueId, SyncPolicy};

/// Carried ACKs appended per acquisition of the log lock, so producers are
/// never held up for long by a large carry.
const CARRY_APPEND_SLICE: usize = 4096;

/// First retry after a failed batch; the wait doubles up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_millis(500);

/// What the writer does next, decided under the log lock.
enum Next {
    /// Write the pending buffer (swapped out), then maybe reclaim.
    Write {
        records: u64,
        last_seq: u64,
        /// The metadata written before the batch's records (their queues registered):
        /// synced with the batch, before its records count as durable.
        metadata_ticket: u64,
        written_to: (u32, u64),
        next_message_id: u64,
        reclaim: bool,
    },
    /// Only a reclamation pass (during an outage, between retries).
    Reclaim,
    /// Shutting down with records that could not be written: fail them.
    GiveUp,
    Stop,
}

/// What each of the two pending buffers starts with and goes back to.
pub(crate) const BASE_BUFFER_BYTES: usize = 1 << 20;

/// A burst grows the pending buffers up to `max_pending_bytes` each (16 MiB by default), and
/// a `Vec` never shrinks by itself. Once a batch is small again the load has passed: the
/// buffer just written goes back to its base size (the other one follows on the next batch,
/// as they alternate). Only well past the base, so a steady load never reallocates.
fn shrink_after_burst(buf: &mut Vec<u8>, batch_bytes: usize) {
    if buf.capacity() > 4 * BASE_BUFFER_BYTES && batch_bytes < BASE_BUFFER_BYTES {
        buf.shrink_to(BASE_BUFFER_BYTES);
    }
}

/// Body of the writer thread; returns when the store shuts down, after
/// flushing everything pending (or failing it, if the store is in an outage
/// and one more attempt fails).
pub fn run(shared: Arc<Shared>) {
    let mut spare_buf: Vec<u8> = Vec::with_capacity(BASE_BUFFER_BYTES);
    let mut spare_chunks: Vec<Chunk> = Vec::new();
    let mut retry_delay = RETRY_FIRST;
    let mut retry_at = Instant::now();
    // A write failed after shutdown was asked for: no more attempts.
    let mut gave_up = false;
    loop {
        let next = {
            let mut st = shared.log.lock();
            loop {
                let outage = st.outage.is_some();
                if st.shutdown && (st.buf.is_empty() || gave_up) {
                    break if st.buf.is_empty() {
                        Next::Stop
                    } else {
                        Next::GiveUp
                    };
                }
                let due = !outage || st.shutdown || Instant::now() >= retry_at;
                if outage && due && st.buf.is_empty() {
                    // Nothing waits to be written: a new segment's header
                    // proves that the disk takes writes again.
                    roll_over(&mut st);
                }
                if due && !st.buf.is_empty() {
                    std::mem::swap(&mut st.buf, &mut spare_buf);
                    std::mem::swap(&mut st.chunks, &mut spare_chunks);
                    break Next::Write {
                        records: std::mem::take(&mut st.records_pending),
                        last_seq: st.next_seq - 1,
                        metadata_ticket: shared.metadata_sync.written(),
                        written_to: (st.active_segment, st.active_offset_bytes),
                        next_message_id: st.next_message_id,
                        reclaim: std::mem::take(&mut st.reclaim_dirty),
                    };
                }
                if st.reclaim_dirty {
                    st.reclaim_dirty = false;
                    break Next::Reclaim;
                }
                if outage {
                    shared.work_cv.wait_until(&mut st, retry_at);
                } else {
                    shared.work_cv.wait(&mut st);
                }
            }
        };
        let reclaim = match next {
            Next::Stop => return,
            Next::GiveUp => {
                fail_unwritten(&shared, &[], &[], "store closed during an outage", false);
                return;
            }
            Next::Reclaim => true,
            Next::Write {
                records,
                last_seq,
                metadata_ticket,
                written_to,
                next_message_id,
                reclaim,
            } => {
                shared.space_cv.notify_all();
                shared.space_notify.notify_waiters();
                let written = write_batch(&shared, &spare_buf, &spare_chunks)
                    .map_err(StoreError::from)
                    .and_then(|()| sync_metadata(&shared, metadata_ticket));
                match written {
                    Ok(()) => {
                        let stats = &shared.stats;
                        stats.records_written.fetch_add(records, Ordering::Relaxed);
                        stats
                            .bytes_written
                            .fetch_add(spare_buf.len() as u64, Ordering::Relaxed);
                        stats.batches.fetch_add(1, Ordering::Relaxed);
                        let ended_outage = {
                            let mut st = shared.log.lock();
                            st.durable_seq = last_seq;
                            st.durable_next_message_id = next_message_id;
                            st.written_to = written_to;
                            st.outage.take()
                        };
                        shared.durable_cv.notify_all();
                        shared.durable_tx.send_modify(|d| {
                            d.seq = last_seq;
                            d.outage = None;
                        });
                        if let Some(why) = ended_outage {
                            info!("the message store writes again (after: {why})");
                            retry_delay = RETRY_FIRST;
                        }
                    }
                    Err(e) => {
                        let why = format!("writing the message store failed: {e}");
                        let (first, shutdown) = {
                            let st = shared.log.lock();
                            (st.outage.is_none(), st.shutdown)
                        };
                        if first {
                            error!("{why}; persistent publishes are refused until a write succeeds, retrying");
                        } else {
                            debug!("{why}; retrying");
                        }
                        let abandoned =
                            fail_unwritten(&shared, &spare_buf, &spare_chunks, &why, !shutdown);
                        clean_up(&shared, abandoned);
                        retry_at = Instant::now() + retry_delay;
                        retry_delay = (retry_delay * 2).min(RETRY_MAX);
                        gave_up = shutdown;
                    }
                }
                let batch_bytes = spare_buf.len();
                spare_buf.clear();
                spare_chunks.clear();
                shrink_after_burst(&mut spare_buf, batch_bytes);
                reclaim
            }
        };
        if reclaim {
            reclaim_pass(&shared);
        }
    }
}

/// What the reclamation pass does next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Remove(u32),
    Carry(u32),
    Done,
}

/// The next step of a pass, looking at segments numbered `from` or more that
/// are sealed and completely written (below the segment the writer is on).
fn next_step(st: &LogState, from: u32) -> Step {
    let below = complete_below(st);
    if from >= below {
        return Step::Done;
    }
    for (&segment, info) in st.segments.range(from..below) {
        if info.live_refs != 0 {
            continue;
        }
        // Older segments it holds ACKs for that still exist.
        let deps = info
            .acks_into
            .iter()
            .filter(|m| st.segments.contains_key(m))
            .count();
        if deps == 0 {
            return Step::Remove(segment);
        }
        match info.carry {
            // Its needed ACKs are durable further on in the log.
            Carry::Pending { seq } if seq <= st.durable_seq => return Step::Remove(segment),
            Carry::Pending { .. } | Carry::Failed => continue,
            Carry::NotWorthIt { deps: then } if deps >= then => continue,
            Carry::NotWorthIt { .. } | Carry::NotYet => {}
        }
        // A dead dependency is on its way out (removed or carried once its own
        // carry is durable; it is older, so this pass already saw it): wait
        // for it rather than carry ACKs into it.
        let dep_leaving = info
            .acks_into
            .iter()
            .filter_map(|m| st.segments.get(m))
            .any(|d| d.live_refs == 0 && matches!(d.carry, Carry::NotYet | Carry::Pending { .. }));
        if !dep_leaving {
            return Step::Carry(segment);
        }
    }
    Step::Done
}

/// Removes what can be removed and carries at most one segment forward
/// (docs/STORAGE.md §5).
fn reclaim_pass(shared: &Shared) {
    let mut from = 0;
    loop {
        let step = next_step(&shared.log.lock(), from);
        match step {
            Step::Done => return,
            Step::Remove(segment) => {
                if let Err(e) = remove_segment(shared, segment) {
                    // Later segments may depend on this one: stop here. The
                    // next reclamation pass (next ack that frees a segment)
                    // retries; no busy loop on a persistent error.
                    warn!(segment, "could not remove reclaimable segment: {e}");
                    return;
                }
                from = segment + 1;
            }
            Step::Carry(segment) if shared.log.lock().outage.is_some() => {
                // Carried ACKs could not be written now; removals go on
                // (they are what frees space on a full disk).
                from = segment + 1;
            }
            Step::Carry(segment) => {
                if let Err(e) = carry_forward(shared, segment) {
                    warn!(
                        segment,
                        "could not carry the ACKs of a dead segment forward: {e}"
                    );
                    return;
                }
                // One segment read per pass: write batches in between. The
                // pass resumes after the next batch (carry_forward set
                // `reclaim_dirty`).
                return;
            }
        }
    }
}

/// Carries the needed ACK records of dead segment `segment` forward: reads it
/// back, keeps the ACKs of references whose PUBLISH is in an older segment it
/// depends on that still exists (deduplicated), and re-appends them through
/// the pending buffer. The segment is removed by a later pass, once they are
/// durable (`Carry::Pending`). If they would take more than half of its
/// record bytes, it is left alone (`Carry::NotWorthIt`).
fn carry_forward(shared: &Shared, segment: u32) -> std::io::Result<()> {
    // The id ranges of the segments it acks into that still exist, sorted.
    let (end, mut targets) = {
        let st = shared.log.lock();
        let Some(info) = st.segments.get(&segment) else {
            return Ok(());
        };
        let targets: Vec<(u64, u64, u32)> = info
            .acks_into
            .iter()
            .filter_map(|m| {
                st.segments
                    .get(m)
                    .map(|d| (d.base_message_id, d.end_message_id, *m))
            })
            .collect();
        (info.end_bytes, targets)
    };
    targets.sort_unstable();
    let deps = targets.len();
    let file = shared
        .files
        .lock()
        .get(&segment)
        .cloned()
        .ok_or_else(|| std::io::Error::other(format!("segment {segment} not open")))?;

    // Read it (sealed, completely written: no lock needed).
    let mut acks: Vec<(QueueId, MessageId, u32)> = Vec::new();
    let mut reader = RecordReader::new(file.as_ref(), end, READ_CHUNK_BYTES);
    let mut offset = SEGMENT_HEADER_BYTES as u64;
    let mut corrupt = None;
    while offset < end {
        let record = match reader.frame(offset)? {
            Ok(record) => record,
            Err(e) => {
                corrupt = Some(e.to_string());
                break;
            }
        };
        match decode(&record) {
            Ok(Decoded::Ack { queue, id }) => {
                // Ranges are disjoint: the last one starting at or before id.
                let at = targets.partition_point(|t| t.0 <= id.0);
                if let Some(&(_, end_id, target)) = at.checked_sub(1).map(|i| &targets[i]) {
                    if id.0 < end_id {
                        acks.push((queue, id, target));
                    }
                }
            }
            // A delivery count pins its segment while it counts (§3.5): a dead segment's
            // counts are stale and need no carrying.
            Ok(Decoded::Publish(_) | Decoded::DeliveryCount { .. }) => {}
            Err(e) => {
                corrupt = Some(e.to_string());
                break;
            }
        }
        offset += record.len() as u64;
    }
    drop(reader);
    if let Some(why) = corrupt {
        error!(
            segment,
            offset, "dead segment no longer decodes, keeping it on disk: {why}"
        );
        let mut st = shared.log.lock();
        if let Some(info) = st.segments.get_mut(&segment) {
            info.carry = Carry::Failed;
        }
        st.reclaim_dirty = true;
        return Ok(());
    }
    acks.sort_unstable();
    acks.dedup();

    let segment_size = shared.opts.segment_size_bytes;
    let mut st = shared.log.lock();
    // Only references that are dead in a queue that still exists need it.
    let needed = |st: &LogState, queue: QueueId, id: MessageId| st.queues.is_dead(queue, id.0);
    acks.retain(|&(queue, id, _)| needed(&st, queue, id));
    let record_bytes = end.saturating_sub(SEGMENT_HEADER_BYTES as u64);
    if 2 * (acks.len() * ACK_RECORD_BYTES) as u64 > record_bytes {
        debug!(
            segment,
            acks = acks.len(),
            "dead segment is mostly needed ACKs: not carried"
        );
        if let Some(info) = st.segments.get_mut(&segment) {
            info.carry = Carry::NotWorthIt { deps };
        }
        st.reclaim_dirty = true;
        return Ok(());
    }
    let mut last_seq = 0;
    let mut carried = 0u64;
    for (i, slice) in acks.chunks(CARRY_APPEND_SLICE).enumerate() {
        if i > 0 {
            drop(st);
            st = shared.log.lock();
        }
        for &(queue, id, target) in slice {
            if needed(&st, queue, id) {
                last_seq = append_carried_ack(&mut st, segment_size, queue, id, target);
                carried += 1;
            }
        }
    }
    // Removable once the durable sequence reaches the last carried ACK (at
    // once if none was needed).
    if let Some(info) = st.segments.get_mut(&segment) {
        info.carry = Carry::Pending { seq: last_seq };
    }
    st.reclaim_dirty = true;
    drop(st);
    debug!(
        segment,
        acks = carried,
        "carried the ACKs of a dead segment forward"
    );
    shared
        .stats
        .segments_carried
        .fetch_add(1, Ordering::Relaxed);
    shared
        .stats
        .acks_carried
        .fetch_add(carried, Ordering::Relaxed);
    Ok(())
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
    }
    // Even without fsyncs: a segment's name must outlive the process (once
    // per segment, so it costs nothing measurable).
    if created {
        shared.backend.sync_dir(SEGMENT_DIR)?;
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::index::Bases;
    use crate::recovery::SegmentInfo;

    fn info(live_refs: u64, acks_into: &[u32], carry: Carry) -> SegmentInfo {
        SegmentInfo {
            live_refs,
            acks_into: acks_into.iter().copied().collect(),
            carry,
            ..SegmentInfo::default()
        }
    }

    fn state(segments: BTreeMap<u32, SegmentInfo>, durable_seq: u64) -> LogState {
        let active = segments.keys().next_back().copied().unwrap_or(1);
        LogState {
            buf: Vec::new(),
            chunks: Vec::new(),
            records_pending: 0,
            next_seq: durable_seq + 1,
            next_message_id: 1,
            active_segment: active,
            active_offset_bytes: SEGMENT_HEADER_BYTES as u64,
            needs_segment: false,
            last_segment: active,
            segments,
            queues: crate::live_refs::LiveRefs::default(),
            delivery_counts: HashMap::new(),
            bases: Bases::new(),
            reclaim_dirty: false,
            durable_seq,
            durable_next_message_id: 1,
            written_to: (active, SEGMENT_HEADER_BYTES as u64),
            outage: None,
            shutdown: false,
        }
    }

    #[test]
    fn pass_removes_carries_and_waits_by_the_rules() {
        let mut segs = BTreeMap::new();
        segs.insert(1, info(1, &[], Carry::NotYet)); // pinned by a live message
        segs.insert(2, info(0, &[1], Carry::NotYet)); // dead, acks into 1: carry
        segs.insert(3, info(0, &[2], Carry::NotYet)); // acks into dead 2: wait for it
        segs.insert(4, info(0, &[], Carry::NotYet)); // independent: remove
        segs.insert(5, info(0, &[], Carry::NotYet)); // active (not below)
        let mut st = state(segs, 10);
        assert_eq!(next_step(&st, 0), Step::Carry(2));
        assert_eq!(next_step(&st, 3), Step::Remove(4));

        // 2's carried ACKs not durable yet: 2 and 3 wait, 4 goes.
        st.segments.get_mut(&2).unwrap().carry = Carry::Pending { seq: 11 };
        assert_eq!(next_step(&st, 0), Step::Remove(4));
        // Durable: 2 goes, then 3 has no dependency left.
        st.durable_seq = 11;
        assert_eq!(next_step(&st, 0), Step::Remove(2));
        st.segments.remove(&2);
        assert_eq!(next_step(&st, 0), Step::Remove(3));
    }

    #[test]
    fn segments_not_worth_carrying_are_examined_again_when_deps_go() {
        let mut segs = BTreeMap::new();
        segs.insert(1, info(1, &[], Carry::NotYet));
        segs.insert(2, info(1, &[], Carry::NotYet));
        segs.insert(3, info(0, &[1, 2], Carry::NotWorthIt { deps: 2 }));
        segs.insert(4, info(0, &[1], Carry::Failed));
        segs.insert(5, info(1, &[], Carry::NotYet)); // active for now
        let mut st = state(segs, 0);
        assert_eq!(next_step(&st, 0), Step::Done);
        // 2 is gone: 3 has fewer dependencies, examine it again.
        st.segments.remove(&2);
        assert_eq!(next_step(&st, 0), Step::Carry(3));
        // A dead dependency kept for good (not worth it, failed) does not
        // make its dependants wait.
        st.segments.get_mut(&3).unwrap().carry = Carry::NotWorthIt { deps: 1 };
        st.segments.insert(6, info(0, &[3, 4], Carry::NotYet));
        st.segments.insert(7, info(0, &[], Carry::NotYet));
        st.written_to.0 = 7;
        assert_eq!(next_step(&st, 0), Step::Carry(6));
        // 1 freed: everything goes in one ascending pass.
        st.segments.get_mut(&1).unwrap().live_refs = 0;
        assert_eq!(next_step(&st, 0), Step::Remove(1));
    }

    #[test]
    fn a_buffer_grown_by_a_burst_goes_back_to_its_base_size_once_batches_are_small() {
        let mut buf: Vec<u8> = Vec::with_capacity(16 * BASE_BUFFER_BYTES);
        // Batches still large: the room stays.
        shrink_after_burst(&mut buf, 8 * BASE_BUFFER_BYTES);
        assert!(buf.capacity() >= 16 * BASE_BUFFER_BYTES);
        shrink_after_burst(&mut buf, 4096);
        assert!(buf.capacity() >= BASE_BUFFER_BYTES);
        assert!(buf.capacity() < 2 * BASE_BUFFER_BYTES, "{}", buf.capacity());
        // A buffer a little over its base is left alone, whatever the batch.
        let mut buf: Vec<u8> = Vec::with_capacity(2 * BASE_BUFFER_BYTES);
        shrink_after_burst(&mut buf, 0);
        assert!(buf.capacity() >= 2 * BASE_BUFFER_BYTES);
    }
}
