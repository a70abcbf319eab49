//! Declaring: queue.declare of a new queue (transient, or durable with a store, which writes
//! a definitions journal record and waits for it to be durable), and queue.bind of one queue
//! to a topic exchange with a new pattern each time.

use warren_codec::*;

use crate::client::{Client, Result};
use crate::node::{self, Storage};

/// `count` queue.declare of new queues, each answered before the next.
pub async fn declare(durable: bool, count: usize) -> Result<String> {
    let node = node::start(if durable {
        Storage::Classic
    } else {
        Storage::Memory
    })?;
    let mut client = Client::connect(node.broker.clone()).await?;
    for i in 0..count {
        client
            .declare_queue(&format!("declared-{i}"), durable, FieldTable::new())
            .await?;
    }
    let queues = node
        .broker
        .vhost("/")
        .map(|v| v.queues().len())
        .unwrap_or(0);
    client.close().await;
    node.leave_to_exit();
    if queues < count {
        return Err(format!("{count} declared but {queues} queues"));
    }
    Ok(format!("{count} queues declared (durable: {durable})"))
}

/// `count` queue.bind of one queue to a topic exchange, each with a new pattern.
pub async fn bind(count: usize) -> Result<String> {
    let node = node::start(Storage::Memory)?;
    let mut client = Client::connect(node.broker.clone()).await?;
    let exchange = ExchangeDeclare {
        exchange: "topic".into(),
        exchange_type: "topic".into(),
        ..Default::default()
    };
    client
        .call(exchange, "exchange.declare-ok", |m| {
            matches!(m, Method::ExchangeDeclareOk(_))
        })
        .await?;
    client
        .declare_queue("bound", false, FieldTable::new())
        .await?;
    for i in 0..count {
        let bind = QueueBind {
            queue: "bound".into(),
            exchange: "topic".into(),
            routing_key: format!("orders.{i}.*.#").into(),
            ..Default::default()
        };
        client
            .call(bind, "queue.bind-ok", |m| {
                matches!(m, Method::QueueBindOk(_))
            })
            .await?;
    }
    client.close().await;
    node.leave_to_exit();
    Ok(format!("{count} bindings to a topic exchange"))
}
