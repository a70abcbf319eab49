//! A response body sent as it is produced: a producer on a blocking thread writes its text
//! into a `ChunkWriter`, which hands each 64 KiB to the connection through a channel of a few
//! chunks. A body of 100,000 queues' metrics (hundreds of MB) is never held whole, the first
//! bytes leave before the last are written, and a client that reads slowly holds the producer
//! back (the channel is bounded) instead of letting the body pile up in memory.
//!
//! A client that goes away closes the channel; the writer then drops what it is given and
//! `is_closed` tells a producer that checks it that it may stop early.

use axum::body::{Body, Bytes};
use std::convert::Infallible;
use tokio::sync::mpsc;

/// Text gathered before it is handed to the connection as one chunk.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Chunks produced ahead of the connection's writes.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Where a streamed body's producer writes (as `std::io::Write` or `std::fmt::Write`).
pub struct ChunkWriter {
    buffer: Vec<u8>,
    sender: mpsc::Sender<Bytes>,
    closed: bool,
}

impl ChunkWriter {
    /// True once the client is gone: what is written from then on is dropped.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn push_str(&mut self, text: &str) {
        self.push_bytes(text.as_bytes());
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        if self.closed {
            return;
        }
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK_BYTES {
            self.send();
        }
    }

    fn send(&mut self) {
        if self.buffer.is_empty() || self.closed {
            return;
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        // Waits while the connection is `CHUNKS_IN_FLIGHT` chunks behind.
        if self.sender.blocking_send(Bytes::from(chunk)).is_err() {
            self.closed = true;
        }
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.push_bytes(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Write for ChunkWriter {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.push_str(text);
        Ok(())
    }
}

/// The last chunk leaves when the writer is dropped (on the producer's thread: writers are
/// only made by `streamed`, which hands them to a blocking thread).
impl Drop for ChunkWriter {
    fn drop(&mut self) {
        self.send();
    }
}

/// A body whose bytes `produce` writes, run on tokio's blocking pool (it may take seconds
/// and take locks); the body ends when `produce` is done with the writer.
pub fn streamed(produce: impl FnOnce(ChunkWriter) + Send + 'static) -> Body {
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        produce(ChunkWriter {
            buffer: Vec::with_capacity(CHUNK_BYTES),
            sender,
            closed: false,
        })
    });
    let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((Ok::<_, Infallible>(chunk), receiver))
    });
    Body::from_stream(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_body_is_what_was_written_in_chunks() {
        let line = "0123456789abcdef\n";
        let lines = 3 * CHUNK_BYTES / line.len() + 7;
        let body = streamed(move |mut out| {
            for _ in 0..lines {
                out.push_str(line);
            }
        });
        let mut chunks = 0;
        let mut text = Vec::new();
        let mut stream = body.into_data_stream();
        use futures_util::StreamExt;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            assert!(chunk.len() <= CHUNK_BYTES + line.len());
            text.extend_from_slice(&chunk);
            chunks += 1;
        }
        assert_eq!(text, line.repeat(lines).into_bytes());
        assert!(chunks >= 4, "{chunks} chunks");
    }

    #[tokio::test]
    async fn a_client_gone_closes_the_writer() {
        let (done, finished) = tokio::sync::oneshot::channel();
        let body = streamed(move |mut out| {
            while !out.is_closed() {
                out.push_str("x");
            }
            let _ = done.send(());
        });
        let mut stream = body.into_data_stream();
        use futures_util::StreamExt;
        assert!(stream.next().await.is_some());
        drop(stream);
        finished.await.unwrap();
    }
}
