//! The vhost's side of dead-lettering: a queue hands over the messages that left it dead
//! (`QueueHome::route_dead_letters`) and the vhost routes their dead-lettered copies through
//! its exchanges to their next queues — the queue itself never reaches into the vhost.

use super::VHost;
use crate::dead_letter::{dead_lettered, is_death_cycle};
use crate::queue::{DeadLetters, QueueHome};
use std::sync::Arc;
use warren_codec::ShortStr;
use warren_store::QueueId;

impl QueueHome for VHost {
    fn vhost_name(&self) -> &str {
        &self.name
    }

    fn route_dead_letters(
        &self,
        queue: &ShortStr,
        dead: DeadLetters,
        dlx: Option<&ShortStr>,
        dlx_routing_key: Option<&ShortStr>,
    ) {
        for (_, reason) in &dead {
            self.counters.dead_lettered.add(*reason, dlx.is_some(), 1);
        }
        let Some(dlx) = dlx else {
            return;
        };
        let Some(exchange) = self.exchange(dlx) else {
            return;
        };
        let mut queues = Vec::new();
        for (m, reason) in dead {
            let (mut copy, headers) =
                dead_lettered(&m.message, queue, reason, dlx, dlx_routing_key);
            copy.inherited_delivery_count = m.delivery_count;
            self.route(&exchange, &copy.routing_key, Some(&headers), &mut queues);
            // RabbitMQ's cycle rule, per target queue (see dead_letter.rs).
            queues.retain(|q| !is_death_cycle(&q.name, reason, &headers));
            // A persistent copy reaching durable queues is stored like a fresh publish.
            let stored = match &self.store {
                Some(store) if copy.persistent => {
                    let ids: Vec<QueueId> = queues
                        .iter()
                        .filter_map(|q| q.stored.as_ref().map(|s| s.id))
                        .collect();
                    (!ids.is_empty())
                        .then(|| store.append(&ids, &copy.to_stored()).ok())
                        .flatten()
                }
                _ => None,
            };
            if let (Some(appended), Some(store)) = (stored, &self.store) {
                if copy.inherited_delivery_count > 0 {
                    // The count the copy brings along, for each durable queue it joins.
                    for q in queues.iter().filter_map(|q| q.stored.as_ref()) {
                        let _ = store.set_delivery_count(
                            q.id,
                            appended.id,
                            copy.inherited_delivery_count,
                        );
                    }
                }
            }
            let copy = Arc::new(copy);
            for q in queues.drain(..) {
                q.publish(copy.clone(), stored.filter(|_| q.stored.is_some()));
            }
        }
    }

    fn forward_peers(&self) -> Arc<crate::remote::ForwardPeers> {
        VHost::forward_peers(self)
    }
}
