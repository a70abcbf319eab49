//! Opening a client: TCP, the SASL layer (PLAIN with the URI's user, or ANONYMOUS when
//! that is all the broker offers), then the AMQP header with open, begin and attach, each
//! after the broker's answer to the one before. A
//! broker that answers the SASL header with the plain AMQP header (no SASL layer) is
//! reconnected to without one.
//!
//! Refusals become errors that say what the broker said: a failed login (the SASL code),
//! a closed connection or ended session (their error), an attach without a terminus
//! followed by a detach (its error: amqp:not-found for a missing queue).

use super::endpoint::{Endpoint, CHANNEL, HANDLE, INCOMING_WINDOW, INITIAL_DELIVERY_COUNT};
use crate::client::AmqpUri;
use anyhow::{anyhow, bail, Context, Result};
use bytes::BytesMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_amqp10_codec::{
    self as codec, decode_performative, decode_sasl_server_frame, parse_frame, Attach, Begin,
    Binary, ChannelMax, MaxFrameSize, Open, Performative, RawFrame, ReceiverSettleMode, Role,
    SaslCode, SaslInit, SaslServerFrame, SenderSettleMode, Source, Symbol, Target, TargetArchetype,
    FRAME_AMQP, FRAME_SASL, PROTOCOL_HEADER_AMQP, PROTOCOL_HEADER_SASL,
};

/// The largest frame we take (our open's max-frame-size): many-pairs messages are ~150
/// bytes; the broker splits anything larger.
pub const MAX_FRAME_BYTES: u32 = 65_536;

/// A client whose link is attached: its socket, what was read beyond the attach, its
/// protocol state, and the broker's idle-time-out (we must send something within it).
pub struct Opened {
    pub stream: TcpStream,
    pub rbuf: BytesMut,
    pub endpoint: Endpoint,
    pub peer_idle: Option<Duration>,
}

/// Which link to attach: `address` is the target of a sender, the source of a receiver.
pub struct LinkSpec<'a> {
    pub name: &'a str,
    pub address: &'a str,
}

