//! Recycled `Arc<Message>` allocations: the one allocation a published message made, taken
//! from a bounded free list instead of malloc, and given back there when the message's last
//! holder is done with it on the hot paths (a no-ack delivery written to its client, an acked
//! delivery settled).
//!
//! Why: every publish allocated its `Arc<Message>` (~190 bytes with the counts) and every
//! delivery freed it, ~330 instructions per message in glibc's malloc and free (callgrind,
//! docs/benchmarks.md): a window of messages is in flight at once, more than glibc's
//! per-thread cache holds of one size (7), so most went through its bins; and in the broker a
//! message is allocated on the publisher's connection task and freed on the consumer's, often
//! on another thread, where glibc's free takes the owning arena's lock.
//!
//! How: magazines, as allocators with per-thread caches do. Each thread keeps one magazine
//! (up to `MAGAZINE_MESSAGES` empty messages) that it takes from and gives to without a lock;
//! a full magazine goes to a shared depot, and a thread whose magazine is empty takes a full
//! one from there, so a consumer's thread feeds a publisher's thread at one uncontended lock
//! per magazine. A message is only given back when its `Arc` is unique (no queue, channel or
//! store reference left), and its fields are dropped at once — a pooled allocation holds no
//! message at all (`Slot`), so no read buffer stays pinned by the pool, and filling it writes
//! the new message without dropping a placeholder first. Bounded: at most
//! `MAGAZINE_MESSAGES` per thread and `DEPOT_MAGAZINES` magazines in the depot (~200 KB);
//! beyond that a message is freed as before. Any other drop of an `Arc<Message>` frees it as
//! before too.

use crate::message::Message;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Empty messages one thread keeps, and one depot magazine holds.
const MAGAZINE_MESSAGES: usize = 64;
/// Full magazines the depot keeps; what comes back beyond them is freed.
const DEPOT_MAGAZINES: usize = 16;

/// A message's allocation with no message in it. Invariant: unique (no other `Arc` or
/// `Weak` to it), and its contents dropped already: dropping a slot frees the allocation and
/// drops nothing.
type Slot = Arc<MaybeUninit<Message>>;

type Magazine = Vec<Slot>;

/// Full magazines, and emptied ones kept so that filling a new magazine allocates nothing.
struct Depot {
    full: Vec<Magazine>,
    empty: Vec<Magazine>,
}

/// The depot and the rules for moving messages between it and a thread's magazine; one for
/// the process (tests make their own).
struct Pool {
    depot: Mutex<Depot>,
}

static POOL: Pool = Pool::new();

thread_local! {
    static MAGAZINE: RefCell<Magazine> = const { RefCell::new(Vec::new()) };
}

/// `message` in a shared allocation: a recycled one when there is one, else a new `Arc`.
#[inline]
pub fn shared(message: Message) -> Arc<Message> {
    let recycled = MAGAZINE
        .try_with(|magazine| POOL.take(&mut magazine.borrow_mut()))
        .ok()
        .flatten();
    fill(recycled, message)
}

/// Done with `message`: when this was its last reference, its fields are dropped now and its
/// allocation kept for the next `shared`; otherwise only this reference goes.
#[inline]
pub fn recycle(message: Arc<Message>) {
    let Some(empty) = emptied(message) else {
        return;
    };
    let _ = MAGAZINE.try_with(|magazine| POOL.give(&mut magazine.borrow_mut(), empty));
}

/// A recycled allocation (if any) holding `message`.
#[inline]
fn fill(recycled: Option<Slot>, message: Message) -> Arc<Message> {
    match recycled {
        Some(mut slot) => match Arc::get_mut(&mut slot) {
            Some(room) => {
                room.write(message);
                // SAFETY: just written.
                unsafe { slot.assume_init() }
            }
            None => Arc::new(message),
        },
        None => Arc::new(message),
    }
}

