//! The management node's link pair (Link Pair CS 01, as RabbitMQ 4 pairs them): a sender
//! and a receiver the client attaches with the same name to `/management`, each with the
//! `paired` property. A request arrives on the client's sender as a settled transfer and is
//! answered (`crate::management`) with a settled transfer on the receiver of its pair,
//! within that link's credit and the session window; answers wait on the link for credit.

use super::deliver::{first_transfer, frames_for, max_payload, write_transfer};
use super::pair::{LaterAnswer, LinkPair, ReplyLink};
use super::{Env, Fail, IncomingLink, Link, Session, INCOMING_LINK_CREDIT};
use crate::address::TargetAddress;
use crate::codec::{self, *};
use crate::management::{self, Answer, Response};
use bytes::Bytes;
use fe2o3_amqp_types::messaging::MessageId;
use std::collections::VecDeque;

/// RabbitMQ 4 requires the `paired` link property set to true on both halves.
fn is_paired(a: &Attach) -> bool {
    a.properties.as_ref().is_some_and(|p| {
        p.iter()
            .any(|(k, v)| k.as_str() == "paired" && *v == Value::Bool(true))
    })
}

impl Session {
    /// The client attaches one half of a pair; the pair is complete when both are there.
    pub(super) fn attach_pair_half(&mut self, a: Attach, env: &mut Env) -> Result<(), Fail> {
        let handle = a.handle.0;
        let client_sends = matches!(a.role, Role::Sender);
        let mut reply = Attach {
            name: a.name.clone(),
            handle: a.handle.clone(),
            role: if client_sends {
                Role::Receiver
            } else {
                Role::Sender
            },
            snd_settle_mode: SenderSettleMode::Settled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: a.source.clone(),
            target: a.target.clone(),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: (!client_sends).then_some(0),
            max_message_size: if client_sends {
                Some(env.max_message_size)
            } else {
                a.max_message_size
            },
            offered_capabilities: None,
            desired_capabilities: None,
            properties: a.properties.clone(),
        };
        if !is_paired(&a) {
            let error = codec::error(
                AmqpError::InvalidField,
                "Link property 'paired' is not set to boolean value 'true'",
            );
            self.refuse(reply, error, env);
            return Ok(());
        }
        let existing = self.pairs.iter().position(|p| p.name == a.name);
        let half_taken = existing.is_some_and(|i| {
            let p = &self.pairs[i];
            if client_sends {
                p.incoming.is_some()
            } else {
                p.outgoing.is_some()
            }
        });
        if half_taken {
            let error = codec::error(
                AmqpError::PreconditionFailed,
                format!("management link pair '{}' already has this half", a.name),
            );
            reply.properties = None;
            self.refuse(reply, error, env);
            return Ok(());
        }
        let index = existing.unwrap_or_else(|| {
            self.pairs.push(LinkPair {
                name: a.name.clone(),
                incoming: None,
                outgoing: None,
            });
            self.pairs.len() - 1
        });
        self.send(env, Performative::Attach(reply));
        if client_sends {
            self.pairs[index].incoming = Some(handle);
            let link = IncomingLink {
                target: TargetAddress::Management,
                delivery_count: a.initial_delivery_count.unwrap_or(0),
                credit: INCOMING_LINK_CREDIT,
                partial: None,
                temporary: None,
            };
            let state = (handle, link.delivery_count, link.credit, false);
            self.links.insert(handle, Link::In(Box::new(link)));
            let flow = self.flow_frame(Some(state));
            self.send(env, Performative::Flow(flow));
        } else {
            self.pairs[index].outgoing = Some(handle);
            let link = ReplyLink {
                delivery_count: 0,
                credit: 0,
                drain: false,
                pending: VecDeque::new(),
                next_tag: 0,
            };
            self.links.insert(handle, Link::Reply(Box::new(link)));
        }
        Ok(())
    }

    /// A link of a pair went: the pair forgets it (and goes once both are gone).
    pub(super) fn forget_pair_half(&mut self, handle: u32) {
        for pair in &mut self.pairs {
            if pair.incoming == Some(handle) {
                pair.incoming = None;
            }
            if pair.outgoing == Some(handle) {
                pair.outgoing = None;
            }
        }
        self.pairs
            .retain(|p| p.incoming.is_some() || p.outgoing.is_some());
    }

