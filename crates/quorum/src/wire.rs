//! The frames nodes exchange over an authenticated peer connection (see [`crate::tcp`]): every
//! group's Raft RPCs and their answers, tagged with a request id so many can be in flight on one
//! connection, and the node-level heartbeat.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of a bincode-encoded
//! [`Frame`] (varint integers). The length is checked against the connection's maximum before
//! anything is allocated, and decoding is bounded by the same limit, so a corrupt or hostile
//! length can neither exhaust memory nor panic: it is an error that closes the connection.

use bincode::Options;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use crate::machine::Reply;
use crate::member::MemberChange;
use crate::network::{RaftRequest, RaftResponse, TransportError};
use crate::types::{GroupId, LogId, NodeId, Proposal, QueueRaft, Snapshot, SnapshotMeta, Vote};

/// Bytes of the length prefix in front of every frame.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Default bound on one frame. A snapshot travels whole in one frame, so this also bounds the
/// snapshot a queue can hand to a lagging follower.
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 64 * 1024 * 1024;

/// One unit on a peer connection.
#[derive(Serialize, Deserialize)]
pub enum Frame {
    /// A group's Raft RPC; answered by a [`Frame::Response`] with the same `id`.
    Request {
        id: u64,
        group: GroupId,
        rpc: WireRequest,
    },
    Response {
        id: u64,
        answer: WireResponse,
    },
    /// The node-level failure detector's beat: each side sends one per interval, and any frame
    /// received counts as a sign of life.
    Heartbeat,
}

#[derive(Serialize, Deserialize)]
pub enum WireRequest {
    AppendEntries(AppendEntriesRequest<QueueRaft>),
    Vote(VoteRequest<QueueRaft>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: Vec<u8>,
    },
    ClientWrite(Proposal),
    ChangeMembers(MemberChange),
    PreVote(VoteRequest<QueueRaft>),
}

#[derive(Serialize, Deserialize)]
pub enum WireResponse {
    AppendEntries(AppendEntriesResponse<QueueRaft>),
    Vote(VoteResponse<QueueRaft>),
    Snapshot(SnapshotResponse<QueueRaft>),
    /// The group is not running on the answering node.
    NoSuchGroup,
    /// The group's Raft failed the request.
    Failed(String),
    ClientWrite {
        log_id: LogId,
        reply: Reply,
    },
    MembersChanged {
        log_id: LogId,
    },
    /// A forwarded write reached a member that does not lead; `leader` is who it thinks does.
    NotLeader(Option<NodeId>),
    /// A membership change reached a member with no state: its node is in no cluster yet.
    NotInitialized,
}

impl From<RaftRequest> for WireRequest {
    fn from(request: RaftRequest) -> Self {
        match request {
            RaftRequest::AppendEntries(rpc) => WireRequest::AppendEntries(rpc),
            RaftRequest::Vote(rpc) => WireRequest::Vote(rpc),
            RaftRequest::Snapshot { vote, snapshot } => WireRequest::Snapshot {
                vote,
                meta: snapshot.meta,
                data: snapshot.snapshot,
            },
            RaftRequest::ClientWrite(proposal) => WireRequest::ClientWrite(proposal),
            RaftRequest::ChangeMembers(change) => WireRequest::ChangeMembers(change),
            RaftRequest::PreVote(rpc) => WireRequest::PreVote(rpc),
        }
    }
}

impl From<WireRequest> for RaftRequest {
    fn from(request: WireRequest) -> Self {
        match request {
            WireRequest::AppendEntries(rpc) => RaftRequest::AppendEntries(rpc),
            WireRequest::Vote(rpc) => RaftRequest::Vote(rpc),
            WireRequest::Snapshot { vote, meta, data } => RaftRequest::Snapshot {
                vote,
                snapshot: Snapshot {
                    meta,
                    snapshot: data,
                },
            },
            WireRequest::ClientWrite(proposal) => RaftRequest::ClientWrite(proposal),
            WireRequest::ChangeMembers(change) => RaftRequest::ChangeMembers(change),
            WireRequest::PreVote(rpc) => RaftRequest::PreVote(rpc),
        }
    }
}

impl WireResponse {
    /// What the local group answered, for the wire.
    pub fn from_result(result: Result<RaftResponse, TransportError>) -> Self {
        match result {
            Ok(RaftResponse::AppendEntries(r)) => WireResponse::AppendEntries(r),
            Ok(RaftResponse::Vote(r)) => WireResponse::Vote(r),
            Ok(RaftResponse::Snapshot(r)) => WireResponse::Snapshot(r),
            Ok(RaftResponse::ClientWrite { log_id, reply }) => {
                WireResponse::ClientWrite { log_id, reply }
            }
            Ok(RaftResponse::MembersChanged { log_id }) => WireResponse::MembersChanged { log_id },
            Err(TransportError::NoSuchGroup { .. }) => WireResponse::NoSuchGroup,
            Err(TransportError::NotLeader { leader, .. }) => WireResponse::NotLeader(leader),
            Err(TransportError::NotInitialized(_)) => WireResponse::NotInitialized,
            Err(e) => WireResponse::Failed(e.to_string()),
        }
    }

