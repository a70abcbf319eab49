//! A vhost's map of exchanges or queues by name with a generation that every write lock taken
//! on it advances, and `LastLookup`: one name → entity a publishing channel remembers, valid
//! while that generation is unchanged.
//!
//! Every basic.publish looked its exchange up by name, and on the default exchange its queue
//! too: a read lock, a hash and a compare each (callgrind, `tools/bench/instructions.sh`). A
//! publisher nearly always sends to the same exchange and key, so the channel keeps the last
//! answer and checks it with an atomic load and a string compare. Any change to the map —
//! a declare, a delete, an auto-delete, a cluster node's replacement of a record, a vhost's
//! removal — takes the write lock and so invalidates every channel's memory of it, whichever
//! entity changed: there is nothing to find and evict, and a cached entity is always the one
//! the map holds now. Bindings live inside the exchange (and its bindings' queues are looked up
//! by the exchange, not cached), so a bind or unbind is seen by the next publish as before.
//!
//! The cache holds a `Weak`: a deleted queue or exchange is freed when the map and its users
//! let go, not when the channel publishes again (a quorum queue's background tasks end when
//! the last strong reference goes). A `Weak` that still upgrades proves nothing by itself — a
//! deleted queue lives on while an unacknowledged delivery or a consumer holds it — so the
//! generation is what decides.

use crate::named_entries::{Named, NamedEntries};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use warren_codec::ShortStr;

/// Entities by name (and in name order, `named_entries.rs`) behind a read-write lock, with a
/// generation counting write locks.
pub struct VersionedMap<V> {
    map: RwLock<NamedEntries<V>>,
    generation: AtomicU64,
}

impl<V> Default for VersionedMap<V> {
    fn default() -> Self {
        VersionedMap {
            map: RwLock::new(NamedEntries::default()),
            generation: AtomicU64::new(0),
        }
    }
}

/// Write access to the map; the generation advances when it is dropped, while the lock is
/// still held, so a reader that sees the map after a change sees the new generation too.
pub struct VersionedWriteGuard<'a, V> {
    guard: RwLockWriteGuard<'a, NamedEntries<V>>,
    generation: &'a AtomicU64,
}

impl<V> Deref for VersionedWriteGuard<'_, V> {
    type Target = NamedEntries<V>;
    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl<V> DerefMut for VersionedWriteGuard<'_, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

impl<V> Drop for VersionedWriteGuard<'_, V> {
    fn drop(&mut self) {
        // Runs before the `guard` field is dropped, so still under the write lock.
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// The last name a channel looked up in one `VersionedMap`, with the generation it was valid
/// at. Empty until the first successful lookup; a name not found is not remembered.
pub struct LastLookup<V> {
    found: Option<(u64, ShortStr, Weak<V>)>,
}

impl<V> Default for LastLookup<V> {
    fn default() -> Self {
        LastLookup { found: None }
    }
}

/// `a == b` without a call to `memcmp` for the empty name (the default exchange, looked up
/// for every publish to it).
#[inline]
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

impl<V: Named> VersionedMap<V> {
    pub fn read(&self) -> RwLockReadGuard<'_, NamedEntries<V>> {
        self.map.read()
    }

    pub fn write(&self) -> VersionedWriteGuard<'_, V> {
        VersionedWriteGuard {
            guard: self.map.write(),
            generation: &self.generation,
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<V>> {
        self.map.read().get(name).cloned()
    }

    /// `get`, answered from `last` when it names the same entity and the map has not changed
    /// since; otherwise looked up and remembered in `last`.
    pub fn get_via(&self, name: &str, last: &mut LastLookup<V>) -> Option<Arc<V>> {
        if let Some((generation, cached_name, entity)) = &last.found {
            if *generation == self.generation.load(Ordering::Acquire)
                && same_name(cached_name, name)
            {
                // Always live while the generation holds (the map keeps it); upgrading is
                // the reference-count bump a lookup's clone would have been.
                if let Some(entity) = entity.upgrade() {
                    return Some(entity);
                }
            }
        }
        let map = self.map.read();
        // Read under the read lock: no writer is between its change and its bump.
        let generation = self.generation.load(Ordering::Acquire);
        let entity = map.get(name)?;
        // The entity's own name: a reference-count bump, no allocation.
        last.found = Some((generation, entity.name().clone(), Arc::downgrade(entity)));
        Some(entity.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::named_entries::{entity, Entity};

    fn map_of(names: &[&str]) -> VersionedMap<Entity> {
        let map = VersionedMap::default();
        for name in names {
            map.write().insert(entity(name, 1));
        }
        map
    }

    #[test]
    fn a_remembered_entity_is_the_one_the_map_holds() {
        let map = map_of(&["a", "b"]);
        let mut last = LastLookup::default();
        let a = map.get_via("a", &mut last).unwrap();
        assert!(Arc::ptr_eq(&a, &map.get_via("a", &mut last).unwrap()));
        // Another name is looked up, not answered from the memory of "a".
        assert_eq!(map.get_via("b", &mut last).unwrap().name.as_str(), "b");
        assert_eq!(map.get_via("c", &mut last), None);
    }

    #[test]
    fn any_write_forgets_what_was_remembered() {
        let map = map_of(&["a"]);
        let mut last = LastLookup::default();
        let first = map.get_via("a", &mut last).unwrap();
        // Replaced under the same name: the new entity, not the remembered one.
        map.write().insert(entity("a", 2));
        let second = map.get_via("a", &mut last).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.version, 2);
        // Removed: gone for the next lookup, and the cache does not keep it alive.
        let weak = Arc::downgrade(&second);
        drop(second);
        map.write().remove("a");
        assert_eq!(map.get_via("a", &mut last), None);
        drop(first);
        assert!(weak.upgrade().is_none(), "the cache held the entity");
    }
}
