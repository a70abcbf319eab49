//! Letting a connection into a vhost and a channel into a connection: the checks RabbitMQ's
//! connection.open and channel.open make, in its order, written once for every protocol
//! (0-9-1's connection.open, AMQP 1.0's open). Each protocol only chooses how to say no: 530
//! NOT_ALLOWED in 0-9-1, an error condition per `ConnectionRefusal` in AMQP 1.0.

use crate::broker::Broker;
use crate::consumer::{ConnectionEvent, ConnectionId};
use crate::error::AmqpError;
use crate::event_channel::EventSender;
use crate::user_usage::UsageSlot;
use crate::vhost::VHost;
use std::sync::Arc;
use warren_codec::ReplyCode;

/// Why a connection may not open its vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionRefusal {
    NoSuchVhost(String),
    /// The vhost's or the user's connection limit is reached, or the vhost is going.
    LimitReached(String),
    AccessRefused(String),
}

impl ConnectionRefusal {
    /// What 0-9-1 closes the connection with (530, RabbitMQ 3.13's texts).
    pub fn amqp091(&self) -> AmqpError {
        let text = match self {
            ConnectionRefusal::NoSuchVhost(vhost) => format!("vhost {vhost} not found"),
            ConnectionRefusal::LimitReached(text) | ConnectionRefusal::AccessRefused(text) => {
                text.clone()
            }
        };
        AmqpError::new(ReplyCode::NotAllowed, text)
    }
}

/// An admitted connection: its vhost (registered there until `VHost::close_connection`) and
/// its user's connection slot, held for as long as the connection lives.
pub struct Admission {
    pub vhost: Arc<VHost>,
    pub slot: UsageSlot,
}

impl Broker {
    /// connection.open: the vhost exists and its connection limit is not reached, the user's
    /// connection limit is not reached, the user has access to the vhost. `name`: RabbitMQ's
    /// name of the connection (`registry::connection_name`).
    pub fn admit_connection(
        &self,
        vhost: &str,
        user: &str,
        connection: ConnectionId,
        name: String,
        events: EventSender<ConnectionEvent>,
    ) -> Result<Admission, ConnectionRefusal> {
        let Some(found) = self.vhost(vhost) else {
            return Err(ConnectionRefusal::NoSuchVhost(vhost.to_owned()));
        };
        found
            .open_connection(connection, user, name, events)
            .map_err(|e| ConnectionRefusal::LimitReached(e.text.to_string()))?;
        let limits = self.access.user(user).map(|u| u.limits).unwrap_or_default();
        let slot = match self
            .user_usage
            .take_connection(user, limits.max_connections)
        {
            Ok(slot) => slot,
            Err(limit) => {
                found.close_connection(connection);
                return Err(ConnectionRefusal::LimitReached(format!(
                    "connection refused for user '{user}': user connection limit ({limit}) is reached"
                )));
            }
        };
        if !self.access.check_vhost(user, vhost) {
            found.close_connection(connection);
            return Err(ConnectionRefusal::AccessRefused(format!(
                "access to vhost '{vhost}' refused for user '{user}'"
            )));
        }
        Ok(Admission { vhost: found, slot })
    }

    /// channel.open (an AMQP 1.0 begin is not counted, as RabbitMQ does not): the user's
    /// channel limit is not reached. The refusal is a connection error (530), as RabbitMQ's.
    pub fn admit_channel(&self, user: &str) -> Result<UsageSlot, AmqpError> {
        let limits = self.access.user(user).map(|u| u.limits).unwrap_or_default();
        self.user_usage
            .take_channel(user, limits.max_channels)
            .map_err(|limit| {
                AmqpError::new(
                    ReplyCode::NotAllowed,
                    format!(
                        "number of channels opened for user '{user}' has reached the maximum allowed user limit of {limit}"
                    ),
                )
            })
    }
}
