//! Sizing of a connection's socket buffers (both protocols): they start small and grow with
//! the traffic, and go back to small when the traffic stops.
//!
//! Why: a broker holds a read and a write buffer per connection. Sized for throughput
//! (64 KiB each) they made a connection carrying 10 msg/s cost ~75 KB of RSS, because reads
//! and writes walk through the whole allocation and so touch every page of it in time;
//! 20,000 such connections were 1.5 GB. Here:
//! - A write buffer starts empty and grows as output needs; a read buffer starts at
//!   `START_BYTES`; each read that fills all the room it had doubles
//!   the room the next read gets, up to `MAX_READ_BYTES`, so a busy connection is back to
//!   many frames per syscall after a handful of reads.
//! - An empty buffer is rewound to the start of its allocation (when nothing else holds on
//!   to it: frame payloads are slices of the read buffer), so a quiet connection keeps
//!   using the same first pages instead of walking through the allocation.
//! - At an idle check (every few seconds) a buffer that is empty, and for a read buffer was
//!   not filled since the last check, is given back: a write buffer entirely (the next
//!   output allocates what it needs), a read buffer down to `IDLE_READ_BYTES`, which is
//!   what an idle connection waits on until a read fills it. An idle connection held a
//!   1 KiB read buffer and the ~1 KiB its handshake's output left in the write buffer, a
//!   third of its ~6 KB (issue 30: 9,900 idle connections were ~300 MiB).

use bytes::BytesMut;

/// What a new read buffer gets, and what an idle one goes back to: a few small frames (a
/// 100-byte publish with its method and header frames is ~200 bytes). 1 KiB rather than the
/// 2 KiB it was: at 20,000 connections every KiB here is 20 MB of RSS, and a busy
/// connection's reads grow past it after a few full reads anyway.
pub const START_BYTES: usize = 1024;
/// The most room a read is given (unless a frame being read needs more).
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// The room an idle connection's reads get: a heartbeat (8 bytes) or a small method fits;
/// a read that fills it ends the idleness, and the next gets `START_BYTES` and grows on.
pub const IDLE_READ_BYTES: usize = 64;

/// A new read buffer.
pub fn new_socket_buffer() -> BytesMut {
    BytesMut::with_capacity(START_BYTES)
}

/// A new write buffer: empty until the first frame, then as large as the output needs
/// (a quiet connection's few hundred bytes).
pub fn new_write_buffer() -> BytesMut {
    BytesMut::new()
}

/// Moves an empty buffer's start back to the start of its allocation, without allocating
/// (nothing happens while frame payloads still point into it).
pub fn rewind(buf: &mut BytesMut) {
    if buf.is_empty() {
        // `try_reclaim` only reclaims when asked for more than the room left after the
        // current start, so ask for one byte more than that. When it cannot (a payload
        // still points into the buffer), the buffer stays as it is.
        let room = buf.capacity();
        let _ = buf.try_reclaim(room + 1);
    }
}

/// At an idle check: an empty write buffer is given back, whatever it grew to (the
/// handshake's output, a burst of deliveries); the next output allocates again.
pub fn shrink_idle_write_buffer(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() > 0 {
        *buf = new_write_buffer();
    }
}

/// The room the next read of one connection gets.
#[derive(Debug)]
pub struct ReadSizing {
    /// Room reserved when less than a quarter of it is left.
    reserve_bytes: usize,
    /// A read filled all its room since the last idle check.
    filled: bool,
    /// No read filled its room since an idle check found the connection quiet: reads get
    /// `IDLE_READ_BYTES`.
    idle: bool,
}

impl Default for ReadSizing {
    fn default() -> Self {
        ReadSizing {
            reserve_bytes: START_BYTES,
            filled: false,
            idle: false,
        }
    }
}

impl ReadSizing {
    /// Makes room for the next read; returns the room (what `note_read` wants to know).
    pub fn prepare(&self, buf: &mut BytesMut) -> usize {
        rewind(buf);
        let want = if self.idle {
            IDLE_READ_BYTES
        } else {
            self.reserve_bytes
        };
        if buf.capacity() - buf.len() < want / 4 {
            buf.reserve(want);
        }
        buf.capacity() - buf.len()
    }

    /// After a read of `read_bytes` into `room` bytes: a full read means more was waiting,
    /// so the next read gets twice the room.
    pub fn note_read(&mut self, read_bytes: usize, room: usize) {
        if read_bytes >= room {
            self.filled = true;
            if std::mem::take(&mut self.idle) {
                // Back to `START_BYTES`: traffic again, of a size unknown yet.
                return;
            }
            self.reserve_bytes = (self.reserve_bytes * 2).min(MAX_READ_BYTES);
        }
    }

