//! Connection negotiation and ending, driven byte by byte where a real client would never
//! misbehave: limits before authentication, refused logins, heartbeats with a payload,
//! pipelined handshakes, and a clean close that never ends in a reset.

mod client;

use bytes::{Bytes, BytesMut};
use client::{start_broker, Client};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;

/// A socket past the protocol header and connection.start.
async fn started(port: u16) -> (TcpStream, BytesMut) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(PROTOCOL_HEADER).await.unwrap();
    let mut rbuf = BytesMut::new();
    let (_, start) = read_method(&mut s, &mut rbuf)
        .await
        .expect("connection.start");
    assert!(matches!(start, Method::ConnectionStart(_)));
    (s, rbuf)
}

/// The next method, or None when the server closed the socket.
async fn read_method(s: &mut TcpStream, rbuf: &mut BytesMut) -> Option<(u16, Method)> {
    let read = async {
        loop {
            if let Some(f) = parse_frame(rbuf, 0).unwrap() {
                if f.kind == FrameKind::Method {
                    return Some((
                        f.channel,
                        Method::decode(&mut Reader::new(f.payload)).unwrap(),
                    ));
                }
                continue;
            }
            match s.read_buf(rbuf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("an answer within 5 s")
}

fn frame(channel: u16, m: impl Into<Method>) -> BytesMut {
    let mut out = BytesMut::new();
    write_method(&mut out, channel, &m.into());
    out
}

fn start_ok(response: &[u8], capabilities: &[&str], padding: usize) -> BytesMut {
    let mut caps = FieldTable::new();
    for c in capabilities {
        caps.insert(*c, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    props.insert("capabilities", FieldValue::Table(caps));
    props.insert("padding", FieldValue::string("x".repeat(padding)));
    frame(
        0,
        ConnectionStartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: Bytes::copy_from_slice(response),
            locale: "en_US".into(),
        },
    )
}

fn expect_close(got: Option<(u16, Method)>, code: u16) {
    match got {
        Some((0, Method::ConnectionClose(c))) => assert_eq!(c.reply_code, code, "{c:?}"),
        other => panic!("expected connection.close {code}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_frame_over_4096_bytes_before_tune_ok_is_a_frame_error() {
    let (port, _broker) = start_broker().await;
    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(b"\0guest\0guest", &[], 5000))
        .await
        .unwrap();
    expect_close(read_method(&mut s, &mut rbuf).await, 501);
    // The same start-ok under the limit is fine.
    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(b"\0guest\0guest", &[], 3000))
        .await
        .unwrap();
    assert!(matches!(
        read_method(&mut s, &mut rbuf).await,
        Some((0, Method::ConnectionTune(_)))
    ));
}

#[tokio::test]
async fn a_refused_login_is_told_only_to_clients_that_asked() {
    let (port, _broker) = start_broker().await;
    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(
        b"\0guest\0wrong",
        &["authentication_failure_close"],
        0,
    ))
    .await
    .unwrap();
    expect_close(read_method(&mut s, &mut rbuf).await, 403);

    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(b"\0guest\0wrong", &[], 0))
        .await
        .unwrap();
    assert!(
        read_method(&mut s, &mut rbuf).await.is_none(),
        "the socket is dropped without a close frame"
    );
}

#[tokio::test]
async fn plain_refuses_another_authzid_trailing_data_and_empty_passwords() {
    let (port, _broker) = start_broker().await;
    for response in [
        &b"admin\0guest\0guest"[..],
        b"\0guest\0guest\0more",
        b"\0guest\0",
    ] {
        let (mut s, mut rbuf) = started(port).await;
        s.write_all(&start_ok(response, &["authentication_failure_close"], 0))
            .await
            .unwrap();
        expect_close(read_method(&mut s, &mut rbuf).await, 403);
    }
    // authzid naming the user itself is fine.
    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(b"guest\0guest\0guest", &[], 0))
        .await
        .unwrap();
    assert!(matches!(
        read_method(&mut s, &mut rbuf).await,
        Some((0, Method::ConnectionTune(_)))
    ));
}

/// Handshake pipelined in one write with channel.open and a queue.declare: the broker
/// answers all of them without waiting for more input.
#[tokio::test]
async fn frames_sent_with_connection_open_are_handled_at_once() {
    let (port, _broker) = start_broker().await;
    let (mut s, mut rbuf) = started(port).await;
    s.write_all(&start_ok(b"\0guest\0guest", &[], 0))
        .await
        .unwrap();
    let Some((0, Method::ConnectionTune(tune))) = read_method(&mut s, &mut rbuf).await else {
        panic!("tune")
    };
    let mut burst = frame(
        0,
        ConnectionTuneOk {
            channel_max: tune.channel_max,
            frame_max: tune.frame_max,
            heartbeat: 0,
        },
    );
    burst.extend_from_slice(&frame(
        0,
        ConnectionOpen {
            virtual_host: "/".into(),
        },
    ));
    burst.extend_from_slice(&frame(1, ChannelOpen));
    s.write_all(&burst).await.unwrap();
    assert!(matches!(
        read_method(&mut s, &mut rbuf).await,
        Some((0, Method::ConnectionOpenOk(_)))
    ));
    assert!(matches!(
        read_method(&mut s, &mut rbuf).await,
        Some((1, Method::ChannelOpenOk(_)))
    ));
}

#[tokio::test]
async fn a_heartbeat_with_a_payload_is_a_frame_error() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.send_raw(&[8, 0, 0, 0, 0, 0, 1, 0xAB, FRAME_END]).await;
    match c.method().await {
        (0, Method::ConnectionClose(close)) => assert_eq!(close.reply_code, 501),
        other => panic!("expected connection.close 501, got {other:?}"),
    }
}

