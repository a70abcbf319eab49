//! A vhost's life beside its entities: the connections open on it (so they can be closed
//! when the vhost or their user is deleted, counted against `max-connections`, and named in
//! the firehose's copies), its
//! limits and metadata, and its shutdown when deleted.

use super::properties::{VHostLimits, VHostMetadata};
use super::VHost;
use crate::consumer::{ConnectionEvent, ConnectionId};
use crate::error::AmqpError;
use crate::event_channel::EventSender;
use std::sync::atomic::Ordering;
use warren_codec::ReplyCode;

/// An open connection as its vhost knows it.
#[derive(Debug)]
pub(super) struct OpenConnection {
    user: String,
    /// RabbitMQ's name of the connection, for the firehose's copies (`vhost/trace.rs`).
    name: String,
    events: EventSender<ConnectionEvent>,
}

impl VHost {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limits(&self) -> VHostLimits {
        *self.limits.read()
    }

    /// Sets the limits (persisted with the broker's definitions).
    pub fn set_limits(&self, limits: VHostLimits) {
        *self.limits.write() = limits;
        self.persist_definitions();
    }

    pub fn metadata(&self) -> VHostMetadata {
        self.metadata.read().clone()
    }

    /// Sets the description and tags (persisted with the broker's definitions).
    pub fn set_metadata(&self, metadata: VHostMetadata) {
        *self.metadata.write() = metadata;
        self.persist_definitions();
    }

    /// False once the vhost was deleted: nothing new may start on it.
    pub fn is_live(&self) -> bool {
        !self.deleted.load(Ordering::Acquire)
    }

    pub fn connection_count(&self) -> usize {
        self.connections.lock().len()
    }

    /// Registers a connection that opened this vhost, enforcing `max-connections` (530 with
    /// RabbitMQ's text) and refusing a vhost deleted meanwhile. `name`: RabbitMQ's name of
    /// it ("peer -> local", `registry::connection_name`).
    pub fn open_connection(
        &self,
        connection: ConnectionId,
        user: &str,
        name: String,
        events: EventSender<ConnectionEvent>,
    ) -> Result<(), AmqpError> {
        let mut connections = self.connections.lock();
        if !self.is_live() {
            return Err(AmqpError::new(
                ReplyCode::NotAllowed,
                format!("vhost {} not found", self.name),
            ));
        }
        if let Some(limit) = self.limits().max_connections {
            if connections.len() >= limit as usize {
                return Err(AmqpError::new(
                    ReplyCode::NotAllowed,
                    format!(
                        "access to vhost '{}' refused for user '{user}': connection limit ({limit}) is reached",
                        self.name
                    ),
                ));
            }
        }
        connections.insert(
            connection,
            OpenConnection {
                user: user.to_owned(),
                name,
                events,
            },
        );
        Ok(())
    }

    /// The name of an open connection of the vhost.
    pub(super) fn connection_name(&self, connection: ConnectionId) -> Option<String> {
        let connections = self.connections.lock();
        connections.get(&connection).map(|open| open.name.clone())
    }

    /// Forgets a closed connection and drops the exclusive queues it owned.
    pub fn close_connection(&self, connection: ConnectionId) {
        self.connections.lock().remove(&connection);
        self.connection_closed(connection);
    }

    /// Asks the connections of `user` (all of them when `None`) to close with 320
    /// CONNECTION_FORCED and `reason`; returns how many were asked.
    pub fn force_close_connections(&self, user: Option<&str>, reason: &str) -> usize {
        let connections = self.connections.lock();
        let mut asked = 0;
        for open in connections.values() {
            if user.is_none_or(|u| u == open.user) {
                let _ = open.events.send(ConnectionEvent::Close {
                    code: ReplyCode::ConnectionForced,
                    text: reason.to_owned(),
                });
                asked += 1;
            }
        }
        asked
    }

    /// Deletes everything in the vhost: its connections are told to close ("vhost 'v' is
    /// deleted", as RabbitMQ), its queues go with their stored messages, then its exchanges.
    pub(crate) fn shut_down(&self) {
        self.deleted.store(true, Ordering::Release);
        self.force_close_connections(None, &format!("vhost '{}' is deleted", self.name));
        for queue in self.queues() {
            self.remove_queue(&queue);
        }
        let exchanges = self.exchanges.write().drain();
        drop(exchanges);
        self.reply_consumers.lock().clear();
    }
}
