//! The AMQP 1.0 decoders (`warren_amqp10`): frames split as a connection's read loop splits
//! them, each frame body decoded as a performative (or a SASL init), a transfer's payload as
//! a message through the protocol conversion and back, and our own value decoder on every
//! body. None may panic; what converts must come back out as a message that converts again.

use bytes::{Bytes, BytesMut};
use warren_amqp10::convert::{from_amqp10, to_amqp10};
use warren_amqp10_codec::value;
use warren_amqp10_codec::{decode_performative, decode_sasl_init, parse_frame, Performative};
use warren_broker::Message;
use warren_codec::{ContentHeader, ShortStr, BASIC_CLASS_ID};

/// The first octet picks the max-frame-size (the spec's minimum, a small one, our default);
/// the rest is what a peer sends after the protocol header.
pub fn amqp10_frames(data: &[u8]) {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let max_frame_size = [512, 4096, 131_072][usize::from(pick % 3)];
    // The whole input as one message too: the transfer path gets most of its coverage here.
    message(&Bytes::copy_from_slice(stream));
    let mut buf = BytesMut::from(stream);
    while let Ok(Some(frame)) = parse_frame(&mut buf, max_frame_size) {
        assert!(frame.body.len() + 8 <= max_frame_size as usize);
        if frame.body.is_empty() {
            continue;
        }
        let _ = value::decode(&frame.body);
        if frame.kind == 1 {
            let _ = decode_sasl_init(&frame.body);
            continue;
        }
        if let Ok((Performative::Transfer(_), payload)) = decode_performative(&frame.body) {
            message(&payload);
        }
    }
}

/// A transfer's payload through the broker's conversion, then out to an AMQP 1.0 consumer
/// (as published, and again dead-lettered), and that back in.
fn message(payload: &Bytes) {
    let Ok(incoming) = from_amqp10(payload) else {
        return;
    };
    let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &incoming.properties).properties;
    let m = Message::new(
        ShortStr::from("x"),
        ShortStr::from("k"),
        &incoming.properties,
        raw,
        incoming.body.clone(),
    )
    .with_amqp10(incoming.sections.clone());
    let out = to_amqp10(&m, false, 1);
    if let Err(e) = from_amqp10(&out) {
        panic!("what we send does not convert back: {e}");
    }
    let (copy, _) = warren_broker::dead_letter::dead_lettered(
        &m,
        "q",
        warren_broker::dead_letter::DeathReason::Rejected,
        &ShortStr::from(""),
        None,
    );
    let out = to_amqp10(&copy, true, 2);
    if let Err(e) = from_amqp10(&out) {
        panic!("a dead-lettered copy does not convert back: {e}");
    }
}