/// After a close the client asked for, the socket is the client's to close: the broker does
/// not close first (as RabbitMQ; lapin takes an EOF before it has handled close-ok as an
/// aborted connection), reads until our EOF, and bytes we send after close-ok (a heartbeat in
/// flight, say) must not turn the end into a reset.
#[tokio::test]
async fn close_ends_with_eof_not_a_reset() {
    let (port, _broker) = start_broker().await;
    for _ in 0..20 {
        let mut c = Client::connect(port).await;
        c.send(
            0,
            ConnectionClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        )
        .await;
        assert!(matches!(
            c.method().await,
            (0, Method::ConnectionCloseOk(_))
        ));
        let s = c.stream_mut();
        let mut heartbeat = BytesMut::new();
        write_heartbeat(&mut heartbeat);
        s.write_all(&heartbeat).await.unwrap();
        let mut rest = [0u8; 64];
        assert!(
            tokio::time::timeout(Duration::from_millis(50), s.read(&mut rest))
                .await
                .is_err(),
            "the broker closed before the client"
        );
        s.shutdown().await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut rest))
            .await
            .expect("EOF within 5 s")
            .expect("a clean EOF, not a reset");
        assert_eq!(n, 0);
    }
}

#[tokio::test]
async fn dual_stack_listener_takes_ipv4_and_ipv6_clients_as_loopback() {
    let listener = warren_server::bind_listener("::", 0).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        Broker::new(1 << 30, None),
        ServerConfig::default(),
        std::future::pending(),
    ));
    // guest is loopback-only: an IPv4 client arrives as ::ffff:127.0.0.1 and must count.
    Client::connect(port).await;
    if TcpStream::connect(("::1", port)).await.is_ok() {
        Client::connect_at("::1", port).await;
    }
}

#[tokio::test]
async fn server_properties_come_from_configuration() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = ServerConfig {
        server_properties: vec![
            ("product".into(), "RabbitMQ".into()),
            ("cluster_name".into(), "prod-eu".into()),
        ],
        ..ServerConfig::default()
    };
    tokio::spawn(warren_server::run(
        listener,
        Broker::new(1 << 30, None),
        config,
        std::future::pending(),
    ));
    let c = Client::connect(port).await;
    let prop = |k: &str| c.server_properties.get(k).and_then(|v| v.as_str());
    assert_eq!(prop("product"), Some("RabbitMQ"));
    assert_eq!(prop("cluster_name"), Some("prod-eu"));
    assert_eq!(prop("platform"), Some("Rust"));
    assert!(c.server_properties.get("capabilities").is_some());
}
