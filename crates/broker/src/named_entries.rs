//! `NamedEntries`: a vhost's queues or exchanges by name (a hash set, for lookups) and also
//! in name order (a B-tree of the same entities, for lists served a page at a time).
//!
//! `GET /api/queues?page=1` sorted by vhost and name picked its 100 rows out of every queue:
//! 971 ms with 1,000,000 queues (docs/benchmarks.md, issue 30). In name order, a page is the
//! entries from its offset on, and only they are read. The order is kept by every change
//! (the only way to change the map is through these methods), so it is never rebuilt.
//!
//! Cost: neither structure keeps a copy of the name. Both hold the entity's `Arc` (8 bytes)
//! and hash or compare through the name inside it: a hash map keyed by the name beside the
//! `Arc` took 32 bytes a slot, and with a million queues its 2^21 slots (it doubles at 7/8
//! full) were ~69 bytes a queue; the set's are ~19. The B-tree adds ~17 bytes a queue at 1M
//! (measured in docs/benchmarks.md). A declare or delete adds one B-tree insert or remove to
//! the hash set's (log n name comparisons); a lookup, and so every publish, never reads the
//! tree, and reads the name the set's slot points at rather than one stored in the slot.

use crate::name_map::NameHasher;
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use warren_codec::ShortStr;

/// What an entity kept in `NamedEntries` is called: its key in the map, its place in the order.
pub trait Named {
    fn name(&self) -> &ShortStr;
}

/// Entities (`&Arc<V>`, or any `&T`) in an order, from either end, knowing how many: what
/// `VHost::read_queues_in_order` lends out for the time of its read lock.
pub trait InOrder<'a, T: 'a>: DoubleEndedIterator<Item = &'a T> + ExactSizeIterator {}

impl<'a, T: 'a, I: DoubleEndedIterator<Item = &'a T> + ExactSizeIterator> InOrder<'a, T> for I {}

/// Entities by name, and in name order.
pub struct NamedEntries<V> {
    by_name: HashSet<ByName<V>, NameHasher>,
    in_order: BTreeSet<ByName<V>>,
}

/// An entity in the hash set and the B-tree: hashed, ordered and equal by its name.
struct ByName<V>(Arc<V>);

impl<V: Named> PartialEq for ByName<V> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<V: Named> Eq for ByName<V> {}

/// Hashed as its name's `str` is, so that a `&str` finds its entry (`Borrow<str>` below).
impl<V: Named> Hash for ByName<V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().as_str().hash(state)
    }
}

impl<V: Named> PartialOrd for ByName<V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<V: Named> Ord for ByName<V> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.name().as_str().cmp(other.0.name().as_str())
    }
}

/// Found by `&str`: the hash and order of `str`, as `Hash` and `Ord` above, so a name finds
/// its entry.
impl<V: Named> Borrow<str> for ByName<V> {
    fn borrow(&self) -> &str {
        self.0.name().as_str()
    }
}

impl<V> Default for NamedEntries<V> {
    fn default() -> Self {
        NamedEntries {
            by_name: HashSet::default(),
            in_order: BTreeSet::new(),
        }
    }
}

/// Read access: lookups by name and reads of every entity, in no order.
impl<V: Named> NamedEntries<V> {
    pub fn get(&self, name: &str) -> Option<&Arc<V>> {
        self.by_name.get(name).map(|e| &e.0)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.by_name.contains(name)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every entity, in no order (quicker than `in_name_order`).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Arc<V>> + '_ {
        self.by_name.iter().map(|e| &e.0)
    }
}

impl<V: Named> NamedEntries<V> {
    /// Adds `entity` under its name, replacing (and returning) one of that name.
    pub fn insert(&mut self, entity: Arc<V>) -> Option<Arc<V>> {
        self.in_order.replace(ByName(entity.clone()));
        self.by_name.replace(ByName(entity)).map(|e| e.0)
    }

    /// The entity called as `entity` is, added if there is none.
    pub fn get_or_insert(&mut self, entity: Arc<V>) -> Arc<V> {
        if let Some(existing) = self.get(entity.name().as_str()) {
            return existing.clone();
        }
        self.insert(entity.clone());
        entity
    }

