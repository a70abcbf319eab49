//! Reading records out of a segment file in bounded chunks (docs/STORAGE.md §4.1, §6).
//!
//! [`RecordReader`] keeps one window of the file in memory (normally
//! [`READ_CHUNK_BYTES`]) and hands out each framed record as a zero-copy
//! [`Bytes`] slice of that window. A record cut by the end of the window is
//! re-read at the start of the next one; a record longer than the chunk size
//! is read whole into a window of its own (its length prefix says how long it
//! is, and the prefix is checked against the readable end first, so a corrupt
//! length never makes it read past that end). While no slice of the current
//! window is alive, the next window reuses its allocation, so a sequential
//! pass over a segment allocates once.
//!
//! [`scan_segment`] is recovery's pass over one segment: every valid record
//! in order, stopping at the first invalid one and reporting where, leaving
//! the policy (truncate the last segment, skip the rest of others) to the
//! caller.

use std::io;

use bytes::{Bytes, BytesMut};

use crate::backend::BackendFile;
use crate::record::{decode, DecodeError, Decoded, FRAME_PREFIX_BYTES};
use crate::segment::{parse_header, SegmentHeader, SEGMENT_HEADER_BYTES};

/// Default window size for sequential reads (recovery and queue scans).
pub const READ_CHUNK_BYTES: usize = 1 << 20;

/// Smallest possible frame: prefix plus the type byte.
const MIN_FRAME_BYTES: usize = FRAME_PREFIX_BYTES + 1;

/// Sequential, chunked reader of the frames in `file[..limit]`.
pub struct RecordReader<'f> {
    file: &'f dyn BackendFile,
    limit: u64,
    chunk: usize,
    buf: Bytes,
    buf_at: u64,
}

impl<'f> RecordReader<'f> {
    /// A reader of `file` that never reads at or past `limit`, in windows of
    /// `chunk` bytes (at least one frame prefix).
    pub fn new(file: &'f dyn BackendFile, limit: u64, chunk: usize) -> Self {
        RecordReader {
            file,
            limit,
            chunk: chunk.max(MIN_FRAME_BYTES),
            buf: Bytes::new(),
            buf_at: 0,
        }
    }

    /// Makes `file[offset..offset + need]` part of the window. The caller
    /// guarantees `offset + need <= limit`.
    fn load(&mut self, offset: u64, need: usize) -> io::Result<()> {
        let have_end = self.buf_at + self.buf.len() as u64;
        if offset >= self.buf_at && offset + need as u64 <= have_end {
            return Ok(());
        }
        let avail = self.limit - offset;
        let n = (need as u64).max(avail.min(self.chunk as u64));
        let n = usize::try_from(n).map_err(|_| io::Error::other("read window too large"))?;
        // Reuse the old window's allocation unless a returned slice still uses it.
        let mut window = match std::mem::take(&mut self.buf).try_into_mut() {
            Ok(window) => window,
            Err(_) => BytesMut::new(),
        };
        if window.len() < n {
            window.resize(n, 0);
        } else {
            window.truncate(n);
        }
        self.buf_at = offset;
        self.file.read_at(offset, &mut window[..])?;
        self.buf = window.freeze();
        Ok(())
    }

    /// Framed length of the record at `offset`, after checking that its
    /// length field is sane and the whole frame lies below the limit. Reads
    /// only the prefix (plus whatever the window brings along); does not
    /// check the CRC.
    pub fn frame_len(&mut self, offset: u64) -> io::Result<Result<usize, DecodeError>> {
        let avail = self.limit.saturating_sub(offset);
        if avail < MIN_FRAME_BYTES as u64 {
            return Ok(Err(DecodeError::Truncated));
        }
        self.load(offset, MIN_FRAME_BYTES)?;
        let at = (offset - self.buf_at) as usize;
        let len = u32::from_le_bytes(self.buf[at + 4..at + 8].try_into().expect("4 bytes"));
        if len == 0 {
            return Ok(Err(DecodeError::Invalid("zero record length".into())));
        }
        let framed = FRAME_PREFIX_BYTES as u64 + u64::from(len);
        if framed > avail {
            return Ok(Err(DecodeError::Truncated));
        }
        Ok(Ok(framed as usize))
    }

