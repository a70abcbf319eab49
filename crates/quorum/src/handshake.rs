//! The handshake that opens every peer connection: each side proves it knows the cluster secret
//! (RabbitMQ's Erlang cookie plays this role) without sending it, and names its node id.
//!
//! Fixed-size messages, in this order (integers big-endian, nonces fresh from the OS RNG):
//!
//! 1. dialer → acceptor: `"WRNC"`, version 2, dialer node id (u64), dialer nonce (32 bytes).
//! 2. acceptor → dialer: `"WRNC"`, version 2, acceptor node id, acceptor nonce, and
//!    `HMAC-SHA256(secret, "warren-cluster-v1" | 'A' | dialer id | acceptor id | dialer nonce |
//!    acceptor nonce)`.
//! 3. dialer → acceptor: the same MAC with role byte `'D'`, sent only once the acceptor's MAC
//!    checked out (a dialer does not prove itself to a node that cannot prove itself).
//! 4. acceptor → dialer: one byte, 1 = accepted, 0 = refused.
//!
//! (Version 2 added what follows an accepted handshake: the dialer's one byte naming the
//! connection's kind, Raft RPCs or a forwarding link — see `tcp.rs`. A version 1 node would
//! read that byte as a frame, so the versions refuse each other.)
//!
//! Both nonces go into both MACs, so neither side can replay an old exchange, and the role byte
//! keeps one side's MAC from being reflected as the other's. Nothing but these messages is read
//! before the verdict, so a peer without the secret never gets a Raft frame parsed.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::types::NodeId;

const MAGIC: [u8; 4] = *b"WRNC";
const VERSION: u8 = 2;
const NONCE_BYTES: usize = 32;
const MAC_BYTES: usize = 32;
const CONTEXT: &[u8] = b"warren-cluster-v1";
const HELLO_BYTES: usize = 4 + 1 + 8 + NONCE_BYTES;
const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("I/O during the handshake: {0}")]
    Io(#[from] std::io::Error),
    #[error("the peer is not a Warren cluster node (bad magic bytes)")]
    NotAPeer,
    #[error("the peer speaks cluster protocol version {0}, this node speaks {VERSION}")]
    Version(u8),
    #[error("node {0} failed authentication: it does not know the cluster secret")]
    BadSecret(NodeId),
    #[error("node {0} refused this node: the cluster secrets differ")]
    Refused(NodeId),
    #[error("expected node {expected} at this address, found node {found}")]
    UnexpectedNode { expected: NodeId, found: NodeId },
    #[error("the peer claims this node's own id {0}")]
    SameNode(NodeId),
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    nonce
}

fn mac(
    secret: &[u8],
    role: u8,
    dialer: NodeId,
    acceptor: NodeId,
    dialer_nonce: &[u8],
    acceptor_nonce: &[u8],
) -> Hmac<Sha256> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(CONTEXT);
    mac.update(&[role]);
    mac.update(&dialer.to_be_bytes());
    mac.update(&acceptor.to_be_bytes());
    mac.update(dialer_nonce);
    mac.update(acceptor_nonce);
    mac
}

fn hello(node: NodeId, nonce: &[u8; NONCE_BYTES]) -> [u8; HELLO_BYTES] {
    let mut hello = [0u8; HELLO_BYTES];
    hello[..4].copy_from_slice(&MAGIC);
    hello[4] = VERSION;
    hello[5..13].copy_from_slice(&node.to_be_bytes());
    hello[13..].copy_from_slice(nonce);
    hello
}

/// Parses a peer's hello: its node id and nonce.
fn parse_hello(hello: &[u8; HELLO_BYTES]) -> Result<(NodeId, [u8; NONCE_BYTES]), HandshakeError> {
    if hello[..4] != MAGIC {
        return Err(HandshakeError::NotAPeer);
    }
    if hello[4] != VERSION {
        return Err(HandshakeError::Version(hello[4]));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&hello[5..13]);
    let mut nonce = [0u8; NONCE_BYTES];
    nonce.copy_from_slice(&hello[13..]);
    Ok((NodeId::from_be_bytes(id), nonce))
}

/// The dialing side: authenticates the node at the other end, expected to be `expected`.
pub async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    expected: NodeId,
    secret: &[u8],
) -> Result<(), HandshakeError> {
    dial_node(stream, me, Some(expected), secret)
        .await
        .map(|_| ())
}

