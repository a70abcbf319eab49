//! Decoding errors, each mapping to the reply code a broker closes the connection with.

use crate::ReplyCode;

/// Why bytes could not be decoded. "Incomplete" is not an error: frame parsing returns
/// `Ok(None)` for that.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Bad frame type, frame-end octet or size: the framing itself is broken.
    #[error("frame error: {0}")]
    Frame(&'static str),
    /// A frame larger than the negotiated frame_max.
    #[error("frame of {size} bytes exceeds frame_max {frame_max}")]
    FrameTooLarge { size: usize, frame_max: u32 },
    /// A method or header payload that ends early or holds an impossible value.
    #[error("syntax error: {0}")]
    Syntax(&'static str),
    /// A field table value type octet RabbitMQ does not know.
    #[error("unknown field value type {0:?}")]
    UnknownFieldType(char),
    /// A (class, method) pair not in the spec.
    #[error("unknown method class {class_id} method {method_id}")]
    UnknownMethod { class_id: u16, method_id: u16 },
}

impl CodecError {
    /// The connection-level reply code RabbitMQ uses for this kind of bad input.
    pub fn reply_code(&self) -> ReplyCode {
        match self {
            CodecError::Frame(_) | CodecError::FrameTooLarge { .. } => ReplyCode::FrameError,
            CodecError::Syntax(_) | CodecError::UnknownFieldType(_) => ReplyCode::SyntaxError,
            CodecError::UnknownMethod { .. } => ReplyCode::CommandInvalid,
        }
    }
}
