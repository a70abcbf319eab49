//! openraft's async runtime for queue groups: tokio for everything, except that the random
//! numbers openraft draws (each member's election timeout) can be made to follow a seed.
//!
//! A deterministic simulation runs every node on one thread and calls [`seed_thread_rng`]
//! first; from then on the election timeouts drawn on that thread repeat with the seed, so a
//! failing run replays exactly. Everywhere else (no seed set) the timeouts come from the
//! operating system's entropy, as with openraft's own tokio runtime. openraft draws once per
//! group start, so the indirection costs nothing on the message path.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

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

/// tokio, with seedable randomness.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct QuorumRuntime;

impl AsyncRuntime for QuorumRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = StdRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
            // A child generator per draw keeps the sequence a function of the seed alone.
            Some(rng) => StdRng::seed_from_u64(rng.next_u64()),
            None => StdRng::from_entropy(),
        })
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(sender), receiver)
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
