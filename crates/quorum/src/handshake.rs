//! The handshake that opens every peer connection: each side proves it knows the cluster secret
//! (RabbitMQ's Erlang cookie plays this role) without sending it, names its node id and its
//! incarnation, and may refuse a peer that was reset.
//!
//! Fixed-size messages, in this order (integers big-endian, nonces fresh from the OS RNG):
//!
//! 1. dialer → acceptor: `"WRNC"`, version 5, dialer node id (u64), dialer incarnation (u64),
//!    dialer nonce (32 bytes).
//! 2. acceptor → dialer: `"WRNC"`, version 5, acceptor node id, acceptor incarnation, acceptor
//!    nonce, and `HMAC-SHA256(secret, "warren-cluster-v1" | 'A' | dialer id | acceptor id |
//!    dialer incarnation | acceptor incarnation | dialer nonce | acceptor nonce)`.
//! 3. dialer → acceptor: one status byte and 32 bytes: status 1 and the same MAC with role byte
//!    `'D'`, sent only once the acceptor's MAC checked out (a dialer does not prove itself to a
//!    node that cannot prove itself); or status 2 and zeros: the acceptor is a reset node the
//!    dialer's cluster still counts as a member under an older incarnation.
//! 4. acceptor → dialer: one byte, 1 = accepted, 0 = refused (bad secret), 2 = refused: the
//!    dialer is a reset node.
//!
//! The incarnation is a random number a node draws when its data directory is new and keeps
//! with its data: a node whose data was wiped comes back under its old name and id but a new
//! incarnation. A cluster records each member's incarnation; a peer that differs from the
//! record is refused here ([`Admit`]), before any Raft message — its empty log would otherwise
//! meet the leaders' memory of what it had ("follower log reversion"), which stops their Raft
//! cores. Incarnation 0 means "unknown" (a member recorded before incarnations existed): it is
//! never refused for a difference.
//!
//! (Version 2 added what follows an accepted handshake: the dialer's one byte naming the
//! connection's kind, Raft RPCs or a forwarding link — see `tcp.rs`. Version 3 added the
//! incarnations and the reset refusals. Version 4 added the Pre-Vote request to the frames that
//! follow. A node of an older version gets "the peer speaks
//! cluster protocol version N" from both sides and no link: the versions refuse each other,
//! so a cluster is upgraded by stopping every node, not one node at a time.)
//!
//! Both nonces go into both MACs, so neither side can replay an old exchange, and the role byte
//! keeps one side's MAC from being reflected as the other's. Nothing but these messages is read
//! before the verdict, so a peer without the secret never gets a Raft frame parsed.

use hmac::{Hmac, Mac};
use rand::TryRng;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::types::NodeId;

const MAGIC: [u8; 4] = *b"WRNC";
/// The cluster protocol: the Raft wire (`wire.rs`) and the forwarding link's frames. 6: the
/// forwarding link carries each node's resource alarms (cluster-wide alarms). 7: a join request
/// reaching a node in no cluster is answered so (`WireResponse::NotInitialized`).
const VERSION: u8 = 7;
const NONCE_BYTES: usize = 32;
const MAC_BYTES: usize = 32;
const CONTEXT: &[u8] = b"warren-cluster-v1";
const HELLO_BYTES: usize = 4 + 1 + 8 + 8 + NONCE_BYTES;
const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;
/// The verdict (and the dialer's status) refusing a reset peer.
const RESET: u8 = 2;

/// This node as the handshake presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub node: NodeId,
    /// Drawn when the node's data directory was new; 0 = unknown.
    pub incarnation: u64,
    /// The node name, for the operator's instructions when this node is refused as reset.
    pub name: String,
}

impl Identity {
    /// A node without a recorded incarnation (tools and tests).
    pub fn anonymous(node: NodeId) -> Self {
        Self {
            node,
            incarnation: 0,
            name: node.to_string(),
        }
    }
}

/// A peer as the handshake authenticated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    pub node: NodeId,
    pub incarnation: u64,
}

/// Decides whether an authenticated peer (node id, incarnation) may connect: `Err` carries the
/// reason, logged on this side and named to the peer as a reset refusal.
pub type Admit<'a> = &'a (dyn Fn(NodeId, u64) -> Result<(), String> + Send + Sync);

