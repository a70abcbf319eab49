//! A channel: the synchronous AMQP methods (declare, bind, qos, consume, select, commit) as
//! async calls, and the hot paths as plain functions that append frames to the connection's
//! output buffer (`publish`, `ack`). Incoming frames for the channel arrive through
//! `ChannelShared::on_frame`, called by the connection's reader task.

use super::confirms::ConfirmTracker;
use super::connection::ConnInner;
use super::{ClientError, Result};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Notify};
use warren_codec::*;

/// Callbacks run on the reader task when the broker confirms or returns a message. They must
/// be quick: the reader dispatches nothing else meanwhile.
pub trait ChannelHooks: Send + Sync {
    /// `received_ns`: when the read that brought the confirm returned (see `Delivery`).
    fn on_confirm(&self, _seq: u64, _ack: bool, _sent_ns: u64, _received_ns: u64) {}
    fn on_return(&self, _reply_code: u16, _body: &Bytes) {}
}

/// A consumer that handles each delivery on the connection's reader task, the moment its last
/// frame is parsed: no hand-over to another task, so a receiver's clock reading is taken as
/// soon as the message is in (many-pairs' flight times). Must be quick.
pub trait DeliveryHook: Send + Sync {
    fn on_delivery(&self, delivery: Delivery);
}

/// Where a consumer's deliveries go.
enum ConsumerSink {
    Stream(mpsc::UnboundedSender<Delivery>),
    Hook(Arc<dyn DeliveryHook>),
}

/// A message delivered by `basic.deliver` or `basic.get-ok`.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub routing_key: ShortStr,
    /// The encoded property block; decode with `BasicProperties::decode` only when needed.
    pub properties: Bytes,
    pub body: Bytes,
    /// When the socket read that completed this delivery returned (`payload::now_ns`): one
    /// clock reading per read, shared by every frame the read brought in. A flight time
    /// ends when the message is in the tool's hands, which is when that read returned; and
    /// reading the clock per message instead was CPU the tool takes from the broker it
    /// measures on shared cores (docs/benchmarks.md).
    pub received_ns: u64,
}

