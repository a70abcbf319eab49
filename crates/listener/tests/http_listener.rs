//! The HTTP endpoints' listener in process: one axum router served on a plain and a TLS
//! listener at once, the client's address reaching handlers, HTTP/1.1 agreed in ALPN, and
//! TLS clients served while other connections sit in a stalled handshake.

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_listener::http_listener::{self, ClientAddr, HttpListener};
use warren_listener::tls::{self, TlsOptions};

/// A server certificate for localhost from a fresh CA: the server's TLS configuration (read
/// from files, as the broker does) and a client configuration trusting the CA.
fn tls_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    let server = tls::server_config(&TlsOptions {
        cert_file: dir.path().join("server.pem"),
        key_file: dir.path().join("server.key"),
        ..TlsOptions::default()
    })
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(issuer.der().clone()).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (server, Arc::new(client))
}

/// A router answering with the client's address as the handler sees it.
fn app() -> Router {
    Router::new().route(
        "/peer",
        get(|ConnectInfo(ClientAddr(peer)): ConnectInfo<ClientAddr>| async move {
            peer.to_string()
        }),
    )
}

/// GET /peer over `stream`: the status line and the body.
async fn get_peer<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> (String, String) {
    stream
        .write_all(b"GET /peer HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("an answer within 10 s")
    .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

#[tokio::test]
async fn one_router_on_plain_and_tls_listeners() {
    let (server_tls, client_tls) = tls_configs();
    let (plain, plain_addr) = bind().await;
    let (secure, secure_addr) = bind().await;
    let listeners = vec![
        HttpListener::plain(plain),
        HttpListener::tls(secure, &server_tls),
    ];
    assert_eq!(
        listeners
            .iter()
            .map(HttpListener::is_tls)
            .collect::<Vec<_>>(),
        [false, true]
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(http_listener::serve(listeners, app(), async {
        let _ = stopped.await;
    }));

    let mut tcp = TcpStream::connect(plain_addr).await.unwrap();
    let me = tcp.local_addr().unwrap().to_string();
    assert_eq!(get_peer(&mut tcp).await, ("HTTP/1.1 200 OK".into(), me));

    let tcp = TcpStream::connect(secure_addr).await.unwrap();
    let me = tcp.local_addr().unwrap().to_string();
    let mut tls = tokio_rustls::TlsConnector::from(client_tls)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    // Offered h2 and http/1.1: the server takes the one it speaks.
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(get_peer(&mut tls).await, ("HTTP/1.1 200 OK".into(), me));

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("stops on shutdown")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn stalled_handshakes_do_not_hold_up_other_clients() {
    let (server_tls, client_tls) = tls_configs();
    let (secure, addr) = bind().await;
    tokio::spawn(http_listener::serve(
        vec![HttpListener::tls(secure, &server_tls)],
        app(),
        std::future::pending(),
    ));
    // Connections that never send a ClientHello, accepted before the real client.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client_tls)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(get_peer(&mut tls).await.0, "HTTP/1.1 200 OK");
    // Handshakes one after the other would have waited out four handshake timeouts.
    assert!(
        started.elapsed() < tls::TLS_HANDSHAKE_TIMEOUT * 2,
        "{:?}",
        started.elapsed()
    );
    // The stalled connections are dropped at the handshake timeout.
    for mut socket in stalled {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(tls::TLS_HANDSHAKE_TIMEOUT * 4, socket.read(&mut byte))
            .await
            .expect("closed after the handshake timeout");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