/// Admits every authenticated peer.
pub fn admit_all(_: NodeId, _: u64) -> Result<(), String> {
    Ok(())
}

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
    #[error("the peer claims this node's own id {0} (two nodes with one node name?)")]
    SameNode(NodeId),
    /// The address dialed is this node's own (a seed list that names the node itself, as one
    /// configuration file shared by every node does): the acceptor proved the secret and
    /// presented this node's id and incarnation.
    #[error("the address is this node's own")]
    Itself,
    /// This side refused the peer ([`Admit`] said why).
    #[error("refused node {peer}: {reason}")]
    PeerReset { peer: NodeId, reason: String },
    /// The peer refused this node: its cluster knows this node under another incarnation.
    #[error(
        "node {peer} refused this node: node {name} was reset (its data is new): run `warren ctl \
         forget_cluster_node {name}` on a running node, then restart it"
    )]
    ThisNodeReset { peer: NodeId, name: String },
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0u8; NONCE_BYTES];
    // Straight from the operating system, as rand 0.8's `OsRng` did (and panicking like it
    // when the system has no randomness to give).
    rand::rngs::SysRng
        .try_fill_bytes(&mut nonce)
        .expect("the operating system's random source failed");
    nonce
}

fn mac(
    secret: &[u8],
    role: u8,
    dialer: PeerIdentity,
    acceptor: PeerIdentity,
    dialer_nonce: &[u8],
    acceptor_nonce: &[u8],
) -> Hmac<Sha256> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(CONTEXT);
    mac.update(&[role]);
    mac.update(&dialer.node.to_be_bytes());
    mac.update(&acceptor.node.to_be_bytes());
    mac.update(&dialer.incarnation.to_be_bytes());
    mac.update(&acceptor.incarnation.to_be_bytes());
    mac.update(dialer_nonce);
    mac.update(acceptor_nonce);
    mac
}

fn hello(me: PeerIdentity, nonce: &[u8; NONCE_BYTES]) -> [u8; HELLO_BYTES] {
    let mut hello = [0u8; HELLO_BYTES];
    hello[..4].copy_from_slice(&MAGIC);
    hello[4] = VERSION;
    hello[5..13].copy_from_slice(&me.node.to_be_bytes());
    hello[13..21].copy_from_slice(&me.incarnation.to_be_bytes());
    hello[21..].copy_from_slice(nonce);
    hello
}

/// Parses a peer's hello: its identity and nonce.
fn parse_hello(
    hello: &[u8; HELLO_BYTES],
) -> Result<(PeerIdentity, [u8; NONCE_BYTES]), HandshakeError> {
    if hello[..4] != MAGIC {
        return Err(HandshakeError::NotAPeer);
    }
    if hello[4] != VERSION {
        return Err(HandshakeError::Version(hello[4]));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&hello[5..13]);
    let mut incarnation = [0u8; 8];
    incarnation.copy_from_slice(&hello[13..21]);
    let mut nonce = [0u8; NONCE_BYTES];
    nonce.copy_from_slice(&hello[21..]);
    let peer = PeerIdentity {
        node: NodeId::from_be_bytes(id),
        incarnation: u64::from_be_bytes(incarnation),
    };
    Ok((peer, nonce))
}

/// The dialing side: authenticates the node at the other end, expected to be `expected`
/// (no incarnation, every peer admitted: tools and tests).
pub async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    expected: NodeId,
    secret: &[u8],
) -> Result<(), HandshakeError> {
    dial_as(
        stream,
        &Identity::anonymous(me),
        Some(expected),
        secret,
        &admit_all,
    )
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
    dial_as(stream, &Identity::anonymous(me), None, secret, &admit_all)
        .await
        .map(|peer| peer.node)
}

