//! Property tests of the quorum queue state machine: over random command sequences no message is
//! lost or handed out twice, prefetch holds, ready messages never idle next to a consumer with
//! room, a requeued message goes behind every ready one, a config change (a policy) applies like
//! any command, at-least-once dead-lettering holds exactly the dead messages not yet settled,
//! and a snapshot taken anywhere restores a machine that behaves identically.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use proptest::prelude::*;
use warren_quorum::machine::{
    Command, ConsumerKey, Effect, MsgId, Overflow, PublisherSeq, QueueConfig, QueueState, Reply,
};

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        ttl_ms: Option<u64>,
        seq: Option<u64>,
        len: usize,
    },
    Checkout {
        consumer: ConsumerKey,
        prefetch: u32,
    },
    Cancel {
        consumer: ConsumerKey,
    },
    Settle {
        consumer: ConsumerKey,
        picks: Vec<usize>,
    },
    Return {
        consumer: ConsumerKey,
        picks: Vec<usize>,
    },
    Discard {
        consumer: ConsumerKey,
        picks: Vec<usize>,
    },
    Release {
        consumer: ConsumerKey,
        picks: Vec<usize>,
    },
    Purge,
    Tick {
        advance_ms: u64,
    },
    /// A policy changed the queue's limits.
    SetConfig(QueueConfig),
    /// At-least-once dead-lettering switched on or off.
    DeadLetterAtLeastOnce(bool),
    /// The leader reports held dead messages delivered (picked by index, as settles are).
    SettleDeadLetters {
        picks: Vec<usize>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let consumer = 0u64..3;
    let picks = proptest::collection::vec(0usize..8, 0..4);
    prop_oneof![
        4 => (proptest::option::of(0u64..40), proptest::option::of(0u64..6), 0usize..5)
            .prop_map(|(ttl_ms, seq, len)| Op::Enqueue { ttl_ms, seq, len }),
        1 => (consumer.clone(), 0u32..4).prop_map(|(consumer, prefetch)| Op::Checkout { consumer, prefetch }),
        1 => consumer.clone().prop_map(|consumer| Op::Cancel { consumer }),
        2 => (consumer.clone(), picks.clone()).prop_map(|(consumer, picks)| Op::Settle { consumer, picks }),
        2 => (consumer.clone(), picks.clone()).prop_map(|(consumer, picks)| Op::Return { consumer, picks }),
        1 => (consumer.clone(), picks.clone()).prop_map(|(consumer, picks)| Op::Discard { consumer, picks }),
        1 => (consumer, picks).prop_map(|(consumer, picks)| Op::Release { consumer, picks }),
        1 => Just(Op::Purge),
        1 => (0u64..30).prop_map(|advance_ms| Op::Tick { advance_ms }),
        1 => config().prop_map(Op::SetConfig),
        1 => any::<bool>().prop_map(Op::DeadLetterAtLeastOnce),
        1 => proptest::collection::vec(0usize..8, 0..4).prop_map(|picks| Op::SettleDeadLetters { picks }),
    ]
}

fn config() -> impl Strategy<Value = QueueConfig> {
    (
        proptest::option::of(0u32..3),
        proptest::option::of(0u64..5),
        proptest::option::of(0u64..12),
        prop_oneof![Just(Overflow::DropHead), Just(Overflow::RejectPublish)],
        proptest::option::of(0u64..60),
        any::<bool>(),
    )
        .prop_map(
            |(
                delivery_limit,
                max_length,
                max_length_bytes,
                overflow,
                message_ttl_ms,
                single_active_consumer,
            )| {
                QueueConfig {
                    delivery_limit,
                    max_length,
                    max_length_bytes,
                    overflow,
                    message_ttl_ms,
                    single_active_consumer,
                }
            },
        )
}

