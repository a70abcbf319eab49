//! The hasher for a connection's channel table, keyed by channel number.
//!
//! Every frame looks its channel up, three times per published message, and the standard
//! SipHash costs ~150 instructions per `u16`. Channel numbers are bounded by the negotiated
//! channel-max (≤ 65535 and one connection's own), so there is no flooding to resist: one
//! multiply spreads them over the table's high bits, which is all hashbrown needs.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Channel number → value, hashed by [`ChannelIdHasher`].
pub type ChannelMap<V> = HashMap<u16, V, BuildHasherDefault<ChannelIdHasher>>;

#[derive(Default)]
pub struct ChannelIdHasher(u64);

impl Hasher for ChannelIdHasher {
    fn finish(&self) -> u64 {
        // Fibonacci hashing: the golden-ratio multiply moves the low bits into the high
        // ones (hashbrown takes its control byte from the top 7 bits).
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n);
    }

    /// Only `u16` keys are hashed here; any other input still hashes deterministically.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn channel_numbers_keep_distinct_control_bytes() {
        let build = BuildHasherDefault::<ChannelIdHasher>::default();
        let top7 = |n: u16| build.hash_one(n) >> 57;
        let distinct: std::collections::HashSet<u64> = (1..=128u16).map(top7).collect();
        assert!(
            distinct.len() > 64,
            "{} distinct control bytes",
            distinct.len()
        );
        let mut map = ChannelMap::default();
        for n in 1..=2047u16 {
            map.insert(n, n);
        }
        assert!((1..=2047u16).all(|n| map.get(&n) == Some(&n)));
    }
}
