//! The registry of open connections, their channels and consumers, as the HTTP API and
//! Prometheus list them (RabbitMQ's `/api/connections`, `/api/channels`, `/api/consumers`).
//!
//! The server crate fills it: a connection registers once its handshake is done and leaves
//! when it ends; channels and consumers come and go with their methods. Nothing here is
//! touched per message except the atomics (byte counts, `MessageStats`, unacked and
//! unconfirmed gauges), each written only by its connection's task.
//!
//! A connection can be closed from outside (`DELETE /api/connections/NAME`):
//! `request_close` sends its task `ConnectionEvent::Close`, and it sends connection.close
//! 320 CONNECTION_FORCED with the reason, as RabbitMQ does.

use crate::consumer::{ChannelFlow, ConnectionEvent, ConnectionId};
use crate::event_channel::EventSender;
use crate::stats::{MessageCounts, MessageStats};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use warren_codec::{FieldTable, PackedTable, ReplyCode};

/// Every open connection, by id.
#[derive(Debug, Default)]
pub struct Registry {
    connections: RwLock<BTreeMap<ConnectionId, Arc<ConnectionInfo>>>,
    /// Counts of channels that have closed, per vhost: totals never go backwards.
    retired: Mutex<HashMap<String, MessageCounts>>,
}

impl Registry {
    pub fn register(&self, connection: Arc<ConnectionInfo>) {
        self.connections.write().insert(connection.id, connection);
    }

    pub fn unregister(&self, id: ConnectionId) {
        // The map stays locked until the counts are retired, so that `message_totals` sees
        // the connection either open or retired, never neither: totals never dip.
        let mut connections = self.connections.write();
        let Some(connection) = connections.remove(&id) else {
            return;
        };
        let counts = connection.message_counts();
        let mut retired = self.retired.lock();
        let total = retired.entry(connection.vhost.clone()).or_default();
        *total = total.plus(&counts);
    }

    /// Every channel's counts since the broker started, of one vhost or of all. Monotonic:
    /// read under the map's lock, which `unregister` holds while it retires a connection.
    pub fn message_totals(&self, vhost: Option<&str>) -> MessageCounts {
        let connections = self.connections.read();
        let mut total = MessageCounts::default();
        for (name, counts) in self.retired.lock().iter() {
            if vhost.is_none_or(|v| v == name) {
                total = total.plus(counts);
            }
        }
        for c in connections.values() {
            if vhost.is_none_or(|v| v == c.vhost) {
                total = total.plus(&c.message_counts());
            }
        }
        total
    }

    /// Open connections in the order they opened.
    pub fn connections(&self) -> Vec<Arc<ConnectionInfo>> {
        self.connections.read().values().cloned().collect()
    }

    /// The connection with RabbitMQ's name for it ("peer:port -> local:port").
    pub fn connection(&self, name: &str) -> Option<Arc<ConnectionInfo>> {
        self.connections
            .read()
            .values()
            .find(|c| c.name == name)
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.connections.read().len()
    }

    /// Asks every open connection, of either protocol, to close with 320 CONNECTION_FORCED
    /// and `reason`; returns how many were asked.
    pub fn close_all(&self, reason: &str) -> usize {
        let connections = self.connections();
        for connection in &connections {
            connection.request_close(reason.to_owned());
        }
        connections.len()
    }

    pub fn is_empty(&self) -> bool {
        self.connections.read().is_empty()
    }
}

/// A connection's state as `rabbitmqctl list_connections state` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnectionState {
    Running = 0,
    /// An alarm is on; the connection has not published since.
    Blocking = 1,
    /// An alarm is on and the connection published: its socket is not read.
    Blocked = 2,
    Closing = 3,
}

impl ConnectionState {
    pub fn name(self) -> &'static str {
        match self {
            ConnectionState::Running => "running",
            ConnectionState::Blocking => "blocking",
            ConnectionState::Blocked => "blocked",
            ConnectionState::Closing => "closing",
        }
    }

    fn from_u8(v: u8) -> ConnectionState {
        match v {
            1 => ConnectionState::Blocking,
            2 => ConnectionState::Blocked,
            3 => ConnectionState::Closing,
            _ => ConnectionState::Running,
        }
    }
}

