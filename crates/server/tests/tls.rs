//! AMQPS in process: certificates made with rcgen, a rustls client driving the AMQP
//! handshake. EXTERNAL with the certificate's distinguished name as the user, EXTERNAL only
//! offered with a verified certificate, client certificates refused under
//! fail_if_no_peer_cert, and the TLS options that cannot work refused at startup.

use bytes::{Bytes, BytesMut};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::Broker;
use warren_codec::*;
use warren_listener::tls::{self, TlsOptions};
use warren_server::ServerConfig;

const CLIENT_DN: &str = "CN=app-1,O=Warren Tests,C=GB";

struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
    stranger: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A client certificate with subject C=GB, O=Warren Tests, CN=app-1 (CLIENT_DN).
fn client_cert(
    issuer: &CertifiedIssuer<'static, KeyPair>,
) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CountryName, "GB");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Warren Tests");
    params.distinguished_name.push(DnType::CommonName, "app-1");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (cert.der().clone(), key)
}

/// A CA, a server certificate for localhost (files, as the broker reads them), and client
/// certificates from that CA and from another one.
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let issuer = ca("Warren Test CA");
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("ca.pem"), issuer.pem()).unwrap();
    Pki {
        dir,
        ca: issuer.der().clone(),
        client: client_cert(&issuer),
        stranger: client_cert(&ca("Another CA")),
    }
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn options(&self, verify_peer: bool, fail_if_no_peer_cert: bool) -> TlsOptions {
        TlsOptions {
            cert_file: self.path("server.pem"),
            key_file: self.path("server.key"),
            ca_file: verify_peer.then(|| self.path("ca.pem")),
            verify_peer,
            fail_if_no_peer_cert,
        }
    }

    fn client_config(
        &self,
        cert: Option<&(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        Arc::new(match cert {
            Some((c, k)) => builder
                .with_client_auth_cert(vec![c.clone()], k.clone_key())
                .unwrap(),
            None => builder.with_no_client_auth(),
        })
    }
}

/// An AMQPS listener whose broker has `users`, without passwords (they can only log in
/// with EXTERNAL).
async fn start_tls(options: &TlsOptions, users: &[&str]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tls_config = tls::server_config(options).unwrap();
    let broker = Broker::new(1 << 30, None);
    for user in users {
        broker.access.put_user(user, None, vec![]).unwrap();
    }
    tokio::spawn(warren_server::run_tls(
        listener,
        tls_config,
        broker,
        Arc::new(ServerConfig::default()),
        std::future::pending(),
    ));
    port
}

