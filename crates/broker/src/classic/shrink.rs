//! Giving a queue's ready-list buffer back a while after the queue emptied, rather than at
//! once. A queue under load empties and refills many times a second; shrinking its buffer on
//! each emptying made every refill grow it again through reallocations and page faults on
//! fresh pages (~10 % of the broker's CPU in a 16 B autoack run, docs/benchmarks.md). So an
//! emptying only arms a timer, at most one per queue; when it fires, whatever levels are
//! still empty are shrunk (a queue that refilled meanwhile keeps its buffer and arms again the
//! next time it empties). An idle queue thus holds a burst's buffer for `SHRINK_DELAY` at
//! most, well inside the idle trimmer's first look (`allocator.rs` in the binary).

use super::queue::{ClassicQueue, ClassicState};
use crate::queue::Queue;
use std::sync::Arc;
use std::time::Duration;

/// How long an emptied queue keeps the buffer a burst grew.
const SHRINK_DELAY: Duration = Duration::from_secs(1);

/// With the queue's lock held (`st`), after taking messages off the ready list: arms the
/// shrink timer if the list is empty with a grown buffer and no timer is armed yet. Without
/// a runtime (some tests) it shrinks at once.
pub(super) fn shrink_later(queue: &Arc<Queue>, st: &mut ClassicState) {
    if st.shrink_timer || !st.ready.holds_emptied_room() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        st.ready.shrink_emptied();
        return;
    };
    st.shrink_timer = true;
    let queue = Arc::downgrade(queue);
    runtime.spawn(async move {
        tokio::time::sleep(SHRINK_DELAY).await;
        // A queue deleted meanwhile has nothing to give back here.
        let Some(queue) = queue.upgrade() else { return };
        let Some(classic) = ClassicQueue::of(&queue) else {
            return;
        };
        let mut st = classic.state.lock();
        st.shrink_timer = false;
        st.ready.shrink_emptied();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use bytes::Bytes;
    use warren_codec::{BasicProperties, ShortStr};

    fn queue() -> Arc<Queue> {
        crate::classic::standalone("q")
    }

    fn publish(queue: &Arc<Queue>, n: usize) {
        for _ in 0..n {
            let m = Message::new(
                ShortStr::from(""),
                ShortStr::from("q"),
                &BasicProperties::default(),
                Bytes::new(),
                Bytes::from_static(b"m"),
            );
            queue.publish(Arc::new(m), None);
        }
    }

    fn capacity(queue: &Queue) -> usize {
        state(queue).ready.capacity()
    }

    fn state(queue: &Queue) -> parking_lot::MutexGuard<'_, ClassicState> {
        ClassicQueue::of(queue)
            .expect("a classic queue")
            .state
            .lock()
    }

    #[tokio::test]
    async fn an_emptied_queue_keeps_its_buffer_a_while_then_gives_it_back() {
        let q = queue();
        publish(&q, 20_000);
        while q.get(true).is_some() {}
        // Emptied: kept for now, so a refill right away does not regrow it.
        assert!(capacity(&q) >= 20_000);
        publish(&q, 20_000);
        while q.get(true).is_some() {}
        assert!(capacity(&q) >= 20_000);
        tokio::time::sleep(SHRINK_DELAY + Duration::from_millis(300)).await;
        assert!(capacity(&q) < 20_000, "{}", capacity(&q));
        assert!(!state(&q).shrink_timer);
    }

    #[tokio::test]
    async fn a_queue_that_refilled_keeps_its_buffer_until_it_empties_again() {
        let q = queue();
        publish(&q, 20_000);
        while q.get(true).is_some() {}
        publish(&q, 20_000);
        tokio::time::sleep(SHRINK_DELAY + Duration::from_millis(300)).await;
        // The timer found it full again: nothing given back, nothing armed.
        assert!(capacity(&q) >= 20_000);
        assert!(!state(&q).shrink_timer);
        while q.get(true).is_some() {}
        tokio::time::sleep(SHRINK_DELAY + Duration::from_millis(300)).await;
        assert!(capacity(&q) < 20_000, "{}", capacity(&q));
    }
}
