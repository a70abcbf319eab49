//! The firehose (RabbitMQ's `rabbit_trace`): while an operator has tracing on in a vhost
//! (`rabbitmqctl trace_on`, the HTTP API's `"tracing": true`), every message published to
//! one of its exchanges is copied to `amq.rabbitmq.trace` with routing key
//! `publish.<exchange>`, and every message delivered to a consumer or fetched with
//! basic.get with `deliver.<queue>`. A copy has the original body and, as RabbitMQ 3.13's,
//! no properties but headers describing the original: `exchange_name`, `routing_keys`,
//! `properties` (the original properties as a table), `node`, then who published or
//! consumed (`vhost`, `connection`, `channel`, `user`) and `routed_queues` for a publish,
//! `redelivered` for a delivery.
//!
//! Off, tracing costs the publish and deliver paths one relaxed load of `VHost::tracing`.
//! On, each copy is routed from the trace exchange and enqueued as RabbitMQ's
//! `publish_at_most_once` does: transient, unconfirmed, uncounted in the exchanges' stats.
//! Copies are never traced themselves: the exchange is internal (clients cannot publish to
//! it), a copy is not published through `VHost::publish`, and a delivery of a message whose
//! exchange is the trace exchange is not traced (RabbitMQ's same check), so a consumer of
//! the firehose does not feed it.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use warren_codec::{
    BasicProperties, ContentHeader, FieldTable, FieldValue, ShortStr, BASIC_CLASS_ID,
};
use warren_store::StoreError;

use super::publish::{is_direct_reply, Publish, PublishScratch, Routed, TraceOrigin};
use super::VHost;
use crate::confirm::ConfirmTo;
use crate::message::Message;
use crate::names::TRACE_EXCHANGE;
use crate::queue::Queue;
use crate::queued_message::QueuedMessage;
use crate::routing_keys::header_routes;

impl VHost {
    /// Whether the firehose is on in this vhost: the one check the hot paths make.
    #[inline]
    pub fn tracing(&self) -> bool {
        self.tracing.load(Ordering::Relaxed)
    }

    /// Turns the firehose on (`node`: the name a copy's `node` header gives) or off. Logged
    /// as RabbitMQ logs it.
    pub fn set_tracing(&self, on: bool, node: &str) {
        if on {
            *self.trace_node.write() = Arc::from(node);
        }
        let was = self.tracing.swap(on, Ordering::Relaxed);
        match (was, on) {
            (false, true) => tracing::info!(vhost = %self.name, "enabling tracing"),
            (true, false) => tracing::info!(vhost = %self.name, "disabling tracing"),
            _ => {}
        }
    }

    /// `publish` with the firehose on: the publish as it is off, noting the queues it
    /// reaches, then its copy with them. (RabbitMQ's channel copies between routing and
    /// delivery; the copy and the message go to different queues, so no consumer can tell.)
    #[cold]
    #[inline(never)]
    pub(super) fn publish_traced(
        &self,
        publish: &Publish<'_>,
        scratch: &mut PublishScratch,
    ) -> Result<Routed, StoreError> {
        let reached = RefCell::new(Vec::new());
        let note = |q: &Queue| {
            reached.borrow_mut().push(q.name.clone());
            true
        };
        let routed = self.route_and_enqueue(publish, scratch, Some(&note));
        let mut reached = reached.into_inner();
        if is_direct_reply(publish) && routed.as_ref().is_ok_and(|r| r.queues > 0) {
            // RabbitMQ lists a direct reply-to's virtual queue, named by the routing key.
            reached.push(publish.message.routing_key_name());
        }
        self.trace_publish(publish, &reached);
        routed
    }

    fn trace_publish(&self, publish: &Publish<'_>, routed_queues: &[ShortStr]) {
        let origin = publish.origin;
        let message = publish.message;
        let mut extra = self.origin_headers(origin);
        extra.push((
            "routed_queues",
            FieldValue::Array(routed_queues.iter().map(|q| text(q)).collect()),
        ));
        self.trace(
            "publish",
            message.exchange(),
            message,
            Some(publish.routing_keys),
            extra,
        );
    }

    /// RabbitMQ's `tap_out`: traces a message delivered from `queue` to a consumer or a
    /// basic.get. Callers check `tracing()` first, so that the path with the firehose off
    /// builds nothing (an unchecked call traces nothing either).
    #[cold]
    #[inline(never)]
    pub fn trace_deliver(&self, queue: &str, delivered: &QueuedMessage, origin: TraceOrigin<'_>) {
        let mut extra = vec![(
            "redelivered",
            FieldValue::I32(i32::from(delivered.redelivered)),
        )];
        extra.extend(self.origin_headers(origin));
        self.trace("deliver", queue, &delivered.message, None, extra);
    }

