//! Message rates by sampling, as RabbitMQ's management agent does in its default "basic"
//! mode: every `SAMPLE_INTERVAL` the counters of every object are read, and each rate is
//! the growth since the previous sample divided by the time between them. Objects that are
//! gone drop out at the next sample.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// RabbitMQ's `collect_statistics_interval` default.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

struct Sample {
    at: Instant,
    values: Vec<u64>,
    rates: Vec<f64>,
}

#[derive(Default)]
pub struct Rates {
    samples: Mutex<HashMap<String, Sample>>,
}

impl Rates {
    /// Takes one round of samples: `values` yields (object key, its counters in a fixed
    /// order). Keys not seen this round are forgotten.
    pub fn sample(&self, values: impl IntoIterator<Item = (String, Vec<u64>)>) {
        let now = Instant::now();
        let mut samples = self.samples.lock();
        let mut next = HashMap::with_capacity(samples.len());
        for (key, values) in values {
            let rates = match samples.remove(&key) {
                Some(prev) if prev.values.len() == values.len() => {
                    let secs = now.duration_since(prev.at).as_secs_f64().max(1e-3);
                    values
                        .iter()
                        .zip(&prev.values)
                        .map(|(v, p)| (*v as f64 - *p as f64) / secs)
                        .collect()
                }
                _ => vec![0.0; values.len()],
            };
            next.insert(
                key,
                Sample {
                    at: now,
                    values,
                    rates,
                },
            );
        }
        *samples = next;
    }

    /// The rates of one object, in the order its values were given.
    pub fn get(&self, key: &str) -> Option<Vec<f64>> {
        self.samples.lock().get(key).map(|s| s.rates.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_growth_over_time() {
        let rates = Rates::default();
        rates.sample([("q".to_string(), vec![10, 5])]);
        std::thread::sleep(Duration::from_millis(100));
        rates.sample([("q".to_string(), vec![20, 5])]);
        let r = rates.get("q").unwrap();
        assert!(r[0] > 50.0 && r[0] <= 100.0, "{r:?}");
        assert_eq!(r[1], 0.0);
        rates.sample(std::iter::empty());
        assert!(rates.get("q").is_none());
    }
}
