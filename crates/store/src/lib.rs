//! `warren-store`: Warren's embedded, crash-safe message store.
//!
//! It persists the broker's definitions (an opaque blob, atomically
//! replaced), a table of stable queue ids, and persistent messages in
//! append-only segment files shared by all queues, with CRC-checked records,
//! group commit (one fsync for many appends, a durable sequence number to
//! await), reclamation of fully-acked segments and recovery that tolerates
//! torn and corrupt data. The on-disk format and protocols are specified in
//! `docs/STORAGE.md`; this crate implements exactly that.
//!
//! ```no_run
//! # async fn demo() -> Result<(), warren_store::StoreError> {
//! use warren_store::{Store, StoreOptions, StoredMessage};
//! let (store, recovered) = Store::open("data".as_ref(), StoreOptions::default())?;
//! let q = store.register_queue("orders")?;
//! let appended = store.append(&[q], &StoredMessage::new("", "orders", vec![], "hello"))?;
//! store.wait_durable(appended.seq).await?; // now send the publisher confirm
//! store.ack(q, appended.id)?;
//! # drop(recovered); Ok(()) }
//! ```

pub use roaring::RoaringTreemap;

pub mod backend;
mod durable;
mod error;
mod failure;
mod index;
mod journal;
mod live_refs;
mod lock;
mod meta;
mod metadata_sync;
mod reader;
pub mod record;
mod recovery;
pub mod segment;
mod store;
mod types;
mod undelivered;
mod writer;

pub use backend::{Backend, BackendFile, CrashMode, FaultyBackend, FsBackend};
pub use durable::{DurableState, FailedPublishes, FailedSeqs, Outcome};
pub use error::{Result, StoreError};
pub use store::Store;
pub use types::{
    Appended, Location, LogPosition, MessageId, QueueId, Recovered, RecoveredQueue, RecoveryReport,
    Scan, ScannedMessage, StoreOptions, StoreStats, StoredDefinitions, StoredMessage, SyncPolicy,
};
