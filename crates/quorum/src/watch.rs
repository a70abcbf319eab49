//! A watch channel (one value, replaced whole; receivers wait for the next change) that wakes
//! its waiting receivers in the order they started waiting: the [`openraft::rt::Watch`]
//! implementation of [`crate::runtime::QuorumRuntime`].
//!
//! openraft 0.10 moves a great deal through watch channels — every storage completion reaches
//! a group's core through one, as do its metrics and replication progress — and tokio's watch
//! wakes its waiters in an order drawn from the runtime's random generator (its waiters are
//! spread over eight notifiers picked at random). On a real node that order does not matter;
//! in the deterministic simulation (`tests/sim.rs`) it decides which task runs next, so with
//! tokio's watch a seed no longer replayed the same run. Here the waiters are woken in
//! registration order, a function of the run alone.
//!
//! Semantics follow tokio's watch, which openraft was written against: a send fails (and is
//! dropped) when no receiver is left; `send_if_modified` always runs; `changed` returns at once
//! for a value not yet seen, and fails once every sender is gone and nothing new is left; a
//! receiver made by `subscribe` or `clone` starts out having seen what its origin saw.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use openraft::rt::watch::{RecvError, SendError, Watch, WatchReceiver, WatchSender};
use openraft::rt::{OptionalSend, OptionalSync};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

/// The watch channel type of [`crate::runtime::QuorumRuntime`].
pub struct OrderedWatch;

struct State {
    /// Bumped by every send that changed the value.
    version: u64,
    senders: usize,
    receivers: usize,
    /// Waiting receivers, in the order they registered; each send wakes them all, in order.
    waiters: Vec<(u64, Waker)>,
    next_waiter: u64,
}

struct Shared<T> {
    value: RwLock<T>,
    state: Mutex<State>,
}

impl<T> Shared<T> {
    /// Records a change (called with the value's write lock held, so a reader that sees the new
    /// version also sees the new value) and hands back the waiters to wake.
    fn changed(&self) -> Vec<(u64, Waker)> {
        let mut state = self.state.lock();
        state.version += 1;
        std::mem::take(&mut state.waiters)
    }
}

fn wake(waiters: Vec<(u64, Waker)>) {
    for (_, waker) in waiters {
        waker.wake();
    }
}

pub struct OrderedWatchSender<T> {
    shared: Arc<Shared<T>>,
}

pub struct OrderedWatchReceiver<T> {
    shared: Arc<Shared<T>>,
    /// The version this receiver has seen.
    seen: u64,
}

/// Creates a channel holding `init` (seen by the first receiver).
pub fn channel<T>(init: T) -> (OrderedWatchSender<T>, OrderedWatchReceiver<T>) {
    let shared = Arc::new(Shared {
        value: RwLock::new(init),
        state: Mutex::new(State {
            version: 0,
            senders: 1,
            receivers: 1,
            waiters: Vec::new(),
            next_waiter: 0,
        }),
    });
    (
        OrderedWatchSender {
            shared: shared.clone(),
        },
        OrderedWatchReceiver { shared, seen: 0 },
    )
}

impl<T> Clone for OrderedWatchSender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for OrderedWatchSender<T> {
    fn drop(&mut self) {
        let waiters = {
            let mut state = self.shared.state.lock();
            state.senders -= 1;
            if state.senders > 0 {
                return;
            }
            std::mem::take(&mut state.waiters)
        };
        // The last sender is gone: waiting receivers learn so.
        wake(waiters);
    }
}

impl<T> OrderedWatchSender<T> {
    /// Replaces the value and wakes the receivers; fails (keeping nothing) when none is left.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.shared.state.lock().receivers == 0 {
            return Err(SendError(value));
        }
        let waiters = {
            let mut current = self.shared.value.write();
            *current = value;
            self.shared.changed()
        };
        wake(waiters);
        Ok(())
    }

    /// Lets `modify` change the value in place; the receivers hear of it only if it says it
    /// did.
    pub fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
        let waiters = {
            let mut current = self.shared.value.write();
            if !modify(&mut current) {
                return false;
            }
            self.shared.changed()
        };
        wake(waiters);
        true
    }

    pub fn borrow(&self) -> RwLockReadGuard<'_, T> {
        self.shared.value.read()
    }

    pub fn subscribe(&self) -> OrderedWatchReceiver<T> {
        let _value = self.shared.value.read();
        let mut state = self.shared.state.lock();
        state.receivers += 1;
        OrderedWatchReceiver {
            shared: self.shared.clone(),
            seen: state.version,
        }
    }
}

impl<T> Clone for OrderedWatchReceiver<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().receivers += 1;
        Self {
            shared: self.shared.clone(),
            seen: self.seen,
        }
    }
}

impl<T> Drop for OrderedWatchReceiver<T> {
    fn drop(&mut self) {
        self.shared.state.lock().receivers -= 1;
    }
}

impl<T> OrderedWatchReceiver<T> {
    /// The current value, without marking it seen.
    pub fn borrow(&self) -> RwLockReadGuard<'_, T> {
        self.shared.value.read()
    }

    /// The current value, marked seen.
    pub fn borrow_and_update(&mut self) -> RwLockReadGuard<'_, T> {
        let value = self.shared.value.read();
        self.seen = self.shared.state.lock().version;
        value
    }

    /// Waits for a value not seen yet and marks it seen; fails once every sender is gone (and
    /// no unseen value is left).
    pub fn changed(&mut self) -> Changed<'_, T> {
        Changed {
            receiver: self,
            waiter: None,
        }
    }
}

