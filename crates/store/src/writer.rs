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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{debug, error, warn};

use crate::backend::BackendFile;
use crate::index::forget_base;
use crate::reader::{RecordReader, READ_CHUNK_BYTES};
use crate::record::{decode, Decoded, ACK_RECORD_BYTES};
use crate::recovery::Carry;
use crate::segment::{segment_path, SEGMENT_DIR, SEGMENT_HEADER_BYTES};
use crate::store::{append_carried_ack, Chunk, LogState, Shared};
use crate::types::{MessageId, QueueId, SyncPolicy};

/// Carried ACKs appended per acquisition of the log lock, so producers are
/// never held up for long by a large carry.
const CARRY_APPEND_SLICE: usize = 4096;

/// Body of the writer thread; returns when the store shuts down (after
/// flushing everything pending) or after a fatal I/O error.
pub fn run(shared: Arc<Shared>) {
    let mut spare_buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut spare_chunks: Vec<Chunk> = Vec::new();
    loop {
        // Take a batch.
        let (records, last_seq, written_to, reclaim) = {
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
            let reclaim = std::mem::take(&mut st.reclaim_dirty);
            (records, last_seq, written_to, reclaim)
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
    let below = st.written_to.0;
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
            Ok(Decoded::Publish(_)) => {}
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
    let needed = |st: &LogState, queue: QueueId, id: MessageId| {
        st.queues.get(&queue).is_some_and(|ids| !ids.contains(id.0))
    };
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
            segments,
            queues: HashMap::new(),
            bases: Bases::new(),
            reclaim_dirty: false,
            durable_seq,
            written_to: (active, SEGMENT_HEADER_BYTES as u64),
            failed: None,
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
}
