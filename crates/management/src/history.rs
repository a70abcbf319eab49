//! The last minutes of sampled counters, so that the API can answer RabbitMQ's range queries
//! (`lengths_age`/`lengths_incr`, `msg_rates_age`/`msg_rates_incr`) with `samples` and a
//! console can draw its charts at once after a reload instead of starting empty.
//!
//! The sampler (`routes::sample_forever`) records one round every `rates::SAMPLE_INTERVAL`
//! for the overview and each vhost; each key keeps `HISTORY_ROUNDS` rounds (RabbitMQ keeps
//! its global samples for 605 s by default, and its console offers ranges up to 10 minutes
//! without changing the retention policies). A range is answered as RabbitMQ's
//! rabbit_mgmt_stats does: points every `incr` back from now rounded down to `incr`, each
//! the latest round taken at or before it, newest first, with `avg_rate` and `avg` over them.

use crate::error::{ApiError, ApiResult};
use crate::list::Query;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Ten minutes and one round at one round every 5 s.
pub const HISTORY_ROUNDS: usize = 121;

/// RabbitMQ's ?MAX_RANGE: at most this many `incr` steps in one `age`.
const MAX_RANGE_STEPS: u64 = 500;

/// One sampling round of one key: when (ms since the Unix epoch) and its counters.
pub type Round = (u64, Vec<u64>);

#[derive(Default)]
pub struct History {
    rounds: Mutex<HashMap<String, VecDeque<Round>>>,
}

impl History {
    /// Records one round taken at `at_ms`; keys not in it (a deleted vhost) are forgotten.
    pub fn record(&self, at_ms: u64, entries: impl IntoIterator<Item = (String, Vec<u64>)>) {
        let mut rounds = self.rounds.lock();
        let mut next = HashMap::with_capacity(rounds.len());
        for (key, values) in entries {
            let mut kept = rounds.remove(&key).unwrap_or_default();
            if kept.len() == HISTORY_ROUNDS {
                kept.pop_front();
            }
            kept.push_back((at_ms, values));
            next.insert(key, kept);
        }
        *rounds = next;
    }

    /// The rounds of `key`, oldest first.
    pub fn of(&self, key: &str) -> Vec<Round> {
        self.rounds
            .lock()
            .get(key)
            .map_or_else(Vec::new, |kept| kept.iter().cloned().collect())
    }

    /// The counters of `key`'s latest round.
    pub fn latest(&self, key: &str) -> Option<Vec<u64>> {
        let rounds = self.rounds.lock();
        rounds.get(key)?.back().map(|(_, values)| values.clone())
    }

    /// The rounds of several keys added up round by round (the vhosts a user sees); a key
    /// that has no round at some time (a vhost made later) adds nothing to it.
    pub fn sum_of<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Vec<Round> {
        let rounds = self.rounds.lock();
        let mut sums: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for key in keys {
            for (at_ms, values) in rounds.get(key).into_iter().flatten() {
                let sum = sums.entry(*at_ms).or_insert_with(|| vec![0; values.len()]);
                for (total, value) in sum.iter_mut().zip(values) {
                    *total += value;
                }
            }
        }
        sums.into_iter().collect()
    }
}

/// Now, in ms since the Unix epoch (RabbitMQ's sample timestamps); 0 on a clock before 1970.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A range asked for with `{prefix}_age` and `{prefix}_incr` (seconds), as RabbitMQ's
/// rabbit_mgmt_util:range/3 reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub first_ms: u64,
    pub last_ms: u64,
    pub incr_ms: u64,
}

impl Range {
    /// None when the query has not both parameters as integers (RabbitMQ then serves rates
    /// only); 400 when they are not positive or span more than `MAX_RANGE_STEPS` steps.
    pub fn from_query(query: &Query, prefix: &str, now_ms: u64) -> ApiResult<Option<Range>> {
        let number = |name: String| query.get(&name).and_then(|v| v.parse::<i64>().ok());
        let (Some(age_s), Some(incr_s)) = (
            number(format!("{prefix}_age")),
            number(format!("{prefix}_incr")),
        ) else {
            return Ok(None);
        };
        if age_s <= 0 || incr_s <= 0 || (age_s / incr_s) as u64 > MAX_RANGE_STEPS {
            return Err(ApiError::bad_request(format!(
                "Invalid range parameters: age {age_s}, incr {incr_s}"
            )));
        }
        let incr_ms = incr_s as u64 * 1000;
        let last_ms = now_ms / incr_ms * incr_ms;
        Ok(Some(Range {
            first_ms: last_ms.saturating_sub(age_s as u64 * 1000),
            last_ms,
            incr_ms,
        }))
    }