/// A TLS connection to the broker, or the TLS error (a refused certificate shows up at the
/// first read with TLS 1.3, so the caller reads connection.start before judging).
async fn connect(
    port: u16,
    client: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(client)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// The next method on the stream; Err when the stream ends or fails first.
async fn read_method<S: AsyncRead + Unpin>(
    s: &mut S,
    rbuf: &mut BytesMut,
) -> std::io::Result<Method> {
    let read = async {
        loop {
            if let Some(f) = parse_frame(rbuf, 0).unwrap() {
                if f.kind == FrameKind::Method {
                    return Ok(Method::decode(&mut Reader::new(f.payload)).unwrap());
                }
                continue;
            }
            if s.read_buf(rbuf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("an answer within 5 s")
}

async fn send<S: AsyncWrite + Unpin>(s: &mut S, m: impl Into<Method>) {
    let mut out = BytesMut::new();
    write_method(&mut out, 0, &m.into());
    s.write_all(&out).await.unwrap();
}

/// Protocol header, then connection.start: the mechanisms offered.
async fn mechanisms<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    rbuf: &mut BytesMut,
) -> std::io::Result<String> {
    s.write_all(PROTOCOL_HEADER).await?;
    match read_method(s, rbuf).await? {
        Method::ConnectionStart(start) => Ok(String::from_utf8(start.mechanisms.to_vec()).unwrap()),
        other => panic!("expected connection.start, got {}", other.name()),
    }
}

/// start-ok with `mechanism` and `response`; the answer (tune when logged in, close when not).
async fn login<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    rbuf: &mut BytesMut,
    mechanism: &str,
    response: &'static [u8],
) -> Method {
    let mut caps = FieldTable::new();
    caps.insert("authentication_failure_close", FieldValue::Bool(true));
    let mut props = FieldTable::new();
    props.insert("capabilities", FieldValue::Table(caps));
    send(
        s,
        ConnectionStartOk {
            client_properties: props,
            mechanism: ShortStr::from(mechanism),
            response: Bytes::from_static(response),
            locale: ShortStr::from("en_US"),
        },
    )
    .await;
    read_method(s, rbuf).await.unwrap()
}

/// The answer to a start-ok that logged in: connection.tune.
fn assert_logged_in(answer: Method) {
    assert!(
        matches!(answer, Method::ConnectionTune(_)),
        "expected connection.tune, got {}",
        answer.name()
    );
}

/// The answer to a refused start-ok: connection.close 403 (authentication_failure_close).
fn assert_refused(answer: Method) {
    match answer {
        Method::ConnectionClose(close) => assert_eq!(close.reply_code, 403),
        other => panic!("expected connection.close 403, got {}", other.name()),
    }
}

#[tokio::test]
async fn external_logs_in_as_the_certificate_distinguished_name() {
    let pki = pki();
    let port = start_tls(&pki.options(true, false), &[CLIENT_DN]).await;
    let mut s = connect(port, pki.client_config(Some(&pki.client)))
        .await
        .unwrap();
    let mut rbuf = BytesMut::new();
    assert_eq!(
        mechanisms(&mut s, &mut rbuf).await.unwrap(),
        "PLAIN AMQPLAIN EXTERNAL"
    );
    assert_logged_in(login(&mut s, &mut rbuf, "EXTERNAL", b"").await);
}

#[tokio::test]
async fn external_refused_when_the_certificate_user_does_not_exist() {
    let pki = pki();
    let port = start_tls(&pki.options(true, false), &["CN=app-1"]).await;
    let mut s = connect(port, pki.client_config(Some(&pki.client)))
        .await
        .unwrap();
    let mut rbuf = BytesMut::new();
    mechanisms(&mut s, &mut rbuf).await.unwrap();
    assert_refused(login(&mut s, &mut rbuf, "EXTERNAL", b"").await);
}

#[tokio::test]
async fn external_is_offered_only_with_a_verified_certificate() {
    let pki = pki();
    // TLS without client verification, and verify_peer with a client that sends none.
    for verify_peer in [false, true] {
        let port = start_tls(&pki.options(verify_peer, false), &[CLIENT_DN]).await;
        let cert = (!verify_peer).then_some(&pki.client);
        let mut s = connect(port, pki.client_config(cert)).await.unwrap();
        let mut rbuf = BytesMut::new();
        assert_eq!(
            mechanisms(&mut s, &mut rbuf).await.unwrap(),
            "PLAIN AMQPLAIN"
        );
        assert_refused(login(&mut s, &mut rbuf, "EXTERNAL", b"").await);
        // PLAIN still works over TLS.
        let mut s = connect(port, pki.client_config(None)).await.unwrap();
        let mut rbuf = BytesMut::new();
        mechanisms(&mut s, &mut rbuf).await.unwrap();
        assert_logged_in(login(&mut s, &mut rbuf, "PLAIN", b"\0guest\0guest").await);
    }
}

#[tokio::test]
async fn fail_if_no_peer_cert_refuses_missing_and_foreign_certificates() {
    let pki = pki();
    let port = start_tls(&pki.options(true, true), &[CLIENT_DN]).await;
    for cert in [None, Some(&pki.stranger)] {
        let refused = match connect(port, pki.client_config(cert)).await {
            Err(_) => true,
            // TLS 1.3: the client finishes first and learns of the refusal on reading.
            Ok(mut s) => mechanisms(&mut s, &mut BytesMut::new()).await.is_err(),
        };
        assert!(
            refused,
            "a client with {:?} certificate got in",
            cert.map(|_| "a foreign")
        );
    }
    let mut s = connect(port, pki.client_config(Some(&pki.client)))
        .await
        .unwrap();
    let mut rbuf = BytesMut::new();
    mechanisms(&mut s, &mut rbuf).await.unwrap();
}

#[test]
fn unusable_tls_options_are_refused_naming_the_problem() {
    let pki = pki();
    let err = |options: TlsOptions| tls::server_config(&options).unwrap_err();
    let missing = Path::new("/nonexistent/cert.pem").to_owned();
    assert!(err(TlsOptions {
        cert_file: missing.clone(),
        ..pki.options(false, false)
    })
    .contains("/nonexistent/cert.pem"));
    assert!(err(TlsOptions {
        key_file: pki.path("ca.pem"),
        ..pki.options(false, false)
    })
    .contains("no usable private key"));
    assert!(err(TlsOptions {
        ca_file: None,
        ..pki.options(true, false)
    })
    .contains("needs a CA file"));
    assert!(err(pki.options(false, true)).contains("needs verify_peer"));
    // A key that is not the certificate's.
    std::fs::write(
        pki.path("other.key"),
        KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    assert!(err(TlsOptions {
        key_file: pki.path("other.key"),
        ..pki.options(false, false)
    })
    .contains("server.pem"));
}