/// Container ids must differ between a broker's connections: the process and a counter.
fn container_id(link_name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "warren-perf-{link_name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

struct Wire {
    stream: TcpStream,
    rbuf: BytesMut,
}

impl Wire {
    async fn connect(uri: &AmqpUri) -> Result<Wire> {
        let stream = TcpStream::connect((uri.host.as_str(), uri.port))
            .await
            .with_context(|| format!("connecting to {}:{}", uri.host, uri.port))?;
        let _ = stream.set_nodelay(true);
        Ok(Wire {
            stream,
            rbuf: BytesMut::with_capacity(4096),
        })
    }

    async fn fill(&mut self) -> Result<()> {
        self.rbuf.reserve(4096);
        let n = self.stream.read_buf(&mut self.rbuf).await?;
        if n == 0 {
            bail!("the broker closed the socket during the handshake");
        }
        Ok(())
    }

    async fn header(&mut self) -> Result<[u8; 8]> {
        while self.rbuf.len() < 8 {
            self.fill().await?;
        }
        let mut header = [0u8; 8];
        header.copy_from_slice(&self.rbuf.split_to(8));
        Ok(header)
    }

    /// The next frame that is not an empty (keep-alive) one.
    async fn frame(&mut self) -> Result<RawFrame> {
        loop {
            match parse_frame(&mut self.rbuf, MAX_FRAME_BYTES).map_err(|e| anyhow!(e))? {
                Some(frame) if frame.body.is_empty() => continue,
                Some(frame) => return Ok(frame),
                None => self.fill().await?,
            }
        }
    }
}

/// Opens a connection with one session and attaches `endpoint`'s link to `link`.
pub async fn open(uri: &AmqpUri, link: LinkSpec<'_>, endpoint: Endpoint) -> Result<Opened> {
    let mut wire = Wire::connect(uri).await?;
    wire.stream.write_all(&PROTOCOL_HEADER_SASL).await?;
    let header = wire.header().await?;
    if header == PROTOCOL_HEADER_AMQP {
        // No SASL layer at this broker: it closes this socket; the next goes straight on.
        wire = Wire::connect(uri).await?;
    } else if header == PROTOCOL_HEADER_SASL {
        sasl(&mut wire, uri).await?;
    } else {
        bail!("the broker answered the AMQP 1.0 SASL header with {header:?}: not AMQP 1.0");
    }
    attach(wire, uri, link, endpoint).await
}

async fn sasl(wire: &mut Wire, uri: &AmqpUri) -> Result<()> {
    let frame = wire.frame().await?;
    if frame.kind != FRAME_SASL {
        bail!(
            "expected sasl-mechanisms, got a frame of type {}",
            frame.kind
        );
    }
    let SaslServerFrame::Mechanisms(offered) =
        decode_sasl_server_frame(&frame.body).map_err(|e| anyhow!(e))?
    else {
        bail!("expected sasl-mechanisms, got a sasl-outcome");
    };
    let offered: Vec<&str> = offered
        .sasl_server_mechanisms
        .0
        .iter()
        .map(|m| m.as_str())
        .collect();
    let (mechanism, response) = if offered.contains(&"PLAIN") && !uri.user.is_empty() {
        let mut response = vec![0];
        response.extend_from_slice(uri.user.as_bytes());
        response.push(0);
        response.extend_from_slice(uri.password.as_bytes());
        ("PLAIN", response)
    } else if offered.contains(&"ANONYMOUS") {
        ("ANONYMOUS", b"warren-perf".to_vec())
    } else {
        bail!("the broker offers SASL {offered:?}; this client does PLAIN and ANONYMOUS");
    };
    let init = SaslInit {
        mechanism: Symbol::from(mechanism),
        initial_response: Some(Binary::from(response)),
        hostname: Some(uri.host.clone()),
    };
    let mut out = BytesMut::new();
    codec::write_sasl_init(&mut out, &init);
    wire.stream.write_all(&out).await?;
    let frame = wire.frame().await?;
    if frame.kind != FRAME_SASL {
        bail!("expected sasl-outcome, got a frame of type {}", frame.kind);
    }
    match decode_sasl_server_frame(&frame.body).map_err(|e| anyhow!(e))? {
        SaslServerFrame::Outcome(o) if o.code == SaslCode::Ok => Ok(()),
        SaslServerFrame::Outcome(o) => bail!(
            "SASL {mechanism} login as '{}' refused by the broker (sasl code {:?})",
            uri.user,
            o.code
        ),
        SaslServerFrame::Mechanisms(_) => bail!("expected sasl-outcome, got sasl-mechanisms"),
    }
}

async fn attach(
    mut wire: Wire,
    uri: &AmqpUri,
    link: LinkSpec<'_>,
    mut endpoint: Endpoint,
) -> Result<Opened> {
    let role = endpoint.role();
    let mut out = BytesMut::new();
    out.extend_from_slice(&PROTOCOL_HEADER_AMQP);
    // RabbitMQ 4 (and Warren) take the vhost from the open frame's hostname, "vhost:NAME".
    let hostname = if uri.vhost == "/" {
        uri.host.clone()
    } else {
        format!("vhost:{}", uri.vhost)
    };
    let open = Open {
        container_id: container_id(link.name),
        hostname: Some(hostname),
        max_frame_size: MaxFrameSize(MAX_FRAME_BYTES),
        // One session, on channel 0.
        channel_max: ChannelMax(0),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    codec::write_performative(&mut out, CHANNEL, &Performative::Open(open), &[]);
    let mut begin_frame = BytesMut::new();
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: INCOMING_WINDOW,
        outgoing_window: u32::MAX,
        handle_max: u32::MAX.into(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    codec::write_performative(&mut begin_frame, CHANNEL, &Performative::Begin(begin), &[]);
    let address = Some(link.address.to_owned());
    let (source, target) = match role {
        Role::Sender => (
            Source::default(),
            Target {
                address,
                ..Default::default()
            },
        ),
        Role::Receiver => (
            Source {
                address,
                ..Default::default()
            },
            Target::default(),
        ),
    };
    let attach = Attach {
        name: link.name.to_owned(),
        handle: HANDLE.into(),
        role: role.clone(),
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(source)),
        target: Some(Box::new(TargetArchetype::Target(target))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: (role == Role::Sender).then_some(INITIAL_DELIVERY_COUNT),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let mut attach_frame = BytesMut::new();
    codec::write_performative(
        &mut attach_frame,
        CHANNEL,
        &Performative::Attach(attach),
        &[],
    );
    // Each frame waits for the broker's answer to the one before: pipelining them is
    // allowed (§2.4.1), but a broker may not look at what it read along with the open
    // until more arrives (Warren's open handling does so), and then nothing would.
    wire.stream.write_all(&out).await?;

    let header = wire.header().await?;
    if header != PROTOCOL_HEADER_AMQP {
        bail!("the broker answered the AMQP 1.0 header with {header:?}");
    }
    let mut peer_idle = None;
    let mut refused = false;
    loop {
        let frame = wire.frame().await?;
        if frame.kind != FRAME_AMQP {
            bail!("a frame of type {} after the AMQP header", frame.kind);
        }
        let (performative, _) = decode_performative(&frame.body).map_err(|e| anyhow!(e))?;
        match performative {
            Performative::Open(o) => {
                endpoint.on_open(o.max_frame_size.0);
                peer_idle = o
                    .idle_time_out
                    .filter(|ms| *ms > 0)
                    .map(|ms| Duration::from_millis(u64::from(ms)));
                wire.stream.write_all(&begin_frame).await?;
            }
            Performative::Begin(b) => {
                endpoint.on_begin(&b);
                wire.stream.write_all(&attach_frame).await?;
            }
            Performative::Attach(a) => {
                let terminus = match role {
                    Role::Sender => a.target.is_some(),
                    Role::Receiver => a.source.is_some(),
                };
                if !terminus {
                    // A detach with the reason follows.
                    refused = true;
                    continue;
                }
                endpoint.on_attach(&a);
                break;
            }
            Performative::Detach(d) => bail!(
                "the broker refused the link to {}{}",
                link.address,
                d.error
                    .map(|e| format!(": {}", codec::describe_error(&e)))
                    .unwrap_or_default()
            ),
            Performative::End(e) => bail!(
                "the broker ended the session{}",
                e.error
                    .map(|e| format!(": {}", codec::describe_error(&e)))
                    .unwrap_or_default()
            ),
            Performative::Close(c) => bail!(
                "the broker closed the connection{}",
                c.error
                    .map(|e| format!(": {}", codec::describe_error(&e)))
                    .unwrap_or_default()
            ),
            Performative::Flow(f) if !refused => {
                endpoint.on_performative(Performative::Flow(f), bytes::Bytes::new())
            }
            _ => {}
        }
    }
    Ok(Opened {
        stream: wire.stream,
        rbuf: wire.rbuf,
        endpoint,
        peer_idle,
    })
}