/// The allocation of `message` with its message dropped, if no one else holds it.
fn emptied(mut message: Arc<Message>) -> Option<Slot> {
    let unique: *mut Message = Arc::get_mut(&mut message)?;
    // SAFETY: the `Arc` is unique (no other strong or weak reference: `get_mut`), so nothing
    // else reads the message; it is dropped once here, and the `Arc` is turned into a slot
    // (whose type drops nothing) before anything could drop it again. Drops the body,
    // properties and names (the read buffer they are in is released now).
    unsafe { std::ptr::drop_in_place(unique) };
    // SAFETY: `MaybeUninit<Message>` has `Message`'s layout, so the allocation is the same
    // `ArcInner`.
    Some(unsafe { Arc::from_raw(Arc::into_raw(message).cast()) })
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            depot: Mutex::new(Depot {
                full: Vec::new(),
                empty: Vec::new(),
            }),
        }
    }

    /// An empty message from the thread's magazine, refilled from the depot when empty.
    #[inline]
    fn take(&self, magazine: &mut Magazine) -> Option<Slot> {
        if magazine.is_empty() {
            self.refill(magazine);
        }
        magazine.pop()
    }

    /// Swaps an empty magazine for a full one from the depot, if it has one.
    #[inline(never)]
    fn refill(&self, magazine: &mut Magazine) {
        let mut depot = self.depot.lock();
        if let Some(full) = depot.full.pop() {
            let emptied = std::mem::replace(magazine, full);
            if emptied.capacity() > 0 {
                depot.empty.push(emptied);
            }
        }
    }

    /// Keeps an empty message in the thread's magazine; a full magazine goes to the depot
    /// first (an empty one comes back), or, with the depot full, is freed.
    #[inline]
    fn give(&self, magazine: &mut Magazine, message: Slot) {
        if magazine.len() >= MAGAZINE_MESSAGES || magazine.capacity() == 0 {
            self.make_room(magazine);
        }
        magazine.push(message);
    }

    /// Room in the thread's magazine for one more: a full magazine goes to the depot (an
    /// empty one comes back) or, with the depot full, is emptied; a first one is reserved.
    #[inline(never)]
    fn make_room(&self, magazine: &mut Magazine) {
        if magazine.len() >= MAGAZINE_MESSAGES {
            let mut depot = self.depot.lock();
            if depot.full.len() < DEPOT_MAGAZINES {
                let fresh = depot.empty.pop().unwrap_or_default();
                depot.full.push(std::mem::replace(magazine, fresh));
            } else {
                drop(depot);
                magazine.clear();
            }
        }
        if magazine.capacity() == 0 {
            magazine.reserve_exact(MAGAZINE_MESSAGES);
        }
    }

    /// Messages the depot holds.
    #[cfg(test)]
    fn depot_messages(&self) -> usize {
        self.depot.lock().full.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use warren_codec::{BasicProperties, ShortStr};

    fn message(body: &'static [u8]) -> Message {
        Message::new(
            ShortStr::from("x"),
            ShortStr::from("k"),
            &BasicProperties::default(),
            Bytes::new(),
            Bytes::from_static(body),
        )
    }

    #[test]
    fn a_recycled_allocation_carries_the_new_message_only() {
        let pool = Pool::new();
        let mut magazine = Magazine::new();
        let first = Arc::new(message(b"first"));
        let address = Arc::as_ptr(&first);
        pool.give(&mut magazine, emptied(first).expect("unique"));
        let second = fill(pool.take(&mut magazine), message(b"second"));
        assert_eq!(Arc::as_ptr(&second), address, "the same allocation, reused");
        assert_eq!(second.body(), b"second");
        assert_eq!(second.routing_key(), "k");
    }

    #[test]
    fn a_message_someone_else_holds_is_left_to_them() {
        let m = Arc::new(message(b"kept"));
        let other = m.clone();
        assert!(emptied(m).is_none());
        assert_eq!(
            other.body(),
            b"kept",
            "still whole for the queue holding it"
        );
        // And the public pair does the same.
        let m = shared(message(b"kept too"));
        let other = m.clone();
        recycle(m);
        assert_eq!(other.body(), b"kept too");
    }

    #[test]
    fn a_recycled_message_drops_its_body_at_once() {
        let body = Bytes::from(vec![7u8; 1000]);
        let m = Arc::new(Message::new(
            ShortStr::from(""),
            ShortStr::from("q"),
            &BasicProperties::default(),
            Bytes::new(),
            body.clone(),
        ));
        recycle(m);
        // The pool holds no reference to the body: it is unique again.
        assert!(body.is_unique());
    }

    #[test]
    fn messages_freed_by_one_magazine_serve_another_and_the_pool_is_bounded() {
        let pool = Pool::new();
        let (mut consumer_side, mut publisher_side) = (Magazine::new(), Magazine::new());
        let given = MAGAZINE_MESSAGES * (DEPOT_MAGAZINES + 2);
        let all: Vec<Arc<Message>> = (0..given).map(|_| Arc::new(message(b"m"))).collect();
        let addresses: std::collections::HashSet<*const Message> =
            all.iter().map(Arc::as_ptr).collect();
        for m in all {
            pool.give(&mut consumer_side, emptied(m).expect("unique"));
        }
        assert!(consumer_side.len() <= MAGAZINE_MESSAGES);
        assert_eq!(
            pool.depot_messages(),
            MAGAZINE_MESSAGES * DEPOT_MAGAZINES,
            "full magazines beyond the depot's room were freed"
        );
        for _ in 0..MAGAZINE_MESSAGES * 2 {
            let m = fill(pool.take(&mut publisher_side), message(b"n"));
            assert!(addresses.contains(&Arc::as_ptr(&m)), "from the depot");
            assert_eq!(m.body(), b"n");
        }
        assert_eq!(
            pool.depot_messages(),
            MAGAZINE_MESSAGES * (DEPOT_MAGAZINES - 2)
        );
    }
}
