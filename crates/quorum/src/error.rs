//! The quorum layer's error: what a group operation answers when it fails.

use crate::types::NodeId;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("invalid Raft configuration: {0}")]
    Config(String),
    #[error("not the leader; the leader is {leader:?}")]
    NotLeader { leader: Option<NodeId> },
    #[error("Raft: {0}")]
    Raft(String),
}
