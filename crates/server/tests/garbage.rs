//! Hostile input after a valid handshake: thousands of random frames (random types, channels,
//! method ids and argument bytes) must never panic the broker. Each connection ends with a
//! close, a dropped socket, or nothing at all, and the broker keeps serving new clients.

mod client;

use bytes::{BufMut, BytesMut};
use client::Client;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Real (class, method) pairs, so many frames get past the method lookup into the handlers.
const METHODS: &[(u16, u16)] = &[
    (10, 50),
    (10, 51),
    (20, 10),
    (20, 20),
    (20, 40),
    (20, 41),
    (40, 10),
    (40, 20),
    (40, 30),
    (40, 40),
    (50, 10),
    (50, 20),
    (50, 30),
    (50, 40),
    (50, 50),
    (60, 10),
    (60, 20),
    (60, 30),
    (60, 40),
    (60, 70),
    (60, 80),
    (60, 90),
    (60, 100),
    (60, 110),
    (60, 120),
    (85, 10),
    (90, 10),
    (90, 20),
    (90, 30),
];

fn random_frame(rng: &mut StdRng, out: &mut BytesMut) {
    let kind = [1u8, 1, 1, 2, 3, 8, rng.gen()][rng.gen_range(0..7)];
    let channel: u16 = [0, 1, 1, 1, 2, rng.gen()][rng.gen_range(0..6)];
    let mut payload = Vec::new();
    if kind == 1 {
        let (class, method) = METHODS[rng.gen_range(0..METHODS.len())];
        payload.extend_from_slice(&class.to_be_bytes());
        payload.extend_from_slice(&method.to_be_bytes());
    } else if kind == 2 {
        payload.extend_from_slice(&60u16.to_be_bytes());
        payload.extend_from_slice(&0u16.to_be_bytes());
        payload.extend_from_slice(&rng.gen_range(0u64..5000).to_be_bytes());
    }
    let extra = rng.gen_range(0..64);
    payload.extend((0..extra).map(|_| {
        // Mostly small numbers and field-type letters, which parse further than noise.
        match rng.gen_range(0..4) {
            0 => rng.gen::<u8>(),
            1 => b"tbBsuIilfdDSxATFV"[rng.gen_range(0..17)],
            _ => rng.gen_range(0..4),
        }
    }));
    out.put_u8(kind);
    out.put_u16(channel);
    out.put_u32(payload.len() as u32);
    out.put_slice(&payload);
    out.put_u8(if rng.gen_range(0..50) == 0 {
        0
    } else {
        FRAME_END
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_frames_never_panic_the_broker() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker: Arc<Broker> = Broker::new(1 << 30, None);
    tokio::spawn(warren_server::run(
        listener,
        broker,
        ServerConfig::default(),
        std::future::pending(),
    ));

    let mut rng = StdRng::seed_from_u64(0x5eed);
    for _ in 0..150 {
        let mut c = Client::connect(port).await;
        c.open_channel(1).await;
        let mut garbage = BytesMut::new();
        for _ in 0..rng.gen_range(1..40) {
            random_frame(&mut rng, &mut garbage);
        }
        // The server may close mid-way: a failed write is an acceptable outcome.
        let _ = c.stream_mut().write_all(&garbage).await;
        let _ = tokio::time::timeout(Duration::from_millis(20), c.drain()).await;
    }
    // Still serving, and nothing panicked on the way.
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let ok = c.declare_queue(1, "after-garbage", FieldTable::new()).await;
    assert_eq!(ok.queue.as_str(), "after-garbage");
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "the broker panicked on input"
    );
}
