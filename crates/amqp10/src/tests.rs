//! The protocol state machine end to end over an in-memory stream, with frames written by
//! hand: SASL, open, begin, a refused attach, a publish settled with accepted, and a
//! consumer that receives exactly its credit. (Real clients are in tests/interop.)

use crate::codec::*;
use crate::{serve, Amqp10Config, Endpoints};
use bytes::BytesMut;
use fe2o3_amqp_types::messaging::{Data, Source, Target};
use fe2o3_amqp_types::primitives::Binary;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use warren_broker::vhost::QueueDeclaration;
use warren_broker::Broker;
use warren_codec::{FieldTable, ShortStr};

struct Client {
    stream: DuplexStream,
    rbuf: BytesMut,
}

impl Client {
    async fn send(&mut self, channel: u16, p: Performative, payload: &[u8]) {
        let mut out = BytesMut::new();
        write_performative(&mut out, channel, &p, payload);
        self.stream.write_all(&out).await.unwrap();
    }

    async fn frame(&mut self) -> RawFrame {
        loop {
            if let Some(f) = parse_frame(&mut self.rbuf, 1 << 20).unwrap() {
                if f.body.is_empty() {
                    continue;
                }
                return f;
            }
            let n = tokio::time::timeout(
                Duration::from_secs(10),
                self.stream.read_buf(&mut self.rbuf),
            )
            .await
            .expect("the server answers within 10 s")
            .unwrap();
            assert!(n > 0, "the server closed the stream");
        }
    }

    async fn performative(&mut self) -> (Performative, bytes::Bytes) {
        let f = self.frame().await;
        decode_performative(&f.body).unwrap()
    }

    async fn header(&mut self) -> [u8; 8] {
        while self.rbuf.len() < 8 {
            self.stream.read_buf(&mut self.rbuf).await.unwrap();
        }
        let h = self.rbuf.split_to(8);
        h[..].try_into().unwrap()
    }
}

