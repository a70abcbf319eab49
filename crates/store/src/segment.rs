//! Segment files: naming, the 32-byte header, and scanning a segment's
//! records (docs/STORAGE.md §3, §6).
//!
//! Scanning is pure (works on an in-memory buffer) so recovery and tests
//! share it; it stops at the first invalid record and reports where, leaving
//! the policy (truncate the last segment, skip the rest of others) to the
//! caller.

use crate::record::{decode, frame_bytes_at, DecodeError, Decoded};

/// Directory holding the segments.
pub const SEGMENT_DIR: &str = "msgs";
/// Size of the segment header; the first record starts here.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: &[u8; 8] = b"WRNSEG01";
/// Current segment format version.
pub const SEGMENT_VERSION: u32 = 1;

/// Relative path of segment `segment`.
pub fn segment_path(segment: u32) -> String {
    format!("{SEGMENT_DIR}/{segment:08}.seg")
}

/// Segment number of a file name in the segment directory, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Segment number.
    pub segment: u32,
    /// Next message id at the time the segment was created.
    pub base_message_id: u64,
}

/// Appends the header of a new segment to `buf`.
pub fn encode_header(buf: &mut Vec<u8>, header: SegmentHeader) {
    let start = buf.len();
    buf.extend_from_slice(SEGMENT_MAGIC);
    buf.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    buf.extend_from_slice(&header.segment.to_le_bytes());
    buf.extend_from_slice(&header.base_message_id.to_le_bytes());
    let crc = crc32fast::hash(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
}

/// Parses and checks a segment header.
pub fn parse_header(buf: &[u8]) -> Result<SegmentHeader, String> {
    if buf.len() < SEGMENT_HEADER_BYTES {
        return Err(format!("{} bytes, shorter than the header", buf.len()));
    }
    if &buf[0..8] != SEGMENT_MAGIC {
        return Err("bad magic".into());
    }
    let crc = u32::from_le_bytes(buf[24..28].try_into().expect("4 bytes"));
    if crc32fast::hash(&buf[0..24]) != crc {
        return Err("header CRC mismatch".into());
    }
    let version = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    if version != SEGMENT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    Ok(SegmentHeader {
        segment: u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes")),
        base_message_id: u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes")),
    })
}

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Valid records seen.
    pub records: u64,
    /// Offset just past the last valid record.
    pub valid_end: usize,
    /// The first invalid record, if the scan did not reach the end cleanly.
    pub error: Option<DecodeError>,
    /// Frames from `valid_end` on whose length fields chain up, counting the
    /// invalid one: an estimate of how many records are lost (at least 1 if
    /// any byte is left).
    pub frames_dropped: u64,
}

/// Calls `visit(offset, framed_len, record)` for each valid record after the
/// header, in order, stopping at the first invalid one.
pub fn scan_records(buf: &[u8], mut visit: impl FnMut(usize, usize, Decoded<'_>)) -> ScanOutcome {
    let mut offset = SEGMENT_HEADER_BYTES.min(buf.len());
    let mut records = 0;
    while offset < buf.len() {
        let framed = match frame_bytes_at(buf, offset) {
            Ok(framed) => framed,
            Err(error) => return failed(buf, offset, records, error),
        };
        match decode(&buf[offset..offset + framed]) {
            Ok(record) => visit(offset, framed, record),
            Err(error) => return failed(buf, offset, records, error),
        }
        records += 1;
        offset += framed;
    }
    ScanOutcome {
        records,
        valid_end: offset,
        error: None,
        frames_dropped: 0,
    }
}

fn failed(buf: &[u8], offset: usize, records: u64, error: DecodeError) -> ScanOutcome {
    let mut frames_dropped = 1;
    let mut walk = offset;
    while let Ok(framed) = frame_bytes_at(buf, walk) {
        walk += framed;
        if walk >= buf.len() {
            break;
        }
        frames_dropped += 1;
    }
    ScanOutcome {
        records,
        valid_end: offset,
        error: Some(error),
        frames_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{encode_ack, encode_publish};
    use crate::types::{MessageId, QueueId, StoredMessage};

    fn segment_with_records(n: u64) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_header(
            &mut buf,
            SegmentHeader {
                segment: 3,
                base_message_id: 100,
            },
        );
        for i in 0..n {
            let msg = StoredMessage::new("x", "k", vec![], vec![i as u8; 50]);
            encode_publish(&mut buf, MessageId(100 + i), &[QueueId(1)], &msg);
            encode_ack(&mut buf, QueueId(1), MessageId(100 + i));
        }
        buf
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_path(1), "msgs/00000001.seg");
        assert_eq!(parse_segment_name("00000001.seg"), Some(1));
        assert_eq!(parse_segment_name("00000001.seg.tmp"), None);
        assert_eq!(parse_segment_name("1.seg"), None);
        assert_eq!(parse_segment_name("+0000001.seg"), None);
    }

    #[test]
    fn header_round_trip_and_corruption() {
        let buf = segment_with_records(0);
        assert_eq!(buf.len(), SEGMENT_HEADER_BYTES);
        assert_eq!(
            parse_header(&buf).unwrap(),
            SegmentHeader {
                segment: 3,
                base_message_id: 100
            }
        );
        let mut bad = buf.clone();
        bad[17] ^= 1;
        assert!(parse_header(&bad).is_err());
        assert!(parse_header(&buf[..10]).is_err());
    }

    #[test]
    fn clean_scan_sees_every_record() {
        let buf = segment_with_records(5);
        let mut seen = 0;
        let out = scan_records(&buf, |_, _, _| seen += 1);
        assert_eq!(seen, 10);
        assert_eq!(out.records, 10);
        assert_eq!(out.valid_end, buf.len());
        assert_eq!(out.error, None);
    }

    #[test]
    fn torn_tail_stops_at_last_whole_record() {
        let full = segment_with_records(3);
        let whole = scan_records(&full, |_, _, _| {}).valid_end;
        let torn = &full[..whole - 5];
        let out = scan_records(torn, |_, _, _| {});
        assert_eq!(out.records, 5);
        assert_eq!(out.error, Some(DecodeError::Truncated));
        assert_eq!(out.frames_dropped, 1);
    }

    #[test]
    fn corrupt_middle_record_stops_scan_and_counts_the_rest() {
        let mut buf = segment_with_records(3);
        // Flip a body byte of the first publish record.
        buf[SEGMENT_HEADER_BYTES + 40] ^= 0x10;
        let out = scan_records(&buf, |_, _, _| {});
        assert_eq!(out.records, 0);
        assert!(matches!(out.error, Some(DecodeError::Invalid(_))));
        assert_eq!(out.valid_end, SEGMENT_HEADER_BYTES);
        assert_eq!(out.frames_dropped, 6);
    }
}
