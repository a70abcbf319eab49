//! One client connection: the handshake, then a single task that reads frames, writes
//! frames and takes queue deliveries, with no other task in between.
//!
//! The loop `select!`s over four things: socket readable, socket writable (when output is
//! pending), deliveries from queues, and the heartbeat tick. Every read drains all whole frames
//! in the buffer, and all output goes to one buffer written with as few syscalls as the
//! kernel allows, so many frames share one read and one write.
//!
//! Back-pressure: when output piles up past `WRITE_HIGH_WATER_BYTES` the loop stops reading
//! the socket and stops taking deliveries until the client drains it; during a memory alarm
//! it stops reading from connections that publish.
//!
//! Errors: every handler returns `AmqpResult`; `fail` turns an error into channel.close or
//! connection.close by the reply code's class — the only place that happens.

use crate::auth;
use crate::channel::{Channel, ChannelState};
use crate::config::ServerConfig;
use crate::context::Ctx;
use crate::handshake::{self, ClientCapabilities};
use bytes::{Buf, BytesMut};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use warren_broker::{AmqpError, Broker, ConnectionEvent, ConnectionId, VHost};
use warren_codec::*;
use warren_store::DurableState;

/// Output buffered beyond this stops reading input and deliveries until the socket drains.
const WRITE_HIGH_WATER_BYTES: usize = 1 << 20;
/// Read buffer reserve per read: big enough for many small frames at once.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Deliveries taken per wake-up before the loop looks at the socket again.
const EVENT_BATCH: usize = 512;
/// How long we wait for close-ok after sending connection.close.
const CLOSE_OK_TIMEOUT: Duration = Duration::from_secs(2);

/// An error tied to the method that caused it, for the close frame's class and method ids.
struct Failure {
    error: AmqpError,
    channel: u16,
    class_id: u16,
    method_id: u16,
}

enum Next {
    Continue,
    /// The client closed (close/close-ok exchanged, or socket gone).
    Done,
}

pub struct Connection {
    id: ConnectionId,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    rbuf: BytesMut,
    wbuf: BytesMut,
    frame_max: u32,
    channel_max: u16,
    heartbeat: Option<Duration>,
    user: String,
    vhost: Option<Arc<VHost>>,
    caps: ClientCapabilities,
    channels: HashMap<u16, Channel>,
    events_tx: UnboundedSender<ConnectionEvent>,
    events_rx: UnboundedReceiver<ConnectionEvent>,
    last_read: Instant,
    last_write: Instant,
    /// Set once the client publishes: only publishers are held back by a memory alarm.
    has_published: bool,
    /// The store's durable sequence, watched while confirms wait for an fsync.
    durable: Option<watch::Receiver<DurableState>>,
}

impl Connection {
    pub fn new(
        stream: TcpStream,
        peer: SocketAddr,
        broker: Arc<Broker>,
        config: Arc<ServerConfig>,
    ) -> Connection {
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let (events_tx, events_rx) = unbounded_channel();
        Connection {
            id: broker.next_connection_id(),
            peer,
            broker,
            reader,
            writer,
            rbuf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            wbuf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            frame_max: FRAME_MIN_SIZE.max(config.frame_max),
            channel_max: config.channel_max,
            heartbeat: None,
            user: String::new(),
            vhost: None,
            caps: ClientCapabilities::default(),
            channels: HashMap::new(),
            events_tx,
            events_rx,
            last_read: Instant::now(),
            last_write: Instant::now(),
            has_published: false,
            durable: None,
            config,
        }
    }

    /// Serves the connection to its end and releases everything it held.
    pub async fn serve(mut self) {
        let result =
            match tokio::time::timeout(self.config.handshake_timeout, self.handshake()).await {
                Err(_) => {
                    tracing::info!(peer = %self.peer, "handshake timed out");
                    Ok(false)
                }
                Ok(r) => r,
            };
        match result {
            Ok(true) => {
                tracing::debug!(peer = %self.peer, user = %self.user, "connection open");
                if let Err(e) = self.run().await {
                    tracing::debug!(peer = %self.peer, error = %e, "connection ended");
                }
            }
            Ok(false) => {}
            Err(e) => tracing::debug!(peer = %self.peer, error = %e, "handshake failed"),
        }
        self.release();
    }

