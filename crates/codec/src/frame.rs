//! Frame splitting and frame writing (spec §4.2.3: type, channel, size, payload, frame-end).
//!
//! `parse_frame` is the single entry point for bytes read from a socket. It first checks the
//! 7-byte header and the size against frame_max, so an oversized or garbage frame is refused
//! before we wait for (or buffer) its body; "not enough bytes yet" is `Ok(None)`, never an error.

use crate::{CodecError, MessageBytes, Method, Writer};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What a 0-9-1 client sends first; also our reply to a client speaking another protocol.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
pub const FRAME_END: u8 = 0xCE;
/// Header (type, channel, size) plus the frame-end octet.
pub const FRAME_OVERHEAD: usize = 8;
/// A heartbeat: type 8 on channel 0, no payload.
pub const HEARTBEAT_FRAME: [u8; FRAME_OVERHEAD] = [8, 0, 0, 0, 0, 0, 0, FRAME_END];
/// The smallest frame_max a peer may negotiate, and the limit before tuning.
pub const FRAME_MIN_SIZE: u32 = 4096;

pub(crate) const FRAME_HEADER_SIZE: usize = 7;
/// The most `parse_frame` reserves ahead for a frame it has not got whole when there is no
/// frame_max (a client reading from a server it trusts no more than that).
const UNLIMITED_RESERVE_MAX: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Method,
    Header,
    Body,
    Heartbeat,
}

impl FrameKind {
    fn from_octet(octet: u8) -> Option<FrameKind> {
        Some(match octet {
            1 => FrameKind::Method,
            2 => FrameKind::Header,
            3 => FrameKind::Body,
            8 => FrameKind::Heartbeat,
            _ => return None,
        })
    }

    fn octet(self) -> u8 {
        match self {
            FrameKind::Method => 1,
            FrameKind::Header => 2,
            FrameKind::Body => 3,
            FrameKind::Heartbeat => 8,
        }
    }
}

/// A frame whose payload is still undecoded: a zero-copy slice of the read buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct RawFrame {
    pub kind: FrameKind,
    pub channel: u16,
    pub payload: Bytes,
}

/// What the front of a buffer holds of its next frame, checked as every frame is: a known
/// kind, a size within frame_max (0: no limit), its frame-end octet. The one place those
/// rules are, for `parse_frame` and for `split_publish` (`publish_frames.rs`).
pub(crate) enum FrameExtent {
    /// Fewer bytes than a frame header.
    NoHeader,
    /// The header is there; the whole frame is `frame_len` bytes.
    Partial { frame_len: usize },
    /// A whole frame: its payload is `size` bytes after the header.
    Whole {
        kind: FrameKind,
        channel: u16,
        size: usize,
    },
}

#[inline]
pub(crate) fn frame_extent(buf: &[u8], frame_max: u32) -> Result<FrameExtent, CodecError> {
    if buf.len() < FRAME_HEADER_SIZE {
        return Ok(FrameExtent::NoHeader);
    }
    let kind = FrameKind::from_octet(buf[0]).ok_or(CodecError::Frame("unknown frame type"))?;
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    let frame_len = size + FRAME_OVERHEAD;
    if frame_max != 0 && frame_len > frame_max as usize {
        return Err(CodecError::FrameTooLarge {
            size: frame_len,
            frame_max,
        });
    }
    if buf.len() < frame_len {
        return Ok(FrameExtent::Partial { frame_len });
    }
    if buf[frame_len - 1] != FRAME_END {
        return Err(CodecError::Frame("frame-end octet missing"));
    }
    Ok(FrameExtent::Whole {
        kind,
        channel,
        size,
    })
}

/// Takes one whole frame off the front of `buf`, `Ok(None)` when more bytes are needed.
/// `frame_max` bounds the whole frame, header and end octet included (0 means no limit).
pub fn parse_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<RawFrame>, CodecError> {
    let (kind, channel, size) = match frame_extent(buf, frame_max)? {
        FrameExtent::NoHeader => return Ok(None),
        FrameExtent::Partial { frame_len } => {
            // Room for the rest of the frame, so it arrives in few reads; without a limit
            // only up to a bound, or a 7-byte header claiming 4 GiB would allocate them.
            let missing = frame_len - buf.len();
            buf.reserve(if frame_max == 0 {
                missing.min(UNLIMITED_RESERVE_MAX)
            } else {
                missing
            });
            return Ok(None);
        }
        FrameExtent::Whole {
            kind,
            channel,
            size,
        } => (kind, channel, size),
    };
    let mut frame = buf.split_to(size + FRAME_OVERHEAD);
    frame.advance(FRAME_HEADER_SIZE);
    frame.truncate(size);
    Ok(Some(RawFrame {
        kind,
        channel,
        payload: frame.freeze(),
    }))
}

