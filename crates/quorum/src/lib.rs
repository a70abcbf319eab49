//! Quorum queues (foundation): placeholder overview, rewritten below once all modules exist.

pub mod machine;
pub mod network;
pub mod node;
pub mod storage;
pub mod types;
pub mod wal;
