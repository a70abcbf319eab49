//! Open-time recovery: rebuild the in-memory index from the queue table and
//! a sequential scan of every segment (docs/STORAGE.md §6).
//!
//! Never refuses to start because of bad segment data: a torn or corrupt tail
//! of the last segment is truncated away, corruption elsewhere makes the rest
//! of that segment ignored; both are logged with `tracing::warn!`.
//!
//! Memory: segments are read in bounded chunks; the only per-message state is
//! the live id sets (≈ 1 bit per message) plus, until recovery returns, each
//! segment's body sizes (4 bytes per PUBLISH) and every 64th record offset.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::Arc;

use roaring::RoaringTreemap;
use tracing::{info, warn};

use crate::backend::{Backend, BackendFile};
use crate::error::Result;
use crate::index::{add_base, forget_base, refs_per_segment, segment_of, Bases};
use crate::journal::Journal;
use crate::live_refs::LiveRefs;
use crate::meta::{Metadata, DEFINITIONS_FILE, QUEUES_FILE};
use crate::reader::{read_header, scan_segment, RecordReader, READ_CHUNK_BYTES};
use crate::record::{decode, Decoded};
use crate::segment::{parse_segment_name, segment_path, SEGMENT_DIR, SEGMENT_HEADER_BYTES};
use crate::types::{LogPosition, QueueId, Recovered, RecoveredQueue, RecoveryReport};

/// Per-segment bookkeeping for reclamation (docs/STORAGE.md §5).
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    /// (queue, message) references published in this segment and not yet
    /// acked. The segment can go once this is 0 (and its ACK dependencies
    /// are gone or its ACKs were carried forward).
    pub live_refs: u64,
    /// Older segments this segment holds ACKs for. Invariant: this segment
    /// is removed only after all of them are, or once the ACKs it holds for
    /// those still present have been carried forward durably (§5).
    pub acks_into: BTreeSet<u32>,
    /// `base_message_id` of the header: the segment's PUBLISH records hold
    /// exactly the ids from here up to the next segment's base.
    pub base_message_id: u64,
    /// End of the segment's records once it is sealed (for a recovered
    /// segment: the end of its valid records). Not maintained for the active
    /// segment, whose end is `LogState::active_offset_bytes`.
    pub end_bytes: u64,
    /// Exclusive end of the ids of the segment's PUBLISH records: the next
    /// segment's base once sealed (for a recovered segment: its base plus the
    /// number of valid PUBLISH records read); `u64::MAX` while active. Tells
    /// whether an id's PUBLISH is still on disk when the base map would
    /// attribute an id of a removed later segment to this one (§5.1).
    pub end_message_id: u64,
    /// Where carrying this segment's ACKs forward stands (§5).
    pub carry: Carry,
}

impl Default for SegmentInfo {
    fn default() -> Self {
        SegmentInfo {
            live_refs: 0,
            acks_into: BTreeSet::new(),
            base_message_id: 0,
            end_bytes: 0,
            end_message_id: u64::MAX,
            carry: Carry::NotYet,
        }
    }
}

/// State of carrying a dead segment's ACKs forward (docs/STORAGE.md §5).
/// In memory only: recovery starts every segment at `NotYet`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Carry {
    /// Not carried (the segment is live, or not examined yet).
    #[default]
    NotYet,
    /// Its needed ACKs were re-appended; it may be removed once the durable
    /// sequence reaches `seq`.
    Pending { seq: u64 },
    /// Examined with `deps` older segments still present: the ACKs it would
    /// carry take more than half of its record bytes, so it stays. Examined
    /// again once fewer of those segments exist (or a queue is deleted).
    NotWorthIt { deps: usize },
    /// Its records could not be decoded again (media corruption after it was
    /// written): it stays on disk for good.
    Failed,
}

