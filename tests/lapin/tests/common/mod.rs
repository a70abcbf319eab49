//! What the lapin tests share: a Warren broker started in process, lapin connections with
//! their event streams, and bounded waits so that a broker that misbehaves fails a test
//! instead of hanging it.
// Each test binary uses its own subset.
#![allow(dead_code)]

use futures_util::future::FutureExt;
use futures_util::stream::{BoxStream, StreamExt};
use lapin::{Connection, ConnectionProperties, Event};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use warren_broker::Broker;
use warren_server::ServerConfig;

/// A broker listening on a free port; `url` is the AMQP URI lapin connects to.
pub struct TestBroker {
    pub broker: Arc<Broker>,
    pub url: String,
}

/// Starts `broker` on 127.0.0.1, port 0. The listener runs until the test's runtime ends.
pub async fn serve(broker: Arc<Broker>) -> TestBroker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        broker.clone(),
        ServerConfig::default(),
        std::future::pending(),
    ));
    TestBroker {
        broker,
        url: format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
    }
}

/// A lapin connection and the stream of its connection-level events (blocked, unblocked,
/// errors), subscribed to before anything can happen on it.
pub struct Client {
    pub conn: Connection,
    events: BoxStream<'static, Event>,
    /// Every event taken from the stream so far, in order.
    pub seen: Vec<Event>,
}

impl Client {
    /// Connects to `url` (which may carry a query such as `?heartbeat=1`).
    pub async fn connect(url: &str) -> Client {
        let conn = within(
            10,
            "connect",
            Connection::connect(url, ConnectionProperties::default()),
        )
        .await
        .expect("lapin connects to Warren");
        let events = conn.events_listener().boxed();
        Client {
            conn,
            events,
            seen: Vec::new(),
        }
    }

    /// Waits up to `secs` for an event that `wanted` accepts and returns it; events before it
    /// are kept in `seen` too.
    pub async fn wait_event(
        &mut self,
        secs: u64,
        what: &str,
        wanted: impl Fn(&Event) -> bool,
    ) -> Event {
        let next = async {
            loop {
                let event = self.events.next().await.expect("the event stream ended");
                self.seen.push(event.clone());
                if wanted(&event) {
                    return event;
                }
            }
        };
        within(secs, what, next).await
    }

    /// Takes every event already delivered, without waiting; returns all events seen so far.
    pub fn events_so_far(&mut self) -> &[Event] {
        while let Some(Some(event)) = self.events.next().now_or_never() {
            self.seen.push(event);
        }
        &self.seen
    }

    /// Asserts that the connection is open and no error was ever reported on it.
    pub fn assert_healthy(&mut self, who: &str) {
        let errors: Vec<&Event> = self
            .events_so_far()
            .iter()
            .filter(|e| matches!(e, Event::Error(_)))
            .collect();
        assert!(errors.is_empty(), "{who}: errors reported: {errors:?}");
        assert!(
            self.conn.status().connected(),
            "{who}: connection is no longer open: {:?}",
            self.conn.status()
        );
    }
}

impl Client {
    /// After a close: waits for lapin's IO loop to end and returns how it ended (an error such
    /// as `ConnectionAborted` when the socket went away uncleanly) and every event seen.
    pub async fn finish(self) -> (lapin::Result<()>, Vec<Event>) {
        let Client {
            conn,
            mut events,
            mut seen,
        } = self;
        let ended = within(
            10,
            "the end of lapin's IO loop",
            tokio::task::spawn_blocking(move || conn.run()),
        )
        .await
        .expect("the IO loop thread");
        while let Some(Some(event)) = events.next().now_or_never() {
            seen.push(event);
        }
        (ended, seen)
    }
}

pub fn is_blocked(event: &Event) -> bool {
    matches!(event, Event::ConnectionBlocked(_))
}

pub fn is_unblocked(event: &Event) -> bool {
    matches!(event, Event::ConnectionUnblocked)
}

/// Runs `fut` with a time limit of `secs`, panicking with `what` when it is exceeded.
pub async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: no result within {secs} s"),
    }
}