/// Writes a frame header with a zero size and returns where the size goes.
fn begin_frame(out: &mut BytesMut, kind: FrameKind, channel: u16) -> usize {
    out.put_u8(kind.octet());
    out.put_u16(channel);
    let size_at = out.len();
    out.put_u32(0);
    size_at
}

fn end_frame(out: &mut BytesMut, size_at: usize) {
    let size = (out.len() - size_at - 4) as u32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    out.put_u8(FRAME_END);
}

pub fn write_method(out: &mut BytesMut, channel: u16, method: &Method) {
    let size_at = begin_frame(out, FrameKind::Method, channel);
    method.encode(&mut Writer::new(out));
    end_frame(out, size_at);
}

/// A content header frame; `properties` is the encoded flags-and-properties block, passed
/// through verbatim from the publisher.
pub fn write_content_header(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    properties: &[u8],
) {
    let size_at = begin_frame(out, FrameKind::Header, channel);
    out.put_u16(class_id);
    out.put_u16(0); // weight, unused
    out.put_u64(body_size);
    out.put_slice(properties);
    end_frame(out, size_at);
}

/// Body frames of at most `frame_max` bytes each (none for an empty body).
pub fn write_body_frames(out: &mut BytesMut, channel: u16, body: &[u8], frame_max: u32) {
    for part in body.chunks(body_chunk_bytes(frame_max)) {
        out.reserve(part.len() + FRAME_OVERHEAD);
        let size_at = begin_frame(out, FrameKind::Body, channel);
        out.put_slice(part);
        end_frame(out, size_at);
    }
}

/// The fields of a basic.deliver, borrowed (see `write_deliver`).
#[derive(Debug, Clone, Copy)]
pub struct DeliverFields<'a> {
    pub consumer_tag: &'a str,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: &'a str,
    pub routing_key: &'a str,
}

/// One delivery's frames: basic.deliver, its content header and body frames, byte for byte
/// what `write_method(BasicDeliver)` + `write_content_header` + `write_body_frames` write.
/// This is the consume path's hot spot, so it borrows the names instead of building a
/// `BasicDeliver` (three reference-count increments and decrements on shared `Bytes`, and a
/// `Method` moved by value), reserves room for all the frames at once, and writes them into
/// that room in one pass (`Fill`) rather than field by field (each `put_*` on a `BytesMut`
/// checks its capacity again); a body over several frames is written after, frame by frame.
///
/// A message that still holds its publish's content header and body frames
/// (`MessageBytes::content_frames`) whose body fits one frame under `frame_max` has them
/// copied in one piece, with this channel and a zero weight written over the publisher's:
/// the same bytes as the frames written field by field.
pub fn write_deliver(
    out: &mut BytesMut,
    channel: u16,
    deliver: &DeliverFields,
    message: &MessageBytes,
    frame_max: u32,
) {
    let body_len = message.body().len();
    let chunk = body_chunk_bytes(frame_max);
    match message.content_frames() {
        Some(frames) if body_len <= chunk => {
            write_deliver_frames(out, channel, deliver, frames, body_len)
        }
        _ => write_deliver_fields(
            out,
            channel,
            deliver,
            message.properties_raw(),
            message.body(),
            frame_max,
        ),
    }
}

