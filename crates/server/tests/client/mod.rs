//! A tiny AMQP client over warren-codec for in-process tests: enough to handshake, send
//! methods and content, and read frames back, with timeouts so a broken broker fails a test
//! instead of hanging it.
// Each test binary uses its own subset of this client.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;

/// Serves `broker` with `config` on a fresh loopback port (for as long as the test's runtime
/// lives) and returns the port.
pub async fn serve_with(broker: Arc<Broker>, config: ServerConfig) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        broker,
        config,
        std::future::pending(),
    ));
    port
}

/// `serve_with` the default configuration.
pub async fn serve(broker: Arc<Broker>) -> u16 {
    serve_with(broker, ServerConfig::default()).await
}

/// A broker without a store (1 GiB memory limit), served with the default configuration.
pub async fn start_broker() -> (u16, Arc<Broker>) {
    let broker = Broker::new(1 << 30, None);
    (serve(broker.clone()).await, broker)
}

pub struct Client {
    stream: TcpStream,
    rbuf: BytesMut,
    pub server_properties: FieldTable,
    /// The server closed the socket (seen by `method_or_closed`).
    closed: bool,
}

/// A frame group from the server; tests match on the parts they check.
#[derive(Debug)]
#[allow(dead_code)]
pub enum Incoming {
    Method(u16, Method),
    Content(u16, Method, ContentHeader, Bytes),
}

impl Client {
    pub async fn connect(port: u16) -> Client {
        Self::connect_as(port, "guest", "guest")
            .await
            .expect("handshake")
    }

    /// Handshakes with the capabilities RabbitMQ's clients advertise; returns the close
    /// method if the server refused.
    pub async fn connect_as(port: u16, user: &str, pass: &str) -> Result<Client, Method> {
        Self::connect_with(
            port,
            user,
            pass,
            &[
                "consumer_cancel_notify",
                "authentication_failure_close",
                "connection.blocked",
            ],
        )
        .await
    }

    /// Connects as guest to `host` (an IPv6 address, say).
    pub async fn connect_at(host: &str, port: u16) -> Client {
        let stream = TcpStream::connect((host, port)).await.unwrap();
        Self::handshake(stream, "guest", "guest", &["consumer_cancel_notify"], 0)
            .await
            .expect("handshake")
    }

    /// Connects as guest asking for heartbeats every `heartbeat_s` seconds (the test then
    /// decides whether to send any).
    pub async fn connect_heartbeat(port: u16, heartbeat_s: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        Self::handshake(
            stream,
            "guest",
            "guest",
            &["connection.blocked"],
            heartbeat_s,
        )
        .await
        .expect("handshake")
    }

