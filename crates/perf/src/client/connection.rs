//! Opening a connection (protocol header, start/start-ok with PLAIN, tune/tune-ok, open) and
//! the reader task that routes every incoming frame to its channel.
//!
//! The reader keeps the channel it last dispatched to (`LastChannel`) and checks it against a
//! generation that every change of the channel table advances: a message is three frames on
//! one channel, and locking the table and cloning the channel's `Arc` for each of them was
//! CPU the tool takes from the broker it measures on shared cores.

use super::channel::{Channel, ChannelShared};
use super::outbox::Outbox;
use super::uri::AmqpUri;
use super::{ClientError, Result};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use warren_codec::*;

/// We ask for at most this frame size: bigger frames only help bodies over 128 KiB.
const CLIENT_FRAME_MAX: u32 = 131_072;

pub(crate) struct ConnInner {
    pub out: Outbox,
    pub frame_max: u32,
    pub channel_max: u16,
    channels: Mutex<Vec<Option<Arc<ChannelShared>>>>,
    /// Advanced (under the `channels` lock) whenever a slot of `channels` changes.
    channels_generation: AtomicU64,
    next_channel: Mutex<u16>,
    closed: Mutex<Option<String>>,
    close_ok: Notify,
    /// The broker's `product` and `version` server properties ("" when it sent none).
    server_product: String,
    server_version: String,
}

impl ConnInner {
    pub fn send_method(&self, channel: u16, method: &Method) {
        self.out.write(|buf| write_method(buf, channel, method));
    }

    pub fn close_reason(&self) -> String {
        self.closed
            .lock()
            .clone()
            .unwrap_or_else(|| "connection closed".into())
    }

    pub fn forget_channel(&self, id: u16) {
        let mut channels = self.channels.lock();
        if let Some(slot) = channels.get_mut(id as usize) {
            *slot = None;
            self.channels_generation.fetch_add(1, Ordering::Release);
        }
    }

    fn shut(&self, why: &str) {
        {
            let mut closed = self.closed.lock();
            if closed.is_none() {
                *closed = Some(why.to_owned());
            }
        }
        let channels: Vec<_> = self.channels.lock().iter().flatten().cloned().collect();
        for ch in channels {
            ch.fail(why);
        }
        self.out.close();
        self.close_ok.notify_waiters();
    }

    fn on_frame(&self, frame: RawFrame, last: &mut LastChannel, read_ns: u64) -> Result<()> {
        if frame.channel == 0 {
            return self.on_connection_frame(frame);
        }
        let generation = self.channels_generation.load(Ordering::Acquire);
        let remembered =
            matches!(last, Some((id, g, _)) if *id == frame.channel && *g == generation);
        if !remembered {
            let channels = self.channels.lock();
            // Read under the lock, which every change of the table holds while it advances it.
            let generation = self.channels_generation.load(Ordering::Acquire);
            *last = channels
                .get(frame.channel as usize)
                .and_then(|c| c.clone())
                .map(|ch| (frame.channel, generation, ch));
        }
        match last {
            Some((_, _, ch)) => ch.on_frame(self, frame, read_ns),
            // Frames for a channel we just closed may still be in flight: drop them.
            None => Ok(()),
        }
    }

    fn on_connection_frame(&self, frame: RawFrame) -> Result<()> {
        match frame.kind {
            FrameKind::Heartbeat => {
                // We ask for no heartbeats; answering one costs nothing if a broker sends them.
                self.out.write(write_heartbeat);
                Ok(())
            }
            FrameKind::Method => {
                let method = Method::decode(&mut Reader::new(frame.payload))
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                match method {
                    Method::ConnectionClose(m) => {
                        self.send_method(0, &Method::ConnectionCloseOk(ConnectionCloseOk));
                        self.shut(&format!(
                            "closed by broker: {} {}",
                            m.reply_code, m.reply_text
                        ));
                    }
                    Method::ConnectionCloseOk(_) => self.shut("closed by client"),
                    // connection.blocked and friends: nothing to do for a load tool.
                    _ => {}
                }
                Ok(())
            }
            _ => Err(ClientError::Protocol("content frame on channel 0".into())),
        }
    }
}

/// The reader task's channel of the last frame: its number, the table's generation when it
/// was looked up, and the channel.
type LastChannel = Option<(u16, u64, Arc<ChannelShared>)>;