/// The in-memory index a freshly opened store starts from.
pub struct RecoveredState {
    /// Queue table (as loaded, its journal applied) and the metadata journals.
    pub metadata: Metadata,
    /// Segments on disk that the store manages (skipped corrupt-header files
    /// are not included). All are sealed: the first append starts a new one.
    pub segments: BTreeMap<u32, SegmentInfo>,
    /// Open handles of those segments.
    pub files: HashMap<u32, Arc<dyn BackendFile>>,
    /// The registered queues, and the ids of the live messages of those holding any.
    pub queues: LiveRefs,
    /// The newest DELIVERY_COUNT record of each live reference: (count, its segment), the
    /// segment pinned by it (counted in its `live_refs`).
    pub delivery_counts: HashMap<(QueueId, u64), (u32, u32)>,
    /// Base message id → segment, for every segment in `segments`.
    pub bases: Bases,
    /// The highest-numbered managed segment (0 if there is none) and the end
    /// of its valid records: where the log ends.
    pub last_written: u32,
    pub last_written_end: u64,
    /// The highest segment number on disk, valid or not (new segments are
    /// numbered above it).
    pub last_segment: u32,
    /// Next message id to assign.
    pub next_message_id: u64,
}

/// Segments for which `live_refs == 0` and whose ACK dependencies are gone
/// or removed earlier in the same pass, in ascending order, among segments
/// numbered below `below`. Used at open; the writer's pass (writer.rs) also
/// carries ACKs forward.
pub fn reclaimable(segments: &BTreeMap<u32, SegmentInfo>, below: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for (no, info) in segments.range(..below) {
        let deps_gone = info
            .acks_into
            .iter()
            .all(|m| !segments.contains_key(m) || out.binary_search(m).is_ok());
        if info.live_refs == 0 && deps_gone {
            out.push(*no);
        }
    }
    out
}