    /// Handshakes advertising exactly `capabilities`.
    pub async fn connect_with(
        port: u16,
        user: &str,
        pass: &str,
        capabilities: &[&str],
    ) -> Result<Client, Method> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        Self::handshake(stream, user, pass, capabilities, 0).await
    }

    /// Connects as `user` to `vhost`; returns the close method if the server refused.
    pub async fn connect_vhost(
        port: u16,
        user: &str,
        pass: &str,
        vhost: &str,
    ) -> Result<Client, Method> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let caps = ["consumer_cancel_notify", "authentication_failure_close"];
        Self::handshake_to(stream, user, pass, &caps, 0, vhost).await
    }

    async fn handshake(
        stream: TcpStream,
        user: &str,
        pass: &str,
        capabilities: &[&str],
        heartbeat_s: u16,
    ) -> Result<Client, Method> {
        Self::handshake_to(stream, user, pass, capabilities, heartbeat_s, "/").await
    }

    async fn handshake_to(
        stream: TcpStream,
        user: &str,
        pass: &str,
        capabilities: &[&str],
        heartbeat_s: u16,
        vhost: &str,
    ) -> Result<Client, Method> {
        let mut c = Client {
            stream,
            rbuf: BytesMut::new(),
            server_properties: FieldTable::new(),
            closed: false,
        };
        c.stream.write_all(PROTOCOL_HEADER).await.unwrap();
        let Method::ConnectionStart(start) = c.method().await.1 else {
            panic!("no start")
        };
        c.server_properties = start.server_properties;
        let mut caps = FieldTable::new();
        for cap in capabilities {
            caps.insert(*cap, FieldValue::Bool(true));
        }
        let mut props = FieldTable::new();
        props.insert("capabilities", FieldValue::Table(caps));
        c.send(
            0,
            ConnectionStartOk {
                client_properties: props,
                mechanism: "PLAIN".into(),
                response: Bytes::from(format!("\0{user}\0{pass}")),
                locale: "en_US".into(),
            },
        )
        .await;
        let tune = match c.method().await.1 {
            Method::ConnectionTune(t) => t,
            other => return Err(other),
        };
        c.send(
            0,
            ConnectionTuneOk {
                channel_max: tune.channel_max,
                frame_max: tune.frame_max,
                heartbeat: heartbeat_s,
            },
        )
        .await;
        c.send(
            0,
            ConnectionOpen {
                virtual_host: vhost.into(),
            },
        )
        .await;
        match c.method().await.1 {
            Method::ConnectionOpenOk(_) => Ok(c),
            other => Err(other),
        }
    }

    pub async fn send(&mut self, channel: u16, m: impl Into<Method>) {
        let mut out = BytesMut::new();
        write_method(&mut out, channel, &m.into());
        self.stream.write_all(&out).await.unwrap();
    }

    pub async fn publish(
        &mut self,
        channel: u16,
        exchange: &str,
        key: &str,
        body: &[u8],
        mandatory: bool,
    ) {
        self.publish_with(
            channel,
            exchange,
            key,
            body,
            mandatory,
            &BasicProperties::default(),
        )
        .await;
    }

    /// Publishes with delivery-mode 2 (persistent).
    pub async fn publish_persistent(
        &mut self,
        channel: u16,
        exchange: &str,
        key: &str,
        body: &[u8],
    ) {
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        self.publish_with(channel, exchange, key, body, false, &props)
            .await;
    }

    pub async fn publish_with(
        &mut self,
        channel: u16,
        exchange: &str,
        key: &str,
        body: &[u8],
        mandatory: bool,
        props: &BasicProperties,
    ) {
        let mut out = BytesMut::new();
        let publish = BasicPublish {
            exchange: exchange.into(),
            routing_key: key.into(),
            mandatory,
            immediate: false,
        };
        write_method(&mut out, channel, &publish.into());
        let header = ContentHeader::new(BASIC_CLASS_ID, body.len() as u64, props);
        write_content_header(
            &mut out,
            channel,
            BASIC_CLASS_ID,
            body.len() as u64,
            &header.properties,
        );
        write_body_frames(&mut out, channel, body, 131072);
        self.stream.write_all(&out).await.unwrap();
    }

    /// The next frame of any kind (heartbeats included), within 5 s.
    pub async fn frame(&mut self) -> RawFrame {
        let read = async {
            loop {
                if let Some(f) = parse_frame(&mut self.rbuf, 0).unwrap() {
                    return f;
                }
                if self.stream.read_buf(&mut self.rbuf).await.unwrap() == 0 {
                    panic!("server closed the socket");
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("frame within 5 s")
    }

    /// The next method within `wait` (None if none came, or the socket closed: see
    /// `is_closed`). Heartbeats are skipped.
    pub async fn method_or_closed(&mut self, wait: Duration) -> Option<(u16, Method)> {
        if self.closed {
            return None;
        }
        let read = async {
            loop {
                if let Some(f) = parse_frame(&mut self.rbuf, 0).unwrap() {
                    if f.kind == FrameKind::Method {
                        let m = Method::decode(&mut Reader::new(f.payload)).unwrap();
                        return Some((f.channel, m));
                    }
                    continue;
                }
                match self.stream.read_buf(&mut self.rbuf).await {
                    Ok(0) | Err(_) => {
                        self.closed = true;
                        return None;
                    }
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(wait, read).await.ok().flatten()
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub async fn method(&mut self) -> (u16, Method) {
        loop {
            let f = self.frame().await;
            if f.kind == FrameKind::Method {
                return (
                    f.channel,
                    Method::decode(&mut Reader::new(f.payload)).unwrap(),
                );
            }
        }
    }

    /// The next method, with its content if it carries one.
    pub async fn next(&mut self) -> Incoming {
        let (ch, m) = self.method().await;
        if !m.has_content() {
            return Incoming::Method(ch, m);
        }
        let h = self.frame().await;
        let header = ContentHeader::decode(h.payload).unwrap();
        let mut body = BytesMut::new();
        while (body.len() as u64) < header.body_size {
            body.extend_from_slice(&self.frame().await.payload);
        }
        Incoming::Content(ch, m, header, body.freeze())
    }

    pub async fn open_channel(&mut self, ch: u16) {
        self.send(ch, ChannelOpen).await;
        assert!(matches!(self.method().await, (c, Method::ChannelOpenOk(_)) if c == ch));
    }

    pub async fn declare_queue(&mut self, ch: u16, name: &str, args: FieldTable) -> QueueDeclareOk {
        self.send(
            ch,
            QueueDeclare {
                queue: name.into(),
                arguments: args,
                ..Default::default()
            },
        )
        .await;
        match self.method().await.1 {
            Method::QueueDeclareOk(ok) => ok,
            other => panic!("expected declare-ok, got {other:?}"),
        }
    }

    /// Asserts nothing arrives for `ms`.
    pub async fn expect_silence(&mut self, ms: u64) {
        let r = tokio::time::timeout(
            Duration::from_millis(ms),
            self.stream.read_buf(&mut self.rbuf),
        )
        .await;
        assert!(
            r.is_err() && self.rbuf.is_empty(),
            "unexpected data from server"
        );
    }
}

impl Client {
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }
}

impl Client {
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Reads and discards whatever the server sends until it closes the socket.
    pub async fn drain(&mut self) {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = self.stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    }
}
