//! The AMQP 1.0 wire format behind one interface: protocol headers, frames (8-byte header,
//! then the performative, then a transfer's payload), and the encoding of performatives and
//! SASL frames; `value` reads the values our own code reads. The type system is the
//! fe2o3-amqp-types crate (with serde_amqp); the server (`warren-amqp10`) and `warren perf`'s
//! AMQP 1.0 client use the types re-exported here and never call the encoder themselves, so
//! the codec can be replaced without touching the protocol logic. No I/O and no broker here:
//! a client depends on this crate alone.
//!
//! Why the crate and not our own codec: its types follow the specification field by field,
//! it is maintained, and issue 12's benchmark says it is not the bottleneck. At 10,000 links
//! (benches/frames.rs: one frame per link handle, a loaded 2-core machine) a transfer decodes
//! in ~380 ns and encodes in ~310 ns, a disposition ~240 ns, a flow ~260 ns: ~0.9 µs per
//! message (one transfer in, one out, one disposition), 0.09 of a core for the many-pairs
//! workload at 10,000 pairs (100,000 msg/s). Profiling the broker under many-pairs (docs/benchmarks.md) puts the crate's
//! serde code at about 3 % of the broker's CPU; the broker spends about the same per message
//! on AMQP 1.0 as on 0-9-1, and the rest of 1.0's latency is the client's. Frames are
//! serialised straight into the connection's write buffer. A transfer's payload (the
//! message) is never decoded here: it is a zero-copy slice of the read buffer.

pub mod value;
use bytes::{BufMut, Bytes, BytesMut};

pub use fe2o3_amqp_types::definitions::{
    AmqpError, ConnectionError, Error, ErrorCondition, Fields, LinkError, ReceiverSettleMode, Role,
    SenderSettleMode, SessionError,
};
pub use fe2o3_amqp_types::messaging::{
    Accepted, DeliveryState, DistributionMode, Modified, Rejected, Released, Source, Target,
    TargetArchetype,
};
pub use fe2o3_amqp_types::performatives::{
    Attach, Begin, ChannelMax, Close, Detach, Disposition, End, Flow, MaxFrameSize, Open,
    Performative, Transfer,
};
pub use fe2o3_amqp_types::primitives::{Array, Binary, Symbol, Value};
pub use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslMechanisms, SaslOutcome};

/// The AMQP 1.0 protocol header (protocol id 0).
pub const PROTOCOL_HEADER_AMQP: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// The SASL security layer's protocol header (protocol id 3).
pub const PROTOCOL_HEADER_SASL: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// Frame types.
pub const FRAME_AMQP: u8 = 0;
pub const FRAME_SASL: u8 = 1;
/// Every peer must accept frames of this size (the spec's MIN-MAX-FRAME-SIZE).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;
/// Bytes of a transfer frame that are not payload, at most, for splitting messages: the
/// frame header and a transfer performative with an 8-byte delivery tag and a state.
pub const TRANSFER_OVERHEAD_BYTES: usize = 128;

/// Whether the 8 bytes a client opened with ask for AMQP 1.0 (with or without SASL).
pub fn is_amqp10_header(header: &[u8]) -> bool {
    header == PROTOCOL_HEADER_AMQP || header == PROTOCOL_HEADER_SASL
}

/// One frame as read: its type, channel and body (empty for a heartbeat).
#[derive(Debug)]
pub struct RawFrame {
    pub kind: u8,
    pub channel: u16,
    pub body: Bytes,
}

/// Splits the next whole frame off `buf`; None until one is complete. The size is checked
/// before anything is buffered beyond it.
pub fn parse_frame(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<RawFrame>, String> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let data_offset_bytes = usize::from(buf[4]) * 4;
    if size < 8 || data_offset_bytes < 8 || data_offset_bytes > size as usize {
        return Err(format!(
            "malformed frame header (size {size}, doff {})",
            buf[4]
        ));
    }
    if size > max_frame_size {
        return Err(format!(
            "frame of {size} bytes exceeds max-frame-size {max_frame_size}"
        ));
    }
    if buf.len() < size as usize {
        return Ok(None);
    }
    let kind = buf[5];
    let channel = u16::from_be_bytes([buf[6], buf[7]]);
    let frame = buf.split_to(size as usize).freeze();
    Ok(Some(RawFrame {
        kind,
        channel,
        body: frame.slice(data_offset_bytes..),
    }))
}

/// The byte length of the AMQP value (described or not) at the start of `b`, or None when
/// `b` does not hold a whole one. Frames are split into performative and payload with it,
/// and messages into their sections.
pub fn value_len(b: &[u8]) -> Option<usize> {
    let code = *b.first()?;
    if code == 0x00 {
        let descriptor = value_len(&b[1..])?;
        let value = value_len(b.get(1 + descriptor..)?)?;
        return Some(1 + descriptor + value);
    }
    let len = match code >> 4 {
        0x4 => 1,
        0x5 => 2,
        0x6 => 3,
        0x7 => 5,
        0x8 => 9,
        0x9 => 17,
        0xa | 0xc | 0xe => 2 + usize::from(*b.get(1)?),
        0xb | 0xd | 0xf => 5 + u32::from_be_bytes(b.get(1..5)?.try_into().ok()?) as usize,
        _ => return None,
    };
    (b.len() >= len).then_some(len)
}

