//! The message a many-pairs sender transfers, and what a receiver reads of one. A sender's
//! message is a single Data section holding the body (`payload`'s timestamped layout) and
//! nothing else — no header, so not durable — as fe2o3-amqp's `Message` with only a body
//! encoded it before this client replaced it. A receiver looks for the first Data section
//! among whatever sections the broker delivers (Warren and RabbitMQ 4 add message
//! annotations; another broker may add a header or properties).

use warren_amqp10_codec::value_len;

/// The Data section's descriptor code (amqp:data:binary).
const DATA: u64 = 0x75;

/// Appends a Data section holding `body` to `out`.
pub fn encode_data_section(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&[0x00, 0x53, DATA as u8]);
    match u8::try_from(body.len()) {
        Ok(len) => out.extend_from_slice(&[0xa0, len]),
        Err(_) => {
            out.push(0xb0);
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        }
    }
    out.extend_from_slice(body);
}

/// The bytes of the first Data section of an encoded message; None when there is none or
/// the sections do not parse.
pub fn data_body(message: &[u8]) -> Option<&[u8]> {
    let mut rest = message;
    while !rest.is_empty() {
        let len = value_len(rest)?;
        if let Some(body) = data_of(&rest[..len]) {
            return Some(body);
        }
        rest = &rest[len..];
    }
    None
}

/// The binary of a Data section; None for any other section.
fn data_of(section: &[u8]) -> Option<&[u8]> {
    let (code, value) = match section {
        [0x00, 0x53, code, value @ ..] => (u64::from(*code), value),
        [0x00, 0x80, rest @ ..] if rest.len() >= 8 => {
            (u64::from_be_bytes(rest[..8].try_into().ok()?), &rest[8..])
        }
        _ => return None,
    };
    if code != DATA {
        return None;
    }
    match value {
        [0xa0, len, bytes @ ..] => bytes.get(..usize::from(*len)),
        [0xb0, a, b, c, d, bytes @ ..] => {
            bytes.get(..u32::from_be_bytes([*a, *b, *c, *d]) as usize)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_section_round_trips_small_and_large() {
        for len in [0usize, 20, 100, 255, 256, 70_000] {
            let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut message = vec![];
            encode_data_section(&mut message, &body);
            assert_eq!(data_body(&message), Some(&body[..]), "{len} bytes");
        }
    }

    #[test]
    fn the_body_is_found_after_annotations_and_a_header() {
        let mut message = vec![];
        // header (0x70): a list of one `true` (durable)
        message.extend_from_slice(&[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41]);
        // message-annotations (0x72): a map with one symbol → string entry
        message.extend_from_slice(&[0x00, 0x53, 0x72, 0xc1, 0x08, 0x02, 0xa3, 0x01, b'k']);
        message.extend_from_slice(&[0xa1, 0x02, b'v', b'w']);
        // the data section with an 8-byte (ulong) descriptor
        message.extend_from_slice(&[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x75, 0xa0, 3]);
        message.extend_from_slice(b"abc");
        assert_eq!(data_body(&message), Some(&b"abc"[..]));
    }

    #[test]
    fn no_data_section_or_a_truncated_one_is_none() {
        // amqp-value (0x77) holding a string
        assert_eq!(data_body(&[0x00, 0x53, 0x77, 0xa1, 0x01, b'x']), None);
        assert_eq!(data_body(&[0x00, 0x53, 0x75, 0xa0, 0x05, b'x']), None);
        assert_eq!(data_body(&[]), None);
    }
}