/// The future of [`OrderedWatchReceiver::changed`]; leaves the waiting list when dropped.
pub struct Changed<'a, T> {
    receiver: &'a mut OrderedWatchReceiver<T>,
    /// This future's place among the waiters, once it waits.
    waiter: Option<u64>,
}

impl<T> Future for Changed<'_, T> {
    type Output = Result<(), RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = this.receiver.shared.clone();
        let mut state = shared.state.lock();
        if state.version != this.receiver.seen {
            this.receiver.seen = state.version;
            remove_waiter(&mut state, this.waiter.take());
            return Poll::Ready(Ok(()));
        }
        if state.senders == 0 {
            remove_waiter(&mut state, this.waiter.take());
            return Poll::Ready(Err(RecvError(())));
        }
        // Still listed (polled again before a send): keep the place, update the waker.
        if let Some(id) = this.waiter {
            if let Some((_, waker)) = state.waiters.iter_mut().find(|(w, _)| *w == id) {
                waker.clone_from(cx.waker());
                return Poll::Pending;
            }
        }
        let id = state.next_waiter;
        state.next_waiter += 1;
        state.waiters.push((id, cx.waker().clone()));
        this.waiter = Some(id);
        Poll::Pending
    }
}

fn remove_waiter(state: &mut State, waiter: Option<u64>) {
    if let Some(id) = waiter {
        state.waiters.retain(|(w, _)| *w != id);
    }
}

impl<T> Drop for Changed<'_, T> {
    fn drop(&mut self) {
        if self.waiter.is_some() {
            let mut state = self.receiver.shared.state.lock();
            remove_waiter(&mut state, self.waiter.take());
        }
    }
}

impl Watch for OrderedWatch {
    type Sender<T: OptionalSend + OptionalSync> = OrderedWatchSender<T>;
    type Receiver<T: OptionalSend + OptionalSync> = OrderedWatchReceiver<T>;
    type Ref<'a, T: OptionalSend + 'a> = RwLockReadGuard<'a, T>;

    fn channel<T: OptionalSend + OptionalSync>(init: T) -> (Self::Sender<T>, Self::Receiver<T>) {
        channel(init)
    }
}

impl<T: OptionalSend + OptionalSync> WatchSender<OrderedWatch, T> for OrderedWatchSender<T> {
    fn send(&self, value: T) -> Result<(), SendError<T>> {
        OrderedWatchSender::send(self, value)
    }

    fn send_if_modified<F>(&self, modify: F) -> bool
    where
        F: FnOnce(&mut T) -> bool,
    {
        OrderedWatchSender::send_if_modified(self, modify)
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.borrow()
    }

    fn subscribe(&self) -> OrderedWatchReceiver<T> {
        OrderedWatchSender::subscribe(self)
    }
}

impl<T: OptionalSend + OptionalSync> WatchReceiver<OrderedWatch, T> for OrderedWatchReceiver<T> {
    async fn changed(&mut self) -> Result<(), RecvError> {
        OrderedWatchReceiver::changed(self).await
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.borrow()
    }

    fn borrow_and_update(&mut self) -> RwLockReadGuard<'_, T> {
        OrderedWatchReceiver::borrow_and_update(self)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// Receivers that started waiting in some order are woken in that order, every time.
    #[test]
    fn waiters_wake_in_registration_order() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        let woken = Rc::new(RefCell::new(Vec::new()));
        local.block_on(&runtime, async {
            let (sender, receiver) = channel(0u32);
            let mut tasks = Vec::new();
            for id in 0..16 {
                let mut receiver = receiver.clone();
                let woken = woken.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    while receiver.changed().await.is_ok() {
                        woken.borrow_mut().push((*receiver.borrow(), id));
                    }
                }));
                // Each task registers before the next one is spawned.
                while sender.shared.state.lock().waiters.len() <= id as usize {
                    tokio::task::yield_now().await;
                }
            }
            for value in 1..=3 {
                sender.send(value).expect("receivers are alive");
                // All woken and waiting again before the next value.
                while woken.borrow().len() < 16 * value as usize
                    || sender.shared.state.lock().waiters.len() < 16
                {
                    tokio::task::yield_now().await;
                }
            }
            drop(sender);
            for task in tasks {
                task.await.expect("task");
            }
        });
        let expected: Vec<(u32, u32)> = (1..=3)
            .flat_map(|value| (0..16).map(move |id| (value, id)))
            .collect();
        assert_eq!(*woken.borrow(), expected);
    }

    #[test]
    fn a_send_without_receivers_fails_and_changed_fails_without_senders() {
        let (sender, receiver) = channel(1u8);
        drop(receiver);
        assert!(sender.send(2).is_err());
        let mut receiver = sender.subscribe();
        assert_eq!(*receiver.borrow(), 1, "the failed send kept nothing");
        sender.send(3).expect("a receiver again");
        drop(sender);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            assert!(receiver.changed().await.is_ok(), "3 was not seen yet");
            assert!(receiver.changed().await.is_err(), "no sender is left");
        });
    }
}
