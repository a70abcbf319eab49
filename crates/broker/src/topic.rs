//! The topic exchange's binding index: a trie over dot-separated words with `*` (exactly one
//! word) and `#` (zero or more words) edges.
//!
//! Matching walks the trie with a *set* of live nodes, one word at a time, so a pattern like
//! `#.#.#` costs O(words × nodes) instead of exploring every way the `#`s could split the key.

use std::collections::HashMap;

#[derive(Debug, Default)]
struct Node<T> {
    words: HashMap<String, usize>,
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
                words: HashMap::new(),
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
            words: HashMap::new(),
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
    pub fn matches(&self, key: &str, mut found: impl FnMut(&T)) {
        let mut live: Vec<usize> = Vec::with_capacity(8);
        let mut seen = vec![false; 0];
        self.add_with_hash_closure(0, &mut live, &mut seen);
        for word in words(key) {
            let mut next: Vec<usize> = Vec::with_capacity(live.len() + 4);
            let mut next_seen = Vec::new();
            for &at in &live {
                let node = &self.nodes[at];
                if let Some(&n) = node.words.get(word) {
                    self.add_with_hash_closure(n, &mut next, &mut next_seen);
                }
                if let Some(n) = node.star {
                    self.add_with_hash_closure(n, &mut next, &mut next_seen);
                }
                if node.is_hash {
                    self.add_with_hash_closure(at, &mut next, &mut next_seen);
                }
            }
            live = next;
            if live.is_empty() {
                return;
            }
        }
        for at in live {
            for b in &self.nodes[at].bindings {
                found(b);
            }
        }
    }

    /// Adds `at` and, since `#` may match zero words, the `#` children below it.
    fn add_with_hash_closure(&self, mut at: usize, set: &mut Vec<usize>, seen: &mut Vec<bool>) {
        loop {
            if seen.len() < self.nodes.len() {
                seen.resize(self.nodes.len(), false);
            }
            if seen[at] {
                return;
            }
            seen[at] = true;
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
