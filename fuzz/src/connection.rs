//! The connection state machine fed from an in-memory stream: a whole broker (no store) and
//! one connection over `tokio::io::duplex`, the fuzzer's bytes as everything the client says.
//! The first input octet picks whether a valid handshake (protocol header, start-ok as guest,
//! tune-ok, open) comes first, so the fuzzer works on channels and content, or not, so it
//! works on the handshake itself. The connection must end by itself once the client has said
//! everything and hung up: a hang is a failure too (caught by a generous virtual-time
//! timeout; time is paused, so the broker's own timers cost no real time).

use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_broker::Broker;
use warren_codec::{
    write_method, ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, FieldTable, Method,
    PROTOCOL_HEADER,
};
use warren_server::ServerConfig;

/// Far longer than any of the server's own timeouts (handshake, close-ok wait, linger).
const MUST_END_WITHIN: Duration = Duration::from_secs(3600);

/// What a client sends to get a connection open, in one piece (the server reads it as it
/// would a pipelining client's).
pub fn handshake() -> Bytes {
    let mut out = BytesMut::new();
    out.extend_from_slice(PROTOCOL_HEADER);
    let methods: [Method; 3] = [
        ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: "PLAIN".into(),
            response: Bytes::from_static(b"\0guest\0guest"),
            locale: "en_US".into(),
        }
        .into(),
        ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 0,
        }
        .into(),
        ConnectionOpen {
            virtual_host: "/".into(),
        }
        .into(),
    ];
    for m in &methods {
        write_method(&mut out, 0, m);
    }
    out.freeze()
}

pub fn connection(data: &[u8]) {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let broker = Broker::new(1 << 30, None);
        let (client, server) = tokio::io::duplex(64 * 1024);
        let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
        let served =
            warren_server::serve_stream(server, peer, broker, Arc::new(ServerConfig::default()));
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let talk = async move {
            // The server may hang up at any point: a failed write ends the talking.
            if mode & 1 == 0 && to_server.write_all(&handshake()).await.is_err() {
                return;
            }
            let _ = to_server.write_all(input).await;
            let _ = to_server.shutdown().await;
        };
        // Read whatever the server says, so that it never waits for room to write.
        let listen = async move {
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(from_server.read(&mut buf).await, Ok(n) if n > 0) {}
        };
        let all = async { tokio::join!(served, talk, listen) };
        if tokio::time::timeout(MUST_END_WITHIN, all).await.is_err() {
            panic!("the connection did not end after the client hung up");
        }
    });
}