    /// At an idle check: when no read filled its room since the last check and the buffer
    /// is empty, the connection is idle: its buffer is given back, and reads get
    /// `IDLE_READ_BYTES` until one fills them.
    pub fn on_idle_check(&mut self, buf: &mut BytesMut) {
        if std::mem::take(&mut self.filled) || !buf.is_empty() {
            return;
        }
        self.reserve_bytes = START_BYTES;
        self.idle = true;
        if buf.capacity() > IDLE_READ_BYTES {
            *buf = BytesMut::new();
        }
    }

    /// The room reads are given at the moment.
    pub fn reserve_bytes(&self) -> usize {
        self.reserve_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut};

    #[test]
    fn a_quiet_connection_keeps_using_the_first_bytes_of_its_buffer() {
        let mut buf = new_socket_buffer();
        let sizing = ReadSizing::default();
        let start = buf.as_ptr();
        for _ in 0..1000 {
            sizing.prepare(&mut buf);
            buf.put_slice(&[1u8; 200]);
            // A frame handled and dropped, as the connection does with a whole read.
            drop(buf.split_to(200).freeze());
            assert!(buf.is_empty());
        }
        sizing.prepare(&mut buf);
        assert_eq!(buf.as_ptr(), start, "the buffer walked away from its start");
        assert!(buf.capacity() <= START_BYTES);
    }

    #[test]
    fn a_payload_still_held_keeps_its_bytes_and_is_not_overwritten() {
        let mut buf = new_socket_buffer();
        let sizing = ReadSizing::default();
        sizing.prepare(&mut buf);
        buf.put_slice(b"first frame");
        let held = buf.split_to(11).freeze();
        sizing.prepare(&mut buf);
        buf.put_slice(b"second one!");
        assert_eq!(&held[..], b"first frame");
    }

    #[test]
    fn full_reads_grow_the_room_up_to_the_maximum_and_an_idle_check_shrinks_it() {
        let mut buf = new_socket_buffer();
        let mut sizing = ReadSizing::default();
        for _ in 0..10 {
            let room = sizing.prepare(&mut buf);
            buf.put_bytes(7, room);
            sizing.note_read(room, room);
            buf.clear();
        }
        assert_eq!(sizing.reserve_bytes(), MAX_READ_BYTES);
        assert!(sizing.prepare(&mut buf) >= MAX_READ_BYTES / 4);
        // Still busy at the first check (a read filled its room), idle at the second.
        sizing.on_idle_check(&mut buf);
        assert_eq!(sizing.reserve_bytes(), MAX_READ_BYTES);
        sizing.on_idle_check(&mut buf);
        assert_eq!(sizing.reserve_bytes(), START_BYTES);
        assert_eq!(buf.capacity(), 0, "an idle connection keeps no read buffer");
        // Idle: a heartbeat's read leaves the connection on the small room.
        assert_eq!(sizing.prepare(&mut buf), IDLE_READ_BYTES);
        buf.put_bytes(8, 8);
        sizing.note_read(8, IDLE_READ_BYTES);
        buf.clear();
        assert_eq!(sizing.prepare(&mut buf), IDLE_READ_BYTES);
        // A read that fills it: traffic again, the next read gets the start size.
        buf.put_bytes(1, IDLE_READ_BYTES);
        sizing.note_read(IDLE_READ_BYTES, IDLE_READ_BYTES);
        buf.clear();
        assert!(sizing.prepare(&mut buf) >= START_BYTES);
    }

    #[test]
    fn a_partial_read_does_not_grow_the_room() {
        let mut sizing = ReadSizing::default();
        sizing.note_read(100, START_BYTES);
        assert_eq!(sizing.reserve_bytes(), START_BYTES);
    }

    #[test]
    fn an_empty_write_buffer_is_given_back() {
        let mut buf = new_write_buffer();
        buf.put_bytes(0, 100_000);
        buf.advance(100_000);
        shrink_idle_write_buffer(&mut buf);
        assert_eq!(buf.capacity(), 0);
        // One that still holds output keeps it.
        buf.put_bytes(3, 10_000);
        buf.advance(1);
        shrink_idle_write_buffer(&mut buf);
        assert_eq!(buf.len(), 9_999);
    }
}
