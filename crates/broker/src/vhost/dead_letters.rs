//! The vhost's side of dead-lettering: a queue hands over the messages that left it dead
//! (`QueueHome::route_dead_letters`) and the vhost routes their dead-lettered copies through
//! its exchanges to their next queues — the queue itself never reaches into the vhost.

use super::VHost;
use crate::churn::DeadLettered;
use crate::dead_letter::{dead_lettered, is_death_cycle};
use crate::queue::{DeadLetters, DeadLettersRouted, QueueHome};
use crate::quorum::QuorumConfirm;
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
        confirm: Option<&Arc<QuorumConfirm>>,
    ) -> DeadLettersRouted {
        let mut routed = DeadLettersRouted {
            all_routed: !dead.is_empty(),
            stored: None,
        };
        let Some(dlx) = dlx else {
            routed.all_routed = false;
            return routed;
        };
        let Some(exchange) = self.exchange(dlx) else {
            routed.all_routed = false;
            return routed;
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
            if queues.is_empty() {
                routed.all_routed = false;
            }
            if let (Some(appended), Some(store)) = (stored, &self.store) {
                routed.stored = Some((store.clone(), appended.seq));
            }
            let copy = Arc::new(copy);
            for q in queues.drain(..) {
                let stored = stored.filter(|_| q.stored.is_some());
                match confirm {
                    Some(confirm) => {
                        q.publish_confirmed(copy.clone(), stored, Some(confirm));
                    }
                    None => {
                        q.publish(copy.clone(), stored);
                    }
                }
            }
        }
        routed
    }

    fn dead_lettered(&self) -> &DeadLettered {
        &self.counters.dead_lettered
    }

    fn forward_peers(&self) -> Arc<crate::remote::ForwardPeers> {
        VHost::forward_peers(self)
    }
}
