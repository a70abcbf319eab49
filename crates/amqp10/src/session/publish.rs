//! The publish side of a session: transfers assembled into messages, routed and enqueued
//! as a 0-9-1 publish is, and settled with RabbitMQ 4's outcomes (accepted once stored).

use super::{Env, Fail, Link, Partial, Session, INCOMING_LINK_CREDIT, INCOMING_WINDOW};
use crate::address::{self, Destination, TargetAddress};
use crate::codec::{self, *};
use crate::convert;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use warren_broker::access::AccessKind;
use warren_broker::confirm::{Confirm, ConfirmTo};
use warren_broker::routing_keys::{header_routes, PublishKeys};
use warren_broker::vhost::{Publish, PublishScratch};
use warren_broker::{ExchangeKind, Message};
use warren_store::Outcome;

/// What becomes of a published delivery.
enum PublishOutcome {
    Settled(DeliveryState),
    /// Accepted once every queue has it safe (the store's fsync, a quorum commit, a remote
    /// node's answer), rejected if one refuses it: the 0-9-1 confirm's rule.
    Confirming(Confirm),
}

fn accepted() -> DeliveryState {
    DeliveryState::Accepted(Accepted {})
}

fn rejected(condition: impl Into<ErrorCondition>, text: impl Into<String>) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(codec::error(condition, text)),
    })
}

/// The name permissions see: RabbitMQ checks the default exchange as "amq.default".
fn permission_name(exchange: &str) -> &str {
    if exchange.is_empty() {
        "amq.default"
    } else {
        exchange
    }
}

