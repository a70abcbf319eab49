//! The API served in-process on port 0: Basic auth against the broker's users, a JSON
//! answer, the node's listeners and contexts, RabbitMQ's 401 and 404, and a clean stop on
//! shutdown.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::access::Permission;
use warren_broker::Broker;
use warren_listener::http_listener::HttpListener;
use warren_management::{run, ListenerInfo, ManagementConfig};

/// One HTTP/1.1 request, read to the end (the server closes after `Connection: close`).
async fn request(port: u16, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = auth
        .map(|a| {
            use base64::Engine;
            format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(a)
            )
        })
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[tokio::test]
async fn serves_the_api_on_port_zero() {
    let broker = Broker::new(1 << 30, None);
    broker
        .access
        .put_user("guest", Some("guest"), vec!["administrator".into()])
        .unwrap();
    broker
        .access
        .set_permission("/", "guest", Permission::full())
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut config = ManagementConfig::new("127.0.0.1:5672".parse().unwrap());
    config.listeners.push(ListenerInfo {
        protocol: "https/prometheus",
        address: "127.0.0.1:15691".parse().unwrap(),
    });
    let server = tokio::spawn(run(
        vec![HttpListener::plain(listener)],
        Arc::clone(&broker),
        config,
        async {
            let _ = stopped.await;
        },
    ));

    let (status, body) = request(port, "/api/overview", Some("guest:guest")).await;
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(overview["object_totals"]["queues"], 0);
    assert!(overview["exchange_types"].as_array().unwrap().len() >= 4);
    // The node's listeners, the API's own included, ordered by protocol as RabbitMQ's.
    let listeners: Vec<(String, u64)> = overview["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["protocol"].as_str().unwrap().to_owned(),
                l["port"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listeners,
        [
            ("amqp".to_owned(), 5672),
            ("http".to_owned(), u64::from(port)),
            ("https/prometheus".to_owned(), 15691),
        ]
    );
    let (status, body) = request(port, "/api/nodes", Some("guest:guest")).await;
    assert_eq!(status, 200, "{body}");
    let nodes: serde_json::Value = serde_json::from_str(&body).unwrap();
    let contexts = &nodes[0]["contexts"];
    assert_eq!(contexts[0]["description"], "RabbitMQ Management");
    assert_eq!(contexts[0]["port"], port.to_string());
    assert_eq!(contexts[1]["description"], "RabbitMQ Prometheus");
    assert_eq!(contexts[1]["protocol"], "'https/prometheus'");
    assert_eq!(contexts[1]["ssl"], "true");
    assert_eq!(contexts.as_array().unwrap().len(), 2);

    let (status, body) = request(port, "/api/queues/%2F", Some("guest:guest")).await;
    assert_eq!((status, body.as_str()), (200, "[]"));
    let (status, _) = request(port, "/api/overview", None).await;
    assert_eq!(status, 401);
    let (status, body) = request(port, "/api/overview", Some("guest:nope")).await;
    assert_eq!(status, 401);
    assert!(body.contains("not_authorized"), "{body}");
    let (status, body) = request(port, "/api/nope", Some("guest:guest")).await;
    assert_eq!(status, 404);
    assert!(body.contains("Object Not Found"), "{body}");

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
