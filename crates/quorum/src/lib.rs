//! Quorum queues (foundation): placeholder overview, rewritten below once all modules exist.

pub mod machine;
pub mod types;
pub mod wal;
