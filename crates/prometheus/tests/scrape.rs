//! The endpoint served on a port-0 listener, scraped over plain HTTP/1.1 as Prometheus
//! does: queue depth per queue and summed, churn counters, identity, 404 elsewhere; the
//! per-object and detailed scrapes streamed in chunks, the same text as built whole.

use bytes::Bytes;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::{Broker, Message, QueueDeclaration};
use warren_codec::{BasicProperties, ShortStr};
use warren_listener::http_listener::HttpListener;
use warren_prometheus::Endpoint;

async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let body = match head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        true => unchunk(body),
        false => body.to_owned(),
    };
    (head.to_owned(), body)
}

type Server = tokio::task::JoinHandle<std::io::Result<()>>;

/// The endpoint on a port-0 listener, until the sender is used.
async fn serve(
    broker: &Arc<Broker>,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    Server,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(warren_prometheus::run(
        vec![HttpListener::plain(listener)],
        broker.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, stop, server)
}

/// A chunked body's data (a streamed scrape is sent in chunks of unknown total length).
fn unchunk(mut chunked: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, rest) = chunked.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size, 16).expect("a hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&rest[..size]);
        chunked = rest[size..]
            .strip_prefix("\r\n")
            .expect("CRLF after a chunk");
    }
}

fn declare(vhost: &Arc<warren_broker::VHost>, name: &str) {
    vhost
        .declare_queue(QueueDeclaration::plain(name), 1)
        .unwrap();
}

fn publish(queue: &Arc<warren_broker::Queue>, body: &'static [u8]) {
    let message = Message::new(
        ShortStr::from(""),
        queue.name.clone(),
        &BasicProperties::default(),
        Bytes::new(),
        Bytes::from_static(body),
    );
    queue.publish(Arc::new(message), None);
}