/// An open AMQP connection; cheap to clone.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<ConnInner>,
}

/// A string server property, "" when absent or not a string.
fn server_property(properties: &FieldTable, key: &str) -> String {
    properties
        .get(key)
        .and_then(FieldValue::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl Connection {
    /// The broker's `product` and `version` server properties, as its connection.start gave
    /// them ("" for one it did not send).
    pub fn server_identity(&self) -> (&str, &str) {
        (&self.inner.server_product, &self.inner.server_version)
    }

    pub async fn open(uri: &AmqpUri) -> Result<Connection> {
        Self::open_named(uri, "warren-perf").await
    }

    /// `name` becomes the `connection_name` client property (shown by management tools).
    pub async fn open_named(uri: &AmqpUri, name: &str) -> Result<Connection> {
        let io = |e: std::io::Error| ClientError::Io(format!("{}: {e}", uri.addr()));
        let mut socket = TcpStream::connect(uri.addr()).await.map_err(io)?;
        socket.set_nodelay(true).map_err(io)?;
        let mut rbuf = BytesMut::with_capacity(64 * 1024);
        let mut wbuf = BytesMut::new();
        wbuf.extend_from_slice(PROTOCOL_HEADER);
        tokio::io::AsyncWriteExt::write_all(&mut socket, &wbuf)
            .await
            .map_err(io)?;
        wbuf.clear();

        let Method::ConnectionStart(start) = read_method(&mut socket, &mut rbuf).await? else {
            return Err(ClientError::Protocol("expected connection.start".into()));
        };
        let mut caps = FieldTable::new();
        for cap in [
            "publisher_confirms",
            "basic.nack",
            "consumer_cancel_notify",
            "exchange_exchange_bindings",
        ] {
            caps.insert(cap, FieldValue::Bool(true));
        }
        let mut props = FieldTable::new();
        props.insert("product", FieldValue::string("warren-perf"));
        props.insert("version", FieldValue::string(env!("CARGO_PKG_VERSION")));
        props.insert("connection_name", FieldValue::string(name));
        props.insert("capabilities", FieldValue::Table(caps));
        let mut response = Vec::new();
        response.push(0);
        response.extend_from_slice(uri.user.as_bytes());
        response.push(0);
        response.extend_from_slice(uri.password.as_bytes());
        write_method(
            &mut wbuf,
            0,
            &Method::ConnectionStartOk(ConnectionStartOk {
                client_properties: props,
                mechanism: "PLAIN".into(),
                response: Bytes::from(response),
                locale: "en_US".into(),
            }),
        );
        flush(&mut socket, &mut wbuf).await?;

        let tune = match read_method(&mut socket, &mut rbuf).await? {
            Method::ConnectionTune(t) => t,
            Method::ConnectionClose(c) => {
                return Err(ClientError::ConnectionClosed(format!(
                    "{} {}",
                    c.reply_code, c.reply_text
                )))
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected connection.tune, got {}",
                    other.name()
                )))
            }
        };
        let frame_max = match tune.frame_max {
            0 => CLIENT_FRAME_MAX,
            n => n.min(CLIENT_FRAME_MAX),
        };
        let channel_max = match tune.channel_max {
            0 => u16::MAX,
            n => n,
        };
        write_method(
            &mut wbuf,
            0,
            &Method::ConnectionTuneOk(ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat: 0,
            }),
        );
        write_method(
            &mut wbuf,
            0,
            &Method::ConnectionOpen(ConnectionOpen {
                virtual_host: uri.vhost.as_str().into(),
            }),
        );
        flush(&mut socket, &mut wbuf).await?;
        match read_method(&mut socket, &mut rbuf).await? {
            Method::ConnectionOpenOk(_) => {}
            Method::ConnectionClose(c) => {
                return Err(ClientError::ConnectionClosed(format!(
                    "{} {}",
                    c.reply_code, c.reply_text
                )))
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected connection.open-ok, got {}",
                    other.name()
                )))
            }
        }

        let inner = Arc::new(ConnInner {
            out: Outbox::new(),
            frame_max,
            channel_max,
            channels: Mutex::new(Vec::new()),
            channels_generation: AtomicU64::new(0),
            next_channel: Mutex::new(1),
            closed: Mutex::new(None),
            close_ok: Notify::new(),
            server_product: server_property(&start.server_properties, "product"),
            server_version: server_property(&start.server_properties, "version"),
        });
        let (rd, wr) = socket.into_split();
        let writer = inner.clone();
        tokio::spawn(async move {
            if let Err(e) = writer.out.run_writer(wr).await {
                writer.shut(&format!("write failed: {e}"));
            }
        });
        let reader = inner.clone();
        tokio::spawn(async move {
            let why = match read_loop(&reader, rd, rbuf).await {
                Ok(()) => "connection closed by broker".to_owned(),
                Err(e) => e.to_string(),
            };
            reader.shut(&why);
        });
        Ok(Connection { inner })
    }

    pub fn channel_max(&self) -> u16 {
        self.inner.channel_max
    }

    pub fn is_closed(&self) -> bool {
        self.inner.out.is_closed()
    }

    pub async fn channel(&self) -> Result<Channel> {
        let id = {
            let mut channels = self.inner.channels.lock();
            let mut next = self.inner.next_channel.lock();
            let max = self.inner.channel_max.min(4095);
            let mut id = None;
            for _ in 0..max {
                let candidate = *next;
                *next = if candidate >= max { 1 } else { candidate + 1 };
                if channels.get(candidate as usize).is_none_or(|c| c.is_none()) {
                    id = Some(candidate);
                    break;
                }
            }
            let id = id.ok_or_else(|| ClientError::Protocol("no free channel number".into()))?;
            if channels.len() <= id as usize {
                channels.resize(id as usize + 1, None);
            }
            channels[id as usize] = Some(Arc::new(ChannelShared::new(id)));
            self.inner
                .channels_generation
                .fetch_add(1, Ordering::Release);
            id
        };
        let shared = self.inner.channels.lock()[id as usize]
            .clone()
            .expect("just inserted");
        let ch = Channel {
            conn: self.inner.clone(),
            shared,
        };
        ch.call(Method::ChannelOpen(ChannelOpen)).await?;
        Ok(ch)
    }

    /// Closes politely (connection.close, wait up to 2 s for close-ok).
    pub async fn close(&self) {
        if self.inner.out.is_closed() {
            return;
        }
        let notified = self.inner.close_ok.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        self.inner.send_method(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            }),
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), notified).await;
        self.inner.shut("closed by client");
    }
}

