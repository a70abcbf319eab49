//! Routing through a topic exchange with many bindings: the exchange (`Exchange::route`, the
//! binding trie under its read lock) as every publish to a topic exchange uses it, holding
//! TOPIC_BINDINGS (default 1,000,000) bindings to 1,000 destinations, of 3 to 5 words: a
//! literal first word (one per 1,000 bindings), then words that are `*` one time in ten, `#` one in twenty,
//! else one of 10 literals. Keys are four literal words, so a route walks one first word's
//! share of the trie through its `*` and `#` branches.
//!
//! Binding a million patterns costs far more instructions than the routes measured, so
//! `tools/bench/instructions.sh` runs this under callgrind with collection only inside
//! [`counted_routes`] (`--toggle-collect`): the set-up, and a first pass over the keys that
//! sizes the matcher's scratch, are not counted, in one run.

use std::hint::black_box;
use warren_broker::{Binding, Destination, Exchange, ExchangeKind};
use warren_codec::FieldTable;

use crate::client::Result;

/// Bindings per first word: the share of the trie a route walks, the same size whatever the
/// total, so a route among 50,000 bindings walks what it walks among 1,000,000 (a hash lookup
/// among more first words at the root costs the same).
const BINDINGS_PER_FIRST_WORD: u64 = 1_000;
/// Literals after the first word are drawn from fewer words, so a key meets them often.
const WORDS_AFTER_FIRST: u64 = 10;
const DESTINATIONS: u64 = 1_000;
/// Distinct routing keys, routed in turn.
const KEYS: usize = 1_000;

/// A fixed pseudo-random sequence (a 64-bit LCG), so every run binds the same patterns.
struct Sequence {
    state: u64,
    first_words: u64,
}

impl Sequence {
    fn below(&mut self, n: u64) -> u64 {
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.state >> 33) % n
    }

    /// A literal first word (as most real patterns start: `orders.*.eu.#`), then 2 to 4
    /// words, each `*` one time in ten, `#` one in twenty, else a literal.
    fn pattern(&mut self) -> String {
        let mut pattern = format!("w{}", self.below(self.first_words));
        for _ in 0..2 + self.below(3) {
            pattern.push('.');
            match self.below(20) {
                0 | 1 => pattern.push('*'),
                2 => pattern.push('#'),
                _ => pattern.push_str(&format!("w{}", self.below(WORDS_AFTER_FIRST))),
            }
        }
        pattern
    }

    /// Four words: the first of the whole vocabulary, the others as a pattern's literals.
    fn key(&mut self) -> String {
        let mut key = format!("w{}", self.below(self.first_words));
        for _ in 0..3 {
            key.push_str(&format!(".w{}", self.below(WORDS_AFTER_FIRST)));
        }
        key
    }
}

/// Routes `keys[i % keys.len()]` for `count` routes; returns how many destinations they
/// matched. Not inlined: the instruction count is collected inside this function only.
#[inline(never)]
fn counted_routes(exchange: &Exchange, keys: &[String], count: usize) -> usize {
    let mut matched = 0;
    for i in 0..count {
        let key = keys[i % keys.len()].as_str();
        exchange.route(&[key], None, |d| {
            black_box(d);
            matched += 1;
        });
    }
    matched
}

pub fn route(count: usize) -> Result<String> {
    let bindings: usize = match std::env::var("TOPIC_BINDINGS") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("TOPIC_BINDINGS={v}: not a count"))?,
        Err(_) => 1_000_000,
    };
    let exchange = Exchange::new(
        "topic".into(),
        ExchangeKind::Topic,
        false,
        false,
        false,
        FieldTable::new(),
    );
    let mut sequence = Sequence {
        state: 1,
        first_words: (bindings as u64 / BINDINGS_PER_FIRST_WORD).max(1),
    };
    let mut bound = 0;
    while bound < bindings {
        let binding = Binding {
            destination: Destination::Exchange(format!("d{}", sequence.below(DESTINATIONS)).into()),
            routing_key: sequence.pattern().into(),
            arguments: FieldTable::new(),
        };
        if exchange.bind(binding) {
            bound += 1;
        }
    }
    let keys: Vec<String> = (0..KEYS).map(|_| sequence.key()).collect();
    // The first route sizes the thread's matcher scratch to the trie; later ones reuse it.
    black_box(warm_up_scratch(&exchange, &keys));
    let matched = counted_routes(&exchange, &keys, count);
    Ok(format!(
        "{count} routes through {bound} bindings, {:.1} destinations each",
        matched as f64 / count.max(1) as f64
    ))
}

/// The first pass over the keys, outside the counted function.
#[inline(never)]
fn warm_up_scratch(exchange: &Exchange, keys: &[String]) -> usize {
    let mut matched = 0;
    for key in keys {
        exchange.route(&[key.as_str()], None, |_| matched += 1);
    }
    matched
}
