//! The forwarding link's wire format: length-prefixed frames (`u32 length | u8 kind |
//! payload`, big-endian), the length counting kind and payload and bounded by
//! [`MAX_FRAME_BYTES`]. Messages travel in the quorum log's framing (`quorum/codec.rs`),
//! written straight into the outgoing buffer and read back as slices of the incoming one,
//! so a body is copied once into the socket buffer and not again on either side.
//!
//! Requests go from the node with the remote record (the forwarder) to the node serving the
//! queue; answers come back. Both directions share one connection, so each kind says which
//! half of the peer handles it.

use crate::message::Message;
use crate::quorum::codec;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Largest frame accepted: a maximal message (RabbitMQ's 512 MiB ceiling) plus headers.
pub const MAX_FRAME_BYTES: usize = 512 * 1024 * 1024 + 64 * 1024;

/// How a delivery the client held is settled (basic.ack / nack-or-reject with requeue /
/// without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleKind {
    Ack,
    Requeue,
    Reject,
}

/// One frame, its message (when it has one) still in the wire framing.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    // ---- forwarder → serving node ----
    /// Names queue `queue` of vhost `vhost` as `qid` for the frames that follow.
    Bind {
        qid: u64,
        vhost: String,
        queue: String,
    },
    /// A message for the queue; `seq` 0 asks for no confirm.
    Publish {
        qid: u64,
        seq: u64,
        message: Bytes,
    },
    Consume {
        cid: u64,
        qid: u64,
        prefetch: u32,
        no_ack: bool,
        exclusive: bool,
    },
    Cancel {
        cid: u64,
    },
    Settle {
        qid: u64,
        kind: SettleKind,
        ids: Vec<u64>,
    },
    Get {
        req: u64,
        qid: u64,
        no_ack: bool,
    },
    Purge {
        qid: u64,
    },
    Unbind {
        qid: u64,
    },
    /// A question for the peer's higher layers (`peer_query.rs`): `topic` says which, `body`
    /// is its argument; answered by [`Frame::Answer`] with the same `req`.
    Ask {
        req: u64,
        topic: String,
        body: Bytes,
    },
    // ---- serving node → forwarder ----
    /// The serving queue's answer to publish `seq` (its own confirm rule).
    Confirm {
        seq: u64,
        ok: bool,
    },
    Deliver {
        cid: u64,
        qid: u64,
        id: u64,
        redelivered: bool,
        message: Bytes,
    },
    /// The serving node ended consumer `cid` (queue deleted, consume refused).
    Cancelled {
        cid: u64,
    },
    /// The serving node stopped leading the quorum queue consumer `cid` consumed: the
    /// consumer is attached again through the new leader, not cancelled.
    Moved {
        cid: u64,
    },
    /// basic.get's answer: the message with the ready count after it, or nothing.
    Got {
        req: u64,
        got: Option<(u64, bool, u32, Bytes)>,
    },
    Counts {
        qid: u64,
        messages: u32,
        consumers: u32,
    },
    /// The answer to [`Frame::Ask`] `req` (empty when the peer has nothing to say to it).
    Answer {
        req: u64,
        body: Bytes,
    },
    // ---- both ways ----
    /// The sender's own resource alarms (`AlarmSet::bits`), sent when the link opens and on
    /// every change: a node's alarm blocks publishers on every node, as in RabbitMQ.
    Alarms {
        node: String,
        bits: u8,
    },
}

const BIND: u8 = 1;
const PUBLISH: u8 = 2;
const CONSUME: u8 = 3;
const CANCEL: u8 = 4;
const SETTLE: u8 = 5;
const GET: u8 = 6;
const PURGE: u8 = 7;
const UNBIND: u8 = 8;
const ASK: u8 = 9;
const CONFIRM: u8 = 64;
const DELIVER: u8 = 65;
const CANCELLED: u8 = 66;
const GOT: u8 = 67;
const COUNTS: u8 = 68;
const ANSWER: u8 = 69;
const MOVED: u8 = 70;
const ALARMS: u8 = 128;

/// Starts a frame of `kind` in `buf`; [`end`] fills in its length.
fn begin(buf: &mut BytesMut, kind: u8) -> usize {
    let at = buf.len();
    buf.put_u32(0);
    buf.put_u8(kind);
    at
}

