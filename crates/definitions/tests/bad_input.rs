//! A document with a bad entry is refused with a message naming it, and changes nothing.

use serde_json::{json, Value};
use warren_broker::Broker;

/// Runs an import to its end (with no replicator, its changes are made at once).
fn now<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn refused(doc: Value) -> String {
    let broker = Broker::new(usize::MAX, None);
    let err = now(warren_definitions::import(&broker, &doc)).unwrap_err();
    // Nothing half-applied: the valid user and vhost before the bad entry are not there.
    assert!(broker.access.user("first").is_none(), "{err}");
    assert!(broker.vhost("v").is_none(), "{err}");
    err
}

fn with(key: &str, entry: Value) -> Value {
    let mut doc = json!({
        "users": [{"name": "first", "password": "pw", "tags": ""}],
        "vhosts": [{"name": "v"}],
    });
    let list = doc
        .as_object_mut()
        .unwrap()
        .entry(key)
        .or_insert_with(|| json!([]));
    list.as_array_mut().unwrap().push(entry);
    doc
}

#[test]
fn bad_entries_are_named() {
    let err = refused(with(
        "users",
        json!({"name": "u", "password_hash": "x", "hashing_algorithm": "rabbit_password_hashing_bcrypt", "tags": []}),
    ));
    assert_eq!(err, "user 'u': unknown hashing algorithm 'rabbit_password_hashing_bcrypt' (known: rabbit_password_hashing_sha256, rabbit_password_hashing_sha512)");
    let err = refused(with(
        "users",
        json!({"name": "u", "password_hash": "bm90IGEgaGFzaA==", "tags": []}),
    ));
    assert!(err.contains("password_hash is not a base64 salt"), "{err}");
    let err = refused(with("users", json!({"name": "u", "password": "p"})));
    assert_eq!(err, "user 'u': missing field 'tags'");
    let err = refused(with(
        "permissions",
        json!({"user": "ghost", "vhost": "v", "configure": ".*", "write": ".*", "read": ".*"}),
    ));
    assert_eq!(
        err,
        "permission of user 'ghost' in vhost 'v': no such user 'ghost'"
    );
    let err = refused(with(
        "permissions",
        json!({"user": "first", "vhost": "v", "configure": "(", "write": ".*", "read": ".*"}),
    ));
    assert!(
        err.starts_with("permission of user 'first' in vhost 'v': invalid regex '('"),
        "{err}"
    );
    let err = refused(with(
        "queues",
        json!({"name": "q", "vhost": "elsewhere", "durable": true}),
    ));
    assert_eq!(
        err,
        "Please create virtual host \"elsewhere\" prior to importing definitions."
    );
    let err = refused(with("queues", json!({"name": "q", "durable": true})));
    assert!(err.starts_with("queue 'q' has no vhost"), "{err}");
    let err = refused(with(
        "exchanges",
        json!({"name": "x", "vhost": "v", "type": "x-consistent-hash"}),
    ));
    assert_eq!(
        err,
        "exchange 'x' in vhost 'v': unknown exchange type 'x-consistent-hash'"
    );
    let err = refused(with(
        "queues",
        json!({"name": "q", "vhost": "v", "arguments": {"x-expires": null}}),
    ));
    assert_eq!(err, "queue 'q': argument 'x-expires': null is not allowed");
    let err = refused(with(
        "bindings",
        json!({"source": "nowhere", "vhost": "v", "destination": "q", "destination_type": "queue", "routing_key": ""}),
    ));
    assert_eq!(
        err,
        "binding from 'nowhere' to queue 'q': no exchange 'nowhere' in vhost 'v'"
    );
    let err = refused(with(
        "policies",
        json!({"vhost": "v", "name": "p", "pattern": ".*", "definition": {"max-length": "lots"}}),
    ));
    assert!(err.ends_with("(vhost: \"v\" key: \"p\")"), "{err}");
    assert!(refused(json!([])).contains("must be a JSON object"));
    assert!(refused(json!({"users": {}})).contains("users must be a list"));
}

#[test]
fn tags_as_a_comma_string_and_legacy_forms() {
    let broker = Broker::new(usize::MAX, None);
    now(warren_definitions::import(
        &broker,
        &json!({
            "rabbit_version": "3.6.5",
            "users": [
                {"name": "a", "password": "pw", "tags": "administrator, monitoring"},
                {"name": "b", "password_hash": "", "tags": ""},
            ],
        }),
    ))
    .unwrap();
    assert_eq!(
        broker.access.user("a").unwrap().tags,
        ["administrator", "monitoring"]
    );
    assert!(broker.access.authenticate("a", "pw").is_ok());
    assert!(broker.access.user("b").unwrap().tags.is_empty());
    // Before 3.6 RabbitMQ hashed with MD5; those hashes cannot be checked here.
    let err = now(warren_definitions::import(
        &broker,
        &json!({"rabbit_version": "3.5.7", "users": [{"name": "old", "password_hash": "AAAA", "tags": ""}]}),
    ))
    .unwrap_err();
    assert!(err.contains("rabbit_password_hashing_md5"), "{err}");
}

