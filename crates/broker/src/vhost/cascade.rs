//! Exchange removal and RabbitMQ's auto-delete cascade. A removed exchange's own bindings go
//! with it, and bindings that lead to it are dropped from their sources. An auto-delete
//! exchange goes as soon as a removal leaves it without bindings of its own: only bindings it
//! is the source of keep it, being a destination keeps nothing alive
//! (`rabbit_db_binding:maybe_auto_delete_exchange`). Each removal can empty another source in
//! turn, so the cascade runs until nothing more goes.

use super::VHost;
use crate::exchange::{Destination, Exchange};
use std::sync::Arc;

impl VHost {
    /// Removes `pending` and every exchange their removal cascades to; true when a durable
    /// exchange (and so perhaps durable bindings) went, for the caller to persist once.
    pub(super) fn remove_exchanges(&self, mut pending: Vec<Arc<Exchange>>) -> bool {
        let mut durable_changed = false;
        while let Some(exchange) = pending.pop() {
            {
                let mut exchanges = self.exchanges.write();
                match exchanges.get(&exchange.name) {
                    Some(e) if Arc::ptr_eq(e, &exchange) => {
                        exchanges.remove(&exchange.name);
                    }
                    // Already removed (reached twice in one cascade, or deleted meanwhile).
                    _ => continue,
                }
            }
            // A binding is durable only when both ends are: a durable binding lost here means
            // this exchange was durable.
            durable_changed |= exchange.durable;
            let to_it = Destination::Exchange(exchange.name.clone());
            for source in self.exchanges() {
                if source.unbind_destination(&to_it) > 0 && left_unused(&source) {
                    pending.push(source);
                }
            }
        }
        durable_changed
    }

    /// After bindings were taken from `source`: removes it (cascading) if it is auto-delete
    /// and that was its last one. True when something durable went.
    pub(super) fn source_lost_bindings(&self, source: &Arc<Exchange>) -> bool {
        left_unused(source) && self.remove_exchanges(vec![source.clone()])
    }
}

/// An auto-delete exchange with no bindings of its own left.
fn left_unused(exchange: &Exchange) -> bool {
    exchange.auto_delete && !exchange.has_bindings()
}

#[cfg(test)]
mod tests {
    use crate::connection_id::ConnectionId;
    use crate::memory::MemoryMonitor;
    use crate::{ExchangeDeclaration, QueueDeclaration, VHost};
    use std::sync::Arc;
    use warren_codec::{FieldTable, ShortStr};

    const CONN: ConnectionId = 1;

    fn vhost() -> Arc<VHost> {
        VHost::new(
            "/",
            Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
            None,
            Arc::default(),
        )
    }

    fn declare(v: &VHost, name: &str, auto_delete: bool) {
        v.declare_exchange(ExchangeDeclaration {
            name: name.into(),
            kind: "fanout".into(),
            passive: false,
            durable: false,
            auto_delete,
            internal: false,
            arguments: FieldTable::new(),
        })
        .unwrap();
    }

    fn bind(v: &VHost, destination: &str, source: &str) {
        v.bind_exchange(destination, source, ShortStr::from(""), FieldTable::new())
            .unwrap();
    }

    fn exists(v: &VHost, name: &str) -> bool {
        v.exchange(name).is_some()
    }

    #[test]
    fn unbinding_the_last_source_binding_deletes_an_auto_delete_exchange() {
        let v = vhost();
        declare(&v, "src", true);
        declare(&v, "dst", true);
        bind(&v, "dst", "src");
        v.unbind_exchange("dst", "src", ShortStr::from(""), FieldTable::new())
            .unwrap();
        assert!(!exists(&v, "src"), "the source lost its last binding");
        assert!(exists(&v, "dst"), "being a destination does not count");
    }

    #[test]
    fn unbinding_nothing_deletes_nothing() {
        let v = vhost();
        declare(&v, "lonely", true);
        v.unbind_exchange(
            "amq.fanout",
            "lonely",
            ShortStr::from(""),
            FieldTable::new(),
        )
        .unwrap();
        assert!(exists(&v, "lonely"), "no binding was removed");
    }

    #[test]
    fn deleting_a_destination_cascades_through_auto_delete_sources() {
        let v = vhost();
        declare(&v, "a", true);
        declare(&v, "b", true);
        declare(&v, "c", false);
        declare(&v, "keeps", true);
        bind(&v, "b", "a"); // a -> b -> c
        bind(&v, "c", "b");
        bind(&v, "c", "keeps"); // keeps -> c, keeps -> amq.direct
        bind(&v, "amq.direct", "keeps");
        v.delete_exchange("c", false).unwrap();
        assert!(
            !exists(&v, "b") && !exists(&v, "a"),
            "b then a lost their last binding"
        );
        assert!(exists(&v, "keeps"), "still the source of a binding");
        assert_eq!(v.exchange("keeps").unwrap().bindings().len(), 1);
    }

    #[test]
    fn deleting_a_source_keeps_its_auto_delete_destinations() {
        let v = vhost();
        declare(&v, "src", false);
        declare(&v, "dst", true);
        bind(&v, "dst", "src");
        bind(&v, "amq.fanout", "dst");
        v.delete_exchange("src", false).unwrap();
        assert!(exists(&v, "dst"));
        declare(&v, "src", false);
        assert!(
            v.exchange("src").unwrap().bindings().is_empty(),
            "a new exchange of the same name starts without the old bindings"
        );
    }

    #[test]
    fn if_unused_counts_only_source_bindings() {
        let v = vhost();
        declare(&v, "src", false);
        declare(&v, "dst", false);
        bind(&v, "dst", "src");
        assert_eq!(
            v.delete_exchange("src", true).unwrap_err().reply_text(),
            "PRECONDITION_FAILED - exchange 'src' in vhost '/' in use"
        );
        v.delete_exchange("dst", true).unwrap();
        assert!(v.exchange("src").unwrap().bindings().is_empty());
    }

    #[test]
    fn deleting_a_queue_cascades_to_exchanges() {
        let v = vhost();
        declare(&v, "x1", true);
        declare(&v, "x2", true);
        let q = QueueDeclaration {
            name: "q".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        v.declare_queue(q, CONN).unwrap();
        bind(&v, "x2", "x1");
        v.bind_queue("q", "x2", ShortStr::from(""), FieldTable::new(), CONN)
            .unwrap();
        v.delete_queue("q", false, false, CONN).unwrap();
        assert!(!exists(&v, "x2") && !exists(&v, "x1"));
    }

    #[test]
    fn a_self_bound_auto_delete_exchange_goes_with_its_binding() {
        let v = vhost();
        declare(&v, "me", true);
        bind(&v, "me", "me");
        v.unbind_exchange("me", "me", ShortStr::from(""), FieldTable::new())
            .unwrap();
        assert!(!exists(&v, "me"));
    }
}