    /// The framed record at `offset` (CRC not checked: pass it to
    /// [`decode`]), as a slice of the current window.
    pub fn frame(&mut self, offset: u64) -> io::Result<Result<Bytes, DecodeError>> {
        let framed = match self.frame_len(offset)? {
            Ok(framed) => framed,
            Err(e) => return Ok(Err(e)),
        };
        self.load(offset, framed)?;
        let at = (offset - self.buf_at) as usize;
        Ok(Ok(self.buf.slice(at..at + framed)))
    }
}

/// Reads and checks the header of a segment `len` bytes long.
pub fn read_header(file: &dyn BackendFile, len: u64) -> io::Result<Result<SegmentHeader, String>> {
    let n = len.min(SEGMENT_HEADER_BYTES as u64) as usize;
    let mut buf = [0u8; SEGMENT_HEADER_BYTES];
    file.read_at(0, &mut buf[..n])?;
    Ok(parse_header(&buf[..n]))
}

/// How a pass over a segment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Valid records seen.
    pub records: u64,
    /// Offset just past the last valid record.
    pub valid_end: u64,
    /// The first invalid record, if the scan did not reach the end cleanly.
    pub error: Option<DecodeError>,
    /// Frames from `valid_end` on whose length fields chain up, counting the
    /// invalid one: an estimate of how many records are lost (at least 1 if
    /// any byte is left).
    pub frames_dropped: u64,
}

