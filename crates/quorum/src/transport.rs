//! The transport a node's groups use, chosen at start-up: in-process for a single node, TCP
//! in a cluster.

use crate::network::{InProcessNetwork, RaftRequest, RaftResponse, Transport, TransportError};
use crate::types::{GroupId, NodeId};
use std::sync::Arc;

/// A node's transport chosen at start-up: in-process for a single node (its groups' only
/// member is itself), TCP in a cluster. One concrete type keeps the node and its groups
/// non-generic for the application.
#[derive(Clone)]
pub enum NodeTransport {
    Local(Arc<InProcessNetwork>),
    Tcp(Arc<crate::tcp::TcpTransport>),
}

impl Transport for NodeTransport {
    async fn send(
        &self,
        from: NodeId,
        to: NodeId,
        group: GroupId,
        request: RaftRequest,
    ) -> Result<RaftResponse, TransportError> {
        match self {
            NodeTransport::Local(network) => network.send(from, to, group, request).await,
            NodeTransport::Tcp(tcp) => tcp.send(from, to, group, request).await,
        }
    }
}
