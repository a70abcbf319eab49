//! A tiny AMQP client over warren-codec for in-process tests: enough to handshake, send
//! methods and content, and read frames back, with timeouts so a broken broker fails a test
//! instead of hanging it.
// Each test binary uses its own subset of this client.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_codec::*;

pub struct Client {
    stream: TcpStream,
    rbuf: BytesMut,
    pub server_properties: FieldTable,
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

    /// Handshakes; returns the close method if the server refused.
    pub async fn connect_as(port: u16, user: &str, pass: &str) -> Result<Client, Method> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut c = Client {
            stream,
            rbuf: BytesMut::new(),
            server_properties: FieldTable::new(),
        };
        c.stream.write_all(PROTOCOL_HEADER).await.unwrap();
        let Method::ConnectionStart(start) = c.method().await.1 else {
            panic!("no start")
        };
        c.server_properties = start.server_properties;
        let mut caps = FieldTable::new();
        caps.insert("consumer_cancel_notify", FieldValue::Bool(true));
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
                heartbeat: 0,
            },
        )
        .await;
        c.send(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
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

    async fn frame(&mut self) -> RawFrame {
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
