//! The topic exchange's binding index: a trie over dot-separated words with `*` (exactly one
//! word) and `#` (zero or more words) edges.
//!
//! Matching walks the trie with a *set* of live nodes, one word at a time, so a pattern like
//! `#.#.#` costs O(words × nodes) instead of exploring every way the `#`s could split the key.

use crate::name_map::NameHasher;
use std::cell::RefCell;
use std::collections::HashMap;

/// One thread's reusable matching state; the exchange matches under a read lock from many
/// connection threads at once, so the scratch is per thread rather than per trie.
#[derive(Default)]
struct Scratch {
    live: Vec<usize>,
    next: Vec<usize>,
    /// `stamps[node] == generation` while `node` is in the set being built; shared by every
    /// trie the thread walks (a stamp from another trie is from an older generation).
    stamps: Vec<u32>,
    generation: u32,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A generation never used before in `stamps` (on wrap-around the stamps start over at 0).
fn next_generation(generation: &mut u32, stamps: &mut [u32]) -> u32 {
    *generation = match generation.checked_add(1) {
        Some(g) => g,
        None => {
            stamps.fill(0);
            1
        }
    };
    *generation
}

/// A node's literal words, hashed as the other name maps on the publish path are
/// (`name_map.rs` says why a seeded foldhash is safe here: the words come from bindings
/// that authenticated clients made). With std's SipHash a route spent ~40 % of its
/// instructions hashing, and whether the hasher was inlined changed between builds of
/// unchanged routing code (topic-route: 6,985 or 7,831 instructions).
type WordMap = HashMap<String, usize, NameHasher>;

#[derive(Debug, Default)]
struct Node<T> {
    words: WordMap,
    star: Option<usize>,
    hash: Option<usize>,
    /// True for the node reached through a `#` edge: it may also swallow more words.
    is_hash: bool,
    bindings: Vec<T>,
}

/// Maps binding patterns to values `T` (the binding destinations).
#[derive(Debug)]
pub struct TopicTrie<T> {
    nodes: Vec<Node<T>>,
}

impl<T> Default for TopicTrie<T> {
    fn default() -> Self {
        TopicTrie {
            nodes: vec![Node {
                words: WordMap::default(),
                star: None,
                hash: None,
                is_hash: false,
                bindings: Vec::new(),
            }],
        }
    }
}

/// RabbitMQ splits an empty key into zero words, not one empty word.
fn words(key: &str) -> impl Iterator<Item = &str> {
    let key_words = if key.is_empty() {
        None
    } else {
        Some(key.split('.'))
    };
    key_words.into_iter().flatten()
}

impl<T: PartialEq> TopicTrie<T> {
    fn child(&mut self, at: usize, word: &str) -> usize {
        let existing = match word {
            "*" => self.nodes[at].star,
            "#" => self.nodes[at].hash,
            w => self.nodes[at].words.get(w).copied(),
        };
        if let Some(next) = existing {
            return next;
        }
        let next = self.nodes.len();
        self.nodes.push(Node {
            words: WordMap::default(),
            star: None,
            hash: None,
            is_hash: word == "#",
            bindings: Vec::new(),
        });
        match word {
            "*" => self.nodes[at].star = Some(next),
            "#" => self.nodes[at].hash = Some(next),
            w => {
                self.nodes[at].words.insert(w.to_owned(), next);
            }
        }
        next
    }

    fn find(&self, pattern: &str) -> Option<usize> {
        let mut at = 0;
        for word in words(pattern) {
            at = match word {
                "*" => self.nodes[at].star?,
                "#" => self.nodes[at].hash?,
                w => *self.nodes[at].words.get(w)?,
            };
        }
        Some(at)
    }

    /// Adds `value` under `pattern`; false if that exact binding already exists.
    pub fn insert(&mut self, pattern: &str, value: T) -> bool {
        let mut at = 0;
        for word in words(pattern) {
            at = self.child(at, word);
        }
        if self.nodes[at].bindings.contains(&value) {
            return false;
        }
        self.nodes[at].bindings.push(value);
        true
    }

