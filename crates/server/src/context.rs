//! `Ctx`: what a channel handler may touch of its connection while it runs — the vhost, the
//! output buffer, the negotiated limits — borrowed for one call, so channel code never owns
//! connection state.

use crate::config::ServerConfig;
use crate::unsynced::Unsynced;
use crate::waiting::PendingReply;
use bytes::BytesMut;
use std::sync::Arc;
use warren_broker::access::AccessControl;
use warren_broker::EventSender;
use warren_broker::{Broker, ConnectionEvent, ConnectionId, DurableWait, VHost};
use warren_codec::{write_body_frames, write_content_header, write_method, Method, BASIC_CLASS_ID};

pub struct Ctx<'a> {
    pub broker: &'a Broker,
    pub vhost: &'a Arc<VHost>,
    pub connection: ConnectionId,
    pub events: &'a EventSender<ConnectionEvent>,
    pub out: &'a mut BytesMut,
    pub frame_max: u32,
    pub config: &'a ServerConfig,
    pub user: &'a str,
    /// The broker's users and permissions, for the channel's permission checks.
    pub access: &'a AccessControl,
    /// The client asked for basic.cancel notifications (consumer_cancel_notify).
    pub cancel_notify: bool,
    /// Where a method whose definitions change waits for the metadata log leaves itself
    /// (`pending.rs`); the connection awaits it before its next frame.
    pub pending: &'a mut Option<PendingReply>,
    /// The part of `out` that may not reach the client yet: it answers for changes the store
    /// has written but not yet fsync'd (`Change::Unsynced`). The connection writes what is
    /// before it, awaits the syncs, and reads on meanwhile.
    pub unsynced: &'a mut Unsynced,
}

impl Ctx<'_> {
    /// Holds the output from offset `from` of `out` (where a change's answer begins) back
    /// until `durable` resolves.
    pub fn hold_output_until(&mut self, from: usize, durable: DurableWait) {
        self.unsynced.hold(from, durable);
    }

    pub fn send(&mut self, channel: u16, method: impl Into<Method>) {
        write_method(self.out, channel, &method.into());
    }

    /// A content-bearing method followed by its header and body frames.
    pub fn send_content(
        &mut self,
        channel: u16,
        method: impl Into<Method>,
        properties: &[u8],
        body: &[u8],
    ) {
        write_method(self.out, channel, &method.into());
        write_content_header(
            self.out,
            channel,
            BASIC_CLASS_ID,
            body.len() as u64,
            properties,
        );
        write_body_frames(self.out, channel, body, self.frame_max);
    }
}