fn end(buf: &mut BytesMut, at: usize) {
    let len = (buf.len() - at - 4) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_str(buf: &mut BytesMut, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    buf.put_u16(bytes.len() as u16);
    buf.put_slice(bytes);
}

/// Appends a frame carrying `message` in the log framing (publish or delivery).
pub fn put_publish(buf: &mut BytesMut, qid: u64, seq: u64, message: &Message) {
    let at = begin(buf, PUBLISH);
    buf.put_u64(qid);
    buf.put_u64(seq);
    codec::encode_into(buf, message);
    end(buf, at);
}

pub fn put_deliver(
    buf: &mut BytesMut,
    cid: u64,
    qid: u64,
    id: u64,
    redelivered: bool,
    message: &Message,
) {
    let at = begin(buf, DELIVER);
    buf.put_u64(cid);
    buf.put_u64(qid);
    buf.put_u64(id);
    buf.put_u8(redelivered.into());
    codec::encode_into(buf, message);
    end(buf, at);
}

pub fn put_got(buf: &mut BytesMut, req: u64, got: Option<(u64, bool, u32, &Message)>) {
    let at = begin(buf, GOT);
    buf.put_u64(req);
    match got {
        None => buf.put_u8(0),
        Some((id, redelivered, count, message)) => {
            buf.put_u8(1);
            buf.put_u64(id);
            buf.put_u8(redelivered.into());
            buf.put_u32(count);
            codec::encode_into(buf, message);
        }
    }
    end(buf, at);
}

/// Appends any frame but those carrying a message from the broker (use the `put_*`
/// functions for those; a `message` given here is written as it is).
pub fn put(buf: &mut BytesMut, frame: &Frame) {
    match frame {
        Frame::Bind { qid, vhost, queue } => {
            let at = begin(buf, BIND);
            buf.put_u64(*qid);
            put_str(buf, vhost);
            put_str(buf, queue);
            end(buf, at);
        }
        Frame::Publish { qid, seq, message } => {
            let at = begin(buf, PUBLISH);
            buf.put_u64(*qid);
            buf.put_u64(*seq);
            buf.put_slice(message);
            end(buf, at);
        }
        Frame::Consume {
            cid,
            qid,
            prefetch,
            no_ack,
            exclusive,
        } => {
            let at = begin(buf, CONSUME);
            buf.put_u64(*cid);
            buf.put_u64(*qid);
            buf.put_u32(*prefetch);
            buf.put_u8(u8::from(*no_ack) | (u8::from(*exclusive) << 1));
            end(buf, at);
        }
        Frame::Cancel { cid } => put_id(buf, CANCEL, *cid),
        Frame::Settle { qid, kind, ids } => {
            let at = begin(buf, SETTLE);
            buf.put_u64(*qid);
            buf.put_u8(match kind {
                SettleKind::Ack => 0,
                SettleKind::Requeue => 1,
                SettleKind::Reject => 2,
            });
            buf.put_u32(ids.len() as u32);
            for id in ids {
                buf.put_u64(*id);
            }
            end(buf, at);
        }
        Frame::Get { req, qid, no_ack } => {
            let at = begin(buf, GET);
            buf.put_u64(*req);
            buf.put_u64(*qid);
            buf.put_u8((*no_ack).into());
            end(buf, at);
        }
        Frame::Purge { qid } => put_id(buf, PURGE, *qid),
        Frame::Unbind { qid } => put_id(buf, UNBIND, *qid),
        Frame::Ask { req, topic, body } => {
            let at = begin(buf, ASK);
            buf.put_u64(*req);
            put_str(buf, topic);
            buf.put_slice(body);
            end(buf, at);
        }
        Frame::Answer { req, body } => {
            let at = begin(buf, ANSWER);
            buf.put_u64(*req);
            buf.put_slice(body);
            end(buf, at);
        }
        Frame::Confirm { seq, ok } => {
            let at = begin(buf, CONFIRM);
            buf.put_u64(*seq);
            buf.put_u8((*ok).into());
            end(buf, at);
        }
        Frame::Deliver {
            cid,
            qid,
            id,
            redelivered,
            message,
        } => {
            let at = begin(buf, DELIVER);
            buf.put_u64(*cid);
            buf.put_u64(*qid);
            buf.put_u64(*id);
            buf.put_u8((*redelivered).into());
            buf.put_slice(message);
            end(buf, at);
        }
        Frame::Cancelled { cid } => put_id(buf, CANCELLED, *cid),
        Frame::Moved { cid } => put_id(buf, MOVED, *cid),
        Frame::Alarms { node, bits } => {
            let at = begin(buf, ALARMS);
            put_str(buf, node);
            buf.put_u8(*bits);
            end(buf, at);
        }
        Frame::Got { req, got } => {
            let at = begin(buf, GOT);
            buf.put_u64(*req);
            match got {
                None => buf.put_u8(0),
                Some((id, redelivered, count, message)) => {
                    buf.put_u8(1);
                    buf.put_u64(*id);
                    buf.put_u8((*redelivered).into());
                    buf.put_u32(*count);
                    buf.put_slice(message);
                }
            }
            end(buf, at);
        }
        Frame::Counts {
            qid,
            messages,
            consumers,
        } => {
            let at = begin(buf, COUNTS);
            buf.put_u64(*qid);
            buf.put_u32(*messages);
            buf.put_u32(*consumers);
            end(buf, at);
        }
    }
}

fn put_id(buf: &mut BytesMut, kind: u8, id: u64) {
    let at = begin(buf, kind);
    buf.put_u64(id);
    end(buf, at);
}

/// Why the incoming bytes cannot be read: the link is closed then.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    Malformed(u8),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => write!(f, "frame of {n} bytes is over the limit"),
            FrameError::Malformed(kind) => write!(f, "malformed frame of kind {kind}"),
        }
    }
}

