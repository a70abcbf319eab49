//! Open-time recovery: rebuild the in-memory index from the queue table and
//! a sequential scan of every segment (docs/STORAGE.md §6).
//!
//! Never refuses to start because of bad segment data: a torn or corrupt tail
//! of the last segment is truncated away, corruption elsewhere makes the rest
//! of that segment ignored; both are logged with `tracing::warn!`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tracing::{info, warn};

use crate::backend::{read_all, Backend, BackendFile};
use crate::error::Result;
use crate::meta::{read_envelope, QueueTable, DEFINITIONS_FILE, DEFINITIONS_MAGIC, QUEUES_FILE};
use crate::record::{decode, Decoded};
use crate::segment::{
    encode_header, parse_header, parse_segment_name, scan_records, segment_path, SegmentHeader,
    SEGMENT_DIR, SEGMENT_HEADER_BYTES,
};
use crate::types::{
    Location, MessageId, QueueId, Recovered, RecoveredMessage, RecoveredQueue, RecoveryReport,
    StoreOptions,
};

/// Per-segment bookkeeping for reclamation (docs/STORAGE.md §5).
#[derive(Debug, Clone, Default)]
pub struct SegmentInfo {
    /// (queue, message) references published in this segment and not yet
    /// acked. The segment can go once this is 0 (and its ACK dependencies
    /// are gone).
    pub live_refs: u64,
    /// Older segments this segment holds ACKs for. Invariant: this segment
    /// is removed only after all of them are.
    pub acks_into: BTreeSet<u32>,
}

/// The in-memory index a freshly opened store starts from.
pub struct RecoveredState {
    /// Queue table as loaded.
    pub table: QueueTable,
    /// Segments on disk that the store manages (skipped corrupt-header files
    /// are not included), the new active one included.
    pub segments: BTreeMap<u32, SegmentInfo>,
    /// Open handles of those segments.
    pub files: HashMap<u32, Arc<dyn BackendFile>>,
    /// Live references: queue → message → segment.
    pub queues: HashMap<QueueId, HashMap<MessageId, u32>>,
    /// The new, empty (header only) active segment.
    pub active_segment: u32,
    /// Next message id to assign.
    pub next_message_id: u64,
}

/// Segments for which `live_refs == 0` and whose ACK dependencies are gone
/// or removed earlier in the same pass, in ascending order, among segments
/// numbered below `below`.
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