    /// Removes `value` from `pattern`; false if it was not bound. Emptied nodes stay in the
    /// arena (they cost a little memory, never correctness) until the exchange goes away.
    pub fn remove(&mut self, pattern: &str, value: &T) -> bool {
        let Some(at) = self.find(pattern) else {
            return false;
        };
        let bindings = &mut self.nodes[at].bindings;
        match bindings.iter().position(|b| b == value) {
            Some(i) => {
                bindings.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes every binding for which `pred` holds (a deleted queue).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for node in &mut self.nodes {
            node.bindings.retain(&mut keep);
        }
    }

    /// Calls `found` for every binding whose pattern matches `key` (a binding matched by two
    /// paths through `#` is reported once per matching node, so callers dedupe destinations).
    ///
    /// Allocation-free once the thread's scratch has grown to the largest trie it walked: the
    /// live sets and the "already in this set" stamps are reused, and a new generation number
    /// per word invalidates the stamps instead of zeroing them.
    pub fn matches(&self, key: &str, mut found: impl FnMut(&T)) {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.walk(key, &mut scratch, &mut found),
            // `found` matched again on this thread (nested routing): a scratch of its own.
            Err(_) => self.walk(key, &mut Scratch::default(), &mut found),
        })
    }

    fn walk(&self, key: &str, scratch: &mut Scratch, found: &mut impl FnMut(&T)) {
        let Scratch {
            live,
            next,
            stamps,
            generation,
        } = scratch;
        if stamps.len() < self.nodes.len() {
            stamps.resize(self.nodes.len(), 0);
        }
        live.clear();
        let mut stamp = next_generation(generation, stamps);
        self.add_with_hash_closure(0, live, stamps, stamp);
        for word in words(key) {
            next.clear();
            stamp = next_generation(generation, stamps);
            for &at in live.iter() {
                let node = &self.nodes[at];
                if let Some(&n) = node.words.get(word) {
                    self.add_with_hash_closure(n, next, stamps, stamp);
                }
                if let Some(n) = node.star {
                    self.add_with_hash_closure(n, next, stamps, stamp);
                }
                if node.is_hash {
                    self.add_with_hash_closure(at, next, stamps, stamp);
                }
            }
            std::mem::swap(live, next);
            if live.is_empty() {
                return;
            }
        }
        for &at in live.iter() {
            for b in &self.nodes[at].bindings {
                found(b);
            }
        }
    }

