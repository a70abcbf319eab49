//! Durability through the whole server, on the store's fault-injecting disk: a publisher
//! confirm for a persistent message is withheld until its fsync completes, and every confirmed
//! message is back, redelivered, after a crash that drops all unsynced writes.

mod client;

use client::{Client, Incoming};
use std::sync::Arc;
use tokio::net::TcpListener;
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;
use warren_store::{Backend, CrashMode, FaultyBackend, Store, StoreOptions};

async fn start_on(disk: Arc<FaultyBackend>) -> u16 {
    let backend: Arc<dyn Backend> = disk;
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(1 << 30, Some(store));
    broker.recover(recovered);
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

async fn declare_durable(c: &mut Client, name: &str) {
    c.send(
        1,
        QueueDeclare {
            queue: name.into(),
            durable: true,
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_waits_for_fsync_and_confirmed_messages_survive_a_crash() {
    let disk = Arc::new(FaultyBackend::new(7));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "orders").await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));

    // While the disk does not finish an fsync, no confirm may arrive.
    disk.set_stall_syncs(true);
    c.publish_persistent(1, "", "orders", b"first").await;
    c.expect_silence(300).await;
    disk.set_stall_syncs(false);
    let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
        panic!("expected the confirm once the fsync completed")
    };
    assert_eq!(ack.delivery_tag, 1);

    for i in 2..=50u64 {
        c.publish_persistent(1, "", "orders", format!("m{i}").as_bytes())
            .await;
    }
    let mut confirmed = 1;
    while confirmed < 50 {
        let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
            panic!("expected confirms")
        };
        confirmed = ack.delivery_tag;
    }

    // Power cut: whatever was not fsync'd is gone. Every confirmed message must be back.
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    let port = start_on(after).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "orders").await;
    let mut bodies = Vec::new();
    loop {
        c.send(
            1,
            BasicGet {
                queue: "orders".into(),
                no_ack: true,
            },
        )
        .await;
        match c.next().await {
            Incoming::Content(_, Method::BasicGetOk(g), _, body) => {
                assert!(g.redelivered, "recovered messages are marked redelivered");
                bodies.push(body);
            }
            Incoming::Method(_, Method::BasicGetEmpty(_)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(bodies.len(), 50);
    assert_eq!(&bodies[0][..], b"first");
    assert_eq!(&bodies[49][..], b"m50");
}