/// Takes the next whole frame off the front of `buf`: None while it is incomplete. The
/// frame's message is a slice of `buf`'s bytes (no copy).
pub fn take(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    let mut payload = buf.split_to(len).freeze();
    if payload.is_empty() {
        return Err(FrameError::Malformed(0));
    }
    let kind = payload.get_u8();
    parse(kind, &mut payload)
        .map(Some)
        .ok_or(FrameError::Malformed(kind))
}

fn parse(kind: u8, p: &mut Bytes) -> Option<Frame> {
    let frame = match kind {
        BIND => Frame::Bind {
            qid: u64_of(p)?,
            vhost: str_of(p)?,
            queue: str_of(p)?,
        },
        PUBLISH => Frame::Publish {
            qid: u64_of(p)?,
            seq: u64_of(p)?,
            message: std::mem::take(p),
        },
        CONSUME => {
            let (cid, qid, prefetch) = (u64_of(p)?, u64_of(p)?, u32_of(p)?);
            let flags = u8_of(p)?;
            Frame::Consume {
                cid,
                qid,
                prefetch,
                no_ack: flags & 1 != 0,
                exclusive: flags & 2 != 0,
            }
        }
        CANCEL => Frame::Cancel { cid: u64_of(p)? },
        SETTLE => {
            let qid = u64_of(p)?;
            let kind = match u8_of(p)? {
                0 => SettleKind::Ack,
                1 => SettleKind::Requeue,
                2 => SettleKind::Reject,
                _ => return None,
            };
            let n = u32_of(p)? as usize;
            if p.remaining() != n.checked_mul(8)? {
                return None;
            }
            let ids = (0..n).map(|_| p.get_u64()).collect();
            Frame::Settle { qid, kind, ids }
        }
        GET => Frame::Get {
            req: u64_of(p)?,
            qid: u64_of(p)?,
            no_ack: u8_of(p)? != 0,
        },
        PURGE => Frame::Purge { qid: u64_of(p)? },
        UNBIND => Frame::Unbind { qid: u64_of(p)? },
        ASK => Frame::Ask {
            req: u64_of(p)?,
            topic: str_of(p)?,
            body: std::mem::take(p),
        },
        ANSWER => Frame::Answer {
            req: u64_of(p)?,
            body: std::mem::take(p),
        },
        CONFIRM => Frame::Confirm {
            seq: u64_of(p)?,
            ok: u8_of(p)? != 0,
        },
        DELIVER => Frame::Deliver {
            cid: u64_of(p)?,
            qid: u64_of(p)?,
            id: u64_of(p)?,
            redelivered: u8_of(p)? != 0,
            message: std::mem::take(p),
        },
        CANCELLED => Frame::Cancelled { cid: u64_of(p)? },
        MOVED => Frame::Moved { cid: u64_of(p)? },
        ALARMS => Frame::Alarms {
            node: str_of(p)?,
            bits: u8_of(p)?,
        },
        GOT => {
            let req = u64_of(p)?;
            let got = match u8_of(p)? {
                0 => None,
                _ => Some((u64_of(p)?, u8_of(p)? != 0, u32_of(p)?, std::mem::take(p))),
            };
            Frame::Got { req, got }
        }
        COUNTS => Frame::Counts {
            qid: u64_of(p)?,
            messages: u32_of(p)?,
            consumers: u32_of(p)?,
        },
        _ => return None,
    };
    // Frames without a message end exactly here.
    (!p.has_remaining()).then_some(frame)
}

