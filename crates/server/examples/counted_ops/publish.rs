//! Publishing: the publish→deliver path (transient, no-ack consumer) and the confirmed
//! persistent publish (to a durable classic queue or a quorum queue).

use bytes::BytesMut;
use warren_codec::*;

use crate::client::{encoded_publish, Client, Result};
use crate::node::{self, Storage};

const QUEUE: &str = "counted";
/// Messages written before the client reads their deliveries back.
const WINDOW: usize = 100;
const BODY_BYTES: usize = 16;

/// `count` transient messages to a queue consumed with no-ack, each delivery read back.
pub async fn publish_deliver(count: usize) -> Result<String> {
    let node = node::start(Storage::Memory)?;
    let mut client = Client::connect(node.broker.clone()).await?;
    client
        .declare_queue(QUEUE, false, FieldTable::new())
        .await?;
    let consume = BasicConsume {
        queue: QUEUE.into(),
        consumer_tag: "c".into(),
        no_ack: true,
        ..Default::default()
    };
    client
        .call(consume, "basic.consume-ok", |m| {
            matches!(m, Method::BasicConsumeOk(_))
        })
        .await?;
    let one = encoded_publish(QUEUE, BODY_BYTES, &BasicProperties::default());
    let mut window = BytesMut::with_capacity(one.len() * WINDOW);
    let mut sent = 0;
    while sent < count {
        let n = WINDOW.min(count - sent);
        window.clear();
        for _ in 0..n {
            window.extend_from_slice(&one);
        }
        client.write(&window).await?;
        for _ in 0..n {
            client
                .expect("basic.deliver", |m| matches!(m, Method::BasicDeliver(_)))
                .await?;
        }
        sent += n;
    }
    client.close().await;
    Ok(format!("{sent} deliveries of {BODY_BYTES} B"))
}

/// `count` persistent messages to a durable queue of the kind `storage` names, each
/// confirmed (basic.ack) before the next is sent: one message per store batch and fsync, so
/// the count does not depend on how the writer thread's batches fall.
pub async fn confirmed(storage: Storage, count: usize) -> Result<String> {
    let node = node::start(storage)?;
    let mut client = Client::connect(node.broker.clone()).await?;
    let mut arguments = FieldTable::new();
    if storage == Storage::Quorum {
        arguments.insert("x-queue-type", FieldValue::LongStr("quorum".into()));
    }
    client.declare_queue(QUEUE, true, arguments).await?;
    client.select_confirms().await?;
    let persistent = BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    let one = encoded_publish(QUEUE, BODY_BYTES, &persistent);
    for _ in 0..count {
        client.write(&one).await?;
        client
            .expect("basic.ack", |m| matches!(m, Method::BasicAck(_)))
            .await?;
    }
    let stored = node
        .broker
        .vhost("/")
        .and_then(|v| v.queue(QUEUE))
        .map(|q| q.message_count())
        .unwrap_or(0);
    client.close().await;
    node.leave_to_exit();
    if stored as usize != count {
        return Err(format!("{count} confirmed but {stored} in the queue"));
    }
    Ok(format!(
        "{count} confirmed persistent messages of {BODY_BYTES} B"
    ))
}
