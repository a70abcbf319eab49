//! Maps keyed by entity names (exchanges, queues, consumer tags, direct bindings) on the
//! publish→deliver path, hashed with foldhash instead of the standard SipHash.
//!
//! Every message looks up its exchange, its queue (default exchange) or its binding key, and
//! at delivery its consumer tag: with SipHash those were ~150 instructions each, a tenth of
//! the whole path (callgrind, `tools/bench/instructions.sh`). foldhash is ~5× cheaper on
//! short names and still seeded per process (`fast::RandomState` takes a random per-process
//! seed), so collisions cannot be precomputed offline.
//!
//! Why a weaker hash than SipHash is acceptable here (the DoS argument): every key in these
//! maps was created by an authenticated client with configure permission on the vhost (or is
//! one connection's own consumer tag), and the number of entries is already bounded by the
//! vhost's and the user's limits (max-queues, max-connections, channel-max). A client that
//! could engineer collisions against an unknown seed could slow only lookups in maps it is
//! allowed to fill, which it can already do by declaring many queues; no anonymous input is
//! ever hashed into them.

use std::collections::HashMap;
use warren_codec::ShortStr;

/// The hasher builder for name-keyed maps: foldhash, randomly seeded per process.
pub type NameHasher = foldhash::fast::RandomState;

/// Entity name → value.
pub type NameMap<V> = HashMap<ShortStr, V, NameHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_by_str_and_by_shortstr() {
        let mut map: NameMap<usize> = NameMap::default();
        for i in 0..10_000 {
            map.insert(ShortStr::from(format!("queue-{i}")), i);
        }
        assert_eq!(map.len(), 10_000);
        assert!((0..10_000).all(|i| map.get(format!("queue-{i}").as_str()) == Some(&i)));
        assert_eq!(map.get(&ShortStr::from("queue-42")), Some(&42));
        assert_eq!(map.get(""), None);
    }
}
