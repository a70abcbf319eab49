//! Names the broker makes up (`amq.gen-…` queues, `amq.ctag-…` consumer tags, direct
//! reply-to addresses) and the checks on names clients choose.

use base64::Engine;
use rand::RngCore;

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

pub fn has_reserved_prefix(name: &str) -> bool {
    name.starts_with("amq.")
}