impl Delivery {
    pub fn decode_properties(&self) -> Option<BasicProperties> {
        BasicProperties::decode(&mut Reader::new(self.properties.clone())).ok()
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

/// The encoded `basic.publish` method frame for one channel, exchange and routing key: it never
/// changes between messages, so it is built once and copied.
#[derive(Clone)]
pub struct PublishTemplate {
    frame: Bytes,
}

/// Every frame byte of a message but its body's: the publish method, the content header and
/// the body frame's header, encoded once for a producer whose messages differ only in their
/// body's contents (same exchange, routing key, properties and body length). A message is
/// then three copies into the output buffer instead of a dozen field writes, each of which
/// checks the buffer's capacity (the tool shares the broker's cores: what it spends per
/// message is taken from the broker it measures).
#[derive(Clone)]
pub struct MessageTemplate {
    publish: PublishTemplate,
    properties: Bytes,
    body_len: usize,
    /// None when the body takes other than one frame (empty, or larger than a frame).
    before_body: Option<Bytes>,
}

pub(crate) struct Reply {
    pub method: Method,
    pub delivery: Option<Delivery>,
}

enum ContentMethod {
    Deliver(BasicDeliver),
    Return(BasicReturn),
    GetOk(BasicGetOk),
}

struct Assembling {
    method: ContentMethod,
    properties: Bytes,
    body_size: u64,
    have_header: bool,
    /// The body when it came in one frame (the common case, kept zero-copy), else `parts`.
    single: Option<Bytes>,
    parts: BytesMut,
}

impl Assembling {
    fn new(method: ContentMethod) -> Assembling {
        Assembling {
            method,
            properties: Bytes::new(),
            body_size: 0,
            have_header: false,
            single: None,
            parts: BytesMut::new(),
        }
    }
}

#[derive(Default)]
struct ChannelState {
    closed: Option<String>,
    sync_waiters: VecDeque<oneshot::Sender<Result<Reply>>>,
    /// By consumer tag, looked up once per delivery: foldhash, not SipHash (the tags are the
    /// tool's own).
    consumers: HashMap<ShortStr, ConsumerSink, foldhash::fast::RandomState>,
    confirms: Option<ConfirmTracker>,
    hooks: Option<Arc<dyn ChannelHooks>>,
    content: Option<Assembling>,
}

pub(crate) struct ChannelShared {
    pub id: u16,
    state: Mutex<ChannelState>,
    confirm_progress: Notify,
}

impl ChannelShared {
    pub fn new(id: u16) -> ChannelShared {
        ChannelShared {
            id,
            state: Mutex::new(ChannelState::default()),
            confirm_progress: Notify::new(),
        }
    }

    /// Registers a waiter for the next synchronous reply; must happen before the request
    /// is written so replies pair with requests in order.
    pub fn push_waiter(&self) -> Result<oneshot::Receiver<Result<Reply>>> {
        let mut st = self.state.lock();
        if let Some(why) = &st.closed {
            return Err(ClientError::ChannelClosed(why.clone()));
        }
        let (tx, rx) = oneshot::channel();
        st.sync_waiters.push_back(tx);
        Ok(rx)
    }

    /// The channel (or its connection) is gone: fail every waiter, end every consumer stream.
    pub fn fail(&self, why: &str) {
        let mut st = self.state.lock();
        if st.closed.is_none() {
            st.closed = Some(why.to_owned());
        }
        for w in st.sync_waiters.drain(..) {
            let _ = w.send(Err(ClientError::ChannelClosed(why.to_owned())));
        }
        st.consumers.clear();
        drop(st);
        self.confirm_progress.notify_waiters();
    }

    /// Handles one frame for this channel (called by the reader task).
    /// `read_ns`: when the read that brought `frame` returned.
    pub fn on_frame(&self, conn: &ConnInner, frame: RawFrame, read_ns: u64) -> Result<()> {
        match frame.kind {
            FrameKind::Method => {
                // basic.deliver, one per message received, skips the generic `Method` (the
                // tool shares the broker's cores: its CPU per message caps the rate).
                if let Some(deliver) = decode_basic_deliver(&frame.payload) {
                    let deliver = deliver.map_err(|e| ClientError::Protocol(e.to_string()))?;
                    self.state.lock().content =
                        Some(Assembling::new(ContentMethod::Deliver(deliver)));
                    return Ok(());
                }
                let method = Method::decode(&mut Reader::new(frame.payload))
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                self.on_method(conn, method, read_ns)
            }
            FrameKind::Header => {
                let header = ContentHeader::decode(frame.payload)
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                let mut st = self.state.lock();
                let Some(a) = st.content.as_mut() else {
                    return Err(ClientError::Protocol(
                        "content header without method".into(),
                    ));
                };
                a.have_header = true;
                a.body_size = header.body_size;
                a.properties = header.properties;
                if a.body_size == 0 {
                    let a = st.content.take().expect("checked above");
                    self.finish_content(&mut st, a, Bytes::new(), read_ns);
                }
                Ok(())
            }
            FrameKind::Body => {
                let mut st = self.state.lock();
                let Some(a) = st.content.as_mut().filter(|a| a.have_header) else {
                    return Err(ClientError::Protocol("body frame without header".into()));
                };
                let have = a.parts.len() + a.single.as_ref().map_or(0, |b| b.len());
                if have == 0 && frame.payload.len() as u64 == a.body_size {
                    let a = st.content.take().expect("checked above");
                    self.finish_content(&mut st, a, frame.payload, read_ns);
                    return Ok(());
                }
                if let Some(first) = a.single.take() {
                    a.parts.extend_from_slice(&first);
                }
                if a.parts.is_empty() {
                    a.single = Some(frame.payload);
                } else {
                    a.parts.extend_from_slice(&frame.payload);
                }
                let have = a.parts.len() + a.single.as_ref().map_or(0, |b| b.len());
                if have as u64 >= a.body_size {
                    let mut a = st.content.take().expect("checked above");
                    let body = match a.single.take() {
                        Some(b) => b,
                        None => std::mem::take(&mut a.parts).freeze(),
                    };
                    self.finish_content(&mut st, a, body, read_ns);
                }
                Ok(())
            }
            FrameKind::Heartbeat => Ok(()),
        }
    }

    fn on_method(&self, conn: &ConnInner, method: Method, read_ns: u64) -> Result<()> {
        let mut st = self.state.lock();
        let (content, method) = match method {
            Method::BasicDeliver(m) => (Some(ContentMethod::Deliver(m)), None),
            Method::BasicReturn(m) => (Some(ContentMethod::Return(m)), None),
            Method::BasicGetOk(m) => (Some(ContentMethod::GetOk(m)), None),
            other => (None, Some(other)),
        };
        if let Some(method) = content {
            st.content = Some(Assembling::new(method));
            return Ok(());
        }
        let Some(method) = method else { return Ok(()) };
        match method {
            Method::BasicAck(m) => {
                self.resolve_confirms(&mut st, m.delivery_tag, m.multiple, true, read_ns);
            }
            Method::BasicNack(m) => {
                self.resolve_confirms(&mut st, m.delivery_tag, m.multiple, false, read_ns);
            }
            Method::ChannelClose(m) => {
                drop(st);
                conn.send_method(self.id, &Method::ChannelCloseOk(ChannelCloseOk));
                self.fail(&format!("{} {}", m.reply_code, m.reply_text));
            }
            Method::ChannelFlow(m) => {
                conn.send_method(
                    self.id,
                    &Method::ChannelFlowOk(ChannelFlowOk { active: m.active }),
                );
            }
            Method::BasicCancel(m) => {
                // The broker cancelled a consumer (its queue was deleted): end its stream.
                st.consumers.remove(&m.consumer_tag);
            }
            method => {
                let Some(waiter) = st.sync_waiters.pop_front() else {
                    return Err(ClientError::Protocol(format!(
                        "unexpected {} on channel {}",
                        method.name(),
                        self.id
                    )));
                };
                let _ = waiter.send(Ok(Reply {
                    method,
                    delivery: None,
                }));
            }
        }
        Ok(())
    }

    fn resolve_confirms(
        &self,
        st: &mut ChannelState,
        tag: u64,
        multiple: bool,
        ack: bool,
        read_ns: u64,
    ) {
        let hooks = st.hooks.clone();
        if let Some(tracker) = st.confirms.as_mut() {
            tracker.resolve(tag, multiple, |seq, sent_ns| {
                if let Some(h) = &hooks {
                    h.on_confirm(seq, ack, sent_ns, read_ns);
                }
            });
        }
        self.confirm_progress.notify_waiters();
    }

    fn finish_content(&self, st: &mut ChannelState, a: Assembling, body: Bytes, read_ns: u64) {
        match a.method {
            ContentMethod::Deliver(m) => {
                let delivery = Delivery {
                    delivery_tag: m.delivery_tag,
                    redelivered: m.redelivered,
                    routing_key: m.routing_key,
                    properties: a.properties,
                    body,
                    received_ns: read_ns,
                };
                match st.consumers.get(&m.consumer_tag) {
                    Some(ConsumerSink::Stream(tx)) => {
                        let _ = tx.send(delivery);
                    }
                    Some(ConsumerSink::Hook(hook)) => hook.on_delivery(delivery),
                    None => {}
                }
            }
            ContentMethod::Return(m) => {
                if let Some(h) = &st.hooks {
                    h.on_return(m.reply_code, &body);
                }
            }
            ContentMethod::GetOk(m) => {
                if let Some(waiter) = st.sync_waiters.pop_front() {
                    let _ = waiter.send(Ok(Reply {
                        method: Method::BasicGetEmpty(BasicGetEmpty),
                        delivery: Some(Delivery {
                            delivery_tag: m.delivery_tag,
                            redelivered: m.redelivered,
                            routing_key: m.routing_key,
                            properties: a.properties,
                            body,
                            received_ns: read_ns,
                        }),
                    }));
                }
            }
        }
    }
}

/// A handle on one open channel; cheap to clone, all clones share the channel.
#[derive(Clone)]
pub struct Channel {
    pub(crate) conn: Arc<ConnInner>,
    pub(crate) shared: Arc<ChannelShared>,
}

impl Channel {
    pub fn id(&self) -> u16 {
        self.shared.id
    }

    pub(crate) async fn call(&self, method: Method) -> Result<Reply> {
        let rx = self.shared.push_waiter()?;
        self.conn.send_method(self.shared.id, &method);
        rx.await
            .map_err(|_| ClientError::ConnectionClosed(self.conn.close_reason()))?
    }

    pub fn set_hooks(&self, hooks: Arc<dyn ChannelHooks>) {
        self.shared.state.lock().hooks = Some(hooks);
    }

    pub async fn exchange_declare(
        &self,
        name: &str,
        kind: &str,
        durable: bool,
        auto_delete: bool,
    ) -> Result<()> {
        self.call(Method::ExchangeDeclare(ExchangeDeclare {
            exchange: name.into(),
            exchange_type: kind.into(),
            durable,
            auto_delete,
            ..Default::default()
        }))
        .await?;
        Ok(())
    }

    pub async fn exchange_delete(&self, name: &str) -> Result<()> {
        self.call(Method::ExchangeDelete(ExchangeDelete {
            exchange: name.into(),
            ..Default::default()
        }))
        .await?;
        Ok(())
    }

    /// Declares a queue and returns its name (the broker picks one when `name` is empty)
    /// and its message count.
    pub async fn queue_declare(&self, name: &str, opts: &QueueOptions) -> Result<(String, u32)> {
        let reply = self
            .call(Method::QueueDeclare(QueueDeclare {
                queue: name.into(),
                passive: false,
                durable: opts.durable,
                exclusive: opts.exclusive,
                auto_delete: opts.auto_delete,
                no_wait: false,
                arguments: opts.arguments.clone(),
            }))
            .await?;
        match reply.method {
            Method::QueueDeclareOk(ok) => Ok((ok.queue.to_string(), ok.message_count)),
            other => Err(ClientError::Protocol(format!(
                "expected queue.declare-ok, got {}",
                other.name()
            ))),
        }
    }

    /// A passive declare: the queue's ready-message count (messages delivered but not yet
    /// acknowledged are not in it), or an error that closes the channel when it does not exist.
    pub async fn queue_message_count(&self, name: &str) -> Result<u32> {
        let reply = self
            .call(Method::QueueDeclare(QueueDeclare {
                queue: name.into(),
                passive: true,
                ..Default::default()
            }))
            .await?;
        match reply.method {
            Method::QueueDeclareOk(ok) => Ok(ok.message_count),
            other => Err(ClientError::Protocol(format!(
                "expected queue.declare-ok, got {}",
                other.name()
            ))),
        }
    }

    /// Declares a server-named, exclusive, auto-delete queue (a reply queue, or a consumer's
    /// own queue) and returns its name.
    pub async fn declare_private_queue(&self) -> Result<String> {
        let opts = QueueOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        };
        Ok(self.queue_declare("", &opts).await?.0)
    }

    pub async fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<()> {
        self.call(Method::QueueBind(QueueBind {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            no_wait: false,
            arguments,
        }))
        .await?;
        Ok(())
    }

    pub async fn queue_delete(&self, queue: &str) -> Result<()> {
        self.call(Method::QueueDelete(QueueDelete {
            queue: queue.into(),
            ..Default::default()
        }))
        .await?;
        Ok(())
    }

    pub async fn basic_qos(&self, prefetch_count: u16, global: bool) -> Result<()> {
        self.call(Method::BasicQos(BasicQos {
            prefetch_size: 0,
            prefetch_count,
            global,
        }))
        .await?;
        Ok(())
    }

    pub async fn confirm_select(&self) -> Result<()> {
        self.shared.state.lock().confirms = Some(ConfirmTracker::new());
        self.call(Method::ConfirmSelect(ConfirmSelect { nowait: false }))
            .await?;
        Ok(())
    }

    pub async fn tx_select(&self) -> Result<()> {
        self.call(Method::TxSelect(TxSelect)).await?;
        Ok(())
    }

    pub async fn tx_commit(&self) -> Result<()> {
        self.call(Method::TxCommit(TxCommit)).await?;
        Ok(())
    }

    /// Starts a consumer with a client-chosen tag; deliveries stream into the returned queue,
    /// which ends when the consumer, channel or connection goes away.
    pub async fn basic_consume(
        &self,
        queue: &str,
        consumer_tag: &str,
        no_ack: bool,
    ) -> Result<mpsc::UnboundedReceiver<Delivery>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.consume_into(queue, consumer_tag, no_ack, ConsumerSink::Stream(tx))
            .await?;
        Ok(rx)
    }

