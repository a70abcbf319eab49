//! RabbitMQ's permission checks for AMQP operations (rabbit_channel's check_*_permitted):
//! which permission each method needs on which resource, RabbitMQ's refusal texts (403
//! ACCESS_REFUSED), and the per-channel cache that keeps publishing free of regex matching.

use crate::context::Ctx;
use std::collections::{HashMap, HashSet};
pub use warren_broker::access::required::Resource;
use warren_broker::access::required::{self, Required};
use warren_broker::access::{self, AccessKind};
use warren_broker::{AmqpError, AmqpResult, Exchange, ExchangeKind};
use warren_codec::ShortStr;

/// The name permissions see: RabbitMQ checks the default exchange as "amq.default".
fn resource_name(resource: Resource, name: &str) -> &str {
    match (resource, name) {
        (Resource::Exchange, "") => "amq.default",
        _ => name,
    }
}

fn refused(ctx: &Ctx, resource: Resource, name: &str) -> AmqpError {
    AmqpError::access_refused(access::refusal_text(
        resource.as_str(),
        name,
        ctx.vhost.name(),
        ctx.user,
    ))
}

/// `kind` permission on a queue or exchange, or 403.
pub fn check(ctx: &Ctx, kind: AccessKind, resource: Resource, name: &str) -> AmqpResult<()> {
    let name = resource_name(resource, name);
    match ctx.access.check(ctx.user, ctx.vhost.name(), kind, name) {
        true => Ok(()),
        false => Err(refused(ctx, resource, name)),
    }
}

/// Every permission of `required` (`warren_broker::access::required`), the first refused
/// reported.
pub fn check_all(ctx: &Ctx, required: &[Required]) -> AmqpResult<()> {
    required
        .iter()
        .try_for_each(|r| check(ctx, r.kind, r.resource, r.name))
}

/// basic.consume, basic.get and queue.purge: read on the queue.
pub fn check_read_queue(ctx: &Ctx, queue: &str) -> AmqpResult<()> {
    check(ctx, AccessKind::Read, Resource::Queue, queue)
}

/// Passive declares need any one permission on the resource (`required::check_any`).
pub fn check_any(ctx: &Ctx, resource: Resource, name: &str) -> AmqpResult<()> {
    required::check_any(resource, name, |r| check(ctx, r.kind, r.resource, r.name))
}

/// A topic permission on a routing key of a topic exchange (other kinds have none).
pub fn check_topic(
    ctx: &Ctx,
    exchange: &Exchange,
    kind: AccessKind,
    routing_key: &str,
) -> AmqpResult<()> {
    if exchange.kind != ExchangeKind::Topic {
        return Ok(());
    }
    let allowed = ctx.access.check_topic(
        ctx.user,
        ctx.vhost.name(),
        &exchange.name,
        kind,
        routing_key,
    );
    match allowed {
        true => Ok(()),
        false => Err(AmqpError::access_refused(access::topic_refusal_text(
            routing_key,
            &exchange.name,
            ctx.vhost.name(),
            ctx.user,
        ))),
    }
}

/// Routing keys whose topic check a channel remembers per exchange; past this the cache is
/// cleared (RabbitMQ keeps the last 12).
const TOPIC_CACHE_KEYS: usize = 256;

/// What a channel has been allowed to publish to, valid while the access database's
/// generation is unchanged: on the hot path a check is a string compare and an atomic load,
/// and a cached topic check a hash lookup, with no allocation.
#[derive(Debug, Default)]
pub struct PublishGrants {
    generation: u64,
    /// Exchanges write was granted on, each with whether topic permissions restrict it.
    exchanges: Vec<(ShortStr, bool)>,
    /// Per topic-restricted exchange, the routing keys topic write was granted for.
    topic_keys: HashMap<ShortStr, HashSet<String>>,
}

impl PublishGrants {
    #[inline]
    fn refresh(&mut self, ctx: &Ctx) {
        let generation = ctx.access.generation();
        if generation != self.generation {
            self.generation = generation;
            self.exchanges.clear();
            self.topic_keys.clear();
        }
    }

    /// basic.publish: write on the exchange.
    #[inline]
    pub fn check_write(&mut self, ctx: &Ctx, exchange: &str) -> AmqpResult<()> {
        self.refresh(ctx);
        if self.exchanges.iter().any(|(e, _)| e.as_str() == exchange) {
            return Ok(());
        }
        self.grant_write(ctx, exchange)
    }

    /// `check_write` on an exchange not granted yet: checked, and remembered if granted.
    #[inline(never)]
    fn grant_write(&mut self, ctx: &Ctx, exchange: &str) -> AmqpResult<()> {
        check(ctx, AccessKind::Write, Resource::Exchange, exchange)?;
        let restricted = ctx
            .access
            .has_topic_permission(ctx.user, ctx.vhost.name(), exchange);
        // A copy of its own: the name is in the publish's frame, and kept as a slice it
        // would hold that read buffer for the channel's life.
        self.exchanges.push((ShortStr::from(exchange), restricted));
        Ok(())
    }

    /// basic.publish to a topic exchange: topic write on every routing key (CC/BCC too).
    /// Call after `check_write` for the same exchange.
    #[inline]
    pub fn check_topic_write(
        &mut self,
        ctx: &Ctx,
        exchange: &Exchange,
        routing_keys: &[&str],
    ) -> AmqpResult<()> {
        // Only topic exchanges have topic permissions: the kind first, so the publishes to
        // every other exchange (the default one too) skip the search below.
        if exchange.kind != ExchangeKind::Topic {
            return Ok(());
        }
        self.check_topic_keys(ctx, exchange, routing_keys)
    }

    /// `check_topic_write` to a topic exchange.
    #[inline(never)]
    fn check_topic_keys(
        &mut self,
        ctx: &Ctx,
        exchange: &Exchange,
        routing_keys: &[&str],
    ) -> AmqpResult<()> {
        let restricted = self
            .exchanges
            .iter()
            .find(|(e, _)| *e == exchange.name)
            .is_none_or(|(_, restricted)| *restricted);
        if !restricted {
            return Ok(());
        }
        for key in routing_keys {
            let granted = self.topic_keys.entry(exchange.name.clone()).or_default();
            if granted.contains(*key) {
                continue;
            }
            check_topic(ctx, exchange, AccessKind::Write, key)?;
            if granted.len() >= TOPIC_CACHE_KEYS {
                granted.clear();
            }
            granted.insert((*key).to_owned());
        }
        Ok(())
    }
}