    /// Column `column` of `rounds` (oldest first) at each point of the range, newest first:
    /// (timestamp ms, the latest round's value at or before it). Points before the first
    /// round have no value and are left out.
    pub fn samples(&self, rounds: &[Round], column: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = self.last_ms;
        loop {
            // The rounds are in time order: the last one not after `at`.
            let taken = rounds.partition_point(|(round_ms, _)| *round_ms <= at);
            let Some((_, values)) = taken.checked_sub(1).map(|i| &rounds[i]) else {
                break;
            };
            out.push((at, values.get(column).copied().unwrap_or(0)));
            match at.checked_sub(self.incr_ms) {
                Some(earlier) if earlier >= self.first_ms => at = earlier,
                _ => break,
            }
        }
        out
    }
}

/// Adds `samples` (newest first) to a `*_details` object as RabbitMQ does: `samples` as
/// [{"sample", "timestamp"}], and with more than one, `avg_rate` (per second, newest minus
/// oldest over their time apart) and `avg` (the samples' mean).
pub fn add_samples(details: &mut Value, samples: &[(u64, u64)]) {
    let Some(object) = details.as_object_mut() else {
        return;
    };
    let listed: Vec<Value> = samples
        .iter()
        .map(|(at_ms, sample)| json!({"sample": sample, "timestamp": at_ms}))
        .collect();
    object.insert("samples".into(), Value::Array(listed));
    if let (Some((newest_ms, newest)), Some((oldest_ms, oldest)), true) =
        (samples.first(), samples.last(), samples.len() > 1)
    {
        let span_ms = newest_ms.saturating_sub(*oldest_ms).max(1) as f64;
        let avg_rate = (*newest as f64 - *oldest as f64) * 1000.0 / span_ms;
        let avg = samples.iter().map(|(_, s)| *s as f64).sum::<f64>() / samples.len() as f64;
        object.insert("avg_rate".into(), json!(avg_rate));
        object.insert("avg".into(), json!(avg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn history_keeps_the_last_rounds_and_forgets_missing_keys() {
        let history = History::default();
        for round in 0..(HISTORY_ROUNDS as u64 + 5) {
            history.record(round * 5000, [("overview".into(), vec![round])]);
        }
        let kept = history.of("overview");
        assert_eq!(kept.len(), HISTORY_ROUNDS);
        assert_eq!(kept[0].1, vec![5]);
        history.record(10_000_000, [("vhost /".into(), vec![1])]);
        assert!(history.of("overview").is_empty());
    }

    #[test]
    fn sums_add_up_keys_round_by_round() {
        let history = History::default();
        history.record(5000, [("a".into(), vec![1, 2])]);
        history.record(
            10000,
            [("a".into(), vec![3, 4]), ("b".into(), vec![10, 20])],
        );
        assert_eq!(
            history.sum_of(["a", "b"]),
            vec![(5000, vec![1, 2]), (10000, vec![13, 24])]
        );
    }

    #[test]
    fn a_range_needs_both_numbers_and_refuses_bad_ones() {
        assert_eq!(Range::from_query(&query(&[]), "lengths", 0).unwrap(), None);
        assert_eq!(
            Range::from_query(&query(&[("lengths_age", "60")]), "lengths", 0).unwrap(),
            None
        );
        let asked = query(&[("lengths_age", "60"), ("lengths_incr", "5")]);
        let range = Range::from_query(&asked, "lengths", 123_456)
            .unwrap()
            .unwrap();
        assert_eq!(range.last_ms, 120_000);
        assert_eq!(range.first_ms, 60_000);
        assert_eq!(range.incr_ms, 5000);
        for bad in [("0", "5"), ("60", "-5"), ("6000", "1")] {
            let asked = query(&[("lengths_age", bad.0), ("lengths_incr", bad.1)]);
            assert!(Range::from_query(&asked, "lengths", 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn samples_step_back_from_now_newest_first() {
        let rounds = vec![(1000, vec![7]), (6000, vec![9]), (11000, vec![12])];
        let range = Range {
            first_ms: 0,
            last_ms: 15000,
            incr_ms: 5000,
        };
        // 15000 and 10000 see the rounds at 11000 and 6000; 5000 the one at 1000; 0 none.
        assert_eq!(
            range.samples(&rounds, 0),
            vec![(15000, 12), (10000, 9), (5000, 7)]
        );
        let mut details = json!({"rate": 1.0});
        add_samples(&mut details, &range.samples(&rounds, 0));
        assert_eq!(
            details["samples"][0],
            json!({"sample": 12, "timestamp": 15000})
        );
        assert_eq!(details["avg_rate"], json!(0.5));
        assert_eq!(details["avg"], json!(28.0 / 3.0));
    }
}
