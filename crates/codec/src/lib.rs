//! Warren's AMQP 0-9-1 codec: turns bytes into frames, methods, content headers and field tables
//! and back, with no I/O. Hand-written where it is the hot path (frame splitting, the primitive
//! readers and writers, field tables); the method structs are generated from the spec XML
//! (`generated.rs`, see tools/codegen).
//!
//! Decoding never copies: a frame payload is a `Bytes` slice of the connection's read buffer,
//! and short strings, long strings and bodies are slices of that.

mod content;
mod error;
mod field_table;
mod frame;
#[rustfmt::skip]
mod generated;
mod hot_methods;
mod message_bytes;
mod packed_table;
mod publish_frames;
mod publish_properties;
mod reader;
mod short_str;
pub mod socket_buffer;
mod writer;

pub use content::{ContentHeader, BASIC_CLASS_ID};
pub use error::CodecError;
pub use field_table::{FieldTable, FieldValue};
pub use frame::{
    parse_frame, write_body_frames, write_content_header, write_deliver, write_heartbeat,
    write_method, DeliverFields, FrameKind, RawFrame, FRAME_END, FRAME_MIN_SIZE, FRAME_OVERHEAD,
    HEARTBEAT_FRAME, PROTOCOL_HEADER,
};
pub use generated::*;
pub use hot_methods::{decode_basic_deliver, decode_basic_publish};
pub use message_bytes::MessageBytes;
pub use packed_table::PackedTable;
pub use publish_frames::{split_publish, PublishFrames, WholePublish};
pub use publish_properties::PublishProperties;
pub use reader::Reader;
pub use short_str::ShortStr;
pub use writer::Writer;

/// An AMQP long string: arbitrary bytes with a 32-bit length.
pub type LongStr = bytes::Bytes;
