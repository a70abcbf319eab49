//! Names the broker makes up (`amq.gen-…` queues, `amq.ctag-…` consumer tags, direct
//! reply-to addresses) and the checks on names clients choose.

use base64::Engine;
use rand::RngCore;
use warren_codec::ShortStr;

/// 16 random bytes as URL-safe base64, the shape RabbitMQ uses after its prefixes.
pub fn random_suffix() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn generated_queue_name() -> String {
    format!("amq.gen-{}", random_suffix())
}

pub fn generated_consumer_tag() -> String {
    format!("amq.ctag-{}", random_suffix())
}

/// The pseudo-queue clients consume from for direct reply-to.
pub const DIRECT_REPLY_TO: &str = "amq.rabbitmq.reply-to";
/// Prefix of the per-channel reply address the broker writes into `reply_to`.
pub const DIRECT_REPLY_TO_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// The exchange every vhost has for the firehose (topic, durable, internal: `vhost/trace.rs`).
pub const TRACE_EXCHANGE: &str = "amq.rabbitmq.trace";

/// A queue's name in the store's queue table. The default vhost's queues keep their own name
/// (as before vhosts existed); another vhost's are padded past 255 bytes — longer than any
/// name a client can declare — and carry the vhost's length, so no two can collide.
pub fn store_queue_name(vhost: &str, queue: &str) -> String {
    match vhost {
        "/" => queue.to_owned(),
        _ => format!("{:\0<256}{}:{vhost}{queue}", "\0vhost:", vhost.len()),
    }
}

/// The store name of a transient queue's paged-out messages: the same scheme under its own
/// prefix, so it never meets a durable queue's name.
pub fn spill_queue_name(vhost: &str, queue: &str) -> String {
    match vhost {
        "/" => format!("{:\0<256}{queue}", "\0transient:"),
        _ => format!(
            "{:\0<256}{}:{vhost}{queue}",
            "\0transient-vhost:",
            vhost.len()
        ),
    }
}

pub fn has_reserved_prefix(name: &str) -> bool {
    name.starts_with("amq.")
}

/// The name with every CR and LF removed, as RabbitMQ cleans queue and exchange names in
/// declare, delete, bind and unbind (not in publish, consume, get or purge). A name without
/// them, the usual case, is returned as it is, without copying.
pub fn strip_cr_lf(name: ShortStr) -> ShortStr {
    if !name.bytes().any(|b| b == b'\r' || b == b'\n') {
        return name;
    }
    ShortStr::from(name.replace(['\r', '\n'], ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_cr_lf_removes_every_cr_and_lf() {
        assert_eq!(strip_cr_lf(ShortStr::from("a\r\nb\nc\r")), "abc");
        assert_eq!(strip_cr_lf(ShortStr::from("\n")), "");
        let plain = ShortStr::from("plain.name");
        assert_eq!(
            strip_cr_lf(plain.clone()).as_bytes().as_ptr(),
            plain.as_bytes().as_ptr()
        );
    }

    #[test]
    fn store_names_never_collide() {
        let long = "q".repeat(255);
        let cases = [
            ("/", "q"),
            ("/", "1:aq"),
            ("a", "q"),
            ("a1", ":q"),
            ("a", "1:q"),
            ("/", long.as_str()),
            ("x", long.as_str()),
        ];
        let mut seen = std::collections::HashSet::new();
        for (vhost, queue) in cases {
            assert!(
                seen.insert(store_queue_name(vhost, queue)),
                "{vhost} {queue}"
            );
            assert!(
                seen.insert(spill_queue_name(vhost, queue)),
                "{vhost} {queue}"
            );
        }
        assert_eq!(
            store_queue_name("/", "orders"),
            "orders",
            "as before vhosts"
        );
    }
}
