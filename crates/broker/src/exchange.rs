//! Exchanges and their bindings. Each exchange keeps the list of its bindings (for unbind,
//! listing and persistence) and a per-type index used to route: a hash map for direct, a list
//! for fanout, a trie for topic, argument tables for headers.

use crate::headers_match::{headers_match, RoutingHeaders, XMatch};
use crate::name_map::NameMap;
use crate::policy::{effective_alternate_exchange, AppliedPolicies};
use crate::queue::Queue;
use crate::topic::TopicTrie;
use parking_lot::RwLock;
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

#[derive(Debug, Default)]
struct Bindings {
    all: Vec<Binding>,
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
        let mut b = self.bindings.write();
        if b.all.contains(&binding) {
            return false;
        }
        match self.kind {
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
        let mut b = self.bindings.write();
        let Some(at) = b.all.iter().position(|x| x == binding) else {
            return false;
        };
        b.all.swap_remove(at);
        let dest = &binding.destination;
        match self.kind {
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
                // Another binding with the same key and destination but other arguments
                // shares the trie entry: keep it while one remains.
                let still_bound = b
                    .all
                    .iter()
                    .any(|x| &x.destination == dest && x.routing_key == binding.routing_key);
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
        let before = b.all.len();
        b.all.retain(|x| &x.destination != dest);
        let removed = before - b.all.len();
        if removed > 0 {
            b.direct.retain(|_, list| {
                list.retain(|d| d != dest);
                !list.is_empty()
            });
            b.topic.retain(|d| d != dest);
            b.headers.retain(|(_, _, d)| d != dest);
        }
        removed
    }

    /// True when this exact binding exists.
    pub fn has_binding(&self, binding: &Binding) -> bool {
        self.bindings.read().all.contains(binding)
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