/// What the API shows of one connection. Fixed at registration except the atomics and the
/// channel map.
#[derive(Debug)]
pub struct ConnectionInfo {
    pub id: ConnectionId,
    /// "127.0.0.1:5555 -> 127.0.0.1:5672", RabbitMQ's connection name.
    pub name: String,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: String,
    pub vhost: String,
    pub auth_mechanism: String,
    /// Packed: kept for the connection's life and read only by the API (`packed_table.rs`
    /// in the codec says what a decoded table costs).
    pub client_properties: PackedTable,
    /// "AMQP 0-9-1" or "AMQP 1-0", as RabbitMQ's API names them.
    pub protocol: &'static str,
    /// Milliseconds since the Unix epoch.
    pub connected_at_ms: u64,
    pub frame_max: u32,
    pub channel_max: u16,
    /// Negotiated heartbeat interval in seconds (0: none), RabbitMQ's `timeout`.
    pub heartbeat_s: u16,
    pub tls: bool,
    pub recv_oct: AtomicU64,
    pub recv_cnt: AtomicU64,
    pub send_oct: AtomicU64,
    pub send_cnt: AtomicU64,
    state: AtomicU8,
    channels: Mutex<BTreeMap<u16, Arc<ChannelInfo>>>,
    /// Counts of this connection's channels that have closed.
    retired: Mutex<MessageCounts>,
    /// The connection task's event channel, to ask it to close.
    events: EventSender<ConnectionEvent>,
}

/// The fixed facts of a connection, from its handshake.
#[derive(Debug, Clone)]
pub struct ConnectionFacts {
    pub id: ConnectionId,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: String,
    pub vhost: String,
    pub auth_mechanism: String,
    pub client_properties: FieldTable,
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat_s: u16,
    pub tls: bool,
    pub events: EventSender<ConnectionEvent>,
    pub protocol: &'static str,
}

/// An IPv4 peer on a dual-stack socket shows up as `::ffff:a.b.c.d`; RabbitMQ names it by
/// its IPv4 address.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// RabbitMQ's name of a connection: "peer -> local" ("127.0.0.1:5555 -> 127.0.0.1:5672").
pub fn connection_name(peer: SocketAddr, local: SocketAddr) -> String {
    format!("{} -> {}", canonical(peer), canonical(local))
}

impl ConnectionInfo {
    pub fn new(facts: ConnectionFacts) -> Arc<ConnectionInfo> {
        let peer = canonical(facts.peer);
        let local = canonical(facts.local);
        let connected_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Arc::new(ConnectionInfo {
            id: facts.id,
            name: connection_name(peer, local),
            peer,
            local,
            user: facts.user,
            vhost: facts.vhost,
            auth_mechanism: facts.auth_mechanism,
            client_properties: PackedTable::pack(&facts.client_properties),
            protocol: facts.protocol,
            connected_at_ms,
            frame_max: facts.frame_max,
            channel_max: facts.channel_max,
            heartbeat_s: facts.heartbeat_s,
            tls: facts.tls,
            recv_oct: AtomicU64::new(0),
            recv_cnt: AtomicU64::new(0),
            send_oct: AtomicU64::new(0),
            send_cnt: AtomicU64::new(0),
            state: AtomicU8::new(ConnectionState::Running as u8),
            channels: Mutex::new(BTreeMap::new()),
            retired: Mutex::new(MessageCounts::default()),
            events: facts.events,
        })
    }

    pub fn state(&self) -> ConnectionState {
        ConnectionState::from_u8(self.state.load(Relaxed))
    }

    pub fn set_state(&self, state: ConnectionState) {
        self.state.store(state as u8, Relaxed);
    }

    pub fn add_channel(&self, channel: Arc<ChannelInfo>) {
        self.channels.lock().insert(channel.number, channel);
    }

    pub fn remove_channel(&self, number: u16) {
        if let Some(channel) = self.channels.lock().remove(&number) {
            let mut retired = self.retired.lock();
            *retired = retired.plus(&channel.stats.snapshot());
        }
    }

    /// The counts of every channel this connection had, open or closed. The channel map is
    /// locked first, as `remove_channel` does, so a closing channel is counted once.
    pub fn message_counts(&self) -> MessageCounts {
        let channels = self.channels.lock();
        let retired = *self.retired.lock();
        channels
            .values()
            .fold(retired, |t, c| t.plus(&c.stats.snapshot()))
    }

    /// Open channels by number.
    pub fn channels(&self) -> Vec<Arc<ChannelInfo>> {
        self.channels.lock().values().cloned().collect()
    }

    pub fn channel(&self, number: u16) -> Option<Arc<ChannelInfo>> {
        self.channels.lock().get(&number).cloned()
    }

    /// Asks the connection to close with `reason` (320 CONNECTION_FORCED).
    pub fn request_close(&self, reason: String) {
        let _ = self.events.send(ConnectionEvent::Close {
            code: ReplyCode::ConnectionForced,
            text: reason,
        });
    }
}

