//! Ops and results survive their encoding whole, and applying ops answers what the callers
//! (channel, HTTP API) turn into replies.

use super::*;
use crate::Broker;
use warren_codec::FieldValue;

fn args() -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-max-length", FieldValue::I8(-3));
    t.insert("x-dec", FieldValue::Decimal { scale: 2, value: 7 });
    t.insert("x-dead-letter-exchange", FieldValue::string("dlx"));
    t.insert("x-ts", FieldValue::Timestamp(42));
    let mut inner = FieldTable::new();
    inner.insert("a", FieldValue::Array(vec![FieldValue::Bool(true)]));
    t.insert("nested", FieldValue::Table(inner));
    t
}

fn s(text: &str) -> String {
    text.to_owned()
}

/// One op of every kind.
fn every_op() -> Vec<DefinitionOp> {
    use DefinitionOp::*;
    vec![
        VhostAdd {
            name: s("v"),
            grant_full_to: Some(s("admin")),
        },
        VhostSetMetadata {
            name: s("v"),
            description: s("d"),
            tags: vec![s("t1"), s("t2")],
        },
        VhostSetLimits {
            name: s("v"),
            max_connections: Some(3),
            max_queues: None,
        },
        VhostSetTracing {
            name: s("v"),
            tracing: true,
        },
        VhostDelete { name: s("v") },
        UserPut {
            name: s("u"),
            password_hash: crate::access::Hashing::Sha256.hash("secret"),
            hashing_algorithm: s(crate::access::SHA256),
            tags: vec![s("management")],
        },
        UserDelete { name: s("u") },
        UserSetLimits {
            name: s("u"),
            max_connections: Some(10),
            max_channels: None,
        },
        PermissionSet {
            vhost: s("v"),
            user: s("u"),
            configure: s(".*"),
            write: s("^a"),
            read: s(""),
        },
        PermissionClear {
            vhost: s("v"),
            user: s("u"),
        },
        TopicPermissionSet {
            vhost: s("v"),
            user: s("u"),
            exchange: s("amq.topic"),
            write: s("^x"),
            read: s(".*"),
        },
        TopicPermissionClear {
            vhost: s("v"),
            user: s("u"),
            exchange: None,
        },
        PolicySet {
            list: PolicyList::Operator,
            vhost: s("v"),
            name: s("p"),
            body_json: s(r#"{"pattern":"^q","definition":{"max-length":1}}"#),
        },
        PolicyClear {
            list: PolicyList::Policy,
            vhost: s("v"),
            name: s("p"),
        },
        ParameterSet {
            vhost: s("v"),
            component: s("shovel"),
            name: s("s"),
            value_json: s("{}"),
        },
        ParameterClear {
            vhost: s("v"),
            component: s("shovel"),
            name: s("s"),
        },
        GlobalParameterSet {
            name: s("cluster_name"),
            value_json: s(r#""c""#),
        },
        GlobalParameterClear {
            name: s("cluster_name"),
        },
        ExchangeDeclare {
            vhost: s("v"),
            name: s("x"),
            kind: s("topic"),
            durable: true,
            auto_delete: false,
            internal: true,
            arguments: args(),
        },
        ExchangeDelete {
            vhost: s("v"),
            name: s("x"),
            if_unused: true,
        },
        QueueDeclare {
            vhost: s("v"),
            name: s("amq.gen-abc"),
            server_named: true,
            durable: false,
            exclusive: true,
            auto_delete: true,
            arguments: args(),
            connection: 9,
            members: Vec::new(),
            home: Some(s("rabbit@n1")),
        },
        QueueDelete {
            vhost: s("v"),
            name: s("q"),
            connection: 9,
        },
        QueueSetMembers {
            vhost: s("v"),
            name: s("q"),
            members: vec![3, u64::MAX],
        },
        QueueBind {
            vhost: s("v"),
            queue: s("q"),
            exchange: s("x"),
            routing_key: s("k.é"),
            arguments: args(),
            connection: 9,
        },
        QueueUnbind {
            vhost: s("v"),
            queue: s("q"),
            exchange: s("x"),
            routing_key: s(""),
            arguments: FieldTable::new(),
            connection: 0,
        },
        ExchangeBind {
            vhost: s("v"),
            destination: s("d"),
            source: s("x"),
            routing_key: s("#"),
            arguments: args(),
        },
        ExchangeUnbind {
            vhost: s("v"),
            destination: s("d"),
            source: s("x"),
            routing_key: s("#"),
            arguments: args(),
        },
    ]
}

#[test]
fn every_op_round_trips_through_its_encoding() {
    for op in every_op() {
        let bytes = op.encode();
        assert_eq!(DefinitionOp::decode(&bytes).unwrap(), op, "{op:?}");
    }
}

#[test]
fn the_encoding_is_versioned_and_carries_no_clear_text_password() {
    let op = DefinitionOp::UserPut {
        name: s("u"),
        password_hash: crate::access::Hashing::Sha256.hash("secret"),
        hashing_algorithm: s(crate::access::SHA256),
        tags: vec![],
    };
    let text = String::from_utf8(op.encode()).unwrap();
    assert!(text.contains(r#""v":1"#), "{text}");
    assert!(!text.contains("secret"), "{text}");

    let future = text.replace(r#""v":1"#, r#""v":2"#);
    let refused = DefinitionOp::decode(future.as_bytes()).unwrap_err();
    assert_eq!(refused.code, ReplyCode::InternalError);
    assert!(refused.text.contains("unknown version"), "{}", refused.text);
    assert!(DefinitionOp::decode(b"not json").is_err());
}

#[test]
fn results_round_trip_with_their_reply_code_and_text() {
    let results = [
        Ok(Outcome::Done),
        Ok(Outcome::Put { created: false }),
        Ok(Outcome::Removed { existed: true }),
        Ok(Outcome::QueueDeclared {
            name: s("amq.gen-x"),
            created: true,
            message_count: 4,
            consumer_count: 1,
        }),
        Ok(Outcome::QueueDeleted { message_count: 7 }),
        Err(AmqpError::precondition("inequivalent arg 'durable'")),
        Err(AmqpError::resource_locked("locked")),
        Err(AmqpError::new(ReplyCode::CommandInvalid, "unknown type")),
    ];
    for result in results {
        assert_eq!(decode_result(&encode_result(&result)), result);
    }
    assert_eq!(
        decode_result(b"{}").unwrap_err().code,
        ReplyCode::InternalError
    );
}

#[test]
fn without_connection_clears_only_the_connection() {
    let op = DefinitionOp::QueueBind {
        vhost: s("v"),
        queue: s("q"),
        exchange: s("x"),
        routing_key: s("k"),
        arguments: FieldTable::new(),
        connection: 9,
    };
    let DefinitionOp::QueueBind { connection, .. } = op.clone().without_connection() else {
        panic!("same kind");
    };
    assert_eq!(connection, 0);
    assert_eq!(op.vhost(), Some("v"));
}

fn exchange(name: &str, kind: &str, durable: bool) -> DefinitionOp {
    DefinitionOp::ExchangeDeclare {
        vhost: s("/"),
        name: s(name),
        kind: s(kind),
        durable,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }
}

fn queue(name: &str, durable: bool) -> DefinitionOp {
    DefinitionOp::QueueDeclare {
        vhost: s("/"),
        name: s(name),
        server_named: false,
        durable,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
        connection: 0,
        members: Vec::new(),
        home: None,
    }
}

#[test]
fn applying_declares_answers_as_the_channel_replies() {
    let broker = Broker::new(usize::MAX, None);
    let x = exchange("x", "direct", true);
    assert_eq!(broker.apply(x.clone()), Ok(Outcome::Put { created: true }));
    assert_eq!(broker.apply(x), Ok(Outcome::Put { created: false }));
    let refused = broker.apply(exchange("x", "direct", false)).unwrap_err();
    assert_eq!(
        refused.reply_text(),
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '/': received 'false' but current is 'true'"
    );
    let reserved = broker.apply(exchange("amq.x", "direct", true)).unwrap_err();
    assert_eq!(reserved.code, ReplyCode::AccessRefused);

    assert_eq!(
        broker.apply(queue("q", true)),
        Ok(Outcome::QueueDeclared {
            name: s("q"),
            created: true,
            message_count: 0,
            consumer_count: 0
        })
    );
    // A server-named queue's amq.gen- name, chosen before the op, is taken as is.
    let named = DefinitionOp::QueueDeclare {
        vhost: s("/"),
        name: s("amq.gen-chosen"),
        server_named: true,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
        connection: 0,
        members: Vec::new(),
        home: None,
    };
    assert!(matches!(
        broker.apply(named),
        Ok(Outcome::QueueDeclared { name, .. }) if name == "amq.gen-chosen"
    ));
    assert!(broker.vhost("/").unwrap().queue("amq.gen-chosen").is_some());
    assert_eq!(
        broker
            .apply(queue("amq.gen-chosen", false))
            .unwrap_err()
            .code,
        ReplyCode::AccessRefused,
        "a client naming an amq. queue is refused"
    );
    let bind = DefinitionOp::QueueBind {
        vhost: s("/"),
        queue: s("q"),
        exchange: s("x"),
        routing_key: s("k"),
        arguments: FieldTable::new(),
        connection: 0,
    };
    assert_eq!(broker.apply(bind), Ok(Outcome::Done));
    let x = broker.vhost("/").unwrap().exchange("x").unwrap();
    assert_eq!(x.bindings().len(), 1);
    let delete = DefinitionOp::QueueDelete {
        vhost: s("/"),
        name: s("q"),
        connection: 0,
    };
    assert_eq!(
        broker.apply(delete.clone()),
        Ok(Outcome::QueueDeleted { message_count: 0 })
    );
    assert_eq!(
        broker.apply(delete),
        Ok(Outcome::QueueDeleted { message_count: 0 }),
        "a missing queue's deletion succeeds"
    );
    let missing_vhost = DefinitionOp::ExchangeDelete {
        vhost: s("nope"),
        name: s("x"),
        if_unused: false,
    };
    assert_eq!(
        broker.apply(missing_vhost).unwrap_err().code,
        ReplyCode::NotFound
    );
}

#[test]
fn applying_puts_and_removals_says_whether_they_created_or_found() {
    let broker = Broker::new(usize::MAX, None);
    let add = DefinitionOp::VhostAdd {
        name: s("v"),
        grant_full_to: Some(s("guest")),
    };
    assert_eq!(
        broker.apply(add.clone()),
        Ok(Outcome::Put { created: true })
    );
    assert_eq!(broker.apply(add), Ok(Outcome::Put { created: false }));
    assert!(broker.access.permission("v", "guest").is_some());

    let user = DefinitionOp::UserPut {
        name: s("u"),
        password_hash: crate::access::Hashing::Sha256.hash("pw"),
        hashing_algorithm: s(crate::access::SHA256),
        tags: vec![s("monitoring")],
    };
    assert_eq!(
        broker.apply(user.clone()),
        Ok(Outcome::Put { created: true })
    );
    assert_eq!(broker.apply(user), Ok(Outcome::Put { created: false }));
    assert!(broker.access.authenticate("u", "pw").is_ok());
    let bad_regex = DefinitionOp::permission_set(
        "v",
        "u",
        crate::access::Permission {
            configure: s("("),
            write: s(".*"),
            read: s(".*"),
        },
    );
    assert_eq!(
        broker.apply(bad_regex).unwrap_err().code,
        ReplyCode::PreconditionFailed
    );
    let policy = DefinitionOp::PolicySet {
        list: PolicyList::Policy,
        vhost: s("v"),
        name: s("p"),
        body_json: s(r#"{"pattern":"^q","definition":{"max-length":1}}"#),
    };
    assert_eq!(broker.apply(policy), Ok(Outcome::Put { created: true }));
    let invalid = DefinitionOp::PolicySet {
        list: PolicyList::Policy,
        vhost: s("v"),
        name: s("p"),
        body_json: s(r#"{"pattern":"^q","definition":{"max-length":"x"}}"#),
    };
    assert!(broker
        .apply(invalid)
        .unwrap_err()
        .text
        .contains("Validation failed"));
    let clear = DefinitionOp::PolicyClear {
        list: PolicyList::Policy,
        vhost: s("v"),
        name: s("p"),
    };
    assert_eq!(
        broker.apply(clear.clone()),
        Ok(Outcome::Removed { existed: true })
    );
    assert_eq!(broker.apply(clear), Ok(Outcome::Removed { existed: false }));
    let delete = DefinitionOp::VhostDelete { name: s("v") };
    assert_eq!(
        broker.apply(delete.clone()),
        Ok(Outcome::Removed { existed: true })
    );
    assert_eq!(
        broker.apply(delete),
        Ok(Outcome::Removed { existed: false })
    );
    assert!(broker.access.permission("v", "guest").is_none());
}

#[test]
fn seed_ops_are_what_seed_defaults_applies() {
    let broker = Broker::new(usize::MAX, None);
    let ops = broker.seed_ops("admin", "pw", "prod");
    assert!(ops
        .iter()
        .any(|op| matches!(op, DefinitionOp::UserDelete { name } if name == "guest")));
    broker.seed_defaults("admin", "pw", "prod").unwrap();
    assert!(broker.access.user("guest").is_none());
    assert!(broker.access.authenticate("admin", "pw").is_ok());
    assert!(broker.access.permission("prod", "admin").is_some());
    assert!(broker.vhost("/").is_none(), "an empty / goes");
}

#[test]
fn user_limits_survive_a_restart_and_a_new_password() {
    use warren_store::{Store, StoreOptions};
    let dir = tempfile::tempdir().unwrap();
    let user = DefinitionOp::UserPut {
        name: s("app"),
        password_hash: crate::access::Hashing::Sha256.hash("pw"),
        hashing_algorithm: s(crate::access::SHA256),
        tags: Vec::new(),
    };
    let limits = crate::access::UserLimits {
        max_connections: Some(2),
        max_channels: Some(0),
    };
    {
        let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let broker = crate::Broker::new(usize::MAX, Some(store));
        broker.recover(recovered);
        broker.apply(user.clone()).unwrap();
        broker
            .apply(DefinitionOp::user_set_limits("app", limits))
            .unwrap();
        // A new password (a PUT of the user) keeps the limits, as RabbitMQ.
        broker.apply(user).unwrap();
        assert_eq!(broker.access.user("app").unwrap().limits, limits);
        let refused = broker.apply(DefinitionOp::user_set_limits("nobody", limits));
        assert_eq!(refused.unwrap_err().code, ReplyCode::NotFound);
    }
    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let broker = crate::Broker::new(usize::MAX, Some(store));
    broker.recover(recovered);
    assert_eq!(broker.access.user("app").unwrap().limits, limits);
    // max-channels 0: the user may connect but opens no channel.
    assert!(broker.admit_channel("app").is_err());
    let taken = broker.admit_channel("other").unwrap();
    assert_eq!(broker.user_usage.of("other").channels, 1);
    drop(taken);
    assert_eq!(broker.user_usage.of("other").channels, 0);
}

#[test]
fn tracing_is_replicated_state_and_off_after_a_restart() {
    use warren_store::{Store, StoreOptions};
    let dir = tempfile::tempdir().unwrap();
    let on = DefinitionOp::VhostSetTracing {
        name: s("/"),
        tracing: true,
    };
    let snapshot = {
        let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let broker = crate::Broker::new(usize::MAX, Some(store));
        broker.recover(recovered);
        broker.apply(on.clone()).unwrap();
        assert!(broker.vhost("/").unwrap().tracing());
        let refused = broker.apply(DefinitionOp::VhostSetTracing {
            name: s("nope"),
            tracing: true,
        });
        assert_eq!(refused.unwrap_err().code, ReplyCode::NotFound);
        broker.persist();
        broker.snapshot()
    };
    assert!(snapshot.vhosts.iter().any(|v| v.name == "/" && v.tracing));
    // A boot from the node's own blob: off, as RabbitMQ's firehose is at start.
    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let broker = crate::Broker::new(usize::MAX, Some(store));
    broker.recover(recovered);
    assert!(!broker.vhost("/").unwrap().tracing());
    // A node brought to the cluster's metadata snapshot traces as the cluster does.
    broker.restore_replicated(&snapshot.encode()).unwrap();
    assert!(broker.vhost("/").unwrap().tracing());
}
