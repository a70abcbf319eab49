//! The publish→deliver path in one process, for instruction counts: a Warren connection
//! served over an in-memory pipe (`serve_stream`, the real connection and channel code), and
//! a client on the same single-threaded runtime that publishes N transient messages through
//! the default exchange to a queue it consumes with no-ack, in windows of 100, reading every
//! delivery back. No sockets and no second thread, so `valgrind --tool=callgrind` counts the
//! same instructions run after run; `tools/bench/instructions.sh` runs it at two N and takes
//! the difference per message, which leaves out start-up and handshake.
//!
//! Usage: `publish_deliver [MESSAGES] [BODY_BYTES]` (defaults 10000 and 16); prints the
//! number of deliveries received, and fails if it is not MESSAGES.

use bytes::{Bytes, BytesMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use warren_codec::*;

const QUEUE: &str = "publish-deliver";
/// Messages written before the client reads their deliveries back.
const WINDOW: usize = 100;
const PIPE_BYTES: usize = 1 << 20;

struct Client {
    reader: ReadHalf<DuplexStream>,
    writer: WriteHalf<DuplexStream>,
    rbuf: BytesMut,
}

type Result<T> = std::result::Result<T, String>;

impl Client {
    async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    async fn send(&mut self, channel: u16, m: impl Into<Method>) -> Result<()> {
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
    async fn method(&mut self) -> Result<Method> {
        loop {
            let f = self.frame().await?;
            if f.kind == FrameKind::Method {
                return Method::decode(&mut Reader::new(f.payload)).map_err(|e| e.to_string());
            }
        }
    }

    async fn expect(&mut self, what: &str, ok: impl Fn(&Method) -> bool) -> Result<()> {
        let m = self.method().await?;
        if ok(&m) {
            Ok(())
        } else {
            Err(format!("expected {what}, got {m:?}"))
        }
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
        self.send(1, ChannelOpen).await?;
        self.expect("channel.open-ok", |m| matches!(m, Method::ChannelOpenOk(_)))
            .await?;
        self.send(
            1,
            QueueDeclare {
                queue: QUEUE.into(),
                ..Default::default()
            },
        )
        .await?;
        self.expect("queue.declare-ok", |m| {
            matches!(m, Method::QueueDeclareOk(_))
        })
        .await?;
        self.send(
            1,
            BasicConsume {
                queue: QUEUE.into(),
                consumer_tag: "c".into(),
                no_ack: true,
                ..Default::default()
            },
        )
        .await?;
        self.expect("basic.consume-ok", |m| {
            matches!(m, Method::BasicConsumeOk(_))
        })
        .await
    }

    /// Reads until `count` basic.deliver methods arrived (their content frames skipped).
    async fn deliveries(&mut self, count: usize) -> Result<()> {
        let mut seen = 0;
        while seen < count {
            match self.method().await? {
                Method::BasicDeliver(_) => seen += 1,
                other => return Err(format!("expected basic.deliver, got {other:?}")),
            }
        }
        Ok(())
    }
}

/// One publish (method, header and body frames) encoded once and written per message.
fn encoded_publish(body_bytes: usize) -> BytesMut {
    let mut out = BytesMut::new();
    let publish = BasicPublish {
        exchange: "".into(),
        routing_key: QUEUE.into(),
        mandatory: false,
        immediate: false,
    };
    write_method(&mut out, 1, &publish.into());
    let header = ContentHeader::new(
        BASIC_CLASS_ID,
        body_bytes as u64,
        &BasicProperties::default(),
    );
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

async fn run(messages: usize, body_bytes: usize) -> Result<usize> {
    let broker = warren_broker::Broker::new(usize::MAX, None);
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
    };
    client.handshake().await?;
    let one = encoded_publish(body_bytes);
    let mut window = BytesMut::with_capacity(one.len() * WINDOW);
    let mut sent = 0;
    while sent < messages {
        let n = WINDOW.min(messages - sent);
        window.clear();
        for _ in 0..n {
            window.extend_from_slice(&one);
        }
        client.write(&window).await?;
        client.deliveries(n).await?;
        sent += n;
    }
    drop(client);
    let _ = server.await;
    Ok(sent)
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let messages = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let body_bytes = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(messages, body_bytes)) {
        Ok(received) if received == messages => {
            println!("received {received} deliveries of {body_bytes} B");
            std::process::ExitCode::SUCCESS
        }
        Ok(received) => {
            eprintln!("received {received} of {messages} deliveries");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("publish_deliver: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
