//! A broker becoming a cluster member, once its cluster transport is bound and its quorum
//! host opened over it (the binary does both from its flags; the cluster simulation over a
//! simulated network): the failure detector's failover loop, the node's member of the metadata
//! group (whose machine is the broker's definitions, so that every definitions change goes
//! through it from then on), replication of durable changes, continuous membership
//! reconciliation, and the forwarding links to the other members (accepted, dialled, closed
//! when the failure detector holds a peer down).

use std::sync::Arc;

use warren_quorum::failover::{FailoverDriver, FailoverOptions};
use warren_quorum::tcp::TcpTransport;

use super::cluster::{node_id, ClusterNode};
use super::QuorumHost;
use crate::replication::metadata_group::{BrokerMetadata, ClusterReplicator};
use crate::Broker;

/// Starts the failure detector's failover loop for `quorum`'s queue groups: elections when a
/// group's leader is held down (queue groups run without openraft's own timers).
pub fn spawn_failover(quorum: &QuorumHost, transport: &TcpTransport) {
    tokio::spawn(
        FailoverDriver::new(
            quorum.node_id(),
            quorum.node().registry(),
            transport.liveness().clone(),
            FailoverOptions::default(),
        )
        .run(),
    );
}

/// Starts the node's member of the metadata group and makes `broker` a member of the cluster
/// (see the module's notes); the node forms or joins the cluster through `seeds` in the
/// background.
pub async fn join(
    broker: &Arc<Broker>,
    quorum: &QuorumHost,
    transport: Arc<TcpTransport>,
    name: &str,
    advertised: &str,
    seeds: Vec<String>,
) -> Result<Arc<ClusterNode>, String> {
    accept_forwarding(broker, &transport);
    // The metadata log is this node's record of its definitions from here on, the changes
    // its member re-applies as it starts included: the blob is written behind them.
    broker.write_definitions_in_background();
    let cluster = ClusterNode::start(
        quorum,
        name,
        advertised,
        transport,
        BrokerMetadata::new(broker),
        seeds.clone(),
    )
    .await?;
    broker.enable_cluster(cluster.clone());
    broker.set_replicator(ClusterReplicator::new(cluster.clone()));
    tokio::spawn(dial_forwarding(Arc::downgrade(broker), cluster.clone()));
    super::reconcile::spawn(broker, cluster.clone());
    tokio::spawn(close_links_to_down_peers(
        Arc::downgrade(broker),
        cluster.clone(),
    ));
    tracing::info!(
        node = %name,
        node_id = node_id(name),
        incarnation = cluster.incarnation(),
        %advertised,
        peers = ?seeds,
        "cluster port open; forming or joining the cluster"
    );
    Ok(cluster)
}

/// How often the forwarding dialer looks for peers without a link.
const FORWARD_DIAL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Hands every forwarding connection a peer dials to this node to the broker: a link whose
/// other end is that peer's remote queues, and this node's link to that peer.
fn accept_forwarding(broker: &Arc<Broker>, transport: &Arc<TcpTransport>) {
    let weak = Arc::downgrade(broker);
    transport.on_forward(Arc::new(move |peer_id, stream| {
        let Some(broker) = weak.upgrade() else {
            return;
        };
        let name = broker.cluster().and_then(|cluster| {
            cluster
                .metadata()
                .members()
                .into_iter()
                .find(|(id, _)| *id == peer_id)
                .map(|(_, info)| info.name)
        });
        let Some(name) = name else {
            // Not a member (yet) as this node sees it: the peer dials again.
            tracing::debug!(
                peer = peer_id,
                "forwarding connection from a non-member; closed"
            );
            return;
        };
        let link = crate::remote::open(stream, broker.clone());
        broker.forward_peers().peer(&name).set(link);
    }));
}

/// Closes the forwarding link to every member the cluster transport's failure detector holds
/// down (its node-level heartbeats stopped: a SIGSTOPped, hung or partitioned node, whose TCP
/// connections stay open and silent), so this node's consumers of the queues it serves get
/// basic.cancel, unconfirmed publishes are nacked and declare/consume/get answer 404 within
/// the detector's `peer_down_after` rather than when TCP gives up. The dialer links again
/// once the peer is heard from (it dials only peers the detector holds up). It also tells
/// each peer's record what the detector says (`PeerLink::set_node_down`): routing leaves out
/// the classic queues of a node that is down.
async fn close_links_to_down_peers(broker: std::sync::Weak<Broker>, cluster: Arc<ClusterNode>) {
    let liveness = cluster.transport().liveness().clone();
    let mut changes = liveness.subscribe();
    loop {
        let Some(live) = broker.upgrade() else {
            return;
        };
        for (id, info) in cluster.metadata().members() {
            if id == cluster.id() {
                continue;
            }
            let up = liveness.is_up(id);
            live.forward_peers().peer(&info.name).set_node_down(!up);
            if up {
                continue;
            }
            let link = live
                .forward_peers()
                .get(&info.name)
                .and_then(|peer| peer.current());
            if let Some(link) = link {
                tracing::warn!(
                    peer = %info.name,
                    "the cluster's failure detector holds this peer down: closing its forwarding link"
                );
                link.close();
            }
        }
        drop(live);
        // On every up/down change, and now and then for links made since.
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(FORWARD_DIAL_INTERVAL) => {}
        }
    }
}

/// Keeps a forwarding link to every member whose id is above this node's (the lower id of
/// a pair dials, as for the Raft link), dialling again with backoff while one is away. It
/// dials as soon as the failure detector hears a peer or the peer becomes a member (not only
/// on its 1 s round): a cluster that just formed has its links before its first clients use
/// a queue on another node, which would find it unreachable until then.
async fn dial_forwarding(broker: std::sync::Weak<Broker>, cluster: Arc<ClusterNode>) {
    let mut changes = cluster.transport().liveness().subscribe();
    let mut membership = None;
    loop {
        let Some(live) = broker.upgrade() else {
            return;
        };
        for (id, info) in cluster.metadata().members() {
            // A peer the failure detector holds down would only be closed again.
            if id <= cluster.id() || !cluster.transport().liveness().is_up(id) {
                continue;
            }
            let peer = live.forward_peers().peer(&info.name);
            if !peer.may_dial() {
                continue;
            }
            let transport = cluster.transport().clone();
            let broker = live.clone();
            tokio::spawn(async move {
                let dialed = match transport.resolve(&info.addr).await {
                    Ok(addr) => transport.dial_forward(id, addr).await,
                    Err(e) => Err(e),
                };
                match dialed {
                    Ok(stream) => {
                        peer.set(crate::remote::open(stream, broker));
                        peer.dialed(true);
                    }
                    Err(e) => {
                        tracing::debug!(peer = %info.name, error = %e, "forwarding link not up");
                        peer.dialed(false);
                    }
                }
            });
        }
        drop(live);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            changed = cluster.metadata().membership_changed(membership) => {
                membership = changed;
            }
            _ = tokio::time::sleep(FORWARD_DIAL_INTERVAL) => {}
        }
    }
}