/// The basic.deliver method frame's payload length, and its three names cut to short
/// strings.
#[inline(always)]
fn deliver_method<'a>(deliver: &DeliverFields<'a>) -> (usize, [&'a [u8]; 3]) {
    fn short(s: &str) -> &[u8] {
        &s.as_bytes()[..s.len().min(255)]
    }
    let names = [
        short(deliver.consumer_tag),
        short(deliver.exchange),
        short(deliver.routing_key),
    ];
    // class, method, 3 length octets, delivery tag, bits, then the names.
    let len = 4 + 3 + 8 + 1 + names.iter().map(|n| n.len()).sum::<usize>();
    (len, names)
}

/// Writes the basic.deliver method frame (`method_len` and `names` from `deliver_method`).
/// Inlined into each writer, so that `Fill`'s position stays in a register.
#[inline(always)]
fn put_deliver_method(
    w: &mut Fill,
    channel: u16,
    deliver: &DeliverFields,
    method_len: usize,
    [consumer_tag, exchange, routing_key]: [&[u8]; 3],
) {
    w.put(&[FrameKind::Method.octet()]);
    w.put(&channel.to_be_bytes());
    w.put(&(method_len as u32).to_be_bytes());
    w.put(&crate::BasicDeliver::CLASS_ID.to_be_bytes());
    w.put(&crate::BasicDeliver::METHOD_ID.to_be_bytes());
    w.put(&[consumer_tag.len() as u8]);
    w.put(consumer_tag);
    w.put(&deliver.delivery_tag.to_be_bytes());
    w.put(&[u8::from(deliver.redelivered), exchange.len() as u8]);
    w.put(exchange);
    w.put(&[routing_key.len() as u8]);
    w.put(routing_key);
    w.put(&[FRAME_END]);
}

/// `write_deliver` for content frames as published (`frames`: the header frame, then the
/// body frame unless `body_len` is 0).
fn write_deliver_frames(
    out: &mut BytesMut,
    channel: u16,
    deliver: &DeliverFields,
    frames: &[u8],
    body_len: usize,
) {
    let (method_len, names) = deliver_method(deliver);
    let method_frame = method_len + FRAME_OVERHEAD;
    let total = method_frame + frames.len();
    out.reserve(total);
    let start = out.len();
    let room = &mut out.spare_capacity_mut()[..total];
    let mut w = Fill { buf: room, at: 0 };
    put_deliver_method(&mut w, channel, deliver, method_len, names);
    w.put(frames);
    debug_assert_eq!(w.at, total);
    // SAFETY: `Fill` wrote every byte of `room[..total]` (each `put` fills the range it
    // advances over, in order from 0), and `room` is `out`'s spare capacity from `start`.
    unsafe { out.set_len(start + total) };
    // This channel over the publisher's, in the header frame and the body frame, and a zero
    // weight (the header's octets after its class id), as `write_content_header` writes.
    let header = start + method_frame;
    let channel = channel.to_be_bytes();
    out[header + 1..header + 3].copy_from_slice(&channel);
    out[header + FRAME_HEADER_SIZE + 2..header + FRAME_HEADER_SIZE + 4].copy_from_slice(&[0, 0]);
    if body_len > 0 {
        let body = start + total - body_len - FRAME_OVERHEAD;
        out[body + 1..body + 3].copy_from_slice(&channel);
    }
}

/// `write_deliver` for a message whose content is written field by field.
fn write_deliver_fields(
    out: &mut BytesMut,
    channel: u16,
    deliver: &DeliverFields,
    properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    let (method_len, names) = deliver_method(deliver);
    // header: class, weight, size.
    let header_len = 12 + properties.len();
    let chunk = body_chunk_bytes(frame_max);
    let body_frames = body.len().div_ceil(chunk);
    let total =
        method_len + header_len + 2 * FRAME_OVERHEAD + body.len() + body_frames * FRAME_OVERHEAD;
    out.reserve(total);
    let start = out.len();
    let room = &mut out.spare_capacity_mut()[..total];
    let mut w = Fill { buf: room, at: 0 };
    put_deliver_method(&mut w, channel, deliver, method_len, names);
    w.put(&[FrameKind::Header.octet()]);
    w.put(&channel.to_be_bytes());
    w.put(&(header_len as u32).to_be_bytes());
    w.put(&crate::BASIC_CLASS_ID.to_be_bytes());
    w.put(&[0, 0]); // weight, unused
    w.put(&(body.len() as u64).to_be_bytes());
    w.put(properties);
    if body_frames == 1 {
        // The header's frame-end and the one body frame, written with the rest.
        let mut joint = [FRAME_END, FrameKind::Body.octet(), 0, 0, 0, 0, 0, 0];
        joint[2..4].copy_from_slice(&channel.to_be_bytes());
        joint[4..8].copy_from_slice(&(body.len() as u32).to_be_bytes());
        w.put(&joint);
        w.put(body);
        w.put(&[FRAME_END]);
        debug_assert_eq!(w.at, total);
    } else {
        w.put(&[FRAME_END]);
    }
    let written = w.at;
    // SAFETY: `Fill` wrote every byte of `room[..written]` (each `put` fills the range it
    // advances over, in order from 0), and `room` is `out`'s spare capacity from `start`.
    unsafe { out.set_len(start + written) };
    if body_frames != 1 {
        write_body_frames(out, channel, body, frame_max);
    }
}

/// Body bytes one body frame carries under `frame_max` (0: no limit).
fn body_chunk_bytes(frame_max: u32) -> usize {
    if frame_max == 0 {
        usize::MAX
    } else {
        frame_max as usize - FRAME_OVERHEAD
    }
}

/// Writes consecutive fields into room reserved and not yet written (`write_deliver`): one
/// pass, where filling the room with zeros first and then the fields wrote it twice.
struct Fill<'a> {
    buf: &'a mut [std::mem::MaybeUninit<u8>],
    at: usize,
}

impl Fill<'_> {
    /// Invariant: `buf[..at]` is written.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        let room = &mut self.buf[self.at..end];
        // SAFETY: `room` and `bytes` have the same length (the slice above checked it is in
        // bounds) and cannot overlap (`room` is borrowed mutably); `u8` needs no drop.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                room.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            )
        };
        self.at = end;
    }
}

pub fn write_heartbeat(out: &mut BytesMut) {
    out.put_slice(&HEARTBEAT_FRAME);
}