    /// Starts a consumer whose deliveries `hook` handles on the reader task. The channel
    /// keeps the hook until the consumer, channel or connection goes away.
    pub async fn basic_consume_hook(
        &self,
        queue: &str,
        consumer_tag: &str,
        no_ack: bool,
        hook: Arc<dyn DeliveryHook>,
    ) -> Result<()> {
        self.consume_into(queue, consumer_tag, no_ack, ConsumerSink::Hook(hook))
            .await
    }

    async fn consume_into(
        &self,
        queue: &str,
        consumer_tag: &str,
        no_ack: bool,
        sink: ConsumerSink,
    ) -> Result<()> {
        let tag: ShortStr = consumer_tag.into();
        self.shared.state.lock().consumers.insert(tag.clone(), sink);
        self.call(Method::BasicConsume(BasicConsume {
            queue: queue.into(),
            consumer_tag: tag,
            no_ack,
            ..Default::default()
        }))
        .await?;
        Ok(())
    }

    pub async fn basic_cancel(&self, consumer_tag: &str) -> Result<()> {
        self.call(Method::BasicCancel(BasicCancel {
            consumer_tag: consumer_tag.into(),
            no_wait: false,
        }))
        .await?;
        self.shared.state.lock().consumers.remove(consumer_tag);
        Ok(())
    }

