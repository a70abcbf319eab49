//! The endpoint against frames written by hand: credit and the session window hold a
//! sender back, outcomes count as confirms or nacks, a receiver accepts in runs and tops up
//! its credit, large messages travel in several frames, and the broker's errors end the
//! client with what the broker said.

use super::*;
use crate::stats::new_histogram;
use warren_amqp10_codec::{
    decode_performative, parse_frame, Accepted, Attach, Begin, Detach, Disposition, Flow,
    Performative, ReceiverSettleMode, Rejected, Role, SenderSettleMode, Source, Transfer,
};

fn begin(incoming_window: u32) -> Begin {
    Begin {
        remote_channel: Some(0),
        next_outgoing_id: 100,
        incoming_window,
        outgoing_window: u32::MAX,
        handle_max: 7.into(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// The broker's attach; its handle (5) differs from ours (0), as any broker may choose.
fn attach(role: Role) -> Attach {
    Attach {
        name: "l".into(),
        handle: 5.into(),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(Source::default())),
        target: None,
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(40),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

fn flow(next_incoming_id: u32, window: u32, delivery_count: u32, credit: u32) -> Performative {
    Performative::Flow(Flow {
        next_incoming_id: Some(next_incoming_id),
        incoming_window: window,
        next_outgoing_id: 100,
        outgoing_window: u32::MAX,
        handle: Some(5.into()),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    })
}

fn disposition(first: u32, last: u32, state: DeliveryState) -> Performative {
    Performative::Disposition(Disposition {
        role: Role::Receiver,
        first,
        last: Some(last),
        settled: true,
        state: Some(state),
        batchable: false,
    })
}

/// Every frame in `out` (emptied), decoded, with its payload.
fn frames(out: &mut BytesMut) -> Vec<(Performative, Bytes)> {
    let mut all = vec![];
    while let Some(f) = parse_frame(out, 1 << 20).unwrap() {
        all.push(decode_performative(&f.body).unwrap());
    }
    assert!(out.is_empty());
    all
}

fn transfers(out: &mut BytesMut) -> Vec<(Transfer, Bytes)> {
    frames(out)
        .into_iter()
        .filter_map(|(p, payload)| match p {
            Performative::Transfer(t) => Some((t, payload)),
            _ => None,
        })
        .collect()
}

fn sender(incoming_window: u32) -> (Endpoint, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    let mut e = Endpoint::sender(counters.clone());
    e.on_open(65_536);
    e.on_begin(&begin(incoming_window));
    e.on_attach(&attach(Role::Receiver));
    assert!(e.out.is_empty(), "a sender sends nothing after attach");
    (e, counters)
}

fn body(seq: u8) -> Vec<u8> {
    let mut b = payload::new_body(100);
    b[0] = seq;
    b
}

#[test]
fn a_sender_holds_messages_until_credit_and_counts_outcomes() {
    let (mut e, counters) = sender(1000);
    for seq in 0..3 {
        assert_eq!(e.publish(&body(seq)), Ok(false));
    }
    assert!(e.out.is_empty(), "no credit yet: nothing transferred");
    // Credit 2: the first two leave, in order, unsettled, ids 0 and 1.
    e.on_performative(flow(0, 1000, 0, 2), Bytes::new());
    let sent = transfers(&mut e.out);
    assert_eq!(sent.len(), 2);
    for (i, (t, payload)) in sent.iter().enumerate() {
        assert_eq!(t.handle.0, HANDLE);
        assert_eq!(t.delivery_id, Some(i as u32));
        assert_eq!(t.settled, Some(false));
        assert!(!t.more);
        assert_eq!(data_body(payload).unwrap()[0], i as u8);
    }
    assert_eq!(e.unsettled(), 2);
    e.on_performative(
        disposition(0, 1, DeliveryState::Accepted(Accepted {})),
        Bytes::new(),
    );
    assert_eq!(counters.confirmed.load(Ordering::Acquire), 2);
    assert_eq!(e.unsettled(), 0);
    // The broker's count is now 2: credit 1 more lets the third go; it is rejected.
    e.on_performative(flow(2, 1000, 2, 1), Bytes::new());
    let sent = transfers(&mut e.out);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0.delivery_id, Some(2));
    let rejected = DeliveryState::Rejected(Rejected { error: None });
    e.on_performative(disposition(2, 2, rejected), Bytes::new());
    assert_eq!(counters.nacked.load(Ordering::Acquire), 1);
    // A repeated disposition counts nothing twice.
    e.on_performative(
        disposition(0, 2, DeliveryState::Accepted(Accepted {})),
        Bytes::new(),
    );
    assert_eq!(counters.confirmed.load(Ordering::Acquire), 2);
    assert_eq!(counters.nacked.load(Ordering::Acquire), 1);
    // With credit, a publish transfers at once and asks for the task's wake-up.
    e.on_performative(flow(3, 1000, 3, 10), Bytes::new());
    assert_eq!(e.publish(&body(9)), Ok(true));
    assert_eq!(e.publish(&body(10)), Ok(false), "output was not empty");
    assert_eq!(transfers(&mut e.out).len(), 2);
}

#[test]
fn the_brokers_session_window_holds_a_sender_back() {
    // Window 1 at begin: one transfer, then the broker's flow must open it again.
    let (mut e, _) = sender(1);
    e.on_performative(flow(0, 1, 0, 100), Bytes::new());
    for seq in 0..3 {
        e.publish(&body(seq)).unwrap();
    }
    assert_eq!(transfers(&mut e.out).len(), 1);
    // next-incoming-id 1 + window 2 − our next-outgoing-id 1 = 2 more frames.
    e.on_performative(flow(1, 2, 0, 100), Bytes::new());
    let sent = transfers(&mut e.out);
    assert_eq!(
        sent.iter().map(|(t, _)| t.delivery_id).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
}

#[test]
fn an_unlimited_window_and_credit_do_not_wrap_to_nothing() {
    let (mut e, _) = sender(u32::MAX);
    e.on_performative(flow(0, u32::MAX, 0, u32::MAX), Bytes::new());
    for seq in 0..3 {
        assert_eq!(e.publish(&body(seq)), Ok(seq == 0));
    }
    assert_eq!(transfers(&mut e.out).len(), 3);
}

#[test]
fn a_message_larger_than_the_brokers_frames_is_split() {
    let counters = Arc::new(Counters::default());
    let mut e = Endpoint::sender(counters);
    e.on_open(512);
    e.on_begin(&begin(1000));
    e.on_attach(&attach(Role::Receiver));
    e.on_performative(flow(0, 1000, 0, 5), Bytes::new());
    let big = payload::new_body(1000);
    e.publish(&big).unwrap();
    let mut out = e.out.clone();
    while let Some(f) = parse_frame(&mut out, 512).unwrap() {
        assert!(f.body.len() + 8 <= 512);
    }
    let sent = transfers(&mut e.out);
    assert!(sent.len() >= 3, "{} frames", sent.len());
    assert_eq!(sent[0].0.delivery_id, Some(0));
    assert!(sent[1..].iter().all(|(t, _)| t.delivery_id.is_none()));
    let flags: Vec<bool> = sent.iter().map(|(t, _)| t.more).collect();
    assert!(flags[..flags.len() - 1].iter().all(|m| *m) && !flags[flags.len() - 1]);
    let whole: Vec<u8> = sent.iter().flat_map(|(_, p)| p.to_vec()).collect();
    assert_eq!(data_body(&whole), Some(&big[..]));

    // The receiving side puts the frames back together.
    let (mut r, counters, latency) = receiver(10);
    r.out.clear();
    for (mut t, payload) in sent {
        t.handle = 5.into();
        r.on_performative(Performative::Transfer(t), payload);
    }
    r.end_of_read();
    assert_eq!(counters.received.load(Ordering::Acquire), 1);
    assert_eq!(latency.lock().len(), 1, "the timestamp was read");
}

fn receiver(
    prefetch: u32,
) -> (
    Endpoint,
    Arc<Counters>,
    Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) {
    let counters = Arc::new(Counters::default());
    let latency = Arc::new(Mutex::new(new_histogram()));
    let mut e = Endpoint::receiver(ReceiverHooks {
        counters: counters.clone(),
        latency: latency.clone(),
        prefetch,
    });
    e.on_open(65_536);
    e.on_begin(&begin(1000));
    e.on_attach(&attach(Role::Sender));
    (e, counters, latency)
}

fn delivery(id: u32) -> (Performative, Bytes) {
    let mut message = vec![];
    let mut b = payload::new_body(100);
    payload::stamp(&mut b, payload::now_ns(), 1, u64::from(id));
    encode_data_section(&mut message, &b);
    let t = Transfer {
        handle: 5.into(),
        delivery_id: Some(id),
        delivery_tag: Some(Binary::from(id.to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    (Performative::Transfer(t), Bytes::from(message))
}

#[test]
fn a_receiver_grants_credit_accepts_in_runs_and_tops_up() {
    let (mut e, counters, latency) = receiver(10);
    // The first credit: prefetch, from the broker's initial delivery count 40.
    let granted = frames(&mut e.out);
    let [(Performative::Flow(f), _)] = &granted[..] else {
        panic!("{granted:?}")
    };
    assert_eq!(
        (
            f.handle.as_ref().map(|h| h.0),
            f.delivery_count,
            f.link_credit
        ),
        (Some(HANDLE), Some(40), Some(10))
    );
    assert_eq!(
        f.next_incoming_id,
        Some(100),
        "the broker's next-outgoing-id"
    );

    // One read with deliveries 0, 1, 2 and 4: two runs, two dispositions.
    for id in [0, 1, 2, 4] {
        let (p, payload) = delivery(id);
        e.on_performative(p, payload);
    }
    e.end_of_read();
    assert_eq!(counters.received.load(Ordering::Acquire), 4);
    assert_eq!(latency.lock().len(), 4);
    let written = frames(&mut e.out);
    let accepted: Vec<(u32, Option<u32>)> = written
        .iter()
        .filter_map(|(p, _)| match p {
            Performative::Disposition(d) => {
                assert!(d.settled && d.role == Role::Receiver);
                assert!(matches!(d.state, Some(DeliveryState::Accepted(_))));
                Some((d.first, d.last))
            }
            _ => None,
        })
        .collect();
    assert_eq!(accepted, [(0, Some(2)), (4, None)]);
    assert!(
        !written
            .iter()
            .any(|(p, _)| matches!(p, Performative::Flow(_))),
        "6 of 10 credits left: no top-up yet"
    );

    // A fifth and sixth use half of the credit: it is topped up to 10 again.
    for id in [5, 6] {
        let (p, payload) = delivery(id);
        e.on_performative(p, payload);
    }
    e.end_of_read();
    let topped: Vec<Flow> = frames(&mut e.out)
        .into_iter()
        .filter_map(|(p, _)| match p {
            Performative::Flow(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(topped.len(), 1);
    assert_eq!(
        (topped[0].delivery_count, topped[0].link_credit),
        (Some(46), Some(10))
    );
    assert_eq!(topped[0].next_incoming_id, Some(106));
}

#[test]
fn the_brokers_detach_ends_the_client_with_its_error() {
    let (mut e, _) = sender(1000);
    let detach = Detach {
        handle: 5.into(),
        closed: true,
        error: Some(codec::error(
            AmqpError::NotFound,
            "no queue 'q' in vhost '/'",
        )),
    };
    e.on_performative(Performative::Detach(detach), Bytes::new());
    assert_eq!(
        e.ended.as_deref(),
        Some("the broker detached the link: amqp:not-found: no queue 'q' in vhost '/'")
    );
    assert!(!e.closing_by_us());
    let answered: Vec<&str> = frames(&mut e.out)
        .iter()
        .map(|(p, _)| match p {
            Performative::Detach(_) => "detach",
            Performative::End(_) => "end",
            Performative::Close(_) => "close",
            _ => "other",
        })
        .collect();
    assert_eq!(answered, ["detach", "end", "close"]);
    assert_eq!(e.publish(&body(0)), Err(()));
    assert!(!e.finished);
    e.on_performative(Performative::Close(Close { error: None }), Bytes::new());
    assert!(e.finished);
}

#[test]
fn our_close_ignores_late_deliveries_and_the_brokers_answers() {
    let (mut e, counters, _) = receiver(10);
    e.out.clear();
    let (p, payload) = delivery(0);
    e.on_performative(p, payload);
    e.close();
    assert!(e.closing_by_us());
    // The delivery before the close is accepted ahead of the detach.
    let written = frames(&mut e.out);
    assert!(matches!(written[0].0, Performative::Disposition(_)));
    assert!(matches!(written[1].0, Performative::Detach(_)));
    // One that crosses our detach is neither counted nor accepted.
    let (p, payload) = delivery(1);
    e.on_performative(p, payload);
    e.on_performative(
        Performative::Detach(Detach {
            handle: 5.into(),
            closed: true,
            error: None,
        }),
        Bytes::new(),
    );
    e.on_performative(Performative::End(End { error: None }), Bytes::new());
    e.end_of_read();
    assert!(e.out.is_empty());
    assert_eq!(counters.received.load(Ordering::Acquire), 1);
    assert_eq!(e.ended.as_deref(), Some("closed by the client"));
    e.on_performative(Performative::Close(Close { error: None }), Bytes::new());
    assert!(e.finished && e.out.is_empty());
}

#[test]
fn a_drain_with_nothing_held_gives_the_credit_back() {
    let (mut e, _) = sender(1000);
    let Performative::Flow(mut f) = flow(0, 1000, 0, 7) else {
        unreachable!()
    };
    f.drain = true;
    e.on_performative(Performative::Flow(f), Bytes::new());
    let written = frames(&mut e.out);
    let [(Performative::Flow(back), _)] = &written[..] else {
        panic!("{written:?}")
    };
    assert_eq!(
        (back.delivery_count, back.link_credit, back.drain),
        (Some(7), Some(0), true)
    );
    // No credit is left: a publish is held.
    e.publish(&body(0)).unwrap();
    assert!(e.out.is_empty());
}