    /// Adds `at` and, since `#` may match zero words, the `#` children below it, each once
    /// per set (`stamps[n] == stamp` marks a node already in it).
    fn add_with_hash_closure(
        &self,
        mut at: usize,
        set: &mut Vec<usize>,
        stamps: &mut [u32],
        stamp: u32,
    ) {
        loop {
            if stamps[at] == stamp {
                return;
            }
            stamps[at] = stamp;
            set.push(at);
            match self.nodes[at].hash {
                Some(h) => at = h,
                None => return,
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.iter().all(|n| n.bindings.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(patterns: &[&str], key: &str) -> Vec<String> {
        let mut trie = TopicTrie::default();
        for p in patterns {
            trie.insert(p, p.to_string());
        }
        let mut out = vec![];
        trie.matches(key, |b| {
            if !out.contains(b) {
                out.push(b.clone())
            }
        });
        out.sort();
        out
    }

    #[test]
    fn star_and_hash() {
        let p = ["a.*", "a.#", "#", "*.b", "a.*.c", "#.c", "a.b"];
        assert_eq!(matched(&p, "a.b"), vec!["#", "*.b", "a.#", "a.*", "a.b"]);
        assert_eq!(matched(&p, "a"), vec!["#", "a.#"]);
        assert_eq!(matched(&p, "a.x.c"), vec!["#", "#.c", "a.#", "a.*.c"]);
        assert_eq!(matched(&p, ""), vec!["#"]);
        assert_eq!(matched(&["*"], ""), Vec::<String>::new());
        assert_eq!(matched(&["*"], "x"), vec!["*"]);
        assert_eq!(matched(&[""], ""), vec![""]);
        assert_eq!(matched(&["a..b"], "a..b"), vec!["a..b"]);
    }

    #[test]
    fn many_hashes_do_not_blow_up() {
        let pattern = vec!["#"; 40].join(".");
        let key = vec!["w"; 200].join(".");
        assert_eq!(matched(&[&pattern, "#.#.#"], &key).len(), 2);
        assert_eq!(matched(&["#.x.#.y.#"], "a.x.b.c.y.d"), vec!["#.x.#.y.#"]);
        assert!(matched(&["#.x.#.y.#"], "a.y.b.c.x.d").is_empty());
    }

    /// The specification's reading of a pattern, by backtracking (exponential in the worst
    /// case, fine for short keys): the reference the trie's walk is checked against.
    fn reference_match(pattern: &[&str], key: &[&str]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"#", rest)) => (0..=key.len()).any(|skip| reference_match(rest, &key[skip..])),
            Some((&"*", rest)) => !key.is_empty() && reference_match(rest, &key[1..]),
            Some((w, rest)) => key.first() == Some(w) && reference_match(rest, &key[1..]),
        }
    }

    #[test]
    fn agrees_with_the_reference_across_tries_sharing_the_scratch() {
        // A small xorshift so the patterns are the same on every run.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as usize
        };
        let alphabet = ["a", "b", "*", "#"];
        let mut random_words = |max: usize, alphabet: &[&'static str]| -> Vec<&'static str> {
            let len = next(max as u64 + 1);
            (0..len)
                .map(|_| alphabet[next(alphabet.len() as u64)])
                .collect()
        };
        let big: Vec<String> = (0..300)
            .map(|_| random_words(5, &alphabet).join("."))
            .collect();
        let small: Vec<String> = (0..5)
            .map(|_| random_words(3, &alphabet).join("."))
            .collect();
        let keys: Vec<String> = (0..200)
            .map(|_| random_words(6, &["a", "b"]).join("."))
            .collect();
        let build = |patterns: &[String]| {
            let mut trie = TopicTrie::default();
            for p in patterns {
                trie.insert(p, p.clone());
            }
            trie
        };
        let (big_trie, small_trie) = (build(&big), build(&small));
        for key in &keys {
            // Alternate the tries so each walk finds stamps the other one left behind.
            for (trie, patterns) in [(&big_trie, &big), (&small_trie, &small), (&big_trie, &big)] {
                let mut got = vec![];
                trie.matches(key, |b| {
                    if !got.contains(b) {
                        got.push(b.clone())
                    }
                });
                got.sort();
                let key_words: Vec<&str> = words(key).collect();
                let mut want: Vec<String> = patterns
                    .iter()
                    .filter(|p| reference_match(&words(p).collect::<Vec<_>>(), &key_words))
                    .cloned()
                    .collect();
                want.sort();
                want.dedup();
                assert_eq!(got, want, "key {key:?}");
            }
        }
    }

    #[test]
    fn matching_inside_a_match_callback() {
        let mut outer = TopicTrie::default();
        outer.insert("a.#", 1);
        outer.insert("#.b", 2);
        let mut inner = TopicTrie::default();
        inner.insert("*.b", 10);
        let mut out = vec![];
        outer.matches("a.b", |v| {
            out.push(*v);
            inner.matches("a.b", |w| out.push(*w));
        });
        out.sort();
        assert_eq!(out, vec![1, 2, 10, 10]);
    }

    #[test]
    fn remove_unbinds() {
        let mut trie = TopicTrie::default();
        trie.insert("a.#", 1);
        trie.insert("a.#", 2);
        assert!(!trie.insert("a.#", 1));
        assert!(trie.remove("a.#", &1));
        assert!(!trie.remove("a.#", &1));
        let mut out = vec![];
        trie.matches("a.b", |v| out.push(*v));
        assert_eq!(out, vec![2]);
    }
}