    // ---- socket helpers ----------------------------------------------------------------

    async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.writer.write_all(&self.wbuf).await?;
            self.wbuf.clear();
            self.last_write = Instant::now();
        }
        Ok(())
    }

    async fn fill(&mut self) -> io::Result<()> {
        self.rbuf.reserve(READ_CHUNK_BYTES);
        if self.reader.read_buf(&mut self.rbuf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.last_read = Instant::now();
        Ok(())
    }

    /// Next method on channel 0 during the handshake (heartbeats are skipped).
    async fn read_handshake_method(&mut self) -> io::Result<Result<Method, CodecError>> {
        loop {
            match parse_frame(&mut self.rbuf, self.frame_max) {
                Err(e) => return Ok(Err(e)),
                Ok(Some(frame)) if frame.kind == FrameKind::Heartbeat => continue,
                Ok(Some(frame)) if frame.kind == FrameKind::Method && frame.channel == 0 => {
                    return Ok(Method::decode(&mut Reader::new(frame.payload)));
                }
                Ok(Some(_)) => {
                    return Ok(Err(CodecError::Frame("unexpected frame during handshake")))
                }
                Ok(None) => self.fill().await?,
            }
        }
    }

    /// Sends connection.close and waits (briefly) for close-ok, discarding other frames.
    async fn close_connection(
        &mut self,
        error: &AmqpError,
        class_id: u16,
        method_id: u16,
    ) -> io::Result<()> {
        tracing::info!(peer = %self.peer, code = error.code as u16, text = %error.text, "closing connection");
        write_method(
            &mut self.wbuf,
            0,
            &ConnectionClose {
                reply_code: error.code as u16,
                reply_text: ShortStr::from(error.reply_text()),
                class_id,
                method_id,
            }
            .into(),
        );
        self.flush().await?;
        let wait_close_ok = async {
            loop {
                match parse_frame(&mut self.rbuf, 0) {
                    Ok(Some(f)) if f.kind == FrameKind::Method && f.channel == 0 => {
                        if let Ok(Method::ConnectionCloseOk(_)) =
                            Method::decode(&mut Reader::new(f.payload))
                        {
                            return Ok::<(), io::Error>(());
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => self.fill().await?,
                    Err(_) => return Ok(()),
                }
            }
        };
        // A peer that never answers or hangs up is done with either way.
        let _ = tokio::time::timeout(CLOSE_OK_TIMEOUT, wait_close_ok).await;
        Ok(())
    }

    // ---- handshake -----------------------------------------------------------------------

    /// Runs the opening handshake; true when the connection is open for business.
    async fn handshake(&mut self) -> io::Result<bool> {
        while self.rbuf.len() < PROTOCOL_HEADER.len() {
            self.fill().await?;
        }
        if &self.rbuf[..8] != PROTOCOL_HEADER {
            // Another protocol or version: answer with the one we speak, then hang up.
            self.writer.write_all(PROTOCOL_HEADER).await?;
            return Ok(false);
        }
        self.rbuf.advance(8);
        write_method(&mut self.wbuf, 0, &handshake::connection_start().into());
        self.flush().await?;

        let start_ok = match self.read_handshake_method().await? {
            Ok(Method::ConnectionStartOk(m)) => m,
            other => return self.handshake_error(other, "connection.start-ok").await,
        };
        self.caps = ClientCapabilities::from_client_properties(&start_ok.client_properties);
        if !auth::mechanism_supported(&start_ok.mechanism) {
            let e = AmqpError::access_refused(format!(
                "unsupported authentication mechanism '{}'",
                start_ok.mechanism
            ));
            self.close_connection(&e, 10, 11).await?;
            return Ok(false);
        }
        let credentials = auth::parse_credentials(&start_ok.mechanism, &start_ok.response);
        let login = credentials
            .ok_or_else(|| "malformed credentials".to_owned())
            .and_then(|(u, p)| auth::check_user(&self.config, &u, &p, self.peer.ip()).map(|_| u));
        match login {
            Ok(user) => self.user = user,
            Err(why) => {
                tracing::warn!(peer = %self.peer, "login refused: {why}");
                let e = AmqpError::access_refused(format!(
                    "Login was refused using authentication mechanism {}. For details see the broker logfile.",
                    start_ok.mechanism
                ));
                self.close_connection(&e, 10, 11).await?;
                return Ok(false);
            }
        }

        write_method(
            &mut self.wbuf,
            0,
            &handshake::connection_tune(&self.config).into(),
        );
        self.flush().await?;
        let tune_ok = match self.read_handshake_method().await? {
            Ok(Method::ConnectionTuneOk(m)) => m,
            other => return self.handshake_error(other, "connection.tune-ok").await,
        };
        match handshake::negotiate(&self.config, &tune_ok) {
            Ok((frame_max, channel_max, heartbeat_s)) => {
                self.frame_max = frame_max;
                self.channel_max = channel_max;
                self.heartbeat = (heartbeat_s > 0).then(|| Duration::from_secs(heartbeat_s.into()));
            }
            Err(why) => {
                self.close_connection(&AmqpError::new(ReplyCode::NotAllowed, why), 10, 31)
                    .await?;
                return Ok(false);
            }
        }

        let open = match self.read_handshake_method().await? {
            Ok(Method::ConnectionOpen(m)) => m,
            other => return self.handshake_error(other, "connection.open").await,
        };
        let Some(vhost) = self.broker.vhost(&open.virtual_host) else {
            let e = AmqpError::new(
                ReplyCode::NotAllowed,
                format!("vhost {} not found", open.virtual_host),
            );
            self.close_connection(&e, 10, 40).await?;
            return Ok(false);
        };
        self.durable = vhost.store.as_ref().map(|s| s.durable_watch());
        self.vhost = Some(vhost);
        write_method(&mut self.wbuf, 0, &ConnectionOpenOk.into());
        self.flush().await?;
        Ok(true)
    }

    async fn handshake_error(
        &mut self,
        got: Result<Method, CodecError>,
        expected: &str,
    ) -> io::Result<bool> {
        let (error, class_id, method_id) = match got {
            Err(e) => (AmqpError::new(e.reply_code(), e.to_string()), 0, 0),
            Ok(m) => (
                AmqpError::new(
                    ReplyCode::CommandInvalid,
                    format!("expected '{expected}', got '{}'", m.name()),
                ),
                m.class_id(),
                m.method_id(),
            ),
        };
        self.close_connection(&error, class_id, method_id).await?;
        Ok(false)
    }

    // ---- the open connection ---------------------------------------------------------------

    async fn run(&mut self) -> io::Result<()> {
        let mut blocked = self.broker.memory.subscribe();
        let tick = self
            .heartbeat
            .map(|h| h / 2)
            .unwrap_or(Duration::from_secs(3600));
        let mut heartbeat = tokio::time::interval(tick);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut alarm_notified = false;
        loop {
            let room = self.wbuf.len() < WRITE_HIGH_WATER_BYTES;
            let confirms_waiting = self.channels.values().any(|c| c.awaits_durability());
            let held_back = self.has_published && *blocked.borrow();
            if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK_BYTES / 4 {
                self.rbuf.reserve(READ_CHUNK_BYTES);
            }
            tokio::select! {
                read = self.reader.read_buf(&mut self.rbuf), if room && !held_back => {
                    if read? == 0 {
                        return Ok(());
                    }
                    self.last_read = Instant::now();
                    if let Next::Done = self.on_input().await? {
                        return Ok(());
                    }
                }
                written = self.writer.write(&self.wbuf), if !self.wbuf.is_empty() => {
                    let n = written?;
                    self.wbuf.advance(n);
                    self.last_write = Instant::now();
                }
                event = self.events_rx.recv(), if room => {
                    if let Some(event) = event {
                        self.on_event(event);
                        for _ in 0..EVENT_BATCH {
                            match self.events_rx.try_recv() {
                                Ok(event) => self.on_event(event),
                                Err(_) => break,
                            }
                        }
                    }
                }
                _ = heartbeat.tick(), if self.heartbeat.is_some() => {
                    let interval = self.heartbeat.expect("guarded");
                    if self.last_read.elapsed() > interval * 2 {
                        tracing::warn!(peer = %self.peer, "missed heartbeats from client, timeout: {}s", interval.as_secs());
                        return Ok(());
                    }
                    if self.last_write.elapsed() >= interval / 2 && self.wbuf.is_empty() {
                        write_heartbeat(&mut self.wbuf);
                    }
                }
                _ = durable_advanced(&mut self.durable), if confirms_waiting => {
                    self.flush_confirms();
                }
                changed = blocked.changed() => {
                    if changed.is_err() {
                        continue;
                    }
                    let now_blocked = *blocked.borrow();
                    if self.caps.connection_blocked && now_blocked != alarm_notified {
                        alarm_notified = now_blocked;
                        let method: Method = if now_blocked {
                            ConnectionBlocked { reason: ShortStr::from_static("low on memory") }.into()
                        } else {
                            ConnectionUnblocked.into()
                        };
                        write_method(&mut self.wbuf, 0, &method);
                    }
                }
            }
        }
    }

    /// Handles every whole frame in the read buffer.
    async fn on_input(&mut self) -> io::Result<Next> {
        loop {
            let frame = match parse_frame(&mut self.rbuf, self.frame_max) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    let error = AmqpError::new(e.reply_code(), e.to_string());
                    self.close_connection(&error, 0, 0).await?;
                    return Ok(Next::Done);
                }
            };
            match self.on_frame(frame) {
                Ok(Next::Continue) => {}
                Ok(Next::Done) => {
                    self.flush().await?;
                    return Ok(Next::Done);
                }
                Err(failure) => {
                    if let Some(done) = self.fail(failure).await? {
                        return Ok(done);
                    }
                }
            }
        }
        self.flush_confirms();
        Ok(Next::Continue)
    }

    /// The one place errors become close frames: a soft code closes the channel, a hard one
    /// the connection (returns `Some(Done)` then).
    async fn fail(&mut self, f: Failure) -> io::Result<Option<Next>> {
        if f.error.is_connection_error() || f.channel == 0 {
            self.flush_confirms();
            self.close_connection(&f.error, f.class_id, f.method_id)
                .await?;
            return Ok(Some(Next::Done));
        }
        tracing::debug!(peer = %self.peer, channel = f.channel, code = f.error.code as u16, text = %f.error.text, "closing channel");
        let Some((channel, mut ctx)) = self.channel_and_ctx(f.channel) else {
            return Ok(None);
        };
        channel.flush_confirms(&mut ctx);
        channel.release_all(&mut ctx);
        channel.state = ChannelState::Closing;
        let close = ChannelClose {
            reply_code: f.error.code as u16,
            reply_text: ShortStr::from(f.error.reply_text()),
            class_id: f.class_id,
            method_id: f.method_id,
        };
        ctx.send(f.channel, close);
        Ok(None)
    }

    /// The channels and a context over the rest of the connection, borrowed together so a
    /// channel handler can run without taking its channel out of the map.
    fn split(&mut self) -> (&mut HashMap<u16, Channel>, Ctx<'_>) {
        let ctx = Ctx {
            vhost: self.vhost.as_ref().expect("open connection has a vhost"),
            connection: self.id,
            events: &self.events_tx,
            out: &mut self.wbuf,
            frame_max: self.frame_max,
            config: &self.config,
            user: &self.user,
            cancel_notify: self.caps.consumer_cancel_notify,
        };
        (&mut self.channels, ctx)
    }

    fn ctx(&mut self) -> Ctx<'_> {
        self.split().1
    }

    fn channel_and_ctx(&mut self, ch: u16) -> Option<(&mut Channel, Ctx<'_>)> {
        let (channels, ctx) = self.split();
        Some((channels.get_mut(&ch)?, ctx))
    }

    fn flush_confirms(&mut self) {
        let (channels, mut ctx) = self.split();
        for channel in channels.values_mut().filter(|c| c.awaits_durability()) {
            channel.flush_confirms(&mut ctx);
        }
    }

    fn on_frame(&mut self, frame: RawFrame) -> Result<Next, Failure> {
        let ch = frame.channel;
        let hard = |code: ReplyCode, text: &str| Failure {
            error: AmqpError::new(code, text.to_owned()),
            channel: 0,
            class_id: 0,
            method_id: 0,
        };
        match frame.kind {
            FrameKind::Heartbeat => {
                if ch != 0 {
                    return Err(hard(
                        ReplyCode::UnexpectedFrame,
                        "heartbeat frame on a non-zero channel",
                    ));
                }
                Ok(Next::Continue)
            }
            FrameKind::Method => {
                let (class_id, method_id) = peek_ids(&frame.payload);
                let method =
                    Method::decode(&mut Reader::new(frame.payload)).map_err(|e| Failure {
                        error: AmqpError::new(e.reply_code(), e.to_string()),
                        channel: 0,
                        class_id,
                        method_id,
                    })?;
                if ch == 0 {
                    self.on_connection_method(method)
                } else {
                    self.on_channel_method(ch, method).map(|_| Next::Continue)
                }
            }
            FrameKind::Header | FrameKind::Body => {
                if ch == 0 {
                    return Err(hard(
                        ReplyCode::CommandInvalid,
                        "content frame on channel 0",
                    ));
                }
                self.has_published = true;
                let Some((channel, mut ctx)) = self.channel_and_ctx(ch) else {
                    return Err(hard(
                        ReplyCode::ChannelError,
                        "content frame on a channel that is not open",
                    ));
                };
                if channel.state == ChannelState::Closing {
                    return Ok(Next::Continue);
                }
                let result = if frame.kind == FrameKind::Header {
                    channel.content_header(frame.payload, &mut ctx)
                } else {
                    channel.content_body(frame.payload, &mut ctx)
                };
                result.map(|_| Next::Continue).map_err(|error| Failure {
                    error,
                    channel: ch,
                    class_id: BasicPublish::CLASS_ID,
                    method_id: BasicPublish::METHOD_ID,
                })
            }
        }
    }

    fn on_connection_method(&mut self, method: Method) -> Result<Next, Failure> {
        match method {
            Method::ConnectionClose(m) => {
                tracing::debug!(peer = %self.peer, code = m.reply_code, text = %m.reply_text, "client closed connection");
                write_method(&mut self.wbuf, 0, &ConnectionCloseOk.into());
                Ok(Next::Done)
            }
            Method::ConnectionCloseOk(_) => Ok(Next::Done),
            Method::ConnectionUpdateSecret(_) => {
                write_method(&mut self.wbuf, 0, &ConnectionUpdateSecretOk.into());
                Ok(Next::Continue)
            }
            other => Err(Failure {
                // RabbitMQ's code for a channel method sent on channel 0.
                error: AmqpError::new(
                    ReplyCode::ChannelError,
                    format!("unexpected method {} on channel 0", other.name()),
                ),
                channel: 0,
                class_id: other.class_id(),
                method_id: other.method_id(),
            }),
        }
    }

    fn on_channel_method(&mut self, ch: u16, method: Method) -> Result<(), Failure> {
        let (class_id, method_id) = (method.class_id(), method.method_id());
        let failure = |error: AmqpError| Failure {
            error,
            channel: ch,
            class_id,
            method_id,
        };
        let hard = |code: ReplyCode, text: String| Failure {
            error: AmqpError::new(code, text),
            channel: 0,
            class_id,
            method_id,
        };
        if ch > self.channel_max {
            return Err(hard(
                ReplyCode::ChannelError,
                format!("channel {ch} is above channel_max {}", self.channel_max),
            ));
        }
        match method {
            Method::ChannelOpen(_) => {
                if self.channels.contains_key(&ch) {
                    return Err(hard(
                        ReplyCode::ChannelError,
                        "second 'channel.open' seen".into(),
                    ));
                }
                self.channels.insert(ch, Channel::new(ch));
                write_method(&mut self.wbuf, ch, &ChannelOpenOk.into());
                Ok(())
            }
            Method::ChannelClose(_) => {
                if let Some(mut channel) = self.channels.remove(&ch) {
                    channel.flush_confirms(&mut self.ctx());
                    channel.release_all(&mut self.ctx());
                }
                write_method(&mut self.wbuf, ch, &ChannelCloseOk.into());
                Ok(())
            }
            Method::ChannelCloseOk(_) => {
                if self
                    .channels
                    .get(&ch)
                    .is_some_and(|c| c.state == ChannelState::Closing)
                {
                    self.channels.remove(&ch);
                }
                Ok(())
            }
            method => {
                let Some((channel, mut ctx)) = self.channel_and_ctx(ch) else {
                    return Err(hard(
                        ReplyCode::ChannelError,
                        "expected 'channel.open'".into(),
                    ));
                };
                if channel.state == ChannelState::Closing {
                    return Ok(());
                }
                if channel.expecting_content() {
                    // Reported against the publish whose content was cut short.
                    return Err(Failure {
                        error: AmqpError::new(
                            ReplyCode::UnexpectedFrame,
                            format!("expected content header for class 60, got non content header frame instead ({})", method.name()),
                        ),
                        channel: 0,
                        class_id: BasicPublish::CLASS_ID,
                        method_id: BasicPublish::METHOD_ID,
                    });
                }
                channel.handle(method, &mut ctx).map_err(failure)
            }
        }
    }

    fn on_event(&mut self, event: ConnectionEvent) {
        match event {
            ConnectionEvent::Deliver(delivery) => {
                let ch = delivery.consumer.channel;
                match self.channel_and_ctx(ch) {
                    Some((channel, mut ctx)) => channel.deliver(delivery, &mut ctx),
                    None => crate::deliver::return_delivery(delivery),
                }
            }
            ConnectionEvent::ConsumerCancelled {
                channel: ch,
                consumer_tag,
            } => {
                if let Some((channel, mut ctx)) = self.channel_and_ctx(ch) {
                    channel.consumer_cancelled_by_broker(consumer_tag, &mut ctx);
                }
            }
        }
    }

    /// Connection teardown: channels released (unacked requeued), deliveries still in the
    /// event channel handed back, exclusive queues deleted.
    fn release(&mut self) {
        if self.vhost.is_none() {
            return;
        }
        let (channels, mut ctx) = self.split();
        for channel in channels.values_mut() {
            channel.release_all(&mut ctx);
        }
        self.channels.clear();
        self.events_rx.close();
        while let Ok(event) = self.events_rx.try_recv() {
            if let ConnectionEvent::Deliver(d) = event {
                crate::deliver::return_delivery(d);
            }
        }
        if let Some(vhost) = &self.vhost {
            vhost.connection_closed(self.id);
        }
    }
}

/// Completes when the store's durable sequence moves; never without a store.
async fn durable_advanced(durable: &mut Option<watch::Receiver<DurableState>>) {
    match durable {
        Some(rx) => {
            if rx.changed().await.is_err() {
                // The store is gone (shutting down): stop watching it.
                *durable = None;
            }
        }
        None => std::future::pending().await,
    }
}

/// Class and method ids of a method payload, for the close frame when it fails to decode.
fn peek_ids(payload: &[u8]) -> (u16, u16) {
    if payload.len() < 4 {
        return (0, 0);
    }
    (
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    )
}