    pub async fn basic_get(&self, queue: &str, no_ack: bool) -> Result<Option<Delivery>> {
        let reply = self
            .call(Method::BasicGet(BasicGet {
                queue: queue.into(),
                no_ack,
            }))
            .await?;
        Ok(reply.delivery)
    }

    pub fn ack(&self, delivery_tag: u64, multiple: bool) {
        self.conn.send_method(
            self.shared.id,
            &Method::BasicAck(BasicAck {
                delivery_tag,
                multiple,
            }),
        );
    }

    pub fn publish_template(
        &self,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
    ) -> PublishTemplate {
        let mut buf = BytesMut::new();
        write_method(
            &mut buf,
            self.shared.id,
            &Method::BasicPublish(BasicPublish {
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                mandatory,
                immediate: false,
            }),
        );
        PublishTemplate {
            frame: buf.freeze(),
        }
    }

    /// A template for messages of `body_len` bytes with these properties (`publish_message`).
    pub fn message_template(
        &self,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        properties: Bytes,
        body_len: usize,
    ) -> MessageTemplate {
        let publish = self.publish_template(exchange, routing_key, mandatory);
        let before_body = bytes_before_body(
            &publish.frame,
            self.shared.id,
            &properties,
            body_len,
            self.conn.frame_max,
        );
        MessageTemplate {
            publish,
            properties,
            body_len,
            before_body,
        }
    }

