//! The bounded channel openraft builds its groups on ([`openraft::rt::Mpsc`] of
//! [`crate::runtime::QuorumRuntime`]): tokio's, carrying each message in a box.
//!
//! Why: a tokio channel keeps its messages in blocks of 32 slots, and allocates the first
//! block when the channel is made. openraft makes several channels per Raft group for messages
//! of 170-290 bytes (its API messages, notifications, state-machine commands), so an idle group
//! held ~27 KB of empty slots, a third of its memory, and a node holds a group per quorum
//! queue. Boxed, a slot is a pointer (a block ~300 bytes); the price is one allocation per
//! message, small beside what openraft does with each.

use std::future::Future;

use openraft::rt::mpsc::{Mpsc, MpscReceiver, MpscSender, MpscWeakSender, SendError, TryRecvError};
use openraft::rt::OptionalSend;
use tokio::sync::mpsc;

/// openraft's `Mpsc` over tokio's bounded channel of boxed messages.
pub struct BoxedMpsc;

pub struct BoxedSender<T>(mpsc::Sender<Box<T>>);

pub struct BoxedReceiver<T>(mpsc::Receiver<Box<T>>);

pub struct BoxedWeakSender<T>(mpsc::WeakSender<Box<T>>);

impl<T> Clone for BoxedSender<T> {
    fn clone(&self) -> Self {
        BoxedSender(self.0.clone())
    }
}

impl<T> Clone for BoxedWeakSender<T> {
    fn clone(&self) -> Self {
        BoxedWeakSender(self.0.clone())
    }
}

impl Mpsc for BoxedMpsc {
    type Sender<T: OptionalSend> = BoxedSender<T>;
    type Receiver<T: OptionalSend> = BoxedReceiver<T>;
    type WeakSender<T: OptionalSend> = BoxedWeakSender<T>;

    fn channel<T: OptionalSend>(buffer: usize) -> (Self::Sender<T>, Self::Receiver<T>) {
        let (tx, rx) = mpsc::channel(buffer);
        (BoxedSender(tx), BoxedReceiver(rx))
    }
}

impl<T: OptionalSend> MpscSender<BoxedMpsc, T> for BoxedSender<T> {
    fn send(&self, msg: T) -> impl Future<Output = Result<(), SendError<T>>> + OptionalSend {
        let sent = self.0.send(Box::new(msg));
        async move { sent.await.map_err(|e| SendError(*e.0)) }
    }

    fn downgrade(&self) -> BoxedWeakSender<T> {
        BoxedWeakSender(self.0.downgrade())
    }
}

impl<T: OptionalSend> MpscReceiver<T> for BoxedReceiver<T> {
    async fn recv(&mut self) -> Option<T> {
        self.0.recv().await.map(|boxed| *boxed)
    }

    fn try_recv(&mut self) -> Result<T, TryRecvError> {
        match self.0.try_recv() {
            Ok(boxed) => Ok(*boxed),
            Err(mpsc::error::TryRecvError::Empty) => Err(TryRecvError::Empty),
            Err(mpsc::error::TryRecvError::Disconnected) => Err(TryRecvError::Disconnected),
        }
    }
}

impl<T: OptionalSend> MpscWeakSender<BoxedMpsc, T> for BoxedWeakSender<T> {
    fn upgrade(&self) -> Option<BoxedSender<T>> {
        self.0.upgrade().map(BoxedSender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_arrive_in_order_and_the_bound_holds() {
        let (tx, mut rx) = BoxedMpsc::channel::<[u64; 40]>(2);
        tx.send([1; 40]).await.unwrap();
        tx.send([2; 40]).await.unwrap();
        // Full: a third send waits until a message is taken.
        let third = tx.send([3; 40]);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), &mut third)
                .await
                .is_err()
        );
        assert_eq!(rx.recv().await.unwrap()[0], 1);
        third.await.unwrap();
        assert_eq!(rx.try_recv().unwrap()[0], 2);
        assert_eq!(rx.recv().await.unwrap()[0], 3);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }

    #[tokio::test]
    async fn closing_either_end_is_seen_by_the_other() {
        let (tx, mut rx) = BoxedMpsc::channel::<u32>(4);
        let weak = tx.downgrade();
        tx.send(7).await.unwrap();
        drop(tx);
        assert!(weak.upgrade().is_none(), "no strong sender left");
        assert_eq!(rx.recv().await, Some(7));
        assert_eq!(rx.recv().await, None);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));

        let (tx, rx) = BoxedMpsc::channel::<u32>(4);
        drop(rx);
        assert_eq!(tx.send(9).await.map_err(|e| e.0), Err(9));
    }
}