    /// What the remote `node` answered about `group`, for the caller.
    pub fn into_result(self, node: NodeId, group: GroupId) -> Result<RaftResponse, TransportError> {
        match self {
            WireResponse::AppendEntries(r) => Ok(RaftResponse::AppendEntries(r)),
            WireResponse::Vote(r) => Ok(RaftResponse::Vote(r)),
            WireResponse::Snapshot(r) => Ok(RaftResponse::Snapshot(r)),
            WireResponse::ClientWrite { log_id, reply } => {
                Ok(RaftResponse::ClientWrite { log_id, reply })
            }
            WireResponse::MembersChanged { log_id } => Ok(RaftResponse::MembersChanged { log_id }),
            WireResponse::NotLeader(leader) => Err(TransportError::NotLeader { node, leader }),
            WireResponse::NoSuchGroup => Err(TransportError::NoSuchGroup { node, group }),
            WireResponse::NotInitialized => Err(TransportError::NotInitialized(node)),
            WireResponse::Failed(reason) => Err(TransportError::Remote { node, reason }),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {bytes} bytes is over the limit of {max_bytes} bytes")]
    TooLarge { bytes: usize, max_bytes: u32 },
    #[error("an empty frame")]
    Empty,
    #[error("an undecodable frame: {0}")]
    Undecodable(String),
    #[error("a frame could not be encoded: {0}")]
    Unencodable(String),
}

fn options(max_frame_bytes: u32) -> impl Options {
    bincode::DefaultOptions::new().with_limit(u64::from(max_frame_bytes))
}

/// Encodes a frame with its length prefix, ready to be written.
pub fn encode(frame: &Frame, max_frame_bytes: u32) -> Result<Vec<u8>, FrameError> {
    let body_bytes = options(max_frame_bytes)
        .serialized_size(frame)
        .map_err(|e| match *e {
            bincode::ErrorKind::SizeLimit => FrameError::TooLarge {
                bytes: usize::MAX,
                max_bytes: max_frame_bytes,
            },
            other => FrameError::Unencodable(other.to_string()),
        })? as usize;
    check_length(body_bytes, max_frame_bytes)?;
    let mut bytes = Vec::with_capacity(FRAME_HEADER_BYTES + body_bytes);
    bytes.extend_from_slice(&(body_bytes as u32).to_be_bytes());
    options(max_frame_bytes)
        .serialize_into(&mut bytes, frame)
        .map_err(|e| FrameError::Unencodable(e.to_string()))?;
    Ok(bytes)
}

/// Checks a frame length (from a prefix, or about to be written) against the limit.
pub fn check_length(body_bytes: usize, max_frame_bytes: u32) -> Result<(), FrameError> {
    if body_bytes == 0 {
        return Err(FrameError::Empty);
    }
    if body_bytes > max_frame_bytes as usize {
        return Err(FrameError::TooLarge {
            bytes: body_bytes,
            max_bytes: max_frame_bytes,
        });
    }
    Ok(())
}

/// Decodes one frame's body (the bytes after the length prefix); trailing bytes are an error.
pub fn decode(body: &[u8], max_frame_bytes: u32) -> Result<Frame, FrameError> {
    options(max_frame_bytes)
        .deserialize(body)
        .map_err(|e| FrameError::Undecodable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_round_trips_and_garbage_is_an_error_not_a_panic() {
        let bytes = encode(&Frame::Heartbeat, 1024).expect("encode");
        let len = u32::from_be_bytes(bytes[..4].try_into().expect("prefix")) as usize;
        assert_eq!(len, bytes.len() - FRAME_HEADER_BYTES);
        assert!(matches!(
            decode(&bytes[FRAME_HEADER_BYTES..], 1024),
            Ok(Frame::Heartbeat)
        ));
        // A vector claiming 2^60 elements must be refused by the limit, not allocated.
        let mut hostile = vec![1u8]; // variant Response
        hostile.push(7); // id
        hostile.push(5); // WireResponse::Failed
        hostile.push(0xff);
        hostile.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            decode(&hostile, 1024),
            Err(FrameError::Undecodable(_))
        ));
        assert!(matches!(
            check_length(2048, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(check_length(0, 1024), Err(FrameError::Empty)));
    }

    #[test]
    fn a_frame_over_the_limit_is_not_encoded() {
        let frame = Frame::Response {
            id: 1,
            answer: WireResponse::Failed("x".repeat(4096)),
        };
        assert!(matches!(
            encode(&frame, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(encode(&frame, 8192).is_ok());
    }
}
