//! A basic.publish taken off the read buffer whole: its method frame, its content header
//! frame and its one body frame (none for an empty body), when all of them are already in
//! the buffer, back to back on one channel.
//!
//! Why: a publisher's message is three frames, nearly always read together. Taken as one
//! piece it costs one split of the buffer, where frame by frame it cost three splits (each a
//! reference count taken and later dropped) and three passes through the connection's
//! dispatch. The message keeps that one piece whole, with where its names, properties and
//! body lie in it (`MessageBytes`).
//!
//! The rule that keeps this invisible: `split_publish` takes a publish only when every frame
//! in it is one `parse_frame` would hand out whole and without error (kind, channel, size
//! within frame_max, frame-end octet), and the header says the body is exactly the one body
//! frame that follows. Anything else (a body over several frames, a publish not yet whole,
//! a malformed frame, a frame of another channel in between) is left in the buffer for
//! `parse_frame`, which sees what it would have seen. The checks on the frames' contents
//! (the header's class and size, what the channel allows) stay with whoever handles a
//! publish's frames: they run on what this returns as on the frames one by one. A header too
//! short to hold its property flags is left to `parse_frame` too, so that
//! `ContentHeader::decode` gives its error.

use crate::frame::{frame_extent, FrameExtent, FRAME_HEADER_SIZE};
use crate::hot_methods::publish_spans_in;
use crate::{CodecError, FrameKind, MessageBytes};
use bytes::BytesMut;

/// A content header's class, weight and body size, then at least the two octets of property
/// flags: a shorter header is left to `parse_frame` and `ContentHeader::decode`, whose
/// error it gets.
const HEADER_MIN_BYTES: usize = 14;

/// One basic.publish with its whole content.
#[derive(Debug)]
pub struct PublishFrames {
    pub channel: u16,
    /// The content header's class id (basic's, unless the client is wrong).
    pub class_id: u16,
    /// The content header's body size: the body's length.
    pub body_size: u64,
    /// The message, or the error `decode_basic_publish` gives for the method's payload.
    pub publish: Result<WholePublish, CodecError>,
}

/// A basic.publish's message (its names, properties and body in the frames' one buffer) and
/// its flags.
#[derive(Debug)]
pub struct WholePublish {
    pub message: MessageBytes,
    pub mandatory: bool,
    pub immediate: bool,
}

/// Where one whole frame lies in a buffer.
struct FrameAt {
    channel: u16,
    payload_start: usize,
    payload_end: usize,
}

impl FrameAt {
    /// Where the next frame would start.
    fn next(&self) -> usize {
        self.payload_end + 1
    }
}

/// The whole frame of kind `kind` at `buf[at..]`, when `parse_frame` would take it without
/// error (`frame_extent`, the rules both follow).
#[inline]
fn frame_at(buf: &[u8], at: usize, kind: FrameKind, frame_max: u32) -> Option<FrameAt> {
    match frame_extent(buf.get(at..)?, frame_max) {
        Ok(FrameExtent::Whole {
            kind: found,
            channel,
            size,
        }) if found == kind => {
            let payload_start = at + FRAME_HEADER_SIZE;
            Some(FrameAt {
                channel,
                payload_start,
                payload_end: payload_start + size,
            })
        }
        _ => None,
    }
}