#[test]
fn amq_names_are_skipped_and_existing_entities_kept() {
    let broker = Broker::new(usize::MAX, None);
    let doc = json!({
        "exchanges": [{"name": "amq.direct", "vhost": "/", "type": "direct", "durable": true}],
        "queues": [{"name": "amq.gen-x", "vhost": "/", "durable": true},
                   {"name": "q", "vhost": "/", "durable": true, "arguments": {"x-max-length": 5}}],
    });
    let summary = now(warren_definitions::import(&broker, &doc)).unwrap();
    assert_eq!(summary.skipped.len(), 2, "{:?}", summary.skipped);
    // Importing again with other arguments leaves the queue as it is (RabbitMQ does too).
    let mut again = doc.clone();
    again["queues"][1]["arguments"] = json!({"x-max-length": 9});
    now(warren_definitions::import(&broker, &again)).unwrap();
    let q = broker.vhost("/").unwrap().queue("q").unwrap();
    assert_eq!(
        q.arguments.get("x-max-length").and_then(|v| v.as_i64()),
        Some(5)
    );
}

#[test]
fn max_queues_is_checked_before_anything_is_applied() {
    let broker = Broker::new(usize::MAX, None);
    broker
        .vhost("/")
        .unwrap()
        .set_limits(warren_broker::VHostLimits {
            max_connections: None,
            max_queues: Some(1),
        });
    let err = now(warren_definitions::import(
        &broker,
        &json!({"queues": [{"name": "a", "vhost": "/"}, {"name": "b", "vhost": "/"}]}),
    ))
    .unwrap_err();
    assert!(
        err.starts_with(
            "Adding 2 queue(s) to virtual host \"/\" would exceed the limit of 1 queue(s)."
        ),
        "{err}"
    );
    assert!(broker.vhost("/").unwrap().queues().is_empty());
}

#[test]
fn unknown_components_are_kept_for_export() {
    let broker = Broker::new(usize::MAX, None);
    let doc = json!({
        "parameters": [{"vhost": "/", "component": "federation-upstream", "name": "up",
                        "value": {"uri": "amqp://remote", "expires": 3600000}}],
        "global_parameters": [{"name": "cluster_name", "value": "rabbit@a"}],
    });
    now(warren_definitions::import(&broker, &doc)).unwrap();
    let out = warren_definitions::export(&broker);
    assert_eq!(out["parameters"], doc["parameters"]);
    assert_eq!(out["global_parameters"], doc["global_parameters"]);
}

#[test]
fn a_stream_queue_is_reported_and_the_rest_applied_user_limits_included() {
    // A RabbitMQ export with a stream (and a binding to it) and a user with limits: Warren
    // has no streams; each is reported, everything else (the user's limits too) comes over.
    let broker = Broker::new(usize::MAX, None);
    let doc = json!({
        "users": [{"name": "app", "password_hash": "", "tags": "",
                   "limits": {"max-connections": 10, "max-channels": 5}}],
        "queues": [{"name": "events", "vhost": "/", "durable": true,
                    "arguments": {"x-queue-type": "stream"}},
                   {"name": "work", "vhost": "/", "durable": true}],
        "bindings": [{"source": "amq.topic", "vhost": "/", "destination": "events",
                      "destination_type": "queue", "routing_key": "#", "arguments": {}},
                     {"source": "amq.topic", "vhost": "/", "destination": "work",
                      "destination_type": "queue", "routing_key": "w", "arguments": {}}],
    });
    let summary = now(warren_definitions::import(&broker, &doc)).unwrap();
    let skipped = summary.skipped.join("\n");
    assert!(
        skipped.contains("queue 'events' in vhost '/': stream queues are not supported"),
        "{skipped}"
    );
    assert!(
        skipped.contains("to queue 'events' in vhost '/': its queue was not imported"),
        "{skipped}"
    );
    assert!(!skipped.contains("user 'app'"), "{skipped}");
    let limits = broker.access.user("app").unwrap().limits;
    assert_eq!(
        (limits.max_connections, limits.max_channels),
        (Some(10), Some(5))
    );
    let vhost = broker.vhost("/").unwrap();
    assert!(vhost.queue("events").is_none());
    assert!(vhost.queue("work").is_some());
    assert!(broker.access.user("app").is_some());
    assert_eq!((summary.users, summary.queues, summary.bindings), (1, 1, 1));
}