/// What the API shows of one channel. The channel's task keeps the gauges current.
#[derive(Debug)]
pub struct ChannelInfo {
    pub number: u16,
    /// basic.qos(global=false): prefetch given to new consumers.
    pub prefetch_count: AtomicU32,
    /// The channel's flow, for its global prefetch.
    pub flow: Arc<ChannelFlow>,
    pub confirm: AtomicBool,
    pub transactional: AtomicBool,
    pub messages_unacknowledged: AtomicU32,
    pub messages_unconfirmed: AtomicU32,
    pub stats: MessageStats,
    /// By tag, with the order they came in (what `consumers` lists them by): a channel of
    /// many consumers forgets each in O(1).
    consumers: Mutex<ChannelConsumers>,
}

#[derive(Debug, Default)]
struct ChannelConsumers {
    by_tag: HashMap<String, (u64, ConsumerInfo)>,
    next: u64,
}

/// One consumer, as `/api/consumers` shows it.
#[derive(Debug, Clone)]
pub struct ConsumerInfo {
    pub tag: String,
    pub queue: String,
    pub ack_required: bool,
    pub exclusive: bool,
    pub prefetch_count: u32,
    pub arguments: FieldTable,
}

impl ChannelInfo {
    pub fn new(number: u16, flow: Arc<ChannelFlow>) -> Arc<ChannelInfo> {
        Arc::new(ChannelInfo {
            number,
            prefetch_count: AtomicU32::new(0),
            flow,
            confirm: AtomicBool::new(false),
            transactional: AtomicBool::new(false),
            messages_unacknowledged: AtomicU32::new(0),
            messages_unconfirmed: AtomicU32::new(0),
            stats: MessageStats::default(),
            consumers: Mutex::new(ChannelConsumers::default()),
        })
    }

    pub fn global_prefetch_count(&self) -> u32 {
        self.flow.prefetch_count.load(Relaxed)
    }

    pub fn add_consumer(&self, consumer: ConsumerInfo) {
        let mut consumers = self.consumers.lock();
        let order = consumers.next;
        consumers.next += 1;
        consumers
            .by_tag
            .insert(consumer.tag.clone(), (order, consumer));
    }

    pub fn remove_consumer(&self, tag: &str) {
        self.consumers.lock().by_tag.remove(tag);
    }

    /// The channel's consumers in the order they came in.
    pub fn consumers(&self) -> Vec<ConsumerInfo> {
        let consumers = self.consumers.lock();
        let mut all: Vec<_> = consumers.by_tag.values().collect();
        all.sort_unstable_by_key(|(order, _)| *order);
        all.into_iter().map(|(_, c)| c.clone()).collect()
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.lock().by_tag.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(id: ConnectionId) -> ConnectionFacts {
        let (events, _) = crate::event_channel::event_channel();
        ConnectionFacts {
            events,
            id,
            peer: "[::ffff:127.0.0.1]:5555".parse().unwrap(),
            local: "127.0.0.1:5672".parse().unwrap(),
            user: "guest".into(),
            vhost: "/".into(),
            auth_mechanism: "PLAIN".into(),
            client_properties: FieldTable::default(),
            frame_max: 131072,
            channel_max: 2047,
            heartbeat_s: 60,
            tls: false,
            protocol: "AMQP 0-9-1",
        }
    }

    #[test]
    fn names_connections_as_rabbitmq() {
        let registry = Registry::default();
        let c = ConnectionInfo::new(facts(7));
        assert_eq!(c.name, "127.0.0.1:5555 -> 127.0.0.1:5672");
        registry.register(c.clone());
        assert!(registry
            .connection("127.0.0.1:5555 -> 127.0.0.1:5672")
            .is_some());
        registry.unregister(7);
        assert!(registry.is_empty());
    }

    #[test]
    fn close_request_carries_its_reason() {
        let (events, mut rx) = crate::event_channel::event_channel();
        let c = ConnectionInfo::new(ConnectionFacts { events, ..facts(1) });
        c.request_close("bye".into());
        match rx.try_recv() {
            Ok(ConnectionEvent::Close { code, text }) => {
                assert_eq!(code, ReplyCode::ConnectionForced);
                assert_eq!(text, "bye");
            }
            _ => panic!("no close event"),
        }
    }

    #[test]
    fn channels_and_consumers() {
        let c = ConnectionInfo::new(facts(1));
        let ch = ChannelInfo::new(3, Arc::new(ChannelFlow::default()));
        c.add_channel(ch.clone());
        ch.add_consumer(ConsumerInfo {
            tag: "t".into(),
            queue: "q".into(),
            ack_required: true,
            exclusive: false,
            prefetch_count: 10,
            arguments: FieldTable::default(),
        });
        assert_eq!(c.channel(3).unwrap().consumer_count(), 1);
        ch.remove_consumer("t");
        assert_eq!(ch.consumer_count(), 0);
        c.remove_channel(3);
        assert!(c.channels().is_empty());
    }
}