async fn flush(socket: &mut TcpStream, wbuf: &mut BytesMut) -> Result<()> {
    tokio::io::AsyncWriteExt::write_all(socket, wbuf)
        .await
        .map_err(|e| ClientError::Io(e.to_string()))?;
    wbuf.clear();
    Ok(())
}

/// Reads the next method on channel 0 during the handshake.
async fn read_method(socket: &mut TcpStream, rbuf: &mut BytesMut) -> Result<Method> {
    loop {
        if let Some(frame) =
            parse_frame(rbuf, 0).map_err(|e| ClientError::Protocol(e.to_string()))?
        {
            if frame.kind != FrameKind::Method {
                continue;
            }
            return Method::decode(&mut Reader::new(frame.payload))
                .map_err(|e| ClientError::Protocol(e.to_string()));
        }
        rbuf.reserve(4096);
        let n = socket
            .read_buf(rbuf)
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        if n == 0 {
            return Err(ClientError::ConnectionClosed(
                "broker closed the socket during the handshake".into(),
            ));
        }
    }
}

async fn read_loop(conn: &ConnInner, mut rd: OwnedReadHalf, mut buf: BytesMut) -> Result<()> {
    let mut last: LastChannel = None;
    // One clock reading per read: every frame of a read arrived by the time it returned.
    let mut read_ns = crate::payload::now_ns();
    loop {
        while let Some(frame) =
            parse_frame(&mut buf, 0).map_err(|e| ClientError::Protocol(e.to_string()))?
        {
            conn.on_frame(frame, &mut last, read_ns)?;
        }
        if conn.out.is_closed() && conn.closed.lock().is_some() {
            return Ok(());
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(128 * 1024);
        }
        let n = rd
            .read_buf(&mut buf)
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        if n == 0 {
            return Ok(());
        }
        read_ns = crate::payload::now_ns();
    }
}
