//! The vhost's side of dead-lettering: a queue hands over the messages that left it dead
//! (`QueueHome::route_dead_letters`) and the vhost publishes their dead-lettered copies
//! through its one publish (`VHost::route_and_enqueue`) — the queue itself never reaches
//! into the vhost.

use super::publish::{Publish, PublishScratch, TraceOrigin};
use super::VHost;
use crate::churn::DeadLettered;
use crate::confirm::{ConfirmTo, QueueAnswers};
use crate::dead_letter::{dead_lettered, is_death_cycle};
use crate::queue::{DeadLetters, DeadLettersRouted, Queue, QueueHome};
use crate::routing_keys::{header_routes, PublishKeys};
use std::sync::Arc;
use warren_codec::ShortStr;

impl QueueHome for VHost {
    fn vhost_name(&self) -> &str {
        &self.name
    }

    fn queue_changed(&self, queue: &ShortStr) {
        self.queue_activity.note(queue);
    }

    fn route_dead_letters(
        &self,
        queue: &ShortStr,
        dead: DeadLetters,
        dlx: Option<&ShortStr>,
        dlx_routing_key: Option<&ShortStr>,
        answers: Option<&Arc<QueueAnswers>>,
    ) -> DeadLettersRouted {
        let mut routed = DeadLettersRouted {
            all_routed: !dead.is_empty(),
            stored: None,
        };
        let Some(exchange) = dlx.and_then(|dlx| self.exchange(dlx)) else {
            routed.all_routed = false;
            return routed;
        };
        let confirm_to = match answers {
            Some(answers) => ConfirmTo::Joining(answers),
            None => ConfirmTo::Nobody,
        };
        let dlx = &exchange.name;
        let mut scratch = PublishScratch::default();
        for (m, reason) in dead {
            let (mut copy, headers) =
                dead_lettered(&m.message, queue, reason, dlx, dlx_routing_key);
            copy.inherited_delivery_count = m.delivery_count;
            let copy = Arc::new(copy);
            // RabbitMQ's cycle rule, per target queue (see dead_letter.rs).
            let keep = |q: &Queue| !is_death_cycle(&q.name, reason, &headers);
            // Without a dead-letter routing key the copy goes where the publish's keys
            // lead, its CC keys included (RabbitMQ routes with the message's routing keys;
            // BCC keys were dropped with the header at publish and are not kept). With one,
            // that key alone; the CC header stays on the copy either way, as in RabbitMQ
            // 3.13 and later (3.10 removed it).
            let cc = match dlx_routing_key {
                None => header_routes(Some(&headers)).unwrap_or_default(),
                Some(_) => Vec::new(),
            };
            let keys = PublishKeys::new(copy.routing_key(), &cc);
            let publish = Publish {
                exchange: &exchange,
                message: &copy,
                routing_keys: keys.all(),
                headers: Some(&headers),
                confirm_to,
                origin: TraceOrigin::BROKER,
            };
            match self.route_and_enqueue(&publish, &mut scratch, Some(&keep)) {
                Ok(r) => {
                    // A copy no queue took, or one a queue or the store refused, is not
                    // safe: at-least-once dead-lettering sends it again.
                    if r.queues == 0 || r.confirm.refused() {
                        routed.all_routed = false;
                    }
                    if let (Some(store), true) = (&self.store, r.confirm.waits_for_store()) {
                        routed.stored = Some((store.clone(), r.confirm.store_seq()));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, queue = queue.as_str(), "dead-lettered copy not stored");
                    routed.all_routed = false;
                }
            }
        }
        routed
    }

    fn dead_lettered(&self) -> &DeadLettered {
        &self.counters.dead_lettered
    }
}
