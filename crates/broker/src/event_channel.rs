//! The channel that carries a connection's events (deliveries, consumer cancels, confirms
//! settled, forced closes) from queues and the broker to the connection's task: any number of
//! senders, one receiver, unbounded (a queue never waits for a connection; the connection's
//! own back-pressure is its write buffer and consumer prefetch).
//!
//! Why not tokio's unbounded mpsc: it allocates its first block of 32 slots when the channel
//! is made (32 events of ~90 bytes, ~3 KB, besides ~0.5 KB of cache-padded state) for every
//! connection, whether it ever receives anything or not, and keeps one block however quiet the
//! connection gets; at 10,000 pairs that alone is ~70 MB (issue 12: 10,000 pairs within
//! 300 MB). Here the events wait in a `VecDeque` behind a mutex: nothing is allocated until
//! the first event, a one-event-at-a-time connection holds room for four, and room a burst
//! left is given back at the connection's idle check (`shrink_idle`). A send is one
//! uncontended lock, a push and, when the receiver sleeps, a wake-up, as tokio's is an atomic
//! reservation, a slot write and the same wake-up.
//!
//! The receiver takes a burst in one go: when more than one event waits, it swaps the whole
//! queue for its own empty one under one lock and hands the events out from there, so a
//! connection draining a batch of deliveries takes the lock (whose cache line the publishing
//! threads write) once per batch, not once per event. A lone event is popped as before, so a
//! connection that gets one event at a time keeps a single small queue.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Room above this many events is given back by `shrink_idle` once the queue is empty.
const IDLE_ROOM_EVENTS: usize = 8;

struct State<T> {
    queue: VecDeque<T>,
    /// The receiver's waker while it waits for an event.
    waker: Option<Waker>,
    /// The receiver closed or dropped: sends fail and hand the event back.
    closed: bool,
    senders: usize,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

/// The sending side; cloned for every consumer and queue that reaches the connection.
pub struct EventSender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving side, owned by the connection's task.
pub struct EventReceiver<T> {
    shared: Arc<Shared<T>>,
    /// Events taken off the shared queue in one go and not handed out yet; always older
    /// than anything in the shared queue.
    batch: VecDeque<T>,
}

/// The receiver is gone: the event comes back to the sender (a delivery is requeued).
#[derive(Debug, PartialEq, Eq)]
pub struct SendError<T>(pub T);

/// Why `try_recv` returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// No event now; senders remain.
    Empty,
    /// No event, and none can come (every sender dropped, or the receiver closed).
    Disconnected,
}

/// A new channel; nothing is allocated for events until the first is sent.
pub fn event_channel<T>() -> (EventSender<T>, EventReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            waker: None,
            closed: false,
            senders: 1,
        }),
    });
    (
        EventSender {
            shared: shared.clone(),
        },
        EventReceiver {
            shared,
            batch: VecDeque::new(),
        },
    )
}

impl<T> EventSender<T> {
    /// Queues `event` for the receiver and wakes it; the event back if the receiver is gone.
    pub fn send(&self, event: T) -> Result<(), SendError<T>> {
        let waker = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return Err(SendError(event));
            }
            state.queue.push_back(event);
            state.waker.take()
        };
        // Woken outside the lock: the receiver's task may run on another thread at once.
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// The receiver closed or dropped.
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().closed
    }
}

impl<T> std::fmt::Debug for EventSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for EventReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver").finish_non_exhaustive()
    }
}

impl<T> Clone for EventSender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        EventSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for EventSender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.state.lock();
            state.senders -= 1;
            if state.senders == 0 {
                state.waker.take()
            } else {
                None
            }
        };
        // The last sender gone: a waiting receiver learns that nothing more can come.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> EventReceiver<T> {
    /// The next event; `None` once every sender is gone (or the receiver closed) and nothing
    /// is left.
    pub async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(event) = self.batch.pop_front() {
            return Poll::Ready(Some(event));
        }
        let mut state = self.shared.state.lock();
        if let Some(event) = take_next(&mut state.queue, &mut self.batch) {
            return Poll::Ready(Some(event));
        }
        if state.closed || state.senders == 0 {
            return Poll::Ready(None);
        }
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The next event if there is one now.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        if let Some(event) = self.batch.pop_front() {
            return Ok(event);
        }
        let mut state = self.shared.state.lock();
        match take_next(&mut state.queue, &mut self.batch) {
            Some(event) => Ok(event),
            None if state.closed || state.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Refuses further sends; what was sent already can still be received.
    pub fn close(&mut self) {
        self.shared.state.lock().closed = true;
    }

    /// Gives back the room a burst of events left, when none is waiting. For the
    /// connection's idle check: a busy connection never reallocates for it.
    pub fn shrink_idle(&mut self) {
        if self.batch.is_empty() && self.batch.capacity() > IDLE_ROOM_EVENTS {
            self.batch = VecDeque::new();
        }
        let mut state = self.shared.state.lock();
        if state.queue.is_empty() && state.queue.capacity() > IDLE_ROOM_EVENTS {
            state.queue = VecDeque::new();
        }
    }

    /// Events waiting and the room allocated for them (tests).
    pub fn len_and_capacity(&self) -> (usize, usize) {
        let state = self.shared.state.lock();
        (
            state.queue.len() + self.batch.len(),
            state.queue.capacity() + self.batch.capacity(),
        )
    }
}