/// The dialing side as `me`: authenticates the node at the other end (`expected`, or whichever
/// answers), refuses it when `admit` does, and returns who it is.
pub async fn dial_as<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: &Identity,
    expected: Option<NodeId>,
    secret: &[u8],
    admit: Admit<'_>,
) -> Result<PeerIdentity, HandshakeError> {
    let mine = PeerIdentity {
        node: me.node,
        incarnation: me.incarnation,
    };
    let my_nonce = nonce();
    stream.write_all(&hello(mine, &my_nonce)).await?;
    stream.flush().await?;

    let mut reply = [0u8; HELLO_BYTES];
    stream.read_exact(&mut reply).await?;
    let (peer, peer_nonce) = parse_hello(&reply)?;
    match expected {
        Some(expected) if peer.node != expected => {
            return Err(HandshakeError::UnexpectedNode {
                expected,
                found: peer.node,
            });
        }
        _ => {}
    }
    let mut peer_mac = [0u8; MAC_BYTES];
    stream.read_exact(&mut peer_mac).await?;
    mac(secret, b'A', mine, peer, &my_nonce, &peer_nonce)
        .verify_slice(&peer_mac)
        .map_err(|_| HandshakeError::BadSecret(peer.node))?;
    // Judged after the MAC, so only a node that knows the secret can claim to be this one.
    if peer.node == me.node {
        return Err(match peer.incarnation == me.incarnation {
            true => HandshakeError::Itself,
            false => HandshakeError::SameNode(me.node),
        });
    }

    if let Err(reason) = admit(peer.node, peer.incarnation) {
        let mut refusal = [0u8; 1 + MAC_BYTES];
        refusal[0] = RESET;
        stream.write_all(&refusal).await?;
        stream.flush().await?;
        return Err(HandshakeError::PeerReset {
            peer: peer.node,
            reason,
        });
    }
    let proof = mac(secret, b'D', mine, peer, &my_nonce, &peer_nonce).finalize();
    let mut message = Vec::with_capacity(1 + MAC_BYTES);
    message.push(ACCEPTED);
    message.extend_from_slice(&proof.into_bytes());
    stream.write_all(&message).await?;
    stream.flush().await?;
    let mut verdict = [0u8; 1];
    stream.read_exact(&mut verdict).await?;
    match verdict[0] {
        ACCEPTED => Ok(peer),
        RESET => Err(HandshakeError::ThisNodeReset {
            peer: peer.node,
            name: me.name.clone(),
        }),
        _ => Err(HandshakeError::Refused(peer.node)),
    }
}

/// The accepting side: authenticates the dialer and returns its node id (no incarnation,
/// every peer admitted: tools and tests).
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: NodeId,
    secret: &[u8],
) -> Result<NodeId, HandshakeError> {
    accept_as(stream, &Identity::anonymous(me), secret, &admit_all)
        .await
        .map(|peer| peer.node)
}