    /// A whole request arrived on `handle`, the sender of a pair.
    pub(super) fn management_request(
        &mut self,
        handle: u32,
        settled: bool,
        payload: &Bytes,
        env: &mut Env,
    ) -> Result<(), Fail> {
        let paired = self
            .pairs
            .iter()
            .find(|p| p.incoming == Some(handle))
            .and_then(|p| p.outgoing);
        if paired.is_none() {
            return Err(Fail::Link(
                handle,
                codec::error(
                    AmqpError::PreconditionFailed,
                    "received transfer on half open management link pair",
                ),
            ));
        }
        if !settled {
            // The answer is the acknowledgement: RabbitMQ 4 takes settled requests only.
            return Err(Fail::Link(
                handle,
                codec::error(
                    AmqpError::InvalidField,
                    "management requests must be sent settled",
                ),
            ));
        }
        let request = management::parse_request(payload)
            .map_err(|why| Fail::Link(handle, codec::error(AmqpError::DecodeError, why)))?;
        let cx = management::Ctx {
            vhost: env.vhost,
            broker: env.broker,
            access: env.access,
            user: env.user,
            connection: env.connection,
        };
        match management::handle(&request, &cx).map_err(Fail::Session)? {
            Answer::Now(response) => self.answer(handle, request.message_id, &response, env),
            Answer::Later(response) => {
                *env.later = Some(Box::new(LaterAnswer {
                    channel: self.channel,
                    handle,
                    correlation_id: request.message_id,
                    response,
                }));
            }
        }
        Ok(())
    }

    /// Sends `response` to the request that came on `handle`, on its pair's receiver (if
    /// the client has not detached it meanwhile).
    pub fn answer(
        &mut self,
        handle: u32,
        correlation_id: Option<MessageId>,
        response: &Response,
        env: &mut Env,
    ) {
        let Some(reply) = self
            .pairs
            .iter()
            .find(|p| p.incoming == Some(handle))
            .and_then(|p| p.outgoing)
        else {
            return;
        };
        if let Some(Link::Reply(link)) = self.links.get_mut(&reply) {
            link.pending
                .push_back(management::encode_response(correlation_id, response));
        }
        self.pump_replies(reply, env);
    }

    /// Sends a pair's waiting answers while its receiver has credit and the window room;
    /// a drain then gives the rest of the credit back.
    pub(super) fn pump_replies(&mut self, handle: u32, env: &mut Env) {
        let channel = self.channel;
        let Some(Link::Reply(link)) = self.links.get_mut(&handle) else {
            return;
        };
        let max_payload = max_payload(env);
        while link.credit > 0 {
            let Some(payload) = link.pending.front() else {
                break;
            };
            let frames = frames_for(payload.len(), max_payload);
            if self.remote_incoming_window < frames {
                break;
            }
            let Some(payload) = link.pending.pop_front() else {
                break;
            };
            link.next_tag += 1;
            let first = first_transfer(handle, self.next_delivery_id, link.next_tag, true);
            write_transfer(env, channel, first, &payload, max_payload);
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(frames);
            self.remote_incoming_window -= frames;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit -= 1;
        }
        if link.drain && link.pending.is_empty() {
            link.delivery_count = link.delivery_count.wrapping_add(link.credit);
            link.credit = 0;
            link.drain = false;
            let state = (handle, link.delivery_count, 0, true);
            let frame = self.flow_frame(Some(state));
            self.send(env, Performative::Flow(frame));
        }
    }

    /// The client's flow for a pair's receiver: its credit (and drain), answered with our
    /// state when it asks for an echo.
    pub(super) fn reply_link_flow(&mut self, handle: u32, f: &Flow, env: &mut Env) {
        let Some(Link::Reply(link)) = self.links.get_mut(&handle) else {
            return;
        };
        let limit = f
            .delivery_count
            .unwrap_or(0)
            .wrapping_add(f.link_credit.unwrap_or(0));
        let credit = limit.wrapping_sub(link.delivery_count);
        link.credit = if credit > u32::MAX / 2 { 0 } else { credit };
        link.drain = f.drain;
        if f.echo {
            let state = (handle, link.delivery_count, link.credit, link.drain);
            let frame = self.flow_frame(Some(state));
            self.send(env, Performative::Flow(frame));
        }
        self.pump_replies(handle, env);
    }
}
