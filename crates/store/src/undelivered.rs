//! The clean-shutdown record (docs/STORAGE.md §2.1): which live messages of each queue had
//! never been delivered when the store last closed cleanly.
//!
//! The log does not record deliveries (that would be a write per delivery on the hot path),
//! so after a crash every recovered message may have reached a consumer and goes out marked
//! redelivered, as AMQP allows. A clean stop knows better: the broker hands `Store::close`
//! the ids it never delivered, they are written here, and the next open reads them back and
//! removes the file (durably, before any new record), so a crash after that open falls back
//! to "maybe delivered" instead of trusting a stale list. RabbitMQ's classic queues keep the
//! same knowledge (delivered flags in the queue index) and report it the same way.

use std::collections::HashMap;

use roaring::RoaringTreemap;

use crate::backend::{parent_dir, Backend};
use crate::error::{Result, StoreError};
use crate::meta::{read_envelope, write_atomic};
use crate::types::QueueId;

/// File holding the clean-shutdown record; present only between a clean close and the
/// next open.
pub const UNDELIVERED_FILE: &str = "undelivered.bin";
/// Magic of the clean-shutdown record.
pub const UNDELIVERED_MAGIC: &[u8; 8] = b"WRNUNDL1";

/// Durably writes the record: per queue, the ids of its live messages never delivered.
pub fn write(backend: &dyn Backend, undelivered: &[(QueueId, RoaringTreemap)]) -> Result<()> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(undelivered.len() as u32).to_le_bytes());
    for (queue, ids) in undelivered {
        let len = u32::try_from(ids.serialized_size())
            .map_err(|_| StoreError::Invalid("undelivered set larger than 4 GiB".into()))?;
        payload.extend_from_slice(&queue.0.to_le_bytes());
        payload.extend_from_slice(&len.to_le_bytes());
        ids.serialize_into(&mut payload)?;
    }
    write_atomic(backend, UNDELIVERED_FILE, UNDELIVERED_MAGIC, &payload)
}

/// Reads the record and removes it durably. Empty when there was none (the last stop was
/// not clean), it is corrupt, or it could not be removed (then it must not be trusted: a
/// later crash would find it again).
pub fn take(backend: &dyn Backend) -> Result<HashMap<QueueId, RoaringTreemap>> {
    let _ = backend.remove(&format!("{UNDELIVERED_FILE}.tmp"));
    let Some(payload) = read_envelope(backend, UNDELIVERED_FILE, UNDELIVERED_MAGIC)? else {
        return Ok(HashMap::new());
    };
    let removed = backend
        .remove(UNDELIVERED_FILE)
        .and_then(|()| backend.sync_dir(parent_dir(UNDELIVERED_FILE)));
    if let Err(e) = removed {
        tracing::error!(error = %e, "cannot remove the clean-shutdown record; every recovered message goes out marked redelivered");
        return Ok(HashMap::new());
    }
    match parse(&payload) {
        Some(sets) => Ok(sets),
        None => {
            tracing::error!("ignoring a malformed clean-shutdown record");
            Ok(HashMap::new())
        }
    }
}

fn parse(mut payload: &[u8]) -> Option<HashMap<QueueId, RoaringTreemap>> {
    fn u32_at(bytes: &mut &[u8]) -> Option<u32> {
        let (head, rest) = bytes.split_first_chunk::<4>()?;
        *bytes = rest;
        Some(u32::from_le_bytes(*head))
    }
    let count = u32_at(&mut payload)?;
    let mut sets = HashMap::new();
    for _ in 0..count {
        let queue = QueueId(u32_at(&mut payload)?);
        let len = u32_at(&mut payload)? as usize;
        if payload.len() < len {
            return None;
        }
        let (set, rest) = payload.split_at(len);
        payload = rest;
        sets.insert(queue, RoaringTreemap::deserialize_from(set).ok()?);
    }
    payload.is_empty().then_some(sets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FaultyBackend;

    #[test]
    fn the_record_is_read_once() {
        let backend = FaultyBackend::new(1);
        let ids: RoaringTreemap = [3u64, 5, 1 << 40].into_iter().collect();
        write(
            &backend,
            &[
                (QueueId(7), ids.clone()),
                (QueueId(9), RoaringTreemap::new()),
            ],
        )
        .unwrap();
        let sets = take(&backend).unwrap();
        assert_eq!(sets.get(&QueueId(7)), Some(&ids));
        assert_eq!(sets.get(&QueueId(9)).map(|s| s.len()), Some(0));
        // Gone after the first open: a crash later must not find it.
        assert!(take(&backend).unwrap().is_empty());
    }

    #[test]
    fn a_malformed_record_is_ignored() {
        assert!(parse(&[1, 0, 0, 0, 7, 0, 0, 0, 200, 0, 0, 0, 1]).is_none());
        assert!(parse(&[]).is_none());
        assert_eq!(parse(&[0, 0, 0, 0]).map(|s| s.len()), Some(0));
    }
}
