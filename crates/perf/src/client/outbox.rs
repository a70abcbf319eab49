//! The connection's output buffer and the writer task that drains it. Producers append whole
//! frames under a short lock; the writer swaps the buffer out and writes it in one call, so
//! frames queued while a write is in flight are batched into the next syscall. A high-water
//! mark gives publishers backpressure (`wait_room`) instead of unbounded memory growth.
//!
//! A connection that carries a message now and then (many-pairs: 10 msg/s per connection)
//! has nothing to batch, and handing each frame to the writer task cost a task wake-up, a
//! poll and the writer's bookkeeping per message on top of the write itself. Such an outbox
//! is made `direct`: a producer that finds the buffer empty and the writer idle writes its
//! frames to the socket itself (a non-blocking write); only what the socket does not take
//! goes to the writer task.

use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

/// Above this many buffered bytes publishers wait for the writer: big enough to keep the
/// socket busy, small enough that queued messages do not add noticeable latency.
const HIGH_WATER_BYTES: usize = 1 << 20;

struct State {
    buf: BytesMut,
    /// The socket, for direct writes (set when the writer starts, taken when it ends).
    socket: Option<Arc<OwnedWriteHalf>>,
    /// The writer task holds bytes it has not written yet: a direct write would overtake them.
    writer_busy: bool,
}

pub(crate) struct Outbox {
    state: Mutex<State>,
    wake: Notify,
    drained: Notify,
    closed: AtomicBool,
    /// Producers write to the socket themselves when nothing is queued (see the module
    /// comment).
    direct: bool,
}

impl Outbox {
    pub fn new(direct: bool) -> Outbox {
        Outbox {
            state: Mutex::new(State {
                buf: BytesMut::with_capacity(if direct { 0 } else { 64 * 1024 }),
                socket: None,
                writer_busy: false,
            }),
            wake: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            direct,
        }
    }

    /// Appends frames; wakes the writer only when the buffer was empty, since otherwise a
    /// wake-up is already pending or the writer will find the bytes when its write ends. A
    /// direct outbox first tries to write them itself.
    pub fn write<R>(&self, f: impl FnOnce(&mut BytesMut) -> R) -> R {
        let mut st = self.state.lock();
        let was_empty = st.buf.is_empty();
        let r = f(&mut st.buf);
        if !was_empty {
            return r;
        }
        if self.direct && !st.writer_busy {
            let st = &mut *st;
            if let Some(socket) = &st.socket {
                // WouldBlock or an error: the writer task takes the bytes and meets the error.
                if let Ok(n) = socket.try_write(&st.buf) {
                    st.buf.advance(n);
                }
            }
            if st.buf.is_empty() {
                return r;
            }
        }
        drop(st);
        self.wake.notify_one();
        r
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
        self.drained.notify_waiters();
    }

    /// Waits until the buffer is below the high-water mark (or the connection is gone).
    pub async fn wait_room(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().buf.len() < HIGH_WATER_BYTES || self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// The writer task: runs until the connection closes or the socket fails.
    pub async fn run_writer(&self, socket: OwnedWriteHalf) -> std::io::Result<()> {
        let socket = Arc::new(socket);
        if self.direct {
            self.state.lock().socket = Some(socket.clone());
        }
        let mut spare = BytesMut::with_capacity(if self.direct { 0 } else { 64 * 1024 });
        loop {
            {
                let mut st = self.state.lock();
                std::mem::swap(&mut st.buf, &mut spare);
                st.writer_busy = !spare.is_empty();
                if spare.is_empty() && self.is_closed() {
                    st.socket = None;
                }
            }
            if spare.is_empty() {
                self.drained.notify_waiters();
                if self.is_closed() {
                    // The outbox let go of its handle above: ours is the last one.
                    if let Ok(mut socket) = Arc::try_unwrap(socket) {
                        let _ = socket.shutdown().await;
                    }
                    return Ok(());
                }
                self.wake.notified().await;
                continue;
            }
            write_all(&socket, &spare).await?;
            spare.clear();
            self.drained.notify_waiters();
        }
    }
}

/// `write_all` through a shared write half.
async fn write_all(socket: &OwnedWriteHalf, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        socket.writable().await?;
        match socket.try_write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    const RECORD_BYTES: usize = 1000;

    /// Record `n`: its number, then filler, so a lost, doubled or reordered record shows.
    fn record(n: u32, out: &mut BytesMut) {
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&[n as u8; RECORD_BYTES - 4]);
    }

    /// Two producers write numbered records through an outbox while the reader drains the
    /// socket with pauses, so the socket fills now and then and writes alternate between the
    /// producers (direct) and the writer task; every record must arrive whole and once, each
    /// producer's in its order.
    async fn records_arrive_in_order(direct: bool) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let (_rd, wr) = client.into_split();
        let outbox = Arc::new(Outbox::new(direct));
        let writer = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.run_writer(wr).await })
        };
        const PER_PRODUCER: u32 = 3000;
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let outbox = outbox.clone();
                tokio::spawn(async move {
                    for i in 0..PER_PRODUCER {
                        outbox.write(|buf| record(p * PER_PRODUCER + i, buf));
                        if i % 100 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u32, PER_PRODUCER];
        let mut buf = vec![0u8; RECORD_BYTES];
        for k in 0..2 * PER_PRODUCER {
            if k % 500 == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            server.read_exact(&mut buf).await.unwrap();
            let n = u32::from_be_bytes(buf[..4].try_into().unwrap());
            let p = (n / PER_PRODUCER) as usize;
            assert_eq!(n, next[p], "producer {p}'s records out of order");
            assert!(buf[4..].iter().all(|&b| b == n as u8), "record {n} torn");
            next[p] += 1;
        }
        for p in producers {
            p.await.unwrap();
        }
        outbox.close();
        writer.await.unwrap().unwrap();
        // The writer shut the socket down: the reader sees the end of the stream.
        assert_eq!(server.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_direct_outbox_keeps_every_record_in_order() {
        records_arrive_in_order(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batching_outbox_keeps_every_record_in_order() {
        records_arrive_in_order(false).await;
    }
}
