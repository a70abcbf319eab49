//! A minimal AMQP 0-9-1 client over an in-memory pipe to a Warren connection (`serve_stream`,
//! the real connection and channel code), on the same single-threaded runtime: it writes
//! frames encoded with `warren-codec` and reads the server's back, so both ends' instructions
//! are counted and nothing depends on sockets or a second thread.

use bytes::{Bytes, BytesMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;
use warren_broker::Broker;
use warren_codec::*;

pub type Result<T> = std::result::Result<T, String>;

const PIPE_BYTES: usize = 1 << 20;

pub struct Client {
    reader: ReadHalf<DuplexStream>,
    writer: WriteHalf<DuplexStream>,
    rbuf: BytesMut,
    server: JoinHandle<()>,
}

impl Client {
    /// A connection to `broker` as guest, with channel 1 open.
    pub async fn connect(broker: Arc<Broker>) -> Result<Client> {
        let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);
        let server = tokio::spawn(warren_server::serve_stream(
            server_end,
            peer,
            broker,
            Arc::new(warren_server::ServerConfig::default()),
        ));
        let (reader, writer) = tokio::io::split(client_end);
        let mut client = Client {
            reader,
            writer,
            rbuf: BytesMut::with_capacity(PIPE_BYTES),
            server,
        };
        client.handshake().await?;
        Ok(client)
    }

    /// Closes the pipe and waits for the server's connection task to end.
    pub async fn close(self) {
        drop(self.reader);
        drop(self.writer);
        let _ = self.server.await;
    }

    pub async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    pub async fn send(&mut self, channel: u16, m: impl Into<Method>) -> Result<()> {
        let mut out = BytesMut::new();
        write_method(&mut out, channel, &m.into());
        self.write(&out).await
    }

    /// The next frame from the server.
    async fn frame(&mut self) -> Result<RawFrame> {
        loop {
            if let Some(f) = parse_frame(&mut self.rbuf, 0).map_err(|e| e.to_string())? {
                return Ok(f);
            }
            let n = self
                .reader
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
        }
    }

    /// The next method, skipping content and heartbeat frames.
    pub async fn method(&mut self) -> Result<Method> {
        loop {
            let f = self.frame().await?;
            if f.kind == FrameKind::Method {
                return Method::decode(&mut Reader::new(f.payload)).map_err(|e| e.to_string());
            }
        }
    }

    pub async fn expect(&mut self, what: &str, ok: impl Fn(&Method) -> bool) -> Result<()> {
        let m = self.method().await?;
        if ok(&m) {
            Ok(())
        } else {
            Err(format!("expected {what}, got {m:?}"))
        }
    }

    /// Sends `m` on channel 1 and reads its answer, which must satisfy `ok`.
    pub async fn call(
        &mut self,
        m: impl Into<Method>,
        what: &str,
        ok: impl Fn(&Method) -> bool,
    ) -> Result<()> {
        self.send(1, m).await?;
        self.expect(what, ok).await
    }

    async fn handshake(&mut self) -> Result<()> {
        self.write(PROTOCOL_HEADER).await?;
        self.expect("connection.start", |m| {
            matches!(m, Method::ConnectionStart(_))
        })
        .await?;
        self.send(
            0,
            ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            },
        )
        .await?;
        let Method::ConnectionTune(tune) = self.method().await? else {
            return Err("expected connection.tune".into());
        };
        self.send(
            0,
            ConnectionTuneOk {
                channel_max: tune.channel_max,
                frame_max: tune.frame_max,
                heartbeat: 0,
            },
        )
        .await?;
        self.send(
            0,
            ConnectionOpen {
                virtual_host: "/".into(),
            },
        )
        .await?;
        self.expect("connection.open-ok", |m| {
            matches!(m, Method::ConnectionOpenOk(_))
        })
        .await?;
        self.call(ChannelOpen, "channel.open-ok", |m| {
            matches!(m, Method::ChannelOpenOk(_))
        })
        .await
    }

    /// Declares `queue` on channel 1 (durable or not, with `arguments`).
    pub async fn declare_queue(
        &mut self,
        queue: &str,
        durable: bool,
        arguments: FieldTable,
    ) -> Result<()> {
        let declare = QueueDeclare {
            queue: queue.into(),
            durable,
            arguments,
            ..Default::default()
        };
        self.call(declare, "queue.declare-ok", |m| {
            matches!(m, Method::QueueDeclareOk(_))
        })
        .await
    }

    /// Puts channel 1 in confirm mode.
    pub async fn select_confirms(&mut self) -> Result<()> {
        self.call(ConfirmSelect { nowait: false }, "confirm.select-ok", |m| {
            matches!(m, Method::ConfirmSelectOk(_))
        })
        .await
    }
}

/// One publish (method, header and body frames) on channel 1 through the default exchange to
/// `queue`, encoded once and written per message.
pub fn encoded_publish(queue: &str, body_bytes: usize, properties: &BasicProperties) -> BytesMut {
    let mut out = BytesMut::new();
    let publish = BasicPublish {
        exchange: "".into(),
        routing_key: queue.into(),
        mandatory: false,
        immediate: false,
    };
    write_method(&mut out, 1, &publish.into());
    let header = ContentHeader::new(BASIC_CLASS_ID, body_bytes as u64, properties);
    write_content_header(
        &mut out,
        1,
        BASIC_CLASS_ID,
        body_bytes as u64,
        &header.properties,
    );
    write_body_frames(&mut out, 1, &vec![b'x'; body_bytes], 131_072);
    out
}