/// Runs recovery. Only I/O errors from the backend are returned as errors.
pub fn recover(backend: &dyn Backend, opts: &StoreOptions) -> Result<(RecoveredState, Recovered)> {
    backend.create_dir_all("")?;
    backend.create_dir_all(SEGMENT_DIR)?;
    remove_if_exists(backend, &format!("{DEFINITIONS_FILE}.tmp"))?;
    remove_if_exists(backend, &format!("{QUEUES_FILE}.tmp"))?;
    let table = QueueTable::load(backend)?;
    let definitions = read_envelope(backend, DEFINITIONS_FILE, DEFINITIONS_MAGIC)?;

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
    // queue → message → location of its PUBLISH record; only registered queues.
    let mut live: HashMap<QueueId, HashMap<MessageId, Location>> =
        table.queues.keys().map(|q| (*q, HashMap::new())).collect();
    // Kept only when bodies are requested; slices of these become the bodies.
    let mut segment_bufs: HashMap<u32, Bytes> = HashMap::new();
    let mut next_message_id: u64 = 1;

    for (index, &segment) in numbers.iter().enumerate() {
        let is_last = index + 1 == numbers.len();
        let path = segment_path(segment);
        let file = backend.open(&path, false)?;
        let buf = Bytes::from(read_all(file.as_ref())?);
        report.segments_scanned += 1;

        let header = parse_header(&buf).and_then(|h| {
            if h.segment == segment {
                Ok(h)
            } else {
                Err(format!("header names segment {}", h.segment))
            }
        });
        let header = match header {
            Ok(header) => header,
            Err(why) if is_last => {
                warn!(segment = %path, bytes = buf.len(), "removing last segment with invalid header (crash during creation?): {why}");
                drop(file);
                backend.remove(&path)?;
                backend.sync_dir(SEGMENT_DIR)?;
                continue;
            }
            Err(why) => {
                warn!(segment = %path, bytes = buf.len(), "skipping segment with invalid header, left on disk: {why}");
                continue;
            }
        };
        next_message_id = next_message_id.max(header.base_message_id);

        let mut info = SegmentInfo::default();
        let outcome = scan_records(&buf, |offset, framed, record| match record {
            Decoded::Publish(view) => {
                next_message_id = next_message_id.max(view.id.0.saturating_add(1));
                let location = Location {
                    segment,
                    offset: offset as u32,
                    len: framed as u32,
                };
                for queue in view.queues() {
                    if let Some(messages) = live.get_mut(&queue) {
                        messages.insert(view.id, location);
                    }
                }
            }
            Decoded::Ack { queue, id } => {
                next_message_id = next_message_id.max(id.0.saturating_add(1));
                let removed = live.get_mut(&queue).and_then(|m| m.remove(&id));
                if let Some(location) = removed {
                    if location.segment != segment {
                        info.acks_into.insert(location.segment);
                    }
                }
            }
        });
        report.records_read += outcome.records;
        if let Some(error) = &outcome.error {
            let dropped_bytes = (buf.len() - outcome.valid_end) as u64;
            if is_last {
                warn!(
                    segment = %path,
                    offset = outcome.valid_end,
                    dropped_bytes,
                    dropped_records = outcome.frames_dropped,
                    "truncating torn/corrupt tail of last segment: {error}"
                );
                file.truncate(outcome.valid_end as u64)?;
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
        if opts.recover_bodies {
            segment_bufs.insert(segment, buf);
        }
        segments.insert(segment, info);
        files.insert(segment, file);
    }

    for messages in live.values() {
        for location in messages.values() {
            if let Some(info) = segments.get_mut(&location.segment) {
                info.live_refs += 1;
            }
        }
    }

    for segment in reclaimable(&segments, u32::MAX) {
        files.remove(&segment);
        segments.remove(&segment);
        backend.remove(&segment_path(segment))?;
        // One dir fsync per removal keeps removal order durable (§5).
        backend.sync_dir(SEGMENT_DIR)?;
        segment_bufs.remove(&segment);
        report.segments_removed += 1;
    }

    let active_segment = highest_on_disk
        .checked_add(1)
        .ok_or_else(|| io::Error::other("segment numbers exhausted"))?;
    let path = segment_path(active_segment);
    let file = backend.open(&path, true)?;
    let mut header = Vec::with_capacity(SEGMENT_HEADER_BYTES);
    encode_header(
        &mut header,
        SegmentHeader {
            segment: active_segment,
            base_message_id: next_message_id,
        },
    );
    file.append(&header)?;
    file.sync()?;
    backend.sync_dir(SEGMENT_DIR)?;
    segments.insert(active_segment, SegmentInfo::default());
    files.insert(active_segment, file);

    let mut queues_index = HashMap::with_capacity(live.len());
    let mut recovered_queues = HashMap::with_capacity(live.len());
    for (queue, messages) in live {
        let mut list: Vec<RecoveredMessage> = Vec::with_capacity(messages.len());
        let mut index = HashMap::with_capacity(messages.len());
        for (id, location) in messages {
            index.insert(id, location.segment);
            let message = segment_bufs.get(&location.segment).and_then(|buf| {
                let start = location.offset as usize;
                let record = buf.slice(start..start + location.len as usize);
                match decode(&record) {
                    Ok(Decoded::Publish(view)) => Some(view.message(&record)),
                    _ => None, // unreachable: it decoded during the scan
                }
            });
            list.push(RecoveredMessage {
                id,
                location,
                message,
            });
        }
        list.sort_unstable_by_key(|m| m.id);
        queues_index.insert(queue, index);
        let name = table.queues.get(&queue).cloned().unwrap_or_default();
        recovered_queues.insert(
            queue,
            RecoveredQueue {
                name,
                messages: list,
            },
        );
    }

    let live_references: usize = queues_index.values().map(HashMap::len).sum();
    info!(
        segments = report.segments_scanned,
        records = report.records_read,
        live_references,
        queues = recovered_queues.len(),
        "store recovered"
    );

    Ok((
        RecoveredState {
            table,
            segments,
            files,
            queues: queues_index,
            active_segment,
            next_message_id,
        },
        Recovered {
            definitions,
            queues: recovered_queues,
            report,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(live_refs: u64, acks_into: &[u32]) -> SegmentInfo {
        SegmentInfo {
            live_refs,
            acks_into: acks_into.iter().copied().collect(),
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
