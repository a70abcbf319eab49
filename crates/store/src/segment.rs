//! Segment files: naming and the 32-byte header (docs/STORAGE.md §3).
//! Reading the records of a segment is in `reader.rs`.

/// Directory holding the segments.
pub const SEGMENT_DIR: &str = "msgs";
/// Size of the segment header; the first record starts here.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: &[u8; 8] = b"WRNSEG01";
/// Current segment format version. Version 2 added the flags and publish time to
/// PUBLISH records; a segment of any other version has an invalid header.
pub const SEGMENT_VERSION: u32 = 2;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn header_only() -> Vec<u8> {
        let mut buf = Vec::new();
        encode_header(
            &mut buf,
            SegmentHeader {
                segment: 3,
                base_message_id: 100,
            },
        );
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
        let buf = header_only();
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
    fn other_versions_are_invalid_headers() {
        let mut v1 = header_only();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32fast::hash(&v1[0..24]);
        v1[24..28].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(parse_header(&v1), Err("unsupported version 1".into()));
    }
}