/// Calls `visit(offset, framed_len, record)` for each valid record of
/// `file[SEGMENT_HEADER_BYTES..len]`, in order, stopping at the first invalid
/// one. `visit` may reject a record that decoded (`Err(reason)`): it then
/// counts as the first invalid record.
pub fn scan_segment(
    file: &dyn BackendFile,
    len: u64,
    chunk: usize,
    mut visit: impl FnMut(u64, usize, Decoded<'_>) -> Result<(), String>,
) -> io::Result<ScanOutcome> {
    let mut reader = RecordReader::new(file, len, chunk);
    let mut offset = (SEGMENT_HEADER_BYTES as u64).min(len);
    let mut records = 0;
    while offset < len {
        let record = match reader.frame(offset)? {
            Ok(record) => record,
            Err(error) => return failed(&mut reader, offset, records, error),
        };
        let framed = record.len();
        let verdict = match decode(&record) {
            Ok(decoded) => visit(offset, framed, decoded).map_err(DecodeError::Invalid),
            Err(error) => Err(error),
        };
        drop(record); // lets the next window reuse the buffer
        if let Err(error) = verdict {
            return failed(&mut reader, offset, records, error);
        }
        records += 1;
        offset += framed as u64;
    }
    Ok(ScanOutcome {
        records,
        valid_end: offset,
        error: None,
        frames_dropped: 0,
    })
}

fn failed(
    reader: &mut RecordReader<'_>,
    offset: u64,
    records: u64,
    error: DecodeError,
) -> io::Result<ScanOutcome> {
    let mut frames_dropped = 1;
    let mut walk = offset;
    while let Ok(framed) = reader.frame_len(walk)? {
        walk += framed as u64;
        if walk >= reader.limit {
            break;
        }
        frames_dropped += 1;
    }
    Ok(ScanOutcome {
        records,
        valid_end: offset,
        error: Some(error),
        frames_dropped,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{Backend, FaultyBackend};
    use crate::record::{encode_ack, encode_publish};
    use crate::segment::encode_header;
    use crate::types::{MessageId, QueueId, StoredMessage};

    fn segment_with_records(n: u64, body: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_header(
            &mut buf,
            SegmentHeader {
                segment: 3,
                base_message_id: 100,
            },
        );
        for i in 0..n {
            let msg = StoredMessage::new("x", "k", vec![], vec![i as u8; body + i as usize]);
            encode_publish(&mut buf, MessageId(100 + i), &[QueueId(1)], &msg);
            encode_ack(&mut buf, QueueId(1), MessageId(100 + i));
        }
        buf
    }

    fn file_with(bytes: &[u8]) -> Arc<dyn BackendFile> {
        let disk = FaultyBackend::new(1);
        let file = disk.open("msgs/00000003.seg", true).unwrap();
        file.append(bytes).unwrap();
        file
    }

    fn scan(bytes: &[u8], chunk: usize) -> (Vec<(u64, usize)>, ScanOutcome) {
        let file = file_with(bytes);
        let mut seen = Vec::new();
        let out = scan_segment(file.as_ref(), bytes.len() as u64, chunk, |o, f, _| {
            seen.push((o, f));
            Ok(())
        })
        .unwrap();
        (seen, out)
    }

    #[test]
    fn header_is_read_and_checked() {
        let buf = segment_with_records(0, 10);
        let file = file_with(&buf);
        assert_eq!(
            read_header(file.as_ref(), buf.len() as u64).unwrap(),
            Ok(SegmentHeader {
                segment: 3,
                base_message_id: 100
            })
        );
        assert!(read_header(file.as_ref(), 10).unwrap().is_err());
    }

    #[test]
    fn every_chunk_size_sees_the_same_records() {
        let buf = segment_with_records(20, 37);
        let (reference, out) = scan(&buf, READ_CHUNK_BYTES);
        assert_eq!(reference.len(), 40);
        assert_eq!(out.valid_end, buf.len() as u64);
        assert_eq!(out.error, None);
        // Chunks smaller than most records, cutting records everywhere.
        for chunk in [1, 9, 10, 33, 64, 100, 127, 500] {
            let (seen, out) = scan(&buf, chunk);
            assert_eq!(seen, reference, "chunk {chunk}");
            assert_eq!(out.valid_end, buf.len() as u64, "chunk {chunk}");
        }
    }

    #[test]
    fn slices_outlive_the_window() {
        let buf = segment_with_records(10, 50);
        let file = file_with(&buf);
        let mut reader = RecordReader::new(file.as_ref(), buf.len() as u64, 64);
        let mut offset = SEGMENT_HEADER_BYTES as u64;
        let mut kept = Vec::new();
        while offset < buf.len() as u64 {
            let record = reader.frame(offset).unwrap().unwrap();
            offset += record.len() as u64;
            kept.push(record);
        }
        let joined: Vec<u8> = kept.iter().flat_map(|r| r.iter().copied()).collect();
        assert_eq!(joined, buf[SEGMENT_HEADER_BYTES..]);
    }

    #[test]
    fn torn_tail_stops_at_last_whole_record() {
        let full = segment_with_records(3, 50);
        let (_, whole) = scan(&full, 64);
        let torn = &full[..whole.valid_end as usize - 5];
        let (_, out) = scan(torn, 64);
        assert_eq!(out.records, 5);
        assert_eq!(out.error, Some(DecodeError::Truncated));
        assert_eq!(out.frames_dropped, 1);
    }

    #[test]
    fn corrupt_middle_record_stops_scan_and_counts_the_rest() {
        let mut buf = segment_with_records(3, 50);
        // Flip a body byte of the first publish record.
        buf[SEGMENT_HEADER_BYTES + 40] ^= 0x10;
        for chunk in [16, READ_CHUNK_BYTES] {
            let (_, out) = scan(&buf, chunk);
            assert_eq!(out.records, 0);
            assert!(matches!(out.error, Some(DecodeError::Invalid(_))));
            assert_eq!(out.valid_end, SEGMENT_HEADER_BYTES as u64);
            assert_eq!(out.frames_dropped, 6);
        }
    }

    #[test]
    fn visitor_can_reject_a_record() {
        let buf = segment_with_records(3, 50);
        let file = file_with(&buf);
        let mut n = 0;
        let out = scan_segment(file.as_ref(), buf.len() as u64, 64, |_, _, _| {
            n += 1;
            if n == 3 {
                Err("no".into())
            } else {
                Ok(())
            }
        })
        .unwrap();
        assert_eq!(out.records, 2);
        assert_eq!(out.error, Some(DecodeError::Invalid("no".into())));
        assert_eq!(out.frames_dropped, 4);
    }

    #[test]
    fn a_corrupt_length_never_reads_past_the_limit() {
        let mut buf = segment_with_records(2, 50);
        // Claim a 4 GiB record.
        buf[SEGMENT_HEADER_BYTES + 4..SEGMENT_HEADER_BYTES + 8].copy_from_slice(&[0xff; 4]);
        let (_, out) = scan(&buf, 64);
        assert_eq!(out.error, Some(DecodeError::Truncated));
        assert_eq!(out.valid_end, SEGMENT_HEADER_BYTES as u64);
    }
}