fn u8_of(p: &mut Bytes) -> Option<u8> {
    (p.remaining() >= 1).then(|| p.get_u8())
}

fn u32_of(p: &mut Bytes) -> Option<u32> {
    (p.remaining() >= 4).then(|| p.get_u32())
}

fn u64_of(p: &mut Bytes) -> Option<u64> {
    (p.remaining() >= 8).then(|| p.get_u64())
}

fn str_of(p: &mut Bytes) -> Option<String> {
    if p.remaining() < 2 {
        return None;
    }
    let len = p.get_u16() as usize;
    if p.remaining() < len {
        return None;
    }
    String::from_utf8(p.split_to(len).to_vec()).ok()
}

/// Reads a message framed by `quorum/codec.rs` (as published: no delivery count added).
pub fn message(framed: Bytes) -> Option<Message> {
    codec::decode(framed, 0, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_frames() -> Vec<Frame> {
        let m = Bytes::from_static(b"\x00\x01k\x00\x00\x00\x00body");
        vec![
            Frame::Bind {
                qid: 1,
                vhost: "/".into(),
                queue: "q".into(),
            },
            Frame::Publish {
                qid: 1,
                seq: 7,
                message: m.clone(),
            },
            Frame::Consume {
                cid: 2,
                qid: 1,
                prefetch: 10,
                no_ack: false,
                exclusive: true,
            },
            Frame::Cancel { cid: 2 },
            Frame::Settle {
                qid: 1,
                kind: SettleKind::Requeue,
                ids: vec![3, 4],
            },
            Frame::Get {
                req: 5,
                qid: 1,
                no_ack: true,
            },
            Frame::Purge { qid: 1 },
            Frame::Unbind { qid: 1 },
            Frame::Confirm { seq: 7, ok: false },
            Frame::Deliver {
                cid: 2,
                qid: 1,
                id: 3,
                redelivered: true,
                message: m.clone(),
            },
            Frame::Cancelled { cid: 2 },
            Frame::Moved { cid: 2 },
            Frame::Got { req: 5, got: None },
            Frame::Got {
                req: 6,
                got: Some((3, false, 9, m)),
            },
            Frame::Counts {
                qid: 1,
                messages: 3,
                consumers: 1,
            },
            Frame::Ask {
                req: 8,
                topic: "mgmt.connections".into(),
                body: Bytes::from_static(b"{}"),
            },
            Frame::Answer {
                req: 8,
                body: Bytes::from_static(b"[]"),
            },
            Frame::Alarms {
                node: "n1@host".into(),
                bits: 2,
            },
        ]
    }

    #[test]
    fn every_frame_round_trips_even_when_bytes_arrive_one_by_one() {
        let mut wire = BytesMut::new();
        for f in all_frames() {
            put(&mut wire, &f);
        }
        let mut incoming = BytesMut::new();
        let mut got = Vec::new();
        for byte in wire.iter() {
            incoming.put_u8(*byte);
            while let Some(f) = take(&mut incoming).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, all_frames());
        assert!(incoming.is_empty());
    }

    #[test]
    fn oversized_and_malformed_frames_are_refused() {
        let mut buf = BytesMut::new();
        buf.put_u32(MAX_FRAME_BYTES as u32 + 1);
        assert!(matches!(take(&mut buf), Err(FrameError::TooLarge(_))));
        let mut buf = BytesMut::new();
        buf.put_u32(3);
        buf.put_u8(CANCEL);
        buf.put_u16(0);
        assert_eq!(take(&mut buf), Err(FrameError::Malformed(CANCEL)));
        let mut buf = BytesMut::new();
        buf.put_u32(1);
        buf.put_u8(200);
        assert_eq!(take(&mut buf), Err(FrameError::Malformed(200)));
    }
}
