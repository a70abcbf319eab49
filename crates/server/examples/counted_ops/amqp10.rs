//! The AMQP 1.0 publish path: a client over an in-memory pipe (`serve_stream` hands an AMQP
//! 1.0 header to `warren-amqp10`, as the listener does) that logs in with SASL PLAIN, attaches
//! a sender to `/queues/counted` and sends 16 B messages unsettled, in windows of 100, each
//! window's dispositions (accepted) read back before the next.

use bytes::BytesMut;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use warren_amqp10_codec::*;
use warren_broker::vhost::QueueDeclaration;
use warren_codec::FieldTable;

use crate::client::Result;
use crate::node::{self, Storage};

const QUEUE: &str = "counted";
const WINDOW: u32 = 100;
const BODY_BYTES: usize = 16;
const PIPE_BYTES: usize = 1 << 20;

struct Client {
    stream: DuplexStream,
    rbuf: BytesMut,
}

impl Client {
    async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    async fn send(&mut self, p: Performative, payload: &[u8]) -> Result<()> {
        let mut out = BytesMut::new();
        write_performative(&mut out, 0, &p, payload);
        self.write(&out).await
    }

    async fn fill(&mut self) -> Result<()> {
        let n = self
            .stream
            .read_buf(&mut self.rbuf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(())
    }

    /// The next non-empty frame.
    async fn frame(&mut self) -> Result<RawFrame> {
        loop {
            if let Some(f) = parse_frame(&mut self.rbuf, 1 << 20)? {
                if !f.body.is_empty() {
                    return Ok(f);
                }
                continue;
            }
            self.fill().await?;
        }
    }

    async fn performative(&mut self) -> Result<Performative> {
        let f = self.frame().await?;
        Ok(decode_performative(&f.body)?.0)
    }

    async fn header(&mut self, expected: [u8; 8]) -> Result<()> {
        while self.rbuf.len() < 8 {
            self.fill().await?;
        }
        let header = self.rbuf.split_to(8);
        if header[..] != expected {
            return Err(format!(
                "expected protocol header {expected:?}, got {header:?}"
            ));
        }
        Ok(())
    }

    /// SASL PLAIN as guest, open, begin and a sender attached to `address`, with its credit.
    async fn open_sender(&mut self, address: &str) -> Result<()> {
        self.write(&PROTOCOL_HEADER_SASL).await?;
        self.header(PROTOCOL_HEADER_SASL).await?;
        self.frame().await?; // sasl-mechanisms
        let mut out = BytesMut::new();
        write_sasl_init(
            &mut out,
            &SaslInit {
                mechanism: Symbol::from("PLAIN"),
                initial_response: Some(Binary::from(b"\0guest\0guest".to_vec())),
                hostname: None,
            },
        );
        self.write(&out).await?;
        match decode_sasl_server_frame(&self.frame().await?.body)? {
            SaslServerFrame::Outcome(o) if o.code == SaslCode::Ok => {}
            other => return Err(format!("expected sasl-outcome ok, got {other:?}")),
        }
        self.write(&PROTOCOL_HEADER_AMQP).await?;
        self.header(PROTOCOL_HEADER_AMQP).await?;
        let open = Open {
            container_id: "counted".into(),
            hostname: None,
            max_frame_size: MaxFrameSize(65536),
            channel_max: ChannelMax(10),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(Performative::Open(open), &[]).await?;
        self.expect("open", |p| matches!(p, Performative::Open(_)))
            .await?;
        let begin = Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: u32::MAX,
            outgoing_window: u32::MAX,
            handle_max: 10.into(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(Performative::Begin(begin), &[]).await?;
        self.expect("begin", |p| matches!(p, Performative::Begin(_)))
            .await?;
        let attach = Attach {
            name: "sender".into(),
            handle: 0.into(),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: None,
            target: Some(Box::new(TargetArchetype::Target(Target {
                address: Some(address.into()),
                ..Default::default()
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(Performative::Attach(attach), &[]).await?;
        self.expect("attach", |p| matches!(p, Performative::Attach(_)))
            .await
    }

    async fn expect(&mut self, what: &str, ok: impl Fn(&Performative) -> bool) -> Result<()> {
        let p = self.performative().await?;
        if ok(&p) {
            Ok(())
        } else {
            Err(format!("expected {what}, got {p:?}"))
        }
    }
}

/// One transfer frame (delivery `id`, unsettled) carrying a message of one data section.
fn encoded_transfer(out: &mut BytesMut, id: u32, message: &[u8]) {
    let transfer = Transfer {
        handle: 0.into(),
        delivery_id: Some(id),
        delivery_tag: Some(serde_bytes::ByteBuf::from(id.to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    write_performative(out, 0, &Performative::Transfer(transfer), message);
}

/// `count` transfers to a queue, each settled by the broker with accepted.
pub async fn transfer(count: usize) -> Result<String> {
    let node = node::start(Storage::Memory)?;
    let vhost = node.broker.vhost("/").ok_or("no vhost /")?;
    let declaration = QueueDeclaration {
        name: QUEUE.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    };
    vhost
        .declare_queue(declaration, 0)
        .map_err(|e| format!("declaring {QUEUE}: {e:?}"))?;
    let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
    let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);
    let server = tokio::spawn(warren_server::serve_stream(
        server_end,
        peer,
        node.broker.clone(),
        Arc::new(warren_server::ServerConfig::default()),
    ));
    let mut client = Client {
        stream: client_end,
        rbuf: BytesMut::with_capacity(PIPE_BYTES),
    };
    client.open_sender(&format!("/queues/{QUEUE}")).await?;
    // A message of one data section: descriptor 0x75 (data), then a vbin8 of the body.
    let mut message = vec![0x00, 0x53, 0x75, 0xa0, BODY_BYTES as u8];
    message.extend_from_slice(&[b'x'; BODY_BYTES]);
    let mut window = BytesMut::new();
    let mut sent = 0u32;
    let mut accepted = 0u32;
    while (sent as usize) < count {
        let n = WINDOW.min(count as u32 - sent);
        window.clear();
        for id in sent..sent + n {
            encoded_transfer(&mut window, id, &message);
        }
        client.write(&window).await?;
        sent += n;
        while accepted < sent {
            match client.performative().await? {
                Performative::Disposition(d) => {
                    if !d.settled || !matches!(d.state, Some(DeliveryState::Accepted(_))) {
                        return Err(format!("expected settled accepted, got {d:?}"));
                    }
                    accepted += d.last.unwrap_or(d.first) - d.first + 1;
                }
                Performative::Flow(_) => {}
                other => return Err(format!("expected a disposition, got {other:?}")),
            }
        }
    }
    drop(client);
    let _ = server.await;
    let queued = vhost.queue(QUEUE).map(|q| q.message_count()).unwrap_or(0);
    node.leave_to_exit();
    if queued as usize != count {
        return Err(format!("{accepted} accepted but {queued} in the queue"));
    }
    Ok(format!("{accepted} transfers of {BODY_BYTES} B accepted"))
}