fn remove_if_exists(backend: &dyn Backend, path: &str) -> io::Result<()> {
    match backend.remove(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Every this-many-th PUBLISH of a segment has its offset remembered during
/// recovery, so the first live record of a queue is found with a short read.
const OFFSET_SAMPLE: usize = 64;

/// Window size for that short read.
const FIND_CHUNK_BYTES: usize = 64 * 1024;

/// What recovery remembers about a scanned segment until it returns.
struct ScannedSegment {
    base: u64,
    /// Body length of each PUBLISH, indexed by `id - base`.
    body_sizes: Vec<u32>,
    /// Offset of the PUBLISH with index `k * OFFSET_SAMPLE`, for each k.
    samples: Vec<u32>,
    /// End of the valid records.
    end: u64,
}

/// Runs recovery. Only I/O errors from the backend are returned as errors.
pub fn recover(backend: &dyn Backend) -> Result<(RecoveredState, Recovered)> {
    backend.create_dir_all("")?;
    backend.create_dir_all(SEGMENT_DIR)?;
    remove_if_exists(backend, &format!("{DEFINITIONS_FILE}.tmp"))?;
    remove_if_exists(backend, &format!("{QUEUES_FILE}.tmp"))?;
    for file in [DEFINITIONS_FILE, QUEUES_FILE] {
        remove_if_exists(backend, &format!("{}.tmp", Journal::path_for(file)))?;
    }
    let loaded = Metadata::load(backend)?;
    let table = loaded.metadata.table.clone();
    let mut undelivered = crate::undelivered::take(backend)?;

    let mut numbers: Vec<u32> = backend
        .list(SEGMENT_DIR)?
        .iter()
        .filter_map(|name| parse_segment_name(name))
        .collect();
    numbers.sort_unstable();
    let highest_on_disk = numbers.last().copied().unwrap_or(0);

    let mut report = RecoveryReport::default();
    let mut segments: BTreeMap<u32, SegmentInfo> = BTreeMap::new();
    let mut files: HashMap<u32, Arc<dyn BackendFile>> = HashMap::new();
    let mut bases = Bases::new();
    let mut scanned: HashMap<u32, ScannedSegment> = HashMap::new();
    // The registered queues and the ids of their live persistent messages.
    let mut live = LiveRefs::registered(table.queues.keys().copied());
    let mut next_message_id: u64 = 1;
    // (queue, id) → (count, segment) of the newest DELIVERY_COUNT of a live reference.
    let mut delivery_counts: HashMap<(QueueId, u64), (u32, u32)> = HashMap::new();

    for (index, &segment) in numbers.iter().enumerate() {
        let is_last = index + 1 == numbers.len();
        let path = segment_path(segment);
        let file = backend.open(&path, false)?;
        let len = file.len_bytes()?;
        report.segments_scanned += 1;

        let header = read_header(file.as_ref(), len)?.and_then(|h| {
            if h.segment == segment {
                Ok(h)
            } else {
                Err(format!("header names segment {}", h.segment))
            }
        });
        let header = match header {
            Ok(header) => header,
            Err(why) if is_last => {
                warn!(segment = %path, bytes = len, "removing last segment with invalid header (crash during creation?): {why}");
                drop(file);
                backend.remove(&path)?;
                backend.sync_dir(SEGMENT_DIR)?;
                continue;
            }
            Err(why) => {
                warn!(segment = %path, bytes = len, "skipping segment with invalid header, left on disk: {why}");
                continue;
            }
        };
        let base = header.base_message_id;
        next_message_id = next_message_id.max(base);

        let mut info = SegmentInfo {
            base_message_id: base,
            ..SegmentInfo::default()
        };
        add_base(&mut bases, segment, &info);
        let mut body_sizes: Vec<u32> = Vec::new();
        let mut samples: Vec<u32> = Vec::new();
        let outcome = scan_segment(
            file.as_ref(),
            len,
            READ_CHUNK_BYTES,
            |offset, _framed, record| {
                match record {
                    Decoded::Publish(view) => {
                        // The index relies on ids [base, next base) being exactly this
                        // segment's publishes, in order; anything else is not ours.
                        let expected = base.checked_add(body_sizes.len() as u64);
                        if Some(view.id.0) != expected {
                            return Err(format!(
                                "message id {} out of sequence (segment base {base}, {} publishes before it)",
                                view.id.0,
                                body_sizes.len()
                            ));
                        }
                        let offset = u32::try_from(offset)
                            .map_err(|_| format!("record offset {offset} beyond u32"))?;
                        next_message_id = next_message_id.max(view.id.0.saturating_add(1));
                        if body_sizes.len() % OFFSET_SAMPLE == 0 {
                            samples.push(offset);
                        }
                        // framed ≤ u32::MAX, so the body fits too.
                        body_sizes.push(view.body_len() as u32);
                        if !view.transient {
                            for queue in view.queues() {
                                live.insert(queue, view.id.0);
                            }
                        }
                    }
                    Decoded::Ack { queue, id } => {
                        // Original and carried ACKs (§5) are the same record and are
                        // treated alike. Idempotent: an ACK of a reference that is not
                        // live (already acked by an earlier copy, transient, queue
                        // deleted, PUBLISH lost) changes nothing and records no
                        // dependency; the first copy in log order records it.
                        next_message_id = next_message_id.max(id.0.saturating_add(1));
                        if live.remove(queue, id.0) {
                            delivery_counts.remove(&(queue, id.0));
                            match segment_of(&bases, id.0) {
                                Some(home) if home != segment => {
                                    info.acks_into.insert(home);
                                }
                                _ => {}
                            }
                        }
                    }
                    Decoded::DeliveryCount { queue, id, count } => {
                        // Counts only for a live reference; a newer record replaces it.
                        if live.contains(queue, id.0) {
                            delivery_counts.insert((queue, id.0), (count, segment));
                        }
                    }
                }
                Ok(())
            },
        )?;
        report.records_read += outcome.records;
        if let Some(error) = &outcome.error {
            let dropped_bytes = len - outcome.valid_end;
            if is_last {
                warn!(
                    segment = %path,
                    offset = outcome.valid_end,
                    dropped_bytes,
                    dropped_records = outcome.frames_dropped,
                    "truncating torn/corrupt tail of last segment: {error}"
                );
                file.truncate(outcome.valid_end)?;
                file.sync()?;
                report.truncated_bytes += dropped_bytes;
            } else {
                warn!(
                    segment = %path,
                    offset = outcome.valid_end,
                    ignored_bytes = dropped_bytes,
                    ignored_records = outcome.frames_dropped,
                    "corrupt record in sealed segment, ignoring the rest of it: {error}"
                );
                report.skipped_bytes += dropped_bytes;
            }
        }
        info.end_bytes = outcome.valid_end;
        // Ids past the valid PUBLISH records (a cut tail, ids of skipped
        // segments) are never recovered: no ACK is needed for them.
        info.end_message_id = base.saturating_add(body_sizes.len() as u64);
        body_sizes.shrink_to_fit();
        scanned.insert(
            segment,
            ScannedSegment {
                base,
                body_sizes,
                samples,
                end: outcome.valid_end,
            },
        );
        segments.insert(segment, info);
        files.insert(segment, file);
    }

    for (_, ids) in live.holding() {
        for (segment, count) in refs_per_segment(ids, &bases) {
            if let Some(info) = segments.get_mut(&segment) {
                info.live_refs += count;
            }
        }
    }
    // Each count still in force pins the segment it is in (§3.5).
    for (_, segment) in delivery_counts.values() {
        if let Some(info) = segments.get_mut(segment) {
            info.live_refs += 1;
        }
    }

    for segment in reclaimable(&segments, u32::MAX) {
        files.remove(&segment);
        if let Some(info) = segments.remove(&segment) {
            forget_base(&mut bases, segment, &info);
        }
        scanned.remove(&segment);
        backend.remove(&segment_path(segment))?;
        // One dir fsync per removal keeps removal order durable (§5).
        backend.sync_dir(SEGMENT_DIR)?;
        report.segments_removed += 1;
    }

    // Per queue: the bytes of its live bodies and where its first live record is.
    let order: Vec<(u64, u32)> = bases.iter().map(|(b, s)| (*b, *s)).collect();
    let mut recovered_queues = HashMap::new();
    // Only queues holding messages are reported: an empty queue's recovery is its
    // registration alone, so a million empty queues cost no per-queue work here or in the
    // broker (issue 30: a restart with 1M queues took 15-30 s, most of it on empty ones).
    for (queue, ids) in live.holding() {
        let first = match ids.min() {
            Some(id) => Some(first_position(id, &bases, &scanned, &files)?),
            None => None,
        };
        recovered_queues.insert(
            queue,
            RecoveredQueue {
                name: table
                    .queues
                    .get(&queue)
                    .map(|name| name.to_string())
                    .unwrap_or_default(),
                live: ids.clone(),
                undelivered: undelivered
                    .remove(&queue)
                    .map_or_else(RoaringTreemap::new, |never| never & ids),
                live_body_bytes: live_body_bytes(ids, &order, &scanned),
                first,
            },
        );
    }
    drop(scanned);

    // No new segment here: the first append starts one (numbered above every
    // file on disk), so opening needs no free space.
    if highest_on_disk == u32::MAX {
        return Err(io::Error::other("segment numbers exhausted").into());
    }
    let (last_written, last_written_end) = segments
        .iter()
        .next_back()
        .map_or((0, SEGMENT_HEADER_BYTES as u64), |(n, info)| {
            (*n, info.end_bytes)
        });

    let live_references: u64 = live.count();
    info!(
        segments = report.segments_scanned,
        records = report.records_read,
        live_references,
        queues = recovered_queues.len(),
        "store recovered"
    );

    Ok((
        RecoveredState {
            metadata: loaded.metadata,
            segments,
            files,
            queues: live,
            delivery_counts,
            bases,
            last_written,
            last_written_end,
            last_segment: highest_on_disk,
            next_message_id,
        },
        Recovered {
            definitions: loaded.definitions,
            definitions_changes: loaded.definitions_changes,
            queues: recovered_queues,
            report,
        },
    ))
}

/// Sum of the body sizes of `ids`; `order` is the base map as a sorted list.
fn live_body_bytes(
    ids: &RoaringTreemap,
    order: &[(u64, u32)],
    scanned: &HashMap<u32, ScannedSegment>,
) -> u64 {
    let mut total = 0u64;
    let mut i = 0usize;
    let mut current: Option<usize> = None;
    let mut base = 0u64;
    let mut sizes: &[u32] = &[];
    for id in ids {
        while i + 1 < order.len() && order[i + 1].0 <= id {
            i += 1;
        }
        match order.get(i) {
            Some(&(b, _)) if b <= id => {}
            _ => continue, // below every segment: not in the index
        }
        if current != Some(i) {
            current = Some(i);
            base = order[i].0;
            sizes = scanned
                .get(&order[i].1)
                .map_or(&[][..], |s| &s.body_sizes[..]);
        }
        let size = usize::try_from(id - base)
            .ok()
            .and_then(|k| sizes.get(k))
            .copied()
            .unwrap_or(0);
        total += u64::from(size);
    }
    total
}

/// Position of the PUBLISH record of live message `id`: the sampled offset at
/// or before it, then a short forward read.
fn first_position(
    id: u64,
    bases: &Bases,
    scanned: &HashMap<u32, ScannedSegment>,
    files: &HashMap<u32, Arc<dyn BackendFile>>,
) -> io::Result<LogPosition> {
    let segment = segment_of(bases, id).unwrap_or(0);
    let header = SEGMENT_HEADER_BYTES as u32;
    let found = (|| {
        let seg = scanned.get(&segment)?;
        let file = files.get(&segment)?;
        let index = usize::try_from(id - seg.base).ok()?;
        let start = *seg.samples.get(index / OFFSET_SAMPLE)?;
        Some((seg.end, file, start))
    })();
    let Some((end, file, start)) = found else {
        // Unreachable with a consistent index; scanning from the segment start
        // still yields the record.
        warn!(
            id,
            segment, "first live record not indexed, scanning from the segment start"
        );
        return Ok(LogPosition {
            segment,
            offset: header,
        });
    };
    let mut reader = RecordReader::new(file.as_ref(), end, FIND_CHUNK_BYTES);
    let mut offset = u64::from(start);
    while offset < end {
        let Ok(record) = reader.frame(offset)? else {
            break;
        };
        if let Ok(Decoded::Publish(view)) = decode(&record) {
            if view.id.0 == id {
                return Ok(LogPosition {
                    segment,
                    offset: offset as u32,
                });
            }
        }
        offset += record.len() as u64;
    }
    warn!(
        id,
        segment, "first live record not found after its sampled offset"
    );
    Ok(LogPosition {
        segment,
        offset: start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(live_refs: u64, acks_into: &[u32]) -> SegmentInfo {
        SegmentInfo {
            live_refs,
            acks_into: acks_into.iter().copied().collect(),
            ..SegmentInfo::default()
        }
    }

    #[test]
    fn reclaim_respects_ack_dependencies() {
        let mut segs = BTreeMap::new();
        segs.insert(1, info(1, &[])); // still live: pins 2
        segs.insert(2, info(0, &[1])); // acks into live 1
        segs.insert(3, info(0, &[])); // independent
        segs.insert(4, info(0, &[3])); // depends on 3, removed in the same pass
        segs.insert(5, info(0, &[])); // active (not below)
        assert_eq!(reclaimable(&segs, 5), vec![3, 4]);
        segs.get_mut(&1).unwrap().live_refs = 0;
        assert_eq!(reclaimable(&segs, 5), vec![1, 2, 3, 4]);
    }
}