impl Session {
    pub fn transfer(&mut self, t: Transfer, payload: Bytes, env: &mut Env) -> Result<(), Fail> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        if self.incoming_window == 0 {
            return Err(Fail::Session(codec::error(
                SessionError::WindowViolation,
                "transfer beyond the session's incoming window",
            )));
        }
        self.incoming_window -= 1;
        let handle = t.handle.0;
        let Some(Link::In(link)) = self.links.get_mut(&handle) else {
            return Err(Fail::Session(codec::error(
                SessionError::UnattachedHandle,
                format!("transfer on handle {handle}, which is not a link we receive on"),
            )));
        };
        let mut partial = match link.partial.take() {
            Some(p) => p,
            None => {
                let Some(delivery_id) = t.delivery_id else {
                    return Err(Fail::Connection(codec::error(
                        AmqpError::InvalidField,
                        "first transfer of a delivery without a delivery-id",
                    )));
                };
                if link.credit == 0 {
                    // A sender that ignores credit (ours is withheld during a resource
                    // alarm): RabbitMQ 4 detaches the link with transfer-limit-exceeded and
                    // the message goes nowhere.
                    return Err(Fail::Link(
                        handle,
                        codec::error(
                            LinkError::TransferLimitExceeded,
                            format!("insufficient credit (0) for delivery {delivery_id}"),
                        ),
                    ));
                }
                link.delivery_count = link.delivery_count.wrapping_add(1);
                link.credit -= 1;
                if !t.more && !t.aborted {
                    // One frame: the payload stays a slice of the read buffer.
                    let settled = t.settled.unwrap_or(false);
                    self.after_transfer(handle, env);
                    return self.publish(handle, delivery_id, settled, payload, env);
                }
                Partial {
                    delivery_id,
                    settled: false,
                    payload: BytesMut::new(),
                }
            }
        };
        if t.aborted {
            // The sender gave up on this delivery: nothing of it is kept.
            self.after_transfer(handle, env);
            return Ok(());
        }
        partial.settled |= t.settled.unwrap_or(false);
        partial.payload.extend_from_slice(&payload);
        if partial.payload.len() as u64 > env.max_message_size {
            return Err(Fail::Link(
                handle,
                codec::error(
                    LinkError::MessageSizeExceeded,
                    format!(
                        "message larger than max-message-size {}",
                        env.max_message_size
                    ),
                ),
            ));
        }
        if t.more {
            if let Some(Link::In(link)) = self.links.get_mut(&handle) {
                link.partial = Some(partial);
            }
            return Ok(());
        }
        self.after_transfer(handle, env);
        self.publish(
            handle,
            partial.delivery_id,
            partial.settled,
            partial.payload.freeze(),
            env,
        )
    }

    /// Tops up the link's credit and the session window once half is used.
    fn after_transfer(&mut self, handle: u32, env: &mut Env) {
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            let frame = self.flow_frame(None);
            self.send(env, Performative::Flow(frame));
        }
        if env.publishing_blocked {
            return;
        }
        self.top_up_credit(handle, env);
    }

    /// Gives an incoming link its credit back once half is used.
    fn top_up_credit(&mut self, handle: u32, env: &mut Env) {
        if let Some(Link::In(link)) = self.links.get_mut(&handle) {
            if link.credit < INCOMING_LINK_CREDIT / 2 {
                link.credit = INCOMING_LINK_CREDIT;
                let state = (handle, link.delivery_count, link.credit, false);
                let frame = self.flow_frame(Some(state));
                self.send(env, Performative::Flow(frame));
            }
        }
    }

    /// The resource alarms cleared: publishers that ran low get credit again.
    pub fn resume_publishers(&mut self, env: &mut Env) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            self.top_up_credit(handle, env);
        }
    }

    fn publish(
        &mut self,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        payload: Bytes,
        env: &mut Env,
    ) -> Result<(), Fail> {
        if payload.len() as u64 > env.max_message_size {
            return Err(Fail::Link(
                handle,
                codec::error(
                    LinkError::MessageSizeExceeded,
                    format!(
                        "message larger than max-message-size {}",
                        env.max_message_size
                    ),
                ),
            ));
        }
        let Some(Link::In(link)) = self.links.get(&handle) else {
            return Ok(());
        };
        if link.target == TargetAddress::Management {
            return self.management_request(handle, settled, &payload, env);
        }
        let outcome = route_and_enqueue(
            &link.target,
            &payload,
            settled,
            self.channel,
            &mut self.publish_scratch,
            env,
        );
        if settled {
            return Ok(());
        }
        match outcome {
            PublishOutcome::Settled(state) => self.dispositions.push((delivery_id, state)),
            PublishOutcome::Confirming(confirm) => {
                self.awaiting_confirm.push_back((delivery_id, confirm))
            }
        }
        Ok(())
    }

    /// Settles the incoming deliveries whose confirm is now known: accepted once every
    /// queue has the message safe, rejected when the store failed or a queue refused it.
    pub fn check_durable(&mut self, env: &mut Env) {
        if self.awaiting_confirm.is_empty() {
            return;
        }
        let durable = env.vhost.store.as_ref().map(|s| s.durable_state());
        let mut still = VecDeque::new();
        for (id, confirm) in self.awaiting_confirm.drain(..) {
            match confirm.outcome(durable.as_ref()) {
                None => still.push_back((id, confirm)),
                Some(true) => self.dispositions.push((id, accepted())),
                Some(false) => {
                    let store_failed = durable
                        .as_ref()
                        .is_some_and(|d| d.outcome(confirm.store_seq()) == Outcome::Failed);
                    self.dispositions.push((id, refused(store_failed)));
                }
            }
        }
        self.awaiting_confirm = still;
    }

    /// Sends the dispositions gathered in this batch: runs of consecutive delivery ids with
    /// the same outcome share one frame.
    pub fn flush_dispositions(&mut self, env: &mut Env) {
        if self.dispositions.is_empty() {
            return;
        }
        let mut all = std::mem::take(&mut self.dispositions);
        all.sort_by_key(|(id, _)| *id);
        let mut run: Option<(u32, u32, DeliveryState)> = None;
        for (id, state) in all {
            match &mut run {
                Some((_, last, s)) if *s == state && last.wrapping_add(1) == id => *last = id,
                _ => {
                    if let Some(r) = run.take() {
                        self.send_disposition(r, env);
                    }
                    run = Some((id, id, state));
                }
            }
        }
        if let Some(r) = run {
            self.send_disposition(r, env);
        }
    }

    fn send_disposition(&self, (first, last, state): (u32, u32, DeliveryState), env: &mut Env) {
        self.send(
            env,
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last: (last != first).then_some(last),
                settled: true,
                state: Some(state),
                batchable: false,
            }),
        );
    }
}

/// Whether the user may publish to `dest`: the exchange exists, is not internal, and the
/// user has write on it (and the topic permission for the routing key).
pub(super) fn check_destination(dest: &Destination, env: &Env) -> Result<(), Error> {
    let vhost = &env.vhost.name;
    let Some(exchange) = env.vhost.exchange(&dest.exchange) else {
        return Err(codec::error(
            AmqpError::NotFound,
            format!("no exchange '{}' in vhost '{vhost}'", dest.exchange),
        ));
    };
    if dest.exchange.is_empty() && env.vhost.queue(&dest.routing_key).is_none() {
        return Err(codec::error(
            AmqpError::NotFound,
            format!("no queue '{}' in vhost '{vhost}'", dest.routing_key),
        ));
    }
    if let Some(refusal) = exchange.publish_refusal(vhost) {
        return Err(codec::error(AmqpError::UnauthorizedAccess, refusal));
    }
    let name = permission_name(&dest.exchange);
    if !env.access.check(env.user, vhost, AccessKind::Write, name) {
        return Err(codec::error(
            AmqpError::UnauthorizedAccess,
            format!(
                "write access to exchange '{name}' in vhost '{vhost}' refused for user '{}'",
                env.user
            ),
        ));
    }
    if exchange.kind == ExchangeKind::Topic
        && !env.access.check_topic(
            env.user,
            vhost,
            &dest.exchange,
            AccessKind::Write,
            &dest.routing_key,
        )
    {
        return Err(codec::error(
            AmqpError::UnauthorizedAccess,
            format!(
                "write access to topic '{}' in exchange '{name}' in vhost '{vhost}' refused for user '{}'",
                dest.routing_key, env.user
            ),
        ));
    }
    Ok(())
}