    /// `publish` for a message made from `template`: its body's bytes between the frames
    /// encoded once (any other body length goes the general way).
    pub fn publish_message(
        &self,
        template: &MessageTemplate,
        body: &[u8],
        sent_ns: u64,
    ) -> Result<u64> {
        match &template.before_body {
            Some(before) if body.len() == template.body_len => self.append(sent_ns, |out| {
                out.extend_from_slice(before);
                out.extend_from_slice(body);
                out.extend_from_slice(&[FRAME_END]);
            }),
            _ => self.publish(&template.publish, &template.properties, body, sent_ns),
        }
    }

    /// Appends one message (method, header and body frames) to the output buffer. Returns
    /// its confirm sequence number in confirm mode, else 0. `sent_ns` is kept for the confirm
    /// latency. Never blocks: pair with `wait_room` to respect backpressure.
    pub fn publish(
        &self,
        template: &PublishTemplate,
        properties: &[u8],
        body: &[u8],
        sent_ns: u64,
    ) -> Result<u64> {
        let frame_max = self.conn.frame_max;
        let id = self.shared.id;
        self.append(sent_ns, |out| {
            out.extend_from_slice(&template.frame);
            write_content_header(out, id, BASIC_CLASS_ID, body.len() as u64, properties);
            write_body_frames(out, id, body, frame_max);
        })
    }

