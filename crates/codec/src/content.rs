//! The content header that follows a content-bearing method: class, body size and the
//! property block. The property bytes are kept raw so a broker can pass them to consumers
//! without re-encoding; `properties()` decodes them when a field is needed.

use crate::{BasicProperties, CodecError, PublishProperties, Reader, Writer};
use bytes::{Bytes, BytesMut};

pub const BASIC_CLASS_ID: u16 = 60;

#[derive(Debug, Clone, PartialEq)]
pub struct ContentHeader {
    pub class_id: u16,
    pub body_size: u64,
    /// Property flags followed by the present properties, exactly as on the wire.
    pub properties: Bytes,
}

impl ContentHeader {
    pub fn decode(payload: Bytes) -> Result<ContentHeader, CodecError> {
        let mut r = Reader::new(payload);
        let class_id = r.short()?;
        let _weight = r.short()?;
        let body_size = r.longlong()?;
        if r.remaining() < 2 {
            return Err(CodecError::Syntax("content header without property flags"));
        }
        Ok(ContentHeader {
            class_id,
            body_size,
            properties: r.into_rest(),
        })
    }

    pub fn new(class_id: u16, body_size: u64, properties: &BasicProperties) -> ContentHeader {
        let mut buf = BytesMut::new();
        properties.encode(&mut Writer::new(&mut buf));
        ContentHeader {
            class_id,
            body_size,
            properties: buf.freeze(),
        }
    }

    /// The properties routing needs, read without decoding the rest (same checks and errors
    /// as `properties`).
    pub fn publish_properties(&self) -> Result<PublishProperties, CodecError> {
        PublishProperties::decode(&self.properties)
    }

    /// Decodes the property block; fails on a malformed one.
    pub fn properties(&self) -> Result<BasicProperties, CodecError> {
        let mut r = Reader::new(self.properties.clone());
        let props = BasicProperties::decode(&mut r)?;
        if r.remaining() != 0 {
            return Err(CodecError::Syntax("bytes after the content properties"));
        }
        Ok(props)
    }
}