/// The dialing side towards an address whose node is not known yet (a seed given as
/// `HOST:PORT`): authenticates whichever node answers and returns its id.
pub async fn dial_any<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    secret: &[u8],
) -> Result<NodeId, HandshakeError> {
    dial_node(stream, me, None, secret).await
}

async fn dial_node<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    expected: Option<NodeId>,
    secret: &[u8],
) -> Result<NodeId, HandshakeError> {
    let my_nonce = nonce();
    stream.write_all(&hello(me, &my_nonce)).await?;
    stream.flush().await?;

    let mut reply = [0u8; HELLO_BYTES];
    stream.read_exact(&mut reply).await?;
    let (peer, peer_nonce) = parse_hello(&reply)?;
    match expected {
        Some(expected) if peer != expected => {
            return Err(HandshakeError::UnexpectedNode {
                expected,
                found: peer,
            });
        }
        None if peer == me => return Err(HandshakeError::SameNode(me)),
        _ => {}
    }
    let mut peer_mac = [0u8; MAC_BYTES];
    stream.read_exact(&mut peer_mac).await?;
    mac(secret, b'A', me, peer, &my_nonce, &peer_nonce)
        .verify_slice(&peer_mac)
        .map_err(|_| HandshakeError::BadSecret(peer))?;

    let proof = mac(secret, b'D', me, peer, &my_nonce, &peer_nonce).finalize();
    stream.write_all(&proof.into_bytes()).await?;
    stream.flush().await?;
    let mut verdict = [0u8; 1];
    stream.read_exact(&mut verdict).await?;
    if verdict[0] != ACCEPTED {
        return Err(HandshakeError::Refused(peer));
    }
    Ok(peer)
}

/// The accepting side: authenticates the dialer and returns its node id.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    secret: &[u8],
) -> Result<NodeId, HandshakeError> {
    let mut hello_bytes = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello_bytes).await?;
    let (peer, peer_nonce) = parse_hello(&hello_bytes)?;
    if peer == me {
        return Err(HandshakeError::SameNode(me));
    }
    let my_nonce = nonce();
    let proof = mac(secret, b'A', peer, me, &peer_nonce, &my_nonce).finalize();
    let mut reply = Vec::with_capacity(HELLO_BYTES + MAC_BYTES);
    reply.extend_from_slice(&hello(me, &my_nonce));
    reply.extend_from_slice(&proof.into_bytes());
    stream.write_all(&reply).await?;
    stream.flush().await?;

    let mut peer_mac = [0u8; MAC_BYTES];
    stream.read_exact(&mut peer_mac).await?;
    let verified = mac(secret, b'D', peer, me, &peer_nonce, &my_nonce)
        .verify_slice(&peer_mac)
        .is_ok();
    let verdict = if verified { ACCEPTED } else { REFUSED };
    stream.write_all(&[verdict]).await?;
    stream.flush().await?;
    if verified {
        Ok(peer)
    } else {
        Err(HandshakeError::BadSecret(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(
        dialer_secret: &'static [u8],
        acceptor_secret: &'static [u8],
    ) -> (Result<(), HandshakeError>, Result<NodeId, HandshakeError>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move { accept(&mut b, 2, acceptor_secret).await });
        let dialed = dial(&mut a, 1, 2, dialer_secret).await;
        drop(a);
        (dialed, acceptor.await.expect("acceptor task"))
    }

    #[tokio::test]
    async fn same_secret_authenticates_both_ways() {
        let (dialed, accepted) = run(b"cookie", b"cookie").await;
        assert!(dialed.is_ok(), "{dialed:?}");
        assert_eq!(accepted.expect("accepted"), 1);
    }

    #[tokio::test]
    async fn a_different_secret_is_refused_by_both_sides() {
        let (dialed, accepted) = run(b"cookie", b"other").await;
        // The dialer catches the acceptor's bad proof first and never sends its own.
        assert!(
            matches!(dialed, Err(HandshakeError::BadSecret(2))),
            "{dialed:?}"
        );
        assert!(accepted.is_err(), "{accepted:?}");
    }

    #[tokio::test]
    async fn a_stranger_is_not_a_peer() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move { accept(&mut b, 2, b"cookie").await });
        a.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789abcdef0123")
            .await
            .expect("write");
        let accepted = acceptor.await.expect("acceptor task");
        assert!(
            matches!(accepted, Err(HandshakeError::NotAPeer)),
            "{accepted:?}"
        );
    }
}
