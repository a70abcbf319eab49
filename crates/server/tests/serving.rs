//! `VHost::set_serving`: a queue's serving node changes in place. Two brokers in one process
//! joined by a forwarding link; queue `q` is bound to `amq.direct` with key `k` on both.
//! A serves it first, B holds a record; then B serves it (`Here`), and A's real queue turns
//! into a record for B (`Node`). Each time the consumers of the old side get basic.cancel,
//! and a publish through the same binding reaches the new serving queue.

mod client;

use client::Client;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::remote::{self, RemoteQueue};
use warren_broker::vhost::{QueueDeclaration, Serving, VHost};
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;

async fn listen(broker: Arc<Broker>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        broker,
        ServerConfig::default(),
        std::future::pending(),
    ));
    port
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "not reached in 20 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn vhost(broker: &Broker) -> Arc<VHost> {
    broker.vhost("/").unwrap()
}

fn count(broker: &Broker) -> u32 {
    vhost(broker).queue("q").unwrap().message_count()
}

fn bound_to_q(broker: &Broker) -> bool {
    let v = vhost(broker);
    let q = v.queue("q").unwrap();
    v.exchange("amq.direct").unwrap().bindings().iter().any(|b| {
        b.routing_key.as_str() == "k"
            && matches!(&b.destination, warren_broker::exchange::Destination::Queue(d) if Arc::ptr_eq(d, &q))
    })
}

async fn consumer(port: u16) -> (Client, ShortStr) {
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(
        1,
        BasicConsume {
            queue: "q".into(),
            ..Default::default()
        },
    )
    .await;
    let Method::BasicConsumeOk(ok) = c.method().await.1 else {
        panic!("expected consume-ok")
    };
    (c, ok.consumer_tag)
}

/// A delivery of what the queue held may come before the cancel (the loaded CI machine
/// showed it): skipped.
async fn expect_cancel(c: &mut Client, tag: &ShortStr) {
    loop {
        match c.next().await {
            client::Incoming::Content(..) => continue,
            client::Incoming::Method(_, Method::BasicCancel(cancel)) => {
                assert_eq!(&cancel.consumer_tag, tag);
                return;
            }
            other => panic!("expected basic.cancel, got {other:?}"),
        }
    }
}

/// Publishes with a confirm and waits for it (the serving queue took the message).
async fn publish(port: u16, body: &[u8]) {
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    c.publish(1, "amq.direct", "k", body, false).await;
    assert!(matches!(c.method().await.1, Method::BasicAck(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_serving_moves_a_queue_both_ways_keeping_its_bindings() {
    let a = Broker::new(1 << 30, None);
    let b = Broker::new(1 << 30, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, connected) = tokio::join!(listener.accept(), TcpStream::connect(addr));
    a.forward_peers()
        .peer("b")
        .set(remote::open(accepted.unwrap().0, a.clone()));
    b.forward_peers()
        .peer("a")
        .set(remote::open(connected.unwrap(), b.clone()));

    vhost(&a)
        .declare_queue(
            QueueDeclaration {
                name: "q".into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
            0,
        )
        .unwrap();
    vhost(&b)
        .install_remote_queue(
            "q".into(),
            true,
            false,
            FieldTable::new(),
            &b.forward_peers().peer("a"),
            "classic",
        )
        .unwrap();
    for broker in [&a, &b] {
        vhost(broker)
            .bind_queue("q", "amq.direct", "k".into(), FieldTable::new(), 0)
            .unwrap();
    }
    let (port_a, port_b) = (listen(a.clone()).await, listen(b.clone()).await);

    // Served by A: a publish on B through the binding lands on A.
    publish(port_b, b"one").await;
    eventually("A holds the message published on B", || count(&a) == 1).await;
    let (mut on_b, tag_b) = consumer(port_b).await;

    // B serves it now: B's consumer (of the record) is cancelled; B's binding holds.
    vhost(&b).set_serving("q", Serving::Here).unwrap();
    expect_cancel(&mut on_b, &tag_b).await;
    assert!(RemoteQueue::of(&vhost(&b).queue("q").unwrap()).is_none());
    assert!(bound_to_q(&b), "B's binding moved to its real queue");
    publish(port_b, b"two").await;
    eventually("B's own queue holds the message", || count(&b) == 1).await;
    // "one" is A's still: ready, or out with B's consumer when it was delivered before the
    // cancel (a cancel does not take back what the consumer holds unacked).
    let on_a = vhost(&a).queue("q").unwrap();
    assert_eq!(
        on_a.message_count() + on_a.unacked_count(),
        1,
        "A's queue did not get it"
    );

    // A forwards to B now: A's consumer of its real queue is cancelled; A's binding holds
    // and a publish on A lands on B.
    let (mut on_a, tag_a) = consumer(port_a).await;
    vhost(&a)
        .set_serving("q", Serving::Node("b".into()))
        .unwrap();
    // The delivery of "one" may come before the cancel.
    loop {
        match on_a.next().await {
            client::Incoming::Content(..) => continue,
            client::Incoming::Method(_, Method::BasicCancel(cancel)) => {
                assert_eq!(cancel.consumer_tag, tag_a);
                break;
            }
            other => panic!("expected basic.cancel, got {other:?}"),
        }
    }
    let record = vhost(&a).queue("q").unwrap();
    assert_eq!(RemoteQueue::of(&record).map(|r| r.node()), Some("b"));
    assert!(bound_to_q(&a), "A's binding moved to the record");
    publish(port_a, b"three").await;
    eventually("B's queue holds what was published on A", || count(&b) == 2).await;

    // Setting what already holds changes nothing.
    vhost(&a)
        .set_serving("q", Serving::Node("b".into()))
        .unwrap();
    assert!(Arc::ptr_eq(&record, &vhost(&a).queue("q").unwrap()));
    // An unknown queue is a 404.
    let missing = vhost(&a).set_serving("nope", Serving::Here).unwrap_err();
    assert_eq!(missing.code, ReplyCode::NotFound);
}
