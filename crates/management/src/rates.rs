//! Message rates by sampling, as RabbitMQ's management agent does in its default "basic"
//! mode: every `SAMPLE_INTERVAL` the counters of every exchange, connection, channel and
//! vhost and the overview's are read, and each rate is the growth since the previous sample
//! divided by the time between them. Objects that are gone drop out at the next sample.
//! Queues, which can number a million, are sampled apart (`queue_rates.rs`): only those
//! that changed are read.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// RabbitMQ's `collect_statistics_interval` default.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Keyed by object, hashed with foldhash (randomly seeded, as the broker's name maps): a
/// round looks up every object that moved, and SipHash was an eighth of a round's time.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

struct Sample {
    at: Instant,
    values: Box<[u64]>,
    rates: Box<[f64]>,
}

/// The rates of the last round. Only objects whose counters were not all zero in this round
/// or the one before are kept: every rate of an object idle in both is 0, which is what
/// [`Rates::get`]'s `None` means to its callers. A broker with a million idle queues keeps
/// nothing for them (an entry with its key and two counter arrays was ~900 bytes a queue).
#[derive(Default)]
pub struct Rates {
    /// Replaced whole at the end of a round, so a reader never waits for a round to finish.
    samples: Mutex<Arc<HashMap<String, Sample>>>,
    /// When the last round was taken; None before the first.
    last_at: Mutex<Option<Instant>>,
}

/// One round of samples being taken (see [`Rates::begin`]).
pub struct Round {
    at: Instant,
    /// Seconds since the last round; None in the first, which has nothing to grow from.
    since_s: Option<f64>,
    previous: Arc<HashMap<String, Sample>>,
    next: HashMap<String, Sample>,
    /// The key being looked up, reused: an idle object costs no allocation.
    key: String,
}

impl Rates {
    /// Starts a round: [`Round::record`] each object, then [`Rates::finish`].
    pub fn begin(&self) -> Round {
        let previous = self.samples.lock().clone();
        let at = Instant::now();
        let since_s = self
            .last_at
            .lock()
            .map(|last| at.duration_since(last).as_secs_f64().max(1e-3));
        Round {
            at,
            since_s,
            next: HashMap::with_capacity_and_hasher(previous.len(), Default::default()),
            previous,
            key: String::new(),
        }
    }

    /// Publishes a round's rates; objects it did not record are forgotten.
    pub fn finish(&self, round: Round) {
        *self.last_at.lock() = Some(round.at);
        *self.samples.lock() = Arc::new(round.next);
    }

    /// The rates of one object, in the order its values were given; `None` when they are all
    /// 0 (or the object is unknown).
    pub fn get(&self, key: &str) -> Option<Vec<f64>> {
        self.samples.lock().get(key).map(|s| s.rates.to_vec())
    }
}

impl Round {
    /// Records one object's counters, in a fixed order; `key` writes the object's key into
    /// the buffer it is given.
    pub fn record(&mut self, key: impl FnOnce(&mut String), values: &[u64]) {
        let idle = values.iter().all(|v| *v == 0);
        if idle && self.previous.is_empty() {
            return;
        }
        // An object the last round did not keep had every value 0 then (or did not exist):
        // its growth since is its values, so its first counts show as a rate at once.
        self.key.clear();
        key(&mut self.key);
        let previous = self.previous.get(self.key.as_str());
        if idle && previous.is_none_or(|prev| prev.values.iter().all(|v| *v == 0)) {
            // Idle now and before (or new and idle): every rate is 0.
            return;
        }
        let rates = match previous {
            Some(prev) if prev.values.len() == values.len() => {
                let secs = self.at.duration_since(prev.at).as_secs_f64().max(1e-3);
                values
                    .iter()
                    .zip(prev.values.iter())
                    .map(|(v, p)| (*v as f64 - *p as f64) / secs)
                    .collect()
            }
            _ => match self.since_s {
                Some(secs) => values.iter().map(|v| *v as f64 / secs).collect(),
                None => vec![0.0; values.len()].into_boxed_slice(),
            },
        };
        self.next.insert(
            self.key.clone(),
            Sample {
                at: self.at,
                values: values.into(),
                rates,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(rates: &Rates, objects: &[(&str, &[u64])]) {
        let mut round = rates.begin();
        for (key, values) in objects {
            round.record(|k| k.push_str(key), values);
        }
        rates.finish(round);
    }

    #[test]
    fn rate_is_growth_over_time() {
        let rates = Rates::default();
        round(&rates, &[("q", &[10, 5])]);
        std::thread::sleep(Duration::from_millis(100));
        round(&rates, &[("q", &[20, 5])]);
        let r = rates.get("q").unwrap();
        assert!(r[0] > 50.0 && r[0] <= 100.0, "{r:?}");
        assert_eq!(r[1], 0.0);
        round(&rates, &[]);
        assert!(rates.get("q").is_none());
    }

    #[test]
    fn an_object_first_seen_after_the_first_round_shows_its_growth_at_once() {
        let rates = Rates::default();
        round(&rates, &[("idle", &[0])]);
        std::thread::sleep(Duration::from_millis(100));
        round(&rates, &[("idle", &[0]), ("new", &[0])]);
        std::thread::sleep(Duration::from_millis(100));
        round(&rates, &[("idle", &[10]), ("new", &[10])]);
        for key in ["idle", "new"] {
            let r = rates.get(key).unwrap();
            assert!(r[0] > 50.0 && r[0] <= 100.0, "{key}: {r:?}");
        }
    }

    #[test]
    fn an_object_idle_in_two_rounds_is_not_kept_and_a_fall_to_zero_is_a_rate() {
        let rates = Rates::default();
        round(&rates, &[("idle", &[0, 0]), ("busy", &[100, 0])]);
        assert!(
            rates.get("idle").is_none(),
            "nothing kept for an idle object"
        );
        std::thread::sleep(Duration::from_millis(100));
        // Drained to zero: the fall is a negative rate, shown once.
        round(&rates, &[("idle", &[0, 0]), ("busy", &[0, 0])]);
        let fall = rates.get("busy").expect("the fall to zero is kept");
        assert!(fall[0] < -500.0, "{fall:?}");
        assert!(rates.get("idle").is_none());
        // Zero again: every rate is 0, so nothing is kept.
        round(&rates, &[("idle", &[0, 0]), ("busy", &[0, 0])]);
        assert!(rates.get("busy").is_none());
    }
}