/// Routes one published message and enqueues it, as the 0-9-1 publish path does.
fn route_and_enqueue(
    target: &TargetAddress,
    payload: &Bytes,
    settled: bool,
    channel: u16,
    scratch: &mut PublishScratch,
    env: &mut Env,
) -> PublishOutcome {
    let incoming = match convert::from_amqp10(payload) {
        Ok(m) => m,
        Err(why) => return PublishOutcome::Settled(rejected(AmqpError::DecodeError, why)),
    };
    let dest = match target {
        TargetAddress::Fixed(dest) => dest.clone(),
        TargetAddress::PerMessage => {
            let Some(to) = incoming.to.as_deref() else {
                return PublishOutcome::Settled(rejected(
                    AmqpError::PreconditionFailed,
                    "the message has no 'to' for the null target",
                ));
            };
            match address::parse_destination(to) {
                Ok(d) => d,
                Err(why) => return PublishOutcome::Settled(rejected(AmqpError::InvalidField, why)),
            }
        }
        // `publish` hands the management node's transfers to `link_pair.rs` before this.
        TargetAddress::Management => {
            return PublishOutcome::Settled(rejected(
                AmqpError::NotAllowed,
                "management requests are answered on their link pair",
            ))
        }
    };
    // Checked per message for `to`; for a fixed target again, as the exchange may have
    // gone since the attach.
    if let Err(error) = check_destination(&dest, env) {
        return PublishOutcome::Settled(DeliveryState::Rejected(Rejected { error: Some(error) }));
    }
    let Some(exchange) = env.vhost.exchange(&dest.exchange) else {
        return PublishOutcome::Settled(rejected(AmqpError::NotFound, "exchange gone"));
    };
    let props = incoming.properties;
    if let Some(refusal) = env
        .access
        .user_id_refusal(props.user_id.as_deref(), env.user)
    {
        return PublishOutcome::Settled(rejected(AmqpError::UnauthorizedAccess, refusal));
    }
    let Some(message) = Message::encoded(&exchange.name, &dest.routing_key, &props, incoming.body)
    else {
        return PublishOutcome::Settled(rejected(
            AmqpError::InvalidField,
            "routing key longer than 255 bytes",
        ));
    };
    let message = Arc::new(message.with_amqp10(incoming.sections));
    env.vhost
        .counters
        .published
        .observe(env.connection, message.body().len(), !settled);
    // Sender-selected distribution: the x-cc annotation (the CC header after conversion)
    // adds routing keys; on a topic exchange each needs the topic permission too.
    let cc = header_routes(props.headers.as_ref()).unwrap_or_default();
    let keys = PublishKeys::new(&dest.routing_key, &cc);
    let topic_refused = exchange.kind == ExchangeKind::Topic
        && keys.all()[1..].iter().any(|key| {
            !env.access.check_topic(
                env.user,
                &env.vhost.name,
                &dest.exchange,
                AccessKind::Write,
                key,
            )
        });
    if topic_refused {
        return PublishOutcome::Settled(rejected(
            AmqpError::UnauthorizedAccess,
            format!(
                "write access to a CC topic of exchange '{}' refused",
                dest.exchange
            ),
        ));
    }
    let confirm_to = match settled {
        true => ConfirmTo::Nobody,
        false => ConfirmTo::Connection(env.events),
    };
    let publish = Publish {
        exchange: &exchange,
        message: &message,
        routing_keys: keys.all(),
        headers: props.headers.as_ref(),
        confirm_to,
        origin: env.trace_origin(channel),
    };
    let confirm = match env.vhost.publish(publish, scratch) {
        Ok(routed) if routed.queues == 0 => {
            return PublishOutcome::Settled(DeliveryState::Released(Released {}))
        }
        Ok(routed) => routed.confirm,
        Err(e) => {
            tracing::warn!(error = %e, "message store append failed");
            return PublishOutcome::Settled(rejected(
                AmqpError::InternalError,
                format!("message store: {e}"),
            ));
        }
    };
    match confirm.outcome(None) {
        // Nothing to wait for: settled now (a pre-settled transfer needs no outcome).
        Some(_) if !confirm.waits_for_store() || settled => {
            PublishOutcome::Settled(match confirm.refused() {
                false => accepted(),
                true => refused(false),
            })
        }
        _ => PublishOutcome::Confirming(confirm),
    }
}

/// The outcome of a transfer that a queue refused, or whose store write failed.
fn refused(store_failed: bool) -> DeliveryState {
    match store_failed {
        true => rejected(
            AmqpError::InternalError,
            "the message store failed to write",
        ),
        false => rejected(
            AmqpError::ResourceLimitExceeded,
            "a queue refused the message",
        ),
    }
}
