//! The API served in-process on port 0: Basic auth against the broker's users, a JSON
//! answer, RabbitMQ's 401 and 404, and a clean stop on shutdown.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::access::Permission;
use warren_broker::Broker;
use warren_management::{run, ManagementConfig};
use warren_server::http_listener::HttpListener;

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
    let config = ManagementConfig::new("127.0.0.1:5672".parse().unwrap());
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