/// Takes a whole basic.publish off the front of `buf` (see the module comment for when);
/// `None` leaves `buf` as it was.
#[inline]
pub fn split_publish(buf: &mut BytesMut, frame_max: u32) -> Option<PublishFrames> {
    let method = frame_at(buf, 0, FrameKind::Method, frame_max)?;
    if method.channel == 0
        || buf.get(method.payload_start..method.payload_start + 4) != Some(&[0, 60, 0, 40][..])
    {
        return None;
    }
    let header = frame_at(buf, method.next(), FrameKind::Header, frame_max)?;
    if header.channel != method.channel
        || header.payload_end - header.payload_start < HEADER_MIN_BYTES
    {
        return None;
    }
    let at = header.payload_start;
    let class_id = u16::from_be_bytes([buf[at], buf[at + 1]]);
    let body_size = u64::from_be_bytes(buf[at + 4..at + 12].try_into().expect("8 bytes"));
    let (body_range, end) = if body_size == 0 {
        // An empty body where a body frame would start: every span lies after the names
        // (`MessageBytes::copied` moves them all by the names' start).
        (header.next()..header.next(), header.next())
    } else {
        let body = frame_at(buf, header.next(), FrameKind::Body, frame_max)?;
        if body.channel != method.channel
            || (body.payload_end - body.payload_start) as u64 != body_size
        {
            return None;
        }
        (body.payload_start..body.payload_end, body.next())
    };
    // `MessageBytes` places its parts with u32 offsets; a larger publish (only with a
    // frame_max over 1 GiB) goes frame by frame.
    if end > u32::MAX as usize {
        return None;
    }
    let whole = buf.split_to(end).freeze();
    let publish =
        publish_spans_in(&whole, method.payload_start, method.payload_end).map(|m| WholePublish {
            mandatory: m.mandatory,
            immediate: m.immediate,
            message: MessageBytes::in_frames(
                whole,
                m.exchange,
                m.routing_key,
                at + 12..header.payload_end,
                body_range,
            ),
        });
    Some(PublishFrames {
        channel: method.channel,
        class_id,
        body_size,
        publish,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode_basic_publish, parse_frame, write_body_frames, write_content_header, write_method,
        BasicProperties, BasicPublish, ContentHeader, FrameKind, Method, BASIC_CLASS_ID,
    };
    use bytes::Bytes;
    use proptest::prelude::*;

    /// What a taken publish holds, in the frame-by-frame decoders' terms: the method (as
    /// `decode_basic_publish` gives it), and when it decodes, the content header (as
    /// `ContentHeader::decode` gives it) and the body.
    type AsFrames = (
        Result<BasicPublish, CodecError>,
        Option<(ContentHeader, Bytes)>,
    );

    fn as_frames(p: &PublishFrames) -> AsFrames {
        match &p.publish {
            Err(e) => (Err(e.clone()), None),
            Ok(w) => (
                Ok(BasicPublish {
                    exchange: w.message.exchange_name(),
                    routing_key: w.message.routing_key_name(),
                    mandatory: w.mandatory,
                    immediate: w.immediate,
                }),
                Some((
                    ContentHeader {
                        class_id: p.class_id,
                        body_size: p.body_size,
                        properties: w.message.properties_bytes(),
                    },
                    w.message.body_bytes(),
                )),
            ),
        }
    }

    fn publish_bytes(channel: u16, routing_key: &str, body: &[u8], frame_max: u32) -> BytesMut {
        let mut out = BytesMut::new();
        let method = Method::BasicPublish(BasicPublish {
            exchange: "amq.direct".into(),
            routing_key: routing_key.into(),
            mandatory: true,
            immediate: false,
        });
        write_method(&mut out, channel, &method);
        let properties = BasicProperties {
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        let header = ContentHeader::new(BASIC_CLASS_ID, body.len() as u64, &properties);
        write_content_header(
            &mut out,
            channel,
            BASIC_CLASS_ID,
            header.body_size,
            &header.properties,
        );
        write_body_frames(&mut out, channel, body, frame_max);
        out
    }

    /// What `parse_frame` hands out for the same bytes, frame by frame: the publish, the
    /// header payload and the body (joined), or None when it is not a whole publish.
    fn frame_by_frame(mut buf: BytesMut, frame_max: u32) -> Vec<(FrameKind, u16, Bytes)> {
        let mut frames = Vec::new();
        while let Ok(Some(frame)) = parse_frame(&mut buf, frame_max) {
            frames.push((frame.kind, frame.channel, frame.payload));
        }
        frames
    }

    #[test]
    fn a_whole_publish_is_taken_as_its_frames_would_be() {
        let buf = publish_bytes(3, "key", b"hello", 4096);
        let frames = frame_by_frame(buf.clone(), 4096);
        let mut buf = buf;
        let publish = split_publish(&mut buf, 4096).expect("whole");
        assert!(buf.is_empty());
        assert_eq!(publish.channel, 3);
        let (method, content) = as_frames(&publish);
        let expected = decode_basic_publish(&frames[0].2)
            .expect("a publish")
            .expect("decodes");
        assert_eq!(method.expect("decodes"), expected);
        let (header, body) = content.expect("decodes");
        assert_eq!(header, ContentHeader::decode(frames[1].2.clone()).unwrap());
        assert_eq!(&body[..], b"hello");
    }

    #[test]
    fn an_empty_body_has_no_body_frame() {
        let mut buf = publish_bytes(1, "k", b"", 4096);
        let publish = split_publish(&mut buf, 4096).expect("whole");
        assert!(buf.is_empty());
        assert!(publish.publish.expect("decodes").message.body().is_empty());
    }

    #[test]
    fn what_is_not_one_whole_publish_is_left_for_parse_frame() {
        let whole = publish_bytes(1, "k", b"hello", 4096);
        // Not yet whole: every cut short of the end.
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert!(split_publish(&mut buf, 4096).is_none(), "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
        // A body over two frames (frame_max 4096, a 5,000-byte body).
        let mut buf = publish_bytes(1, "k", &[7; 5000], 4096);
        let len = buf.len();
        assert!(split_publish(&mut buf, 4096).is_none());
        assert_eq!(buf.len(), len);
        // A frame over frame_max: parse_frame's error, not ours.
        let mut buf = publish_bytes(1, "k", &[7; 200], 0);
        assert!(split_publish(&mut buf, 100).is_none());
        // Channel 0, and a header and body on another channel than the method's.
        let mut buf = publish_bytes(0, "k", b"x", 4096);
        assert!(split_publish(&mut buf, 4096).is_none());
        let (one, two) = (
            publish_bytes(1, "k", b"x", 4096),
            publish_bytes(2, "k", b"x", 4096),
        );
        let method_len =
            crate::FRAME_OVERHEAD + u32::from_be_bytes(one[3..7].try_into().unwrap()) as usize;
        let mut crossed = BytesMut::from(&one[..method_len]);
        crossed.extend_from_slice(&two[method_len..]);
        assert!(split_publish(&mut crossed, 4096).is_none());
    }

    proptest! {
        /// Any bytes: either nothing is taken, or what is taken is exactly a method, header
        /// and body frame that parse_frame takes without error, with the same payloads.
        #[test]
        fn taking_a_publish_agrees_with_parse_frame(bytes in proptest::collection::vec(any::<u8>(), 0..64), frame_max in prop_oneof![Just(0u32), Just(40u32), Just(4096u32)]) {
            let mut seeded = publish_bytes(1, "k", b"ab", 4096);
            seeded.extend_from_slice(&bytes);
            for start in [seeded.clone(), BytesMut::from(&bytes[..])] {
                let mut buf = start.clone();
                match split_publish(&mut buf, frame_max) {
                    None => prop_assert_eq!(&buf[..], &start[..]),
                    Some(publish) => {
                        let taken = start.len() - buf.len();
                        let mut by_frame = BytesMut::from(&start[..taken]);
                        let mut kinds = Vec::new();
                        let mut payloads = Vec::new();
                        while let Ok(Some(frame)) = parse_frame(&mut by_frame, frame_max) {
                            kinds.push(frame.kind);
                            payloads.push(frame.payload);
                        }
                        prop_assert!(by_frame.is_empty());
                        prop_assert_eq!(kinds[0], FrameKind::Method);
                        prop_assert_eq!(kinds[1], FrameKind::Header);
                        let (method, content) = as_frames(&publish);
                        prop_assert_eq!(
                            format!("{:?}", method),
                            format!("{:?}", decode_basic_publish(&payloads[0]).expect("a publish"))
                        );
                        if let Some((header, body)) = content {
                            prop_assert_eq!(Ok(header), ContentHeader::decode(payloads[1].clone()));
                            match payloads.get(2) {
                                Some(frame) => {
                                    prop_assert_eq!(kinds[2], FrameKind::Body);
                                    prop_assert_eq!(&body, frame);
                                }
                                None => prop_assert!(body.is_empty()),
                            }
                        }
                    }
                }
            }
        }
    }
}