fn attach(name: &str, handle: u32, role: Role, address: &str) -> Performative {
    let (source, target) = match role {
        Role::Sender => (
            None,
            Some(Box::new(TargetArchetype::Target(Target {
                address: Some(address.into()),
                ..Default::default()
            }))),
        ),
        Role::Receiver => (
            Some(Box::new(Source {
                address: Some(address.into()),
                ..Default::default()
            })),
            None,
        ),
    };
    Performative::Attach(Attach {
        name: name.into(),
        handle: handle.into(),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source,
        target,
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

fn begin() -> Performative {
    Performative::Begin(Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 1000,
        outgoing_window: 1000,
        handle_max: 100.into(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

fn flow(handle: u32, credit: u32) -> Performative {
    Performative::Flow(Flow {
        next_incoming_id: Some(0),
        incoming_window: 1000,
        next_outgoing_id: 1,
        outgoing_window: 1000,
        handle: Some(handle.into()),
        delivery_count: Some(0),
        link_credit: Some(credit),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    })
}

fn transfer(handle: u32, delivery_id: u32) -> Performative {
    Performative::Transfer(Transfer {
        handle: handle.into(),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(serde_bytes::ByteBuf::from(
            delivery_id.to_be_bytes().to_vec(),
        )),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    })
}

async fn open_client(broker: Arc<Broker>) -> Client {
    open_client_served_on(broker, &tokio::runtime::Handle::current()).await
}

/// A client whose server runs on `server_runtime`.
async fn open_client_served_on(
    broker: Arc<Broker>,
    server_runtime: &tokio::runtime::Handle,
) -> Client {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (reader, writer) = tokio::io::split(server);
    let endpoints = Endpoints {
        peer: "127.0.0.1:5555".parse().unwrap(),
        local: "127.0.0.1:5672".parse().unwrap(),
    };
    let mut read = BytesMut::new();
    read.extend_from_slice(&PROTOCOL_HEADER_SASL);
    server_runtime.spawn(serve(
        reader,
        writer,
        read,
        endpoints,
        broker,
        Arc::new(Amqp10Config::default()),
        false,
    ));
    let mut c = Client {
        stream: client,
        rbuf: BytesMut::new(),
    };
    assert_eq!(c.header().await, PROTOCOL_HEADER_SASL);
    let mechanisms = c.frame().await;
    assert_eq!(mechanisms.kind, FRAME_SASL);
    let init = SaslInit {
        mechanism: Symbol::from("PLAIN"),
        initial_response: Some(Binary::from(b"\0guest\0guest".to_vec())),
        hostname: None,
    };
    let mut out = BytesMut::new();
    let body = serde_amqp::to_vec(&init).unwrap();
    out.extend_from_slice(&((8 + body.len()) as u32).to_be_bytes());
    out.extend_from_slice(&[2, FRAME_SASL, 0, 0]);
    out.extend_from_slice(&body);
    c.stream.write_all(&out).await.unwrap();
    let outcome = c.frame().await;
    let outcome: SaslOutcome = serde_amqp::from_slice(&outcome.body).unwrap();
    assert_eq!(outcome.code, SaslCode::Ok);
    c.stream.write_all(&PROTOCOL_HEADER_AMQP).await.unwrap();
    assert_eq!(c.header().await, PROTOCOL_HEADER_AMQP);
    c.send(
        0,
        Performative::Open(Open {
            container_id: "test".into(),
            hostname: None,
            max_frame_size: MaxFrameSize(65536),
            channel_max: ChannelMax(10),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
        &[],
    )
    .await;
    assert!(matches!(c.performative().await.0, Performative::Open(_)));
    c.send(0, begin(), &[]).await;
    assert!(matches!(c.performative().await.0, Performative::Begin(_)));
    c
}

#[tokio::test]
async fn publish_accepted_and_consume_within_credit() {
    let broker = Broker::new(1 << 30, None);
    broker.seed_defaults("guest", "guest", "/").unwrap();
    let vhost = broker.vhost("/").unwrap();
    vhost
        .declare_queue(
            QueueDeclaration {
                name: ShortStr::from("q"),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
            0,
        )
        .unwrap();
    let mut c = open_client(broker.clone()).await;

    // A missing queue: attach without a terminus, then a detach with amqp:not-found.
    c.send(0, attach("missing", 0, Role::Receiver, "/queues/nope"), &[])
        .await;
    let Performative::Attach(a) = c.performative().await.0 else {
        panic!("attach")
    };
    assert!(a.source.is_none());
    let Performative::Detach(d) = c.performative().await.0 else {
        panic!("detach")
    };
    assert_eq!(
        d.error.unwrap().condition,
        ErrorCondition::AmqpError(AmqpError::NotFound)
    );
    c.send(
        0,
        Performative::Detach(Detach {
            handle: 0.into(),
            closed: true,
            error: None,
        }),
        &[],
    )
    .await;

    // Publish three messages; each is settled with accepted.
    c.send(0, attach("out", 1, Role::Sender, "/queues/q"), &[])
        .await;
    assert!(matches!(c.performative().await.0, Performative::Attach(_)));
    let Performative::Flow(f) = c.performative().await.0 else {
        panic!("credit flow")
    };
    assert!(f.link_credit.unwrap() >= 3);
    let body = serde_amqp::to_vec(&Data(Binary::from(b"hi".to_vec()))).unwrap();
    for id in 0..3 {
        c.send(0, transfer(1, id), &body).await;
    }
    let mut accepted = 0;
    while accepted < 3 {
        let Performative::Disposition(d) = c.performative().await.0 else {
            continue;
        };
        assert!(d.settled && matches!(d.state, Some(DeliveryState::Accepted(_))));
        accepted += d.last.unwrap_or(d.first) - d.first + 1;
    }
    assert_eq!(vhost.queue("q").unwrap().message_count(), 3);

    // A receiver with credit 2 gets exactly two; the third stays in the queue.
    c.send(0, attach("in", 2, Role::Receiver, "/queues/q"), &[])
        .await;
    assert!(matches!(c.performative().await.0, Performative::Attach(_)));
    c.send(0, flow(2, 2), &[]).await;
    for _ in 0..2 {
        let (p, payload) = c.performative().await;
        let Performative::Transfer(t) = p else {
            panic!("transfer")
        };
        assert_eq!(t.handle.0, 2);
        assert!(payload.ends_with(b"hi"));
    }
    let extra = tokio::time::timeout(Duration::from_millis(300), c.frame()).await;
    assert!(extra.is_err(), "nothing beyond the credit");
    assert_eq!(vhost.queue("q").unwrap().message_count(), 1);
}

/// As for 0-9-1's close-ok: the links' consumers are gone when the server's close goes, so a
/// client reconnecting on it does not meet them (here: the auto-delete queue they left is
/// deleted by then).
#[test]
fn the_servers_close_comes_after_the_links_consumers_are_gone() {
    // The server on a runtime of its own, so that the client reads the close while the
    // server's task goes on.
    let server_runtime = tokio::runtime::Runtime::new().unwrap();
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let broker = Broker::new(1 << 30, None);
    broker.seed_defaults("guest", "guest", "/").unwrap();
    let vhost = broker.vhost("/").unwrap();
    let declaration = QueueDeclaration {
        name: ShortStr::from("left"),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: true,
        arguments: FieldTable::new(),
    };
    vhost.declare_queue(declaration, 0).unwrap();
    client_runtime.block_on(async {
        let mut c = open_client_served_on(broker.clone(), server_runtime.handle()).await;
        // Many receivers (as many as each of 10 sessions allows), so that releasing them
        // takes a while.
        const SESSIONS: u16 = 10;
        const LINKS: u32 = 100;
        for channel in 1..SESSIONS {
            c.send(channel, begin(), &[]).await;
            assert!(matches!(c.performative().await.0, Performative::Begin(_)));
        }
        for channel in 0..SESSIONS {
            for handle in 0..LINKS {
                let name = format!("in-{channel}-{handle}");
                let receiver = attach(&name, handle, Role::Receiver, "/queues/left");
                c.send(channel, receiver, &[]).await;
            }
        }
        for _ in 0..u32::from(SESSIONS) * LINKS {
            assert!(matches!(c.performative().await.0, Performative::Attach(_)));
        }
        c.send(0, Performative::Close(Close { error: None }), &[])
            .await;
        assert!(matches!(c.performative().await.0, Performative::Close(_)));
        assert!(
            vhost.queue("left").is_none(),
            "the auto-delete queue outlived the server's close"
        );
    });
}

/// A metadata log this node is behind: the ops `committed_elsewhere` (another node answered
/// for them) are applied here only when an op of this node's goes through the log, as a
/// read barrier does.
struct BehindLog {
    node: std::sync::Weak<Broker>,
    committed_elsewhere: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl warren_broker::Replicator for BehindLog {
    fn submit(&self, op: Vec<u8>) -> warren_broker::Submitted {
        let applied = self.node.upgrade().map(|node| {
            for earlier in self.committed_elsewhere.lock().unwrap().drain(..) {
                node.apply_replicated(&earlier);
            }
            node.apply_replicated(&op)
        });
        Box::pin(async move {
            applied.ok_or_else(|| warren_broker::ReplicationError("log stopped".into()))
        })
    }
}

/// The next attach the server sends, and the detach after it when the link was refused
/// (the flows a sending client's link gets are skipped).
async fn attach_answer(c: &mut Client) -> (Attach, Option<Detach>) {
    let a = loop {
        match c.performative().await.0 {
            Performative::Attach(a) => break a,
            Performative::Flow(_) => continue,
            other => panic!("expected an attach, got {other:?}"),
        }
    };
    let refused = a.source.is_none() && a.target.is_none();
    if !refused {
        return (a, None);
    }
    loop {
        match c.performative().await.0 {
            Performative::Detach(d) => return (a, Some(d)),
            Performative::Flow(_) => continue,
            other => panic!("expected a detach, got {other:?}"),
        }
    }
}

/// A link attached on a node behind the metadata log to a queue or exchange another node
/// has just declared is not refused: the attach waits for this node to catch up (a read
/// barrier through the log) before it answers not-found, as the 0-9-1 lookups do.
#[tokio::test]
async fn an_attach_on_a_node_behind_the_log_finds_what_another_node_declared() {
    use warren_broker::DefinitionOp;
    let broker = Broker::new(1 << 30, None);
    broker.seed_defaults("guest", "guest", "/").unwrap();
    let declared_elsewhere = [
        DefinitionOp::QueueDeclare {
            vhost: "/".into(),
            name: "declared-there".into(),
            server_named: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
            connection: 0,
            members: Vec::new(),
            home: None,
        },
        DefinitionOp::ExchangeDeclare {
            vhost: "/".into(),
            name: "x-declared-there".into(),
            kind: "topic".into(),
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        },
    ];
    broker.set_replicator(Arc::new(BehindLog {
        node: Arc::downgrade(&broker),
        committed_elsewhere: std::sync::Mutex::new(
            declared_elsewhere
                .iter()
                .map(DefinitionOp::encode)
                .collect(),
        ),
    }));
    let vhost = broker.vhost("/").unwrap();
    assert!(vhost.queue("declared-there").is_none(), "behind the log");
    let mut c = open_client(broker.clone()).await;

    c.send(
        0,
        attach("r", 0, Role::Receiver, "/queues/declared-there"),
        &[],
    )
    .await;
    let (a, detach) = attach_answer(&mut c).await;
    assert!(a.source.is_some() && detach.is_none(), "{detach:?}");
    c.send(
        0,
        attach("s", 1, Role::Sender, "/exchanges/x-declared-there/k"),
        &[],
    )
    .await;
    let (a, detach) = attach_answer(&mut c).await;
    assert!(a.target.is_some() && detach.is_none(), "{detach:?}");

    // What no node declared is still refused, after the barrier.
    c.send(0, attach("n", 2, Role::Receiver, "/queues/nowhere"), &[])
        .await;
    let (_, detach) = attach_answer(&mut c).await;
    assert_eq!(
        detach.and_then(|d| d.error).map(|e| e.condition),
        Some(ErrorCondition::AmqpError(AmqpError::NotFound))
    );
}