/// The accepting side as `me`: authenticates the dialer, refuses it when `admit` does, and
/// returns who it is.
pub async fn accept_as<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    me: &Identity,
    secret: &[u8],
    admit: Admit<'_>,
) -> Result<PeerIdentity, HandshakeError> {
    let mine = PeerIdentity {
        node: me.node,
        incarnation: me.incarnation,
    };
    let mut hello_bytes = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello_bytes).await?;
    let (peer, peer_nonce) = parse_hello(&hello_bytes)?;
    let my_nonce = nonce();
    let proof = mac(secret, b'A', peer, mine, &peer_nonce, &my_nonce).finalize();
    let mut reply = Vec::with_capacity(HELLO_BYTES + MAC_BYTES);
    reply.extend_from_slice(&hello(mine, &my_nonce));
    reply.extend_from_slice(&proof.into_bytes());
    stream.write_all(&reply).await?;
    stream.flush().await?;
    // A dialer with this node's id: this node itself (a seed naming it), or another node
    // given the same name. The reply above lets the dialer tell which; no link either way.
    if peer.node == me.node {
        return Err(match peer.incarnation == me.incarnation {
            true => HandshakeError::Itself,
            false => HandshakeError::SameNode(me.node),
        });
    }

    let mut status = [0u8; 1];
    stream.read_exact(&mut status).await?;
    let mut peer_mac = [0u8; MAC_BYTES];
    stream.read_exact(&mut peer_mac).await?;
    if status[0] == RESET {
        return Err(HandshakeError::ThisNodeReset {
            peer: peer.node,
            name: me.name.clone(),
        });
    }
    let verified = status[0] == ACCEPTED
        && mac(secret, b'D', peer, mine, &peer_nonce, &my_nonce)
            .verify_slice(&peer_mac)
            .is_ok();
    if !verified {
        stream.write_all(&[REFUSED]).await?;
        stream.flush().await?;
        return Err(HandshakeError::BadSecret(peer.node));
    }
    if let Err(reason) = admit(peer.node, peer.incarnation) {
        stream.write_all(&[RESET]).await?;
        stream.flush().await?;
        return Err(HandshakeError::PeerReset {
            peer: peer.node,
            reason,
        });
    }
    stream.write_all(&[ACCEPTED]).await?;
    stream.flush().await?;
    Ok(peer)
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
        a.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789abcdef0123456789abcdef")
            .await
            .expect("write");
        let accepted = acceptor.await.expect("acceptor task");
        assert!(
            matches!(accepted, Err(HandshakeError::NotAPeer)),
            "{accepted:?}"
        );
    }

    fn identity(node: NodeId, incarnation: u64, name: &str) -> Identity {
        Identity {
            node,
            incarnation,
            name: name.into(),
        }
    }

    /// Dialing `acceptor` as `dialer` (one secret): both sides' results.
    async fn between(
        dialer: Identity,
        acceptor: Identity,
    ) -> (
        Result<PeerIdentity, HandshakeError>,
        Result<PeerIdentity, HandshakeError>,
    ) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let accepting =
            tokio::spawn(async move { accept_as(&mut b, &acceptor, b"cookie", &admit_all).await });
        let dialed = dial_as(&mut a, &dialer, None, b"cookie", &admit_all).await;
        drop(a);
        (dialed, accepting.await.expect("acceptor task"))
    }

    #[tokio::test]
    async fn a_node_dialing_its_own_address_knows_itself() {
        let me = identity(7, 77, "warren@here");
        let (dialed, accepted) = between(me.clone(), me).await;
        assert!(matches!(dialed, Err(HandshakeError::Itself)), "{dialed:?}");
        assert!(
            matches!(accepted, Err(HandshakeError::Itself)),
            "{accepted:?}"
        );
    }

    #[tokio::test]
    async fn two_nodes_with_one_name_are_told_apart_from_a_node_and_itself() {
        let (dialed, accepted) = between(
            identity(7, 77, "warren@here"),
            identity(7, 78, "warren@here"),
        )
        .await;
        assert!(
            matches!(dialed, Err(HandshakeError::SameNode(7))),
            "{dialed:?}"
        );
        assert!(
            matches!(accepted, Err(HandshakeError::SameNode(7))),
            "{accepted:?}"
        );
    }

    /// What node 1's cluster recorded: node 2 under incarnation 22 (and node 1 as 11).
    fn recorded(node: NodeId, incarnation: u64) -> Result<(), String> {
        let known = match node {
            1 => 11,
            2 => 22,
            _ => return Ok(()),
        };
        if incarnation == known {
            Ok(())
        } else {
            Err(format!("node n{node} was reset"))
        }
    }

    #[tokio::test]
    async fn the_recorded_incarnation_is_admitted() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move {
            accept_as(&mut b, &identity(2, 22, "n2"), b"cookie", &recorded).await
        });
        let dialed = dial_as(
            &mut a,
            &identity(1, 11, "n1"),
            Some(2),
            b"cookie",
            &recorded,
        )
        .await;
        assert_eq!(
            dialed.expect("dialed"),
            PeerIdentity {
                node: 2,
                incarnation: 22
            }
        );
        let accepted = acceptor.await.expect("acceptor task").expect("accepted");
        assert_eq!(accepted.incarnation, 11);
    }

    #[tokio::test]
    async fn a_reset_acceptor_is_refused_by_the_dialer_and_told_so() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move {
            // The reset node itself records nothing: it would admit anyone.
            accept_as(&mut b, &identity(2, 99, "n2"), b"cookie", &admit_all).await
        });
        let dialed = dial_as(
            &mut a,
            &identity(1, 11, "n1"),
            Some(2),
            b"cookie",
            &recorded,
        )
        .await;
        assert!(
            matches!(&dialed, Err(HandshakeError::PeerReset { peer: 2, reason }) if reason.contains("n2 was reset")),
            "{dialed:?}"
        );
        let accepted = acceptor.await.expect("acceptor task");
        let text = accepted.expect_err("refused").to_string();
        assert!(
            text.contains(
                "node n2 was reset (its data is new): run `warren ctl forget_cluster_node n2`"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_reset_dialer_is_refused_by_the_acceptor_and_told_so() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move {
            accept_as(&mut b, &identity(1, 11, "n1"), b"cookie", &recorded).await
        });
        let dialed = dial_as(
            &mut a,
            &identity(2, 99, "n2"),
            Some(1),
            b"cookie",
            &admit_all,
        )
        .await;
        let text = dialed.expect_err("refused").to_string();
        assert!(
            text.contains("node 1 refused this node: node n2 was reset (its data is new)"),
            "{text}"
        );
        let accepted = acceptor.await.expect("acceptor task");
        assert!(
            matches!(&accepted, Err(HandshakeError::PeerReset { peer: 2, .. })),
            "{accepted:?}"
        );
    }

    #[tokio::test]
    async fn an_older_version_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let acceptor = tokio::spawn(async move { accept(&mut b, 2, b"cookie").await });
        let mut old = [0u8; HELLO_BYTES];
        old[..4].copy_from_slice(&MAGIC);
        old[4] = 2;
        a.write_all(&old).await.expect("write");
        let accepted = acceptor.await.expect("acceptor task");
        assert!(
            matches!(accepted, Err(HandshakeError::Version(2))),
            "{accepted:?}"
        );
    }
}