#[tokio::test]
async fn scrapes_show_queue_depth_per_object_and_summed() {
    let broker = Broker::new(1 << 30, None);
    broker.name_node("warren@test");
    broker.set_cluster_name("test-cluster");
    let vhost = broker.vhost("/").unwrap();
    for name in ["orders", "audit"] {
        declare(&vhost, name);
    }
    let orders = vhost.queue("orders").unwrap();
    publish(&orders, b"hello");
    publish(&orders, b"world!");
    publish(&vhost.queue("audit").unwrap(), b"x");

    let (addr, stop, server) = serve(&broker).await;

    let (head, body) = get(addr, "/metrics/per-object").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    for line in [
        "rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"orders\"} 2",
        "rabbitmq_queue_messages_ready_bytes{vhost=\"/\",queue=\"orders\"} 11",
        "rabbitmq_queue_messages{vhost=\"/\",queue=\"audit\"} 1",
        "rabbitmq_queues 2",
        "rabbitmq_queues_declared_total 2",
        "rabbitmq_queues_created_total 2",
        "rabbitmq_identity_info{rabbitmq_node=\"warren@test\",rabbitmq_cluster=\"test-cluster\",rabbitmq_endpoint=\"per-object\"} 1",
        "# TYPE rabbitmq_queue_messages_ready gauge",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
    }

    vhost.delete_queue("audit", false, false, 1).unwrap();
    let (_, body) = get(addr, "/metrics").await;
    for line in [
        "rabbitmq_queue_messages_ready 2",
        "rabbitmq_queues 1",
        "rabbitmq_queues_deleted_total 1",
        "rabbitmq_identity_info{rabbitmq_node=\"warren@test\",rabbitmq_cluster=\"test-cluster\",rabbitmq_endpoint=\"aggregated\"} 1",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
    }
    assert!(
        !body.contains("queue=\""),
        "aggregated has no per-queue labels"
    );

    let (_, body) = get(
        addr,
        "/metrics/detailed?family=queue_coarse_metrics&family=connection_churn_metrics&vhost=%2F",
    )
    .await;
    for line in [
        "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"orders\"} 2",
        "rabbitmq_detailed_queues_deleted_total 1",
        "rabbitmq_detailed_queue_info{vhost=\"/\",queue=\"orders\",queue_type=\"rabbit_classic_queue\",membership=\"leader\"} 1",
        "rabbitmq_identity_info{rabbitmq_node=\"warren@test\",rabbitmq_cluster=\"test-cluster\",rabbitmq_endpoint=\"detailed\"} 1",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
    }
    for absent in [
        "rabbitmq_detailed_queue_consumers",
        "rabbitmq_queues ",
        "rabbitmq_queue_",
    ] {
        assert!(
            !body.contains(absent),
            "{absent:?} was not asked for:\n{body}"
        );
    }
    let (_, body) = get(
        addr,
        "/metrics/detailed?family=queue_coarse_metrics&vhost=other",
    )
    .await;
    assert!(!body.contains("queue=\"orders\""), "vhost filter:\n{body}");
    let (_, body) = get(addr, "/metrics/detailed").await;
    let samples: Vec<&str> = body.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(samples.len(), 2, "identity only:\n{body}");

    let (head, _) = get(addr, "/api/overview").await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[test]
fn node_totals_outlive_a_deleted_vhost() {
    let broker = Broker::new(1 << 30, None);
    let vhost = broker.add_vhost("staging").unwrap();
    declare(&vhost, "jobs");
    publish(&vhost.queue("jobs").unwrap(), b"job");
    let before = warren_prometheus::render(&broker, Endpoint::Aggregated);
    assert!(
        before.contains("\nrabbitmq_queues_created_total 1\n"),
        "{before}"
    );
    assert!(
        before.contains("\nrabbitmq_queue_messages_ready 1\n"),
        "{before}"
    );

    assert!(broker.delete_vhost("staging"));
    let after = warren_prometheus::render(&broker, Endpoint::Aggregated);
    for line in [
        "rabbitmq_queues_created_total 1",
        "rabbitmq_queues_deleted_total 1",
        "rabbitmq_queues 0",
        "rabbitmq_queue_messages_ready 0",
    ] {
        assert!(after.lines().any(|l| l == line), "no {line:?} in\n{after}");
    }
}

/// The lines that do not change between two scrapes: family headers and the samples of
/// queues (the node's uptime, memory and CPU figures move on).
fn steady_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with('#') || l.contains("queue=\""))
        .collect()
}

#[tokio::test]
async fn a_streamed_scrape_is_the_text_built_whole() {
    let broker = Broker::new(1 << 30, None);
    broker.name_node("warren@test");
    let other = broker.add_vhost("other").unwrap();
    for vhost in [broker.vhost("/").unwrap(), other] {
        for i in 0..300 {
            let name = format!("queue-{i:03}-with-a-long-name-to-fill-the-chunks");
            declare(&vhost, &name);
            if i % 3 == 0 {
                publish(&vhost.queue(&name).unwrap(), b"payload");
            }
        }
    }
    let (addr, stop, server) = serve(&broker).await;
    for (path, whole) in [
        (
            "/metrics/per-object",
            warren_prometheus::render(&broker, Endpoint::PerObject),
        ),
        (
            "/metrics/detailed?family=queue_coarse_metrics&family=queue_metrics&vhost=other",
            warren_prometheus::render_detailed(
                &broker,
                warren_prometheus::Selection::from_query(
                    "family=queue_coarse_metrics&family=queue_metrics&vhost=other",
                ),
            ),
        ),
    ] {
        let (head, streamed) = get(addr, path).await;
        assert!(
            head.to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{path}: {head}"
        );
        assert!(
            streamed.len() > 2 * warren_listener::streamed_body::CHUNK_BYTES,
            "{path}: {} bytes, more than one chunk",
            streamed.len()
        );
        assert_eq!(streamed.lines().count(), whole.lines().count(), "{path}");
        assert_eq!(steady_lines(&streamed), steady_lines(&whole), "{path}");
        assert!(streamed.ends_with('\n'), "{path}");
    }
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
