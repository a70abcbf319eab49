//! openraft's async runtime for queue groups: tokio for everything, except that the random
//! numbers openraft draws (each member's election timeout) can be made to follow a seed, that
//! the watch channel is [`OrderedWatch`], whose wake-ups come in a deterministic order, and
//! that the bounded channel is [`BoxedMpsc`], whose empty channels hold no message slots.
//!
//! A deterministic simulation runs every node on one thread and calls [`seed_thread_rng`]
//! first; from then on the election timeouts drawn on that thread repeat with the seed, so a
//! failing run replays exactly. Everywhere else (no seed set) the timeouts come from the
//! operating system's entropy, as with openraft's own tokio runtime. openraft draws when a group
//! starts (its tick's first wait, its election timeout), so the indirection costs nothing on the
//! message path.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::AsyncRuntime;
use openraft::OptionalSend;
use openraft_rt_tokio::TokioRuntime;
use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};

use crate::boxed_mpsc::BoxedMpsc;
use crate::watch::OrderedWatch;

thread_local! {
    /// The seeded source of this thread, when a simulation set one.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes the random numbers openraft draws on this thread a function of `seed` (until
/// [`unseed_thread_rng`]).
pub fn seed_thread_rng(seed: u64) {
    SEEDED.with(|seeded| *seeded.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Back to entropy-seeded random numbers on this thread.
pub fn unseed_thread_rng() {
    SEEDED.with(|seeded| *seeded.borrow_mut() = None);
}

/// A number drawn from `range`: from this thread's seeded source when a simulation set one
/// (the cluster transport's reconnect jitter, so that a simulated run replays), else from
/// entropy.
pub fn random_in(range: std::ops::Range<f64>) -> f64 {
    let mut rng = <QuorumRuntime as AsyncRuntime>::thread_rng();
    rng.random_range(range)
}

/// openraft's tokio runtime, with seedable randomness, a watch channel that wakes its
/// receivers in a deterministic order ([`OrderedWatch`]) and boxed channel messages
/// ([`BoxedMpsc`]).
#[derive(Debug)]
pub struct QuorumRuntime(TokioRuntime);

impl AsyncRuntime for QuorumRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = StdRng;
    type Mpsc = BoxedMpsc;
    type Watch = OrderedWatch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
            // A child generator per draw keeps the sequence a function of the seed alone.
            Some(rng) => StdRng::seed_from_u64(rng.next_u64()),
            None => rand::make_rng(),
        })
    }

    fn new(threads: usize) -> Self {
        QuorumRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Vec<u64> {
        let config = openraft::Config {
            election_timeout_min: 100,
            election_timeout_max: 10_000,
            ..openraft::Config::default()
        };
        (0..8)
            .map(|_| config.new_rand_election_timeout::<QuorumRuntime>())
            .collect()
    }

    /// openraft's conformance suite for runtimes (spawning, timers, channels, the watch's
    /// semantics).
    #[test]
    fn the_runtime_passes_openrafts_suite() {
        openraft::rt::testing::Suite::<QuorumRuntime>::test_all();
    }

    #[test]
    fn a_seed_fixes_the_election_timeouts() {
        seed_thread_rng(7);
        let first = timeouts();
        seed_thread_rng(7);
        assert_eq!(timeouts(), first);
        seed_thread_rng(8);
        assert_ne!(timeouts(), first);
        unseed_thread_rng();
        // Unseeded draws vary: eight equal draws from 9,900 values would be a broken source.
        let unseeded = timeouts();
        assert!(unseeded.iter().any(|t| *t != unseeded[0]));
    }
}