    /// The headers naming who published or consumed, in RabbitMQ's order.
    fn origin_headers(&self, origin: TraceOrigin<'_>) -> Vec<(&'static str, FieldValue)> {
        let connection = match origin.connection {
            0 => HTTP_API_CONNECTION.to_owned(),
            // A connection closed meanwhile is named by nothing.
            id => self.connection_name(id).unwrap_or_default(),
        };
        vec![
            ("vhost", text(&self.name)),
            ("connection", text(&connection)),
            ("channel", FieldValue::I32(origin.channel.into())),
            ("user", text(origin.user)),
        ]
    }

    /// Publishes the copy of `message` with routing key `<kind>.<suffix>` to the trace
    /// exchange. `routing_keys`: the publish's (its own, CC's and BCC's); a delivery's are
    /// the message's own and its CC header's (BCC's left with the header at publish).
    fn trace(
        &self,
        kind: &str,
        suffix: &str,
        message: &Message,
        routing_keys: Option<&[&str]>,
        extra: Vec<(&'static str, FieldValue)>,
    ) {
        if !self.tracing() || message.exchange() == TRACE_EXCHANGE {
            return;
        }
        let Some(exchange) = self.exchange(TRACE_EXCHANGE) else {
            return;
        };
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: message.body().len() as u64,
            properties: message.properties_bytes(),
        };
        // The publish paths checked these properties; a stored message read back that no
        // longer decodes is traced with none rather than not at all.
        let original = header.properties().unwrap_or_default();
        let keys = match routing_keys {
            Some(keys) => keys.iter().map(|k| text(k)).collect(),
            None => {
                let cc = header_routes(original.headers.as_ref()).unwrap_or_default();
                std::iter::once(text(message.routing_key()))
                    .chain(cc.into_iter().map(FieldValue::LongStr))
                    .collect()
            }
        };
        let mut headers = FieldTable::new();
        headers.push(
            ShortStr::from_static("exchange_name"),
            text(message.exchange()),
        );
        headers.push(
            ShortStr::from_static("routing_keys"),
            FieldValue::Array(keys),
        );
        headers.push(
            ShortStr::from_static("properties"),
            FieldValue::Table(properties_table(&original)),
        );
        headers.push(
            ShortStr::from_static("node"),
            text(&self.trace_node.read().clone()),
        );
        for (key, value) in extra {
            headers.push(ShortStr::from_static(key), value);
        }
        let properties = BasicProperties {
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
        // Longer than a short string only for a name of 247 bytes or more: cut, as every
        // routing key is, rather than not traced.
        let key = ShortStr::from(format!("{kind}.{suffix}"));
        let copy = Arc::new(Message::new(
            exchange.name.clone(),
            key,
            &properties,
            raw,
            message.body_bytes(),
        ));
        let publish = Publish {
            exchange: &exchange,
            message: &copy,
            routing_keys: &[copy.routing_key()],
            headers: properties.headers.as_ref(),
            confirm_to: ConfirmTo::Nobody,
            origin: TraceOrigin::BROKER,
        };
        // At most once, as RabbitMQ's: a copy no queue could take is dropped.
        if let Err(e) = self.route_and_enqueue(&publish, &mut PublishScratch::default(), None) {
            tracing::warn!(vhost = %self.name, error = %e, "traced copy not enqueued");
        }
    }
}

/// The connection the HTTP API's publishes and gets are traced from.
const HTTP_API_CONNECTION: &str = "HTTP API";

fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

/// The original properties as RabbitMQ's `msg_to_table` gives them: each present one by its
/// field name, in reverse field order (it folds them onto the front of a list); headers as
/// a table, integers (delivery mode, priority, timestamp) as signed 32-bit integers
/// (Erlang's `signedint`, which keeps a timestamp's low 32 bits), the rest as long strings.
fn properties_table(p: &BasicProperties) -> FieldTable {
    let string = |v: &Option<ShortStr>| v.as_ref().map(|s| text(s));
    let int = |v: Option<i64>| v.map(|n| FieldValue::I32(n as i32));
    let fields = [
        ("content_type", string(&p.content_type)),
        ("content_encoding", string(&p.content_encoding)),
        ("headers", p.headers.clone().map(FieldValue::Table)),
        ("delivery_mode", int(p.delivery_mode.map(i64::from))),
        ("priority", int(p.priority.map(i64::from))),
        ("correlation_id", string(&p.correlation_id)),
        ("reply_to", string(&p.reply_to)),
        ("expiration", string(&p.expiration)),
        ("message_id", string(&p.message_id)),
        ("timestamp", int(p.timestamp.map(|t| t as i64))),
        ("type", string(&p.message_type)),
        ("user_id", string(&p.user_id)),
        ("app_id", string(&p.app_id)),
        ("cluster_id", string(&p.reserved)),
    ];
    fields
        .into_iter()
        .rev()
        .filter_map(|(key, value)| Some((ShortStr::from_static(key), value?)))
        .collect()
}