    /// Writes one message's frames (`write`) to the output buffer, numbered for confirms.
    fn append(&self, sent_ns: u64, write: impl FnOnce(&mut BytesMut)) -> Result<u64> {
        let mut st = self.shared.state.lock();
        if let Some(why) = &st.closed {
            return Err(ClientError::ChannelClosed(why.clone()));
        }
        if self.conn.out.is_closed() {
            return Err(ClientError::ConnectionClosed(self.conn.close_reason()));
        }
        // Holding the channel lock while writing keeps sequence numbers in wire order.
        let seq = match st.confirms.as_mut() {
            Some(tracker) => tracker.on_publish(sent_ns),
            None => 0,
        };
        self.conn.out.write(write);
        Ok(seq)
    }

    /// Waits until the connection's output buffer has room (publisher backpressure).
    pub async fn wait_room(&self) {
        self.conn.out.wait_room().await
    }

    pub fn outstanding_confirms(&self) -> usize {
        self.shared
            .state
            .lock()
            .confirms
            .as_ref()
            .map_or(0, |t| t.outstanding())
    }

    /// Waits until fewer than `max` publishes await confirmation (or the channel closed).
    pub async fn wait_confirms_below(&self, max: usize) -> Result<()> {
        loop {
            let notified = self.shared.confirm_progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.shared.state.lock();
                if let Some(why) = &st.closed {
                    return Err(ClientError::ChannelClosed(why.clone()));
                }
                if st.confirms.as_ref().map_or(0, |t| t.outstanding()) < max {
                    return Ok(());
                }
            }
            notified.await;
        }
    }

    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().closed.is_some() || self.conn.out.is_closed()
    }

    pub async fn close(&self) -> Result<()> {
        if self.is_closed() {
            return Ok(());
        }
        let r = self
            .call(Method::ChannelClose(ChannelClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            }))
            .await;
        self.shared.fail("closed by client");
        self.conn.forget_channel(self.shared.id);
        r.map(|_| ())
    }
}

/// A message's frames up to its body's bytes (`MessageTemplate`), or None unless the body
/// takes exactly one frame: a whole message with a blank body, written by the general
/// encoders, cut before the body (its one body frame's payload and frame-end come last).
fn bytes_before_body(
    publish_frame: &[u8],
    channel: u16,
    properties: &[u8],
    body_len: usize,
    frame_max: u32,
) -> Option<Bytes> {
    if body_len == 0 || body_len + FRAME_OVERHEAD > frame_max as usize {
        return None;
    }
    let mut whole = BytesMut::from(publish_frame);
    write_content_header(
        &mut whole,
        channel,
        BASIC_CLASS_ID,
        body_len as u64,
        properties,
    );
    write_body_frames(&mut whole, channel, &vec![0; body_len], frame_max);
    whole.truncate(whole.len() - body_len - 1);
    Some(whole.freeze())
}

/// Encodes properties once, for reuse on every publish.
pub fn encode_properties(props: &BasicProperties) -> Bytes {
    let mut buf = BytesMut::new();
    props.encode(&mut Writer::new(&mut buf));
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message from the template is byte for byte what the general encoders write, and
    /// bodies that take other than one frame have no template.
    #[test]
    fn a_templated_message_is_what_the_encoders_write() {
        let mut publish = BytesMut::new();
        write_method(
            &mut publish,
            7,
            &Method::BasicPublish(BasicPublish {
                exchange: "amq.direct".into(),
                routing_key: "key".into(),
                mandatory: true,
                immediate: false,
            }),
        );
        let properties = encode_properties(&BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        });
        let frame_max = 4096;
        for body_len in [1, 20, 1000, 4088] {
            let body: Vec<u8> = (0..body_len).map(|i| i as u8).collect();
            let mut general = BytesMut::from(&publish[..]);
            write_content_header(
                &mut general,
                7,
                BASIC_CLASS_ID,
                body_len as u64,
                &properties,
            );
            write_body_frames(&mut general, 7, &body, frame_max);
            let before = bytes_before_body(&publish, 7, &properties, body_len, frame_max)
                .expect("one body frame");
            let mut templated = BytesMut::from(&before[..]);
            templated.extend_from_slice(&body);
            templated.extend_from_slice(&[FRAME_END]);
            assert_eq!(templated, general, "body of {body_len} B");
        }
        for body_len in [0, 4089, 10_000] {
            assert!(bytes_before_body(&publish, 7, &properties, body_len, frame_max).is_none());
        }
    }
}
