//! A client's one task, from attach to close: it reads and handles whole frames, writes
//! what the endpoint has to send, sends the keep-alives the broker's idle-time-out asks
//! for, and closes on the client's stop. Nothing else runs per client: a sender's
//! publisher encodes its transfer into the endpoint's output itself and wakes this task
//! only when that output was empty (frames made while a write is pending leave with it),
//! so a message costs the sender one wake-up to write it and one to read its disposition,
//! and the receiver one to read it and write its accept (fe2o3-amqp, which this replaces,
//! ran a connection, a session and a link task per client with channels between them:
//! about ten hand-offs per message).

use super::endpoint::Endpoint;
use super::handshake::MAX_FRAME_BYTES;
use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use warren_amqp10_codec::{decode_performative, parse_frame, write_empty_frame, FRAME_AMQP};
use warren_codec::socket_buffer::{rewind, ReadSizing};

/// How long a closing client waits for the broker's answers before it drops the socket.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Keep-alives are checked this often within the broker's idle-time-out (a quarter), but
/// not more often than this.
const KEEPALIVE_CHECK_MIN: Duration = Duration::from_millis(100);

/// What the task and a sender's publisher share.
pub struct Shared {
    pub endpoint: Mutex<Endpoint>,
    /// Output appeared while the task may be waiting.
    pub wake: Notify,
}

/// The socket side of an opened client.
pub struct Io {
    pub stream: TcpStream,
    /// What the handshake read beyond the broker's attach.
    pub rbuf: BytesMut,
    /// The broker's idle-time-out: we send something at least every half of it.
    pub peer_idle: Option<Duration>,
}

/// Runs the client until the broker's close, a socket failure, or `stop` and the close
/// handshake (at most `CLOSE_TIMEOUT`).
pub async fn run(shared: Arc<Shared>, io: Io, mut stop: oneshot::Receiver<()>) {
    let Io {
        mut stream,
        mut rbuf,
        peer_idle,
    } = io;
    let (mut rd, wr) = stream.split();
    let mut sizing = ReadSizing::default();
    // Taken from the endpoint's output, not yet written.
    let mut wbuf = BytesMut::new();
    let mut keepalive = peer_idle.map(|idle| {
        let period = (idle / 4).max(KEEPALIVE_CHECK_MIN);
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    });
    let mut wrote_since_check = false;
    let mut stopping = false;
    let mut close_deadline = Instant::now() + Duration::from_secs(365 * 86_400);
    // Frames the handshake read past the attach (a sender's first credit).
    if !rbuf.is_empty() {
        handle_frames(&shared, &mut rbuf);
    }
    loop {
        {
            let mut endpoint = shared.endpoint.lock();
            take_output(&mut endpoint.out, &mut wbuf);
            if endpoint.finished && wbuf.is_empty() {
                return;
            }
        }
        if !wbuf.is_empty() {
            match wr.try_write(&wbuf) {
                Ok(n) => {
                    wbuf.advance(n);
                    if wbuf.is_empty() {
                        rewind(&mut wbuf);
                    }
                    wrote_since_check = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    gone(&shared, format!("writing to the broker: {e}"), stopping);
                    return;
                }
            }
        }
        let room = sizing.prepare(&mut rbuf);
        tokio::select! {
            read = rd.read_buf(&mut rbuf) => match read {
                Ok(0) => {
                    gone(&shared, "the broker closed the socket".into(), stopping);
                    return;
                }
                Ok(n) => {
                    sizing.note_read(n, room);
                    handle_frames(&shared, &mut rbuf);
                }
                Err(e) => {
                    gone(&shared, format!("reading from the broker: {e}"), stopping);
                    return;
                }
            },
            _ = shared.wake.notified() => {}
            writable = wr.writable(), if !wbuf.is_empty() => {
                if let Err(e) = writable {
                    gone(&shared, format!("writing to the broker: {e}"), stopping);
                    return;
                }
            }
            _ = tick(&mut keepalive) => {
                if !std::mem::take(&mut wrote_since_check) && wbuf.is_empty() {
                    write_empty_frame(&mut shared.endpoint.lock().out);
                }
                sizing.on_idle_check(&mut rbuf);
            }
            _ = &mut stop, if !stopping => {
                stopping = true;
                close_deadline = Instant::now() + CLOSE_TIMEOUT;
                shared.endpoint.lock().close();
            }
            // In a block: a disabled branch's future is still built, and a bare Sleep
            // would look up the timer for every turn of the loop.
            _ = async move { tokio::time::sleep_until(close_deadline).await }, if stopping => {
                return;
            }
        }
    }
}

/// Appends the endpoint's output to what is left to write (swapped when nothing is left,
/// so the bytes are not copied).
fn take_output(out: &mut BytesMut, wbuf: &mut BytesMut) {
    if out.is_empty() {
        return;
    }
    if wbuf.is_empty() {
        std::mem::swap(out, wbuf);
    } else {
        wbuf.extend_from_slice(out);
        out.clear();
    }
}

/// Every whole frame in `rbuf`, then the end-of-read duties (a receiver's accepts and
/// credit), under one lock.
fn handle_frames(shared: &Shared, rbuf: &mut BytesMut) {
    let mut endpoint = shared.endpoint.lock();
    loop {
        match parse_frame(rbuf, MAX_FRAME_BYTES) {
            Ok(Some(frame)) if frame.body.is_empty() => {} // a keep-alive
            Ok(Some(frame)) if frame.kind != FRAME_AMQP => {
                endpoint.on_bad_frame(format!("a frame of type {} after open", frame.kind));
                break;
            }
            Ok(Some(frame)) => match decode_performative(&frame.body) {
                Ok((performative, payload)) => endpoint.on_performative(performative, payload),
                Err(why) => {
                    endpoint.on_bad_frame(why);
                    break;
                }
            },
            Ok(None) => break,
            Err(why) => {
                endpoint.on_bad_frame(why);
                rbuf.clear();
                break;
            }
        }
    }
    endpoint.end_of_read();
    if let Some(why) = endpoint.ended.as_deref() {
        if !endpoint.closing_by_us() {
            report_once(why);
        }
    }
}

async fn tick(keepalive: &mut Option<Interval>) {
    match keepalive {
        Some(tick) => {
            tick.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The socket is gone: the endpoint ends with `why` (unless we were closing anyway).
fn gone(shared: &Shared, why: String, stopping: bool) {
    let mut endpoint = shared.endpoint.lock();
    endpoint.on_socket_gone(why.clone());
    if !stopping && !endpoint.closing_by_us() {
        report_once(&why);
    }
}

/// The first client that the broker ends is reported on stderr; thousands more would
/// bury it (the step's counts say how many publishes failed).
fn report_once(why: &str) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if !REPORTED.swap(true, Ordering::AcqRel) {
        eprintln!("   an AMQP 1.0 client ended: {why} (later ones are not shown)");
    }
}
