//! Exchanges and their bindings. Each exchange keeps the list of its bindings (for unbind,
//! listing and persistence) and a per-type index used to route: a hash map for direct, a list
//! for fanout, a trie for topic, argument tables for headers.

use crate::headers_match::{headers_match, RoutingHeaders, XMatch};
use crate::name_map::NameMap;
use crate::policy::{effective_alternate_exchange, AppliedPolicies};
use crate::queue::Queue;
use crate::topic::TopicTrie;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use warren_codec::{FieldTable, ShortStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeKind {
    pub fn parse(s: &str) -> Option<ExchangeKind> {
        Some(match s {
            "direct" => ExchangeKind::Direct,
            "fanout" => ExchangeKind::Fanout,
            "topic" => ExchangeKind::Topic,
            "headers" => ExchangeKind::Headers,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// Where a binding sends messages: a queue (held directly, so routing needs no lookup) or
/// another exchange (held by name, so exchange-to-exchange cycles are not `Arc` cycles).
#[derive(Debug, Clone)]
pub enum Destination {
    Queue(Arc<Queue>),
    Exchange(ShortStr),
}

impl PartialEq for Destination {
    fn eq(&self, other: &Destination) -> bool {
        match (self, other) {
            (Destination::Queue(a), Destination::Queue(b)) => Arc::ptr_eq(a, b),
            (Destination::Exchange(a), Destination::Exchange(b)) => a == b,
            _ => false,
        }
    }
}

impl Destination {
    pub fn name(&self) -> &ShortStr {
        match self {
            Destination::Queue(q) => &q.name,
            Destination::Exchange(e) => e,
        }
    }

    pub fn is_queue(&self) -> bool {
        matches!(self, Destination::Queue(_))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub destination: Destination,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

/// A binding's identity, for the index: its key, its destination (a queue by the address of
/// its `Arc`, which the binding holds, so no other queue has it meanwhile; an exchange by
/// name) and its arguments, encoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BindingId {
    routing_key: ShortStr,
    destination: DestinationId,
    arguments: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DestinationId {
    Queue(usize),
    Exchange(ShortStr),
}

impl DestinationId {
    fn of(destination: &Destination) -> DestinationId {
        match destination {
            Destination::Queue(q) => DestinationId::Queue(Arc::as_ptr(q) as usize),
            Destination::Exchange(name) => DestinationId::Exchange(name.clone()),
        }
    }
}

impl BindingId {
    fn of(binding: &Binding) -> BindingId {
        let mut arguments = bytes::BytesMut::new();
        if !binding.arguments.is_empty() {
            warren_codec::Writer::new(&mut arguments).table(&binding.arguments);
        }
        BindingId {
            routing_key: binding.routing_key.clone(),
            destination: DestinationId::of(&binding.destination),
            arguments: arguments.to_vec(),
        }
    }

    /// The (key, destination) part: bindings that differ only in arguments share a direct
    /// list entry and a topic trie entry.
    fn route(&self) -> (ShortStr, DestinationId) {
        (self.routing_key.clone(), self.destination.clone())
    }
}

#[derive(Debug, Default)]
struct Bindings {
    /// Every binding, for fanout routing, listing and persistence.
    all: Vec<Binding>,
    /// Where each binding is in `all`: bind and unbind in O(1) however many bindings the
    /// exchange has (a linear search made binding N queues O(N²): a million topic bindings
    /// would never finish).
    at: HashMap<BindingId, usize>,
    /// How many bindings share each (key, destination).
    per_route: HashMap<(ShortStr, DestinationId), u32>,
    direct: NameMap<Vec<Destination>>,
    topic: TopicTrie<Destination>,
    /// Headers bindings: (rule, arguments, destination), checked one by one.
    headers: Vec<(XMatch, FieldTable, Destination)>,
}

#[derive(Debug)]
pub struct Exchange {
    pub name: ShortStr,
    pub kind: ExchangeKind,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    /// The arguments it was declared with (policies do not change them).
    pub arguments: FieldTable,
    policy: RwLock<PolicyState>,
    bindings: RwLock<Bindings>,
    /// publish_in / publish_out (the API's message_stats).
    pub stats: crate::stats::MessageStats,
}

/// The policies that apply to an exchange and the alternate exchange they leave it with.
#[derive(Debug, Default)]
struct PolicyState {
    applied: AppliedPolicies,
    alternate_exchange: Option<ShortStr>,
}

/// A vhost keeps its exchanges by name and in name order (`named_entries.rs`).
impl crate::named_entries::Named for Exchange {
    fn name(&self) -> &ShortStr {
        &self.name
    }
}

impl Exchange {
    /// RabbitMQ's refusal of a publish to this exchange when it is internal (only bindings
    /// from other exchanges may feed it); None when clients may publish to it. Every
    /// protocol's publish asks it: 0-9-1 closes the channel with 403, AMQP 1.0 rejects the
    /// transfer with unauthorized-access, the HTTP API answers 401.
    pub fn publish_refusal(&self, vhost: &str) -> Option<String> {
        self.internal.then(|| {
            format!(
                "cannot publish to internal exchange '{}' in vhost '{vhost}'",
                self.name
            )
        })
    }

    pub fn new(
        name: ShortStr,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Exchange {
        let alternate_exchange =
            effective_alternate_exchange(&arguments, &AppliedPolicies::default());
        Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            policy: RwLock::new(PolicyState {
                applied: AppliedPolicies::default(),
                alternate_exchange,
            }),
            bindings: RwLock::new(Bindings::default()),
            stats: crate::stats::MessageStats::default(),
        }
    }

    /// Where unroutable messages go: the `alternate-exchange` argument, else the policy's.
    pub fn alternate_exchange(&self) -> Option<ShortStr> {
        self.policy.read().alternate_exchange.clone()
    }

    /// The policies that apply to the exchange (the management API's `policy`).
    pub fn policies(&self) -> AppliedPolicies {
        self.policy.read().applied.clone()
    }

    /// Applies a (new) set of policies; returns true when they changed.
    pub fn apply_policies(&self, applied: AppliedPolicies) -> bool {
        let mut state = self.policy.write();
        if state.applied == applied {
            return false;
        }
        state.alternate_exchange = effective_alternate_exchange(&self.arguments, &applied);
        state.applied = applied;
        true
    }

    /// Adds a binding; false if an identical one exists. Headers bindings must carry a valid
    /// `x-match` (checked by the caller with `XMatch::from_arguments`).
    pub fn bind(&self, binding: Binding) -> bool {
        let id = BindingId::of(&binding);
        let mut b = self.bindings.write();
        if b.at.contains_key(&id) {
            return false;
        }
        let shared = b.per_route.get(&id.route()).is_some_and(|n| *n > 0);
        *b.per_route.entry(id.route()).or_default() += 1;
        let at = b.all.len();
        b.at.insert(id, at);
        match self.kind {
            ExchangeKind::Direct if shared => {}
            ExchangeKind::Direct => b
                .direct
                .entry(binding.routing_key.clone())
                .or_default()
                .push(binding.destination.clone()),
            ExchangeKind::Fanout => {}
            ExchangeKind::Topic => {
                b.topic
                    .insert(&binding.routing_key, binding.destination.clone());
            }
            ExchangeKind::Headers => {
                let rule = XMatch::from_arguments(&binding.arguments).unwrap_or(XMatch::All);
                b.headers
                    .push((rule, binding.arguments.clone(), binding.destination.clone()));
            }
        }
        b.all.push(binding);
        true
    }

    /// Removes a binding; false if there was none.
    pub fn unbind(&self, binding: &Binding) -> bool {
        let id = BindingId::of(binding);
        let mut b = self.bindings.write();
        Self::unbind_locked(self.kind, &mut b, binding, id)
    }

    fn unbind_locked(
        kind: ExchangeKind,
        b: &mut Bindings,
        binding: &Binding,
        id: BindingId,
    ) -> bool {
        let Some(at) = b.at.remove(&id) else {
            return false;
        };
        b.all.swap_remove(at);
        if let Some(moved) = b.all.get(at) {
            let moved = BindingId::of(moved);
            b.at.insert(moved, at);
        }
        // Another binding with the same key and destination but other arguments shares
        // the direct list's and the topic trie's entry: kept while one remains.
        let route = id.route();
        let still_bound = match b.per_route.get_mut(&route) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            _ => {
                b.per_route.remove(&route);
                false
            }
        };
        let dest = &binding.destination;
        match kind {
            ExchangeKind::Direct if still_bound => {}
            ExchangeKind::Direct => {
                if let Some(list) = b.direct.get_mut(&binding.routing_key) {
                    list.retain(|d| d != dest);
                    if list.is_empty() {
                        b.direct.remove(&binding.routing_key);
                    }
                }
            }
            ExchangeKind::Fanout => {}
            ExchangeKind::Topic => {
                if !still_bound {
                    b.topic.remove(&binding.routing_key, dest);
                }
            }
            ExchangeKind::Headers => {
                if let Some(i) = b
                    .headers
                    .iter()
                    .position(|(_, a, d)| d == dest && *a == binding.arguments)
                {
                    b.headers.remove(i);
                }
            }
        }
        true
    }

    /// Drops every binding to `dest` (a deleted queue or exchange); returns how many.
    pub fn unbind_destination(&self, dest: &Destination) -> usize {
        let mut b = self.bindings.write();
        // One pass to find them (a pointer or name compare each), then each removed as
        // unbind removes it.
        let bound: Vec<Binding> = b
            .all
            .iter()
            .filter(|x| &x.destination == dest)
            .cloned()
            .collect();
        for binding in &bound {
            Self::unbind_locked(self.kind, &mut b, binding, BindingId::of(binding));
        }
        bound.len()
    }

    /// True when this exact binding exists.
    pub fn has_binding(&self, binding: &Binding) -> bool {
        let id = BindingId::of(binding);
        self.bindings.read().at.contains_key(&id)
    }

    pub fn has_bindings(&self) -> bool {
        !self.bindings.read().all.is_empty()
    }

    pub fn bindings(&self) -> Vec<Binding> {
        self.bindings.read().all.clone()
    }

    /// Calls `found` with each destination this exchange's own bindings select for any of
    /// `routing_keys` (a destination two keys select is reported twice).
    pub fn route(
        &self,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        mut found: impl FnMut(&Destination),
    ) {
        let b = self.bindings.read();
        match self.kind {
            ExchangeKind::Direct => {
                for key in routing_keys {
                    if let Some(list) = b.direct.get(*key) {
                        list.iter().for_each(&mut found);
                    }
                }
            }
            ExchangeKind::Fanout => b.all.iter().for_each(|x| found(&x.destination)),
            ExchangeKind::Topic => {
                for key in routing_keys {
                    b.topic.matches(key, &mut found);
                }
            }
            ExchangeKind::Headers if !b.headers.is_empty() => {
                let headers = RoutingHeaders::new(headers);
                for (rule, args, dest) in &b.headers {
                    if headers_match(*rule, args, &headers) {
                        found(dest);
                    }
                }
            }
            ExchangeKind::Headers => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_codec::FieldValue;

    fn to(destination: &str, key: &str, arguments: &FieldTable) -> Binding {
        Binding {
            destination: Destination::Exchange(destination.into()),
            routing_key: key.into(),
            arguments: arguments.clone(),
        }
    }

    fn routed(x: &Exchange) -> Vec<String> {
        let mut found = Vec::new();
        x.route(&["k"], None, |d| found.push(d.name().to_string()));
        found.sort();
        found
    }

    #[test]
    fn bindings_differing_in_arguments_share_a_route_until_the_last_goes() {
        let none = FieldTable::new();
        let mut some = FieldTable::new();
        some.insert("a", FieldValue::I32(1));
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Topic,
            ExchangeKind::Fanout,
        ] {
            let x = Exchange::new("x".into(), kind, false, false, false, none.clone());
            assert!(x.bind(to("d", "k", &none)));
            assert!(x.bind(to("d", "k", &some)));
            assert!(
                !x.bind(to("d", "k", &some)),
                "{kind:?}: an identical binding"
            );
            assert!(x.bind(to("e", "k", &none)));
            let both = if kind == ExchangeKind::Fanout {
                vec!["d", "d", "e"]
            } else {
                vec!["d", "e"]
            };
            assert_eq!(routed(&x), both, "{kind:?}");
            assert!(x.unbind(&to("d", "k", &none)));
            assert!(!x.unbind(&to("d", "k", &none)), "{kind:?}: gone already");
            assert_eq!(routed(&x), ["d", "e"], "{kind:?}: d's other binding routes");
            // The last binding moved into the removed one's place: still found.
            assert!(x.has_binding(&to("e", "k", &none)), "{kind:?}");
            assert!(x.has_binding(&to("d", "k", &some)), "{kind:?}");
            assert!(x.unbind(&to("d", "k", &some)));
            assert_eq!(routed(&x), ["e"], "{kind:?}");
            assert!(x.bind(to("e", "other", &none)));
            let e = Destination::Exchange("e".into());
            assert_eq!(x.unbind_destination(&e), 2, "{kind:?}");
            assert!(!x.has_bindings(), "{kind:?}");
            assert!(routed(&x).is_empty(), "{kind:?}");
        }
    }
}