/// A frame body's performative and the payload after it (a transfer's message bytes).
pub fn decode_performative(body: &Bytes) -> Result<(Performative, Bytes), String> {
    let len = value_len(body).ok_or("truncated performative")?;
    // What serde_amqp would misread (or, in a debug build, panic on) is refused first.
    crate::value::check(&body[..len]).map_err(|e| format!("bad performative: {e}"))?;
    let performative: Performative =
        serde_amqp::from_slice(&body[..len]).map_err(|e| format!("bad performative: {e}"))?;
    Ok((performative, body.slice(len..)))
}

/// A SASL init from a SASL frame body.
pub fn decode_sasl_init(body: &[u8]) -> Result<SaslInit, String> {
    crate::value::check(body).map_err(|e| format!("bad sasl-init: {e}"))?;
    serde_amqp::from_slice(body).map_err(|e| format!("bad sasl-init: {e}"))
}

/// Appends a frame of `kind` on `channel` whose body is `value` then `payload`. The value
/// is serialised straight into `out` (no buffer of its own per frame) and the size field
/// written afterwards.
fn write_frame<T: serde::Serialize>(
    out: &mut BytesMut,
    kind: u8,
    channel: u16,
    value: &T,
    payload: &[u8],
) {
    let start = out.len();
    out.reserve(64 + payload.len());
    out.put_u32(0); // the size, known once the value is written
    out.put_u8(2);
    out.put_u8(kind);
    out.put_u16(channel);
    let mut serializer = serde_amqp::ser::Serializer::new((&mut *out).writer());
    // Serialising into memory cannot fail for these types; an error would be a bug in the
    // type definitions, and the frame is then simply not sent.
    if value.serialize(&mut serializer).is_err() {
        tracing::error!("AMQP 1.0: a frame failed to encode");
        out.truncate(start);
        return;
    }
    out.extend_from_slice(payload);
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// Appends a performative frame; `payload` follows a transfer.
pub fn write_performative(out: &mut BytesMut, channel: u16, p: &Performative, payload: &[u8]) {
    write_frame(out, FRAME_AMQP, channel, p, payload);
}

pub fn write_sasl_mechanisms(out: &mut BytesMut, m: &SaslMechanisms) {
    write_frame(out, FRAME_SASL, 0, m, &[]);
}

pub fn write_sasl_outcome(out: &mut BytesMut, o: &SaslOutcome) {
    write_frame(out, FRAME_SASL, 0, o, &[]);
}

/// A client's first SASL frame (the perf tool's AMQP 1.0 client; the broker only reads
/// inits).
pub fn write_sasl_init(out: &mut BytesMut, init: &SaslInit) {
    write_frame(out, FRAME_SASL, 0, init, &[]);
}

/// What a client reads in the SASL layer.
#[derive(Debug)]
pub enum SaslServerFrame {
    Mechanisms(SaslMechanisms),
    Outcome(SaslOutcome),
}

/// A SASL frame a server sent, told apart by its descriptor (sasl-mechanisms 0x40,
/// sasl-outcome 0x44); a sasl-challenge (0x42) or anything else is an error, since the
/// mechanisms a client of ours offers (PLAIN, ANONYMOUS) have no challenge.
pub fn decode_sasl_server_frame(body: &[u8]) -> Result<SaslServerFrame, String> {
    crate::value::check(body).map_err(|e| format!("bad SASL frame: {e}"))?;
    let code = match body {
        [0x00, 0x53, code, ..] => u64::from(*code),
        [0x00, 0x80, rest @ ..] if rest.len() >= 8 => {
            u64::from_be_bytes(rest[..8].try_into().map_err(|_| "bad SASL frame")?)
        }
        _ => return Err("a SASL frame without a numeric descriptor".into()),
    };
    match code {
        0x40 => serde_amqp::from_slice(body)
            .map(SaslServerFrame::Mechanisms)
            .map_err(|e| format!("bad sasl-mechanisms: {e}")),
        0x44 => serde_amqp::from_slice(body)
            .map(SaslServerFrame::Outcome)
            .map_err(|e| format!("bad sasl-outcome: {e}")),
        0x42 => {
            Err("the server sent a sasl-challenge, which PLAIN and ANONYMOUS do not take".into())
        }
        other => Err(format!("unexpected SASL frame (descriptor {other:#x})")),
    }
}

/// An error as peers print it: "amqp:not-found: no queue 'q'".
pub fn describe_error(e: &Error) -> String {
    let condition = match &e.condition {
        ErrorCondition::AmqpError(c) => Symbol::from(c).0,
        ErrorCondition::ConnectionError(c) => Symbol::from(c).0,
        ErrorCondition::SessionError(c) => Symbol::from(c).0,
        ErrorCondition::LinkError(c) => Symbol::from(c).0,
        ErrorCondition::Custom(c) => c.0.clone(),
        // Transaction errors, when a crate enables the type crate's transaction feature.
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    };
    match &e.description {
        Some(d) if !d.is_empty() => format!("{condition}: {d}"),
        _ => condition,
    }
}

/// An empty frame: the idle-timeout keep-alive.
pub fn write_empty_frame(out: &mut BytesMut) {
    out.extend_from_slice(&[0, 0, 0, 8, 2, FRAME_AMQP, 0, 0]);
}

/// An error with a condition and a description.
pub fn error(condition: impl Into<ErrorCondition>, description: impl Into<String>) -> Error {
    Error {
        condition: condition.into(),
        description: Some(description.into()),
        info: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_payload() {
        let mut out = BytesMut::new();
        let transfer = Transfer {
            handle: 3.into(),
            delivery_id: Some(7),
            delivery_tag: Some(serde_bytes::ByteBuf::from(vec![1, 2])),
            message_format: Some(0),
            settled: Some(false),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        write_performative(
            &mut out,
            5,
            &Performative::Transfer(transfer.clone()),
            b"hello",
        );
        write_empty_frame(&mut out);
        let frame = parse_frame(&mut out, 1024).unwrap().unwrap();
        assert_eq!((frame.kind, frame.channel), (FRAME_AMQP, 5));
        let (p, payload) = decode_performative(&frame.body).unwrap();
        assert_eq!(p, Performative::Transfer(transfer));
        assert_eq!(&payload[..], b"hello");
        let empty = parse_frame(&mut out, 1024).unwrap().unwrap();
        assert!(empty.body.is_empty());
        assert!(out.is_empty());
    }

    #[test]
    fn oversized_and_malformed_frames_are_refused() {
        let mut big = BytesMut::from(&[0u8, 0, 4, 0, 2, 0, 0, 0][..]);
        assert!(parse_frame(&mut big, 512).is_err());
        let mut bad = BytesMut::from(&[0u8, 0, 0, 8, 1, 0, 0, 0][..]);
        assert!(parse_frame(&mut bad, 512).is_err());
        let mut partial = BytesMut::from(&[0u8, 0, 0, 20, 2, 0, 0, 0, 1][..]);
        assert!(parse_frame(&mut partial, 512).unwrap().is_none());
    }

    #[test]
    fn a_client_reads_the_servers_sasl_frames() {
        let mut out = BytesMut::new();
        let mechanisms = SaslMechanisms {
            sasl_server_mechanisms: Array(vec![Symbol::from("PLAIN"), Symbol::from("ANONYMOUS")]),
        };
        write_sasl_mechanisms(&mut out, &mechanisms);
        let frame = parse_frame(&mut out, 512).unwrap().unwrap();
        assert_eq!(frame.kind, FRAME_SASL);
        let Ok(SaslServerFrame::Mechanisms(m)) = decode_sasl_server_frame(&frame.body) else {
            panic!("mechanisms")
        };
        assert_eq!(m.sasl_server_mechanisms.0.len(), 2);
        let outcome = SaslOutcome {
            code: SaslCode::Auth,
            additional_data: None,
        };
        write_sasl_outcome(&mut out, &outcome);
        let frame = parse_frame(&mut out, 512).unwrap().unwrap();
        let Ok(SaslServerFrame::Outcome(o)) = decode_sasl_server_frame(&frame.body) else {
            panic!("outcome")
        };
        assert_eq!(o.code, SaslCode::Auth);
        // A client's init is not a server frame; garbage is refused, not panicked on.
        let init = SaslInit {
            mechanism: Symbol::from("PLAIN"),
            initial_response: Some(Binary::from(b"\0u\0p".to_vec())),
            hostname: None,
        };
        write_sasl_init(&mut out, &init);
        let frame = parse_frame(&mut out, 512).unwrap().unwrap();
        assert_eq!(
            decode_sasl_init(&frame.body).unwrap().mechanism.as_str(),
            "PLAIN"
        );
        assert!(decode_sasl_server_frame(&frame.body).is_err());
        assert!(decode_sasl_server_frame(&[0x00, 0x53, 0x44, 0xc0, 0xff]).is_err());
        assert!(decode_sasl_server_frame(&[]).is_err());
    }

    #[test]
    fn errors_read_as_their_symbols() {
        let e = error(AmqpError::NotFound, "no queue 'q'");
        assert_eq!(describe_error(&e), "amqp:not-found: no queue 'q'");
        let e = Error {
            condition: LinkError::DetachForced.into(),
            description: None,
            info: None,
        };
        assert_eq!(describe_error(&e), "amqp:link:detach-forced");
    }

    #[test]
    fn value_lengths() {
        assert_eq!(value_len(&[0x40]), Some(1));
        assert_eq!(value_len(&[0x52, 7]), Some(2));
        assert_eq!(value_len(&[0xa1, 2, b'h', b'i']), Some(4));
        assert_eq!(value_len(&[0xa1, 3, b'h', b'i']), None);
        // described: descriptor smallulong 0x75 (data), value vbin8 of 1 byte
        assert_eq!(value_len(&[0x00, 0x53, 0x75, 0xa0, 1, 9, 0xff]), Some(6));
    }
}
