//! TLS for AMQPS (and, through `server_config`, for the HTTP listeners): building a rustls
//! server configuration from RabbitMQ's `ssl_options` (certfile, keyfile, cacertfile,
//! verify, fail_if_no_peer_cert), and the TLS handshake of an accepted connection.
//!
//! rustls runs on the `ring` provider, chosen explicitly rather than through the process
//! default so that another crate enabling a second provider cannot make the choice ambiguous.

use crate::cert_name::{self, CertLoginFrom};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Time a client has to complete the TLS handshake (RabbitMQ's ssl_handshake_timeout);
/// the AMQP handshake's own timeout starts after it.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// RabbitMQ's `ssl_options`, under Warren's names.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM certificate chain, the server's own certificate first (certfile).
    pub cert_file: PathBuf,
    /// PEM private key: PKCS#8, PKCS#1 or SEC1 (keyfile).
    pub key_file: PathBuf,
    /// PEM CA certificates that client certificates must chain to (cacertfile).
    pub ca_file: Option<PathBuf>,
    /// Ask clients for a certificate and verify it (verify = verify_peer).
    pub verify_peer: bool,
    /// With `verify_peer`: refuse clients that present no certificate.
    pub fail_if_no_peer_cert: bool,
}

/// A rustls server configuration for `options`, or a message naming the file or option at
/// fault. The HTTP listeners use it too (wrap it in their own acceptor).
pub fn server_config(options: &TlsOptions) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&options.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&options.key_file).map_err(|e| {
        format!(
            "TLS key file {}: no usable private key ({e})",
            options.key_file.display()
        )
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?;
    let builder = if options.verify_peer {
        let ca_file = options.ca_file.as_deref().ok_or(
            "TLS peer verification (verify_peer) needs a CA file (tls-ca-file) to verify against",
        )?;
        let mut roots = RootCertStore::empty();
        for ca in certificates(ca_file)? {
            roots
                .add(ca)
                .map_err(|e| format!("TLS CA file {}: {e}", ca_file.display()))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if options.fail_if_no_peer_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let verifier = verifier
            .build()
            .map_err(|e| format!("TLS client verification: {e}"))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        if options.fail_if_no_peer_cert {
            return Err("fail_if_no_peer_cert (tls-fail-if-no-peer-cert) needs verify_peer (tls-verify-peer)".into());
        }
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "TLS certificate {} with key {}: {e}",
            options.cert_file.display(),
            options.key_file.display()
        )
    })?;
    Ok(Arc::new(config))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("TLS certificate file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate file {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// What a TLS connection knows about its client once the handshake is done.
#[derive(Debug, Clone, Default)]
pub struct TlsPeer {
    /// The user name from the verified client certificate (RabbitMQ's
    /// ssl_cert_login_from); None without a certificate or without such a name.
    pub cert_user: Option<String>,
    /// The client presented a certificate that the verifier accepted.
    pub has_verified_cert: bool,
}

/// The TLS handshake on an accepted connection, bounded by `TLS_HANDSHAKE_TIMEOUT`; None (the
/// socket dropped) when it fails or stalls, so a peer that never finishes holds nothing.
/// The HTTP listeners use it too.
pub async fn handshake(acceptor: &TlsAcceptor, stream: TcpStream) -> Option<TlsStream<TcpStream>> {
    let peer_addr = stream.peer_addr().ok();
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::info!(peer = ?peer_addr, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::info!(peer = ?peer_addr, "TLS handshake timed out");
            None
        }
    }
}

/// `handshake`, then what the client's certificate says about it (AMQPS).
pub async fn accept(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    login_from: CertLoginFrom,
) -> Option<(TlsStream<TcpStream>, TlsPeer)> {
    let tls = handshake(acceptor, stream).await?;
    // rustls asks for (and so returns) a certificate only when verification is on, and
    // returns it only once it has been verified.
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    let peer = TlsPeer {
        has_verified_cert: leaf.is_some(),
        cert_user: leaf.and_then(|cert| cert_name::login_name(cert, login_from)),
    };
    Some((tls, peer))
}