    pub fn remove(&mut self, name: &str) -> Option<Arc<V>> {
        let removed = self.by_name.take(name)?;
        self.in_order.remove(name);
        Some(removed.0)
    }

    /// Removes every entity, handing them back.
    pub fn drain(&mut self) -> Vec<Arc<V>> {
        self.in_order.clear();
        self.by_name.drain().map(|e| e.0).collect()
    }

    /// The entities in name order (`.rev()` for the reverse order).
    pub fn in_name_order(
        &self,
    ) -> impl DoubleEndedIterator<Item = &Arc<V>> + ExactSizeIterator + '_ {
        self.in_order.iter().map(|e| &e.0)
    }
}

/// An entity for tests of maps by name: called `name`, told apart from another of the same
/// name by `version`.
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub(crate) struct Entity {
    pub name: ShortStr,
    pub version: u32,
}

#[cfg(test)]
impl Named for Entity {
    fn name(&self) -> &ShortStr {
        &self.name
    }
}

#[cfg(test)]
pub(crate) fn entity(name: &str, version: u32) -> Arc<Entity> {
    Arc::new(Entity {
        name: ShortStr::from(name),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Change {
        Insert(String, u32),
        GetOrInsert(String, u32),
        Remove(String),
        Drain,
    }

    fn change() -> impl Strategy<Value = Change> {
        // Few names (so that changes meet), some sharing prefixes and some multi-byte.
        let name = prop::sample::select(vec![
            "",
            "a",
            "ab",
            "abc",
            "b",
            "B",
            "q-1",
            "q-10",
            "q-2",
            "é",
            "z.y",
            "amq.gen-x",
        ])
        .prop_map(str::to_owned);
        prop_oneof![
            8 => (name.clone(), 0u32..4).prop_map(|(n, v)| Change::Insert(n, v)),
            4 => (name.clone(), 0u32..4).prop_map(|(n, v)| Change::GetOrInsert(n, v)),
            6 => name.prop_map(Change::Remove),
            1 => Just(Change::Drain),
        ]
    }

    proptest! {
        /// After any changes the order lists exactly the map's entities (the same `Arc`s),
        /// sorted by name, and the map answers as a plain map given the same changes would.
        #[test]
        fn the_order_is_the_maps_entities_sorted_by_name(
            changes in prop::collection::vec(change(), 0..200)
        ) {
            let mut entries: NamedEntries<Entity> = NamedEntries::default();
            let mut model: std::collections::BTreeMap<String, u32> = Default::default();
            for change in changes {
                match change {
                    Change::Insert(name, version) => {
                        let old = entries.insert(entity(&name, version));
                        prop_assert_eq!(old.map(|e| e.version), model.insert(name, version));
                    }
                    Change::GetOrInsert(name, version) => {
                        let got = entries.get_or_insert(entity(&name, version));
                        prop_assert_eq!(got.version, *model.entry(name).or_insert(version));
                    }
                    Change::Remove(name) => {
                        let removed = entries.remove(&name);
                        prop_assert_eq!(removed.map(|e| e.version), model.remove(&name));
                    }
                    Change::Drain => {
                        prop_assert_eq!(entries.drain().len(), model.len());
                        model.clear();
                    }
                }
                let in_order: Vec<(&str, u32)> =
                    entries.in_name_order().map(|e| (e.name.as_str(), e.version)).collect();
                let sorted: Vec<(&str, u32)> =
                    model.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                prop_assert_eq!(in_order, sorted);
                prop_assert_eq!(entries.len(), model.len());
                for e in entries.in_name_order() {
                    prop_assert!(Arc::ptr_eq(e, entries.get(e.name.as_str()).unwrap()));
                }
                let reversed: Vec<&str> =
                    entries.in_name_order().rev().map(|e| e.name.as_str()).collect();
                prop_assert!(reversed.iter().eq(model.keys().rev()));
            }
        }
    }
}