/// Ids from `held` by index, sorted and without repeats; an index past the end names an id
/// nobody holds.
fn pick_ids(held: &[MsgId], picks: &[usize]) -> Vec<MsgId> {
    let mut ids: Vec<MsgId> = picks
        .iter()
        .map(|i| held.get(*i).copied().unwrap_or(1_000_000 + *i as u64))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// What the test knows from replies and effects alone.
#[derive(Default)]
struct Model {
    now_ms: u64,
    accepted: BTreeSet<MsgId>,
    held: BTreeMap<MsgId, ConsumerKey>,
    gone: BTreeSet<MsgId>,
    prefetch: BTreeMap<ConsumerKey, u32>,
    /// Consumers in the order they registered (the single active consumer is the first).
    registered: Vec<ConsumerKey>,
    /// Fixed at declaration; a config change does not switch it.
    single_active_consumer: bool,
    at_least_once: bool,
    /// Dead messages held for at-least-once dead-lettering.
    dead_held: BTreeSet<MsgId>,
}

impl Model {
    fn held_by(&self, consumer: ConsumerKey) -> Vec<MsgId> {
        self.held
            .iter()
            .filter(|(_, c)| **c == consumer)
            .map(|(id, _)| *id)
            .collect()
    }

    fn ready(&self) -> BTreeSet<MsgId> {
        self.accepted
            .iter()
            .filter(|id| !self.held.contains_key(id) && !self.gone.contains(id))
            .copied()
            .collect()
    }

    /// Turns an op into a command, picking held ids (plus an id nobody holds) by index.
    fn command(&self, op: &Op) -> Command {
        let pick =
            |consumer: ConsumerKey, picks: &[usize]| pick_ids(&self.held_by(consumer), picks);
        match op {
            Op::Enqueue { ttl_ms, seq, len } => Command::Enqueue {
                publisher: seq.map(|seq| PublisherSeq { publisher: 1, seq }),
                body: Bytes::from(vec![b'x'; *len]),
                ttl_ms: *ttl_ms,
            },
            Op::Checkout { consumer, prefetch } => Command::Checkout {
                consumer: *consumer,
                prefetch: *prefetch,
            },
            Op::Cancel { consumer } => Command::Cancel {
                consumer: *consumer,
            },
            Op::Settle { consumer, picks } => Command::Settle {
                consumer: *consumer,
                msg_ids: pick(*consumer, picks),
            },
            Op::Return { consumer, picks } => Command::Return {
                consumer: *consumer,
                msg_ids: pick(*consumer, picks),
            },
            Op::Discard { consumer, picks } => Command::Discard {
                consumer: *consumer,
                msg_ids: pick(*consumer, picks),
            },
            Op::Release { consumer, picks } => Command::Release {
                consumer: *consumer,
                msg_ids: pick(*consumer, picks),
            },
            Op::Purge => Command::Purge,
            Op::Tick { .. } => Command::Tick,
            Op::SetConfig(config) => Command::SetConfig(config.clone()),
            Op::DeadLetterAtLeastOnce(on) => Command::SetDeadLetterAtLeastOnce(*on),
            Op::SettleDeadLetters { picks } => Command::SettleDeadLetters {
                msg_ids: pick_ids(&self.dead_held.iter().copied().collect::<Vec<_>>(), picks),
            },
        }
    }

    /// Applies `command` to `state` and checks the outcome against the model.
    /// Returns the command with its outcome, so a second machine can be fed the same.
    fn step(
        &mut self,
        state: &mut QueueState,
        op: &Op,
    ) -> Result<(Command, Reply, Vec<Effect>), TestCaseError> {
        if let Op::Tick { advance_ms } = op {
            self.now_ms += advance_ms;
        }
        let command = self.command(op);
        let ready_before = self.ready();
        let (reply, effects) = state.apply(self.now_ms, command.clone());
        let mut requeued = Vec::new();

        // What the command itself did to messages, before its effects.
        match (&command, &reply) {
            (Command::Enqueue { .. }, Reply::Enqueued { msg_id }) => {
                prop_assert!(self.accepted.insert(*msg_id), "msg id {} reused", msg_id);
            }
            (Command::Checkout { consumer, prefetch }, _) => {
                let newly_registered = self.prefetch.insert(*consumer, *prefetch).is_none();
                if newly_registered {
                    self.registered.push(*consumer);
                }
            }
            (Command::Cancel { consumer }, _) => {
                let known = self.prefetch.remove(consumer).is_some();
                self.registered.retain(|c| c != consumer);
                prop_assert_eq!(known, reply == Reply::Ok);
                for id in self.held_by(*consumer) {
                    self.held.remove(&id);
                }
            }
            (Command::Settle { consumer, msg_ids }, _)
            | (Command::Return { consumer, msg_ids }, _)
            | (Command::Discard { consumer, msg_ids }, _)
            | (Command::Release { consumer, msg_ids }, _) => {
                let mine: Vec<MsgId> = msg_ids
                    .iter()
                    .filter(|id| self.held.get(id) == Some(consumer))
                    .copied()
                    .collect();
                if self.prefetch.contains_key(consumer) {
                    prop_assert_eq!(&reply, &Reply::Handled { count: mine.len() });
                } else {
                    prop_assert_eq!(&reply, &Reply::UnknownConsumer);
                }
                for id in mine {
                    self.held.remove(&id);
                    if matches!(command, Command::Settle { .. }) {
                        self.gone.insert(id);
                    }
                    if matches!(command, Command::Return { .. }) {
                        requeued.push(id);
                    }
                }
            }
            (Command::SetDeadLetterAtLeastOnce(on), _) => {
                self.at_least_once = *on;
                if !on {
                    self.dead_held.clear();
                }
            }
            (Command::SettleDeadLetters { msg_ids }, _) => {
                let settled = msg_ids
                    .iter()
                    .filter(|id| self.dead_held.remove(id))
                    .count();
                prop_assert_eq!(&reply, &Reply::Handled { count: settled });
            }
            (Command::Purge, Reply::Purged { count }) => {
                // Expiry at the start of the command may have removed some ready ones first.
                let expired: BTreeSet<MsgId> = effects
                    .iter()
                    .filter_map(|e| match e {
                        Effect::DeadLetter { message, .. } => Some(message.id),
                        _ => None,
                    })
                    .collect();
                let purged: Vec<MsgId> = ready_before.difference(&expired).copied().collect();
                prop_assert_eq!(*count, purged.len());
                self.gone.extend(purged);
            }
            _ => {}
        }

        for effect in &effects {
            match effect {
                Effect::Deliver { consumer, message } => {
                    prop_assert!(self.accepted.contains(&message.id));
                    prop_assert!(!self.gone.contains(&message.id), "delivered a gone message");
                    // Lowering prefetch does not take messages back, so the bound is checked when
                    // a message is handed out.
                    let prefetch = self.prefetch.get(consumer).copied();
                    prop_assert!(prefetch.is_some(), "delivered to an unknown consumer");
                    if self.single_active_consumer {
                        prop_assert_eq!(
                            self.registered.first(),
                            Some(consumer),
                            "delivered to a consumer that is not the active one"
                        );
                    }
                    let held = self.held_by(*consumer).len();
                    prop_assert!(prefetch == Some(0) || held < prefetch.unwrap_or(0) as usize);
                    prop_assert!(
                        self.held.insert(message.id, *consumer).is_none(),
                        "message {} delivered while already checked out",
                        message.id
                    );
                }
                Effect::DeadLetter { message, .. } => {
                    prop_assert!(self.accepted.contains(&message.id));
                    prop_assert!(!self.held.contains_key(&message.id));
                    prop_assert!(self.gone.insert(message.id), "dead-lettered twice");
                    if self.at_least_once {
                        self.dead_held.insert(message.id);
                    }
                }
                Effect::ConsumersFull(true) => {
                    // Reported only when no consumer could take another message.
                    prop_assert!(!self.prefetch.is_empty(), "full without consumers");
                    if !self.single_active_consumer {
                        for (consumer, prefetch) in &self.prefetch {
                            let held = self.held_by(*consumer).len();
                            prop_assert!(
                                *prefetch > 0 && held >= *prefetch as usize,
                                "full while consumer {consumer} holds {held} of {prefetch}"
                            );
                        }
                    }
                }
                Effect::ConsumersFull(false) => {}
            }
        }

        // A purge drops the held dead letters too, those its own start expired included.
        if matches!(command, Command::Purge) {
            self.dead_held.clear();
        }

        // The machine's view matches the model's: nothing lost, nothing duplicated.
        let ready_ids = state.ready_ids();
        let ready_set: BTreeSet<MsgId> = ready_ids.iter().copied().collect();
        // Requeued messages still waiting are the last ones, in the order they were named.
        let requeued_waiting: Vec<MsgId> = requeued
            .iter()
            .filter(|id| ready_set.contains(id))
            .copied()
            .collect();
        prop_assert!(
            ready_ids.ends_with(&requeued_waiting),
            "requeued {:?} not at the back of {:?}",
            requeued_waiting,
            ready_ids
        );
        prop_assert_eq!(ready_set.len(), ready_ids.len(), "duplicate in ready queue");
        prop_assert_eq!(&ready_set, &self.ready());
        prop_assert_eq!(
            state.consumer_keys(),
            self.prefetch.keys().copied().collect::<Vec<_>>()
        );
        let mut room = false;
        for (consumer, prefetch) in &self.prefetch {
            let held = self.held_by(*consumer);
            prop_assert_eq!(state.checked_out_ids(*consumer), Some(held.clone()));
            let serves = !self.single_active_consumer || self.registered.first() == Some(consumer);
            room |= serves && (*prefetch == 0 || held.len() < *prefetch as usize);
        }
        if room {
            prop_assert!(
                ready_ids.is_empty(),
                "ready messages idle next to a free consumer"
            );
        }
        let dead_held: BTreeSet<MsgId> = state.dead_letters_held().map(|(_, m)| m.id).collect();
        prop_assert_eq!(&dead_held, &self.dead_held, "held dead messages");
        prop_assert_eq!(state.dead_letters_at_least_once(), self.at_least_once);
        let bytes: u64 = state.ready_messages().map(|m| m.body.len() as u64).sum();
        prop_assert_eq!(bytes, state.ready_bytes());
        Ok((command, reply, effects))
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_message_lost_or_duplicated(config in config(), ops in proptest::collection::vec(op(), 1..120)) {
        let mut model = Model { single_active_consumer: config.single_active_consumer, ..Model::default() };
        let mut state = QueueState::new(config);
        for op in &ops {
            model.step(&mut state, op)?;
        }
        // Everything accepted is accounted for exactly once.
        let held: BTreeSet<MsgId> = model.held.keys().copied().collect();
        let ready = model.ready();
        prop_assert_eq!(
            model.accepted.len(),
            held.len() + ready.len() + model.gone.len()
        );
        prop_assert_eq!(state.checked_out_count() + state.ready_count(), held.len() + ready.len());
    }

    #[test]
    fn snapshot_restore_is_equivalent(
        config in config(),
        ops in proptest::collection::vec(op(), 1..120),
        split in 0usize..120,
    ) {
        let split = split.min(ops.len());
        let mut model = Model { single_active_consumer: config.single_active_consumer, ..Model::default() };
        let mut original = QueueState::new(config);
        for op in &ops[..split] {
            model.step(&mut original, op)?;
        }
        let mut restored = QueueState::from_snapshot(&original.to_snapshot()).expect("decodes");
        prop_assert_eq!(&restored, &original);
        for op in &ops[split..] {
            let (command, reply, effects) = model.step(&mut original, op)?;
            let (restored_reply, restored_effects) = restored.apply(model.now_ms, command);
            prop_assert_eq!(restored_reply, reply);
            // What a member reports of its consumers' room follows what it reported before
            // (not replicated state, so not in a snapshot): compare the rest.
            let replicated = |effects: Vec<Effect>| -> Vec<Effect> {
                effects.into_iter().filter(Effect::is_replicated).collect()
            };
            prop_assert_eq!(replicated(restored_effects), replicated(effects));
        }
        prop_assert_eq!(restored, original);
    }
}