impl<T> Drop for EventReceiver<T> {
    fn drop(&mut self) {
        let rest = {
            let mut state = self.shared.state.lock();
            state.closed = true;
            state.waker = None;
            std::mem::take(&mut state.queue)
        };
        // Dropped outside the lock: an event's drop may release a queue or a consumer.
        drop(rest);
    }
}

/// The oldest waiting event: popped alone, or, when more wait, with the rest moved into the
/// receiver's (empty) `batch` by swapping the two queues (no event is moved one by one, and
/// the sender side keeps the batch's room for what comes next).
fn take_next<T>(queue: &mut VecDeque<T>, batch: &mut VecDeque<T>) -> Option<T> {
    if queue.len() > 1 {
        debug_assert!(batch.is_empty(), "the batch is handed out before the queue");
        std::mem::swap(queue, batch);
        return batch.pop_front();
    }
    queue.pop_front()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nothing_is_allocated_before_the_first_event_and_a_burst_is_given_back() {
        let (tx, mut rx) = event_channel::<u64>();
        assert_eq!(rx.len_and_capacity(), (0, 0));
        for n in 0..1000 {
            tx.send(n).unwrap();
        }
        let (len, capacity) = rx.len_and_capacity();
        assert_eq!(len, 1000);
        assert!(capacity >= 1000);
        rx.shrink_idle();
        assert!(rx.len_and_capacity().1 >= 1000, "not while events wait");
        let got: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got, (0..1000).collect::<Vec<_>>(), "in order");
        rx.shrink_idle();
        assert_eq!(rx.len_and_capacity(), (0, 0));
        tx.send(7).unwrap();
        assert_eq!(rx.try_recv(), Ok(7));
        rx.shrink_idle();
        assert!(
            rx.len_and_capacity().1 <= IDLE_ROOM_EVENTS,
            "small room is kept"
        );
    }

    #[test]
    fn events_sent_while_a_batch_is_handed_out_come_after_it() {
        let (tx, mut rx) = event_channel::<u32>();
        for n in 0..3 {
            tx.send(n).unwrap();
        }
        assert_eq!(rx.try_recv(), Ok(0), "the first of a burst takes the lot");
        tx.send(3).unwrap();
        tx.send(4).unwrap();
        let got: Vec<u32> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        tx.send(5).unwrap();
        rx.close();
        tx.send(6).unwrap_err();
        assert_eq!(rx.try_recv(), Ok(5), "sent before the close");
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn a_closed_or_dropped_receiver_hands_events_back() {
        let (tx, mut rx) = event_channel::<&str>();
        tx.send("before").unwrap();
        rx.close();
        assert!(tx.is_closed());
        assert_eq!(tx.send("after"), Err(SendError("after")));
        assert_eq!(
            rx.try_recv(),
            Ok("before"),
            "sent before the close is still received"
        );
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        let (tx, rx) = event_channel::<&str>();
        drop(rx);
        assert_eq!(tx.send("late"), Err(SendError("late")));
    }

    #[tokio::test]
    async fn recv_wakes_for_an_event_from_another_task_and_ends_with_the_last_sender() {
        let (tx, mut rx) = event_channel::<u32>();
        let other = tx.clone();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            other.send(1).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            other.send(2).unwrap();
        });
        let deadline = Duration::from_secs(10);
        assert_eq!(tokio::time::timeout(deadline, rx.recv()).await, Ok(Some(1)));
        assert_eq!(tokio::time::timeout(deadline, rx.recv()).await, Ok(Some(2)));
        sender.await.unwrap();
        drop(tx);
        assert_eq!(tokio::time::timeout(deadline, rx.recv()).await, Ok(None));
    }
}
