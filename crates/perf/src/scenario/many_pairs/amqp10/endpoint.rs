//! The protocol state of one client: its connection's one session and that session's one
//! link, as frames in and frames out, without I/O. The connection task (`connection.rs`)
//! feeds it what it reads and writes what it leaves in `out`; a sender's publisher appends
//! transfers to the same `out` under the same lock, so frames leave in the order they were
//! made.
//!
//! Flow control is the specification's (AMQP 1.0 §2.5.6 and §2.6.7): a sender transfers
//! only while it has link credit and the broker's session window is open, and holds
//! messages back otherwise; a receiver grants `prefetch` credit and tops it up once half is
//! used, and keeps the broker's view of its session window open with each flow.
//! Settlement: a sender counts the broker's accepted outcome as a confirm and any other
//! outcome as a nack; a receiver accepts each message, in one disposition per run of
//! consecutive delivery ids in a read.

use super::message::{data_body, encode_data_section};
use crate::payload;
use crate::scenario::many_pairs::counters::Counters;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use warren_amqp10_codec::{
    self as codec, AmqpError, Attach, Begin, Binary, Close, DeliveryState, Detach, Disposition,
    End, Flow, Performative, Role, Transfer, TRANSFER_OVERHEAD_BYTES,
};

/// Our one session's channel and our one link's handle.
pub const CHANNEL: u16 = 0;
pub const HANDLE: u32 = 0;
/// The delivery-count a sender link of ours starts at.
pub const INITIAL_DELIVERY_COUNT: u32 = 0;
/// The transfer frames we let the broker send before it must wait for our flow; each flow
/// we send opens it again in full.
pub const INCOMING_WINDOW: u32 = 65_536;
/// Our outgoing window: informational in the specification, so unlimited.
const OUTGOING_WINDOW: u32 = u32::MAX;

/// What a receiver does with a message.
pub struct ReceiverHooks {
    pub counters: Arc<Counters>,
    pub latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
    /// Credit kept open: granted at attach, topped up once half is used.
    pub prefetch: u32,
}

/// The side-specific state.
enum Side {
    Sender(Box<SendState>),
    Receiver(Box<ReceiveState>),
}

struct SendState {
    counters: Arc<Counters>,
    next_delivery_id: u32,
    /// Encoded messages waiting for link credit or the broker's session window.
    held: VecDeque<Bytes>,
    unsettled: Unsettled,
    /// The message being encoded (reused: a publish allocates nothing).
    scratch: Vec<u8>,
}

struct ReceiveState {
    hooks: ReceiverHooks,
    /// A delivery whose transfer frames are still arriving: its id, whether it came
    /// settled, and its bytes so far.
    partial: Option<(u32, bool, BytesMut)>,
    /// The run of delivery ids to accept at the end of this read: first and last.
    accepts: Option<(u32, u32)>,
}

/// Deliveries a sender transferred and the broker has not settled yet: ids from `first`,
/// consecutive, each still open or already settled (popped once the front is settled).
#[derive(Default)]
struct Unsettled {
    first: u32,
    open: VecDeque<bool>,
}

impl Unsettled {
    fn push(&mut self, id: u32) {
        if self.open.is_empty() {
            self.first = id;
        }
        self.open.push_back(true);
    }

    /// Settles the open ids within `first..=last` (serial-number arithmetic); returns how
    /// many were open.
    fn settle(&mut self, first: u32, last: u32) -> u64 {
        let span = last.wrapping_sub(first);
        let mut settled = 0;
        for (offset, open) in self.open.iter_mut().enumerate() {
            let id = self.first.wrapping_add(offset as u32);
            if *open && id.wrapping_sub(first) <= span {
                *open = false;
                settled += 1;
            }
        }
        while self.open.front() == Some(&false) {
            self.open.pop_front();
            self.first = self.first.wrapping_add(1);
        }
        settled
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.iter().filter(|o| **o).count()
    }
}

pub struct Endpoint {
    /// Frames to write, in order.
    pub out: BytesMut,
    side: Side,
    /// The broker's handle for our link (from its attach).
    remote_handle: Option<u32>,
    // The session (§2.5.6).
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_incoming_id: u32,
    incoming_window: u32,
    // The link (§2.6.7).
    delivery_count: u32,
    link_credit: u32,
    /// The broker's max-frame-size: a sender's transfers are split to fit it.
    peer_max_frame: u32,
    /// Why the client stopped working: the broker ended the link, session or connection,
    /// or the socket failed. Publishes fail from then on.
    pub ended: Option<String>,
    /// We sent close (after detach and end): what arrives now is the broker's answer.
    pub closing: bool,
    /// The broker's close arrived (or the socket is gone): the task may end.
    pub finished: bool,
    /// The close was ours (`close`), not an answer to the broker.
    stopped: bool,
}

impl Endpoint {
    fn new(side: Side) -> Endpoint {
        Endpoint {
            out: BytesMut::new(),
            side,
            remote_handle: None,
            next_outgoing_id: 0,
            remote_incoming_window: 0,
            next_incoming_id: 0,
            incoming_window: INCOMING_WINDOW,
            delivery_count: INITIAL_DELIVERY_COUNT,
            link_credit: 0,
            peer_max_frame: codec::MIN_MAX_FRAME_SIZE,
            ended: None,
            closing: false,
            finished: false,
            stopped: false,
        }
    }

    pub fn sender(counters: Arc<Counters>) -> Endpoint {
        Endpoint::new(Side::Sender(Box::new(SendState {
            counters,
            next_delivery_id: 0,
            held: VecDeque::new(),
            unsettled: Unsettled::default(),
            scratch: Vec::new(),
        })))
    }

    pub fn receiver(hooks: ReceiverHooks) -> Endpoint {
        Endpoint::new(Side::Receiver(Box::new(ReceiveState {
            hooks,
            partial: None,
            accepts: None,
        })))
    }

    pub fn role(&self) -> Role {
        match self.side {
            Side::Sender(_) => Role::Sender,
            Side::Receiver(_) => Role::Receiver,
        }
    }

    fn send(&mut self, p: Performative, payload: &[u8]) {
        codec::write_performative(&mut self.out, CHANNEL, &p, payload);
    }

    // ---- the handshake's answers ---------------------------------------------------

    pub fn on_open(&mut self, peer_max_frame: u32) {
        self.peer_max_frame = peer_max_frame.max(codec::MIN_MAX_FRAME_SIZE);
    }

    pub fn on_begin(&mut self, b: &Begin) {
        self.next_incoming_id = b.next_outgoing_id;
        // Nothing sent yet: the broker's whole window is open.
        self.remote_incoming_window = b.incoming_window;
    }

    /// The broker's attach for our link. A receiver learns the sender's delivery count
    /// here and grants its first credit.
    pub fn on_attach(&mut self, a: &Attach) {
        self.remote_handle = Some(a.handle.0);
        if let Side::Receiver(r) = &self.side {
            self.delivery_count = a.initial_delivery_count.unwrap_or(0);
            self.link_credit = r.hooks.prefetch;
            let flow = self.flow_frame(true, false);
            self.send(Performative::Flow(flow), &[]);
        }
    }

    // ---- frames during the run -------------------------------------------------------

    /// One frame's performative and payload. Frames are not told apart by channel: the
    /// connection carries one session.
    pub fn on_performative(&mut self, p: Performative, payload: Bytes) {
        match p {
            Performative::Flow(f) => self.on_flow(f),
            Performative::Transfer(t) => self.on_transfer(t, payload),
            Performative::Disposition(d) => self.on_disposition(d),
            Performative::Detach(d) if !self.closing => {
                let why = match &d.error {
                    Some(e) => codec::describe_error(e),
                    None => "without an error".to_owned(),
                };
                self.close_with(format!("the broker detached the link: {why}"), None);
            }
            Performative::End(e) if !self.closing => {
                let why = match &e.error {
                    Some(e) => codec::describe_error(e),
                    None => "without an error".to_owned(),
                };
                self.close_with(format!("the broker ended the session: {why}"), None);
            }
            Performative::Close(c) => {
                if !self.closing {
                    let why = match &c.error {
                        Some(e) => codec::describe_error(e),
                        None => "without an error".to_owned(),
                    };
                    self.ended
                        .get_or_insert(format!("the broker closed the connection: {why}"));
                    self.send(Performative::Close(Close { error: None }), &[]);
                    self.closing = true;
                }
                self.finished = true;
            }
            // The answers to our own detach and end, and frames of the handshake repeated.
            _ => {}
        }
    }

    /// A frame that did not parse or decode: the connection ends with a decode error.
    pub fn on_bad_frame(&mut self, why: String) {
        let error = codec::error(AmqpError::DecodeError, why.clone());
        self.close_with(format!("the broker sent a bad frame: {why}"), Some(error));
    }

    /// The socket closed or failed: nothing more can be sent or received.
    pub fn on_socket_gone(&mut self, why: String) {
        if !self.closing {
            self.ended.get_or_insert(why);
        }
        self.closing = true;
        self.finished = true;
    }

    /// Detaches the link, ends the session and closes the connection in one write (the
    /// broker answers each in order); `why` is kept unless the client was stopped by us.
    fn close_with(&mut self, why: String, error: Option<codec::Error>) {
        if self.closing {
            return;
        }
        self.ended.get_or_insert(why);
        self.send_closing_frames(error);
    }

    /// Our own, orderly end: a receiver's unaccepted deliveries go back to the queue.
    pub fn close(&mut self) {
        if self.closing {
            return;
        }
        self.stopped = true;
        self.ended
            .get_or_insert_with(|| "closed by the client".to_owned());
        self.send_closing_frames(None);
    }

    fn send_closing_frames(&mut self, error: Option<codec::Error>) {
        // What a receiver took is accepted before it detaches.
        if let Side::Receiver(r) = &mut self.side {
            if let Some(run) = r.accepts.take() {
                self.accept(run);
            }
        }
        let detach = Detach {
            handle: HANDLE.into(),
            closed: true,
            error: None,
        };
        self.send(Performative::Detach(detach), &[]);
        self.send(Performative::End(End { error: None }), &[]);
        self.send(Performative::Close(Close { error }), &[]);
        self.closing = true;
    }

    /// Whether the client ends because it was told to (`close`).
    pub fn closing_by_us(&self) -> bool {
        self.stopped
    }

    // ---- flow ------------------------------------------------------------------------

    /// Our session's flow state, with the link's when `link`; the session window is opened
    /// again in full with every flow we send.
    fn flow_frame(&mut self, link: bool, drain: bool) -> Flow {
        self.incoming_window = INCOMING_WINDOW;
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: OUTGOING_WINDOW,
            handle: link.then(|| HANDLE.into()),
            delivery_count: link.then_some(self.delivery_count),
            link_credit: link.then_some(self.link_credit),
            available: None,
            drain,
            echo: false,
            properties: None,
        }
    }

    fn on_flow(&mut self, f: Flow) {
        // §2.5.6: the broker's window counts from its next-incoming-id (our first transfer
        // id, 0, when it has not seen one yet).
        // Written as the window less the frames it has not seen, so that a window of
        // u32::MAX (some brokers' "unlimited") does not wrap.
        let their_next_incoming = f.next_incoming_id.unwrap_or(0);
        let unseen = self.next_outgoing_id.wrapping_sub(their_next_incoming);
        self.remote_incoming_window = f.incoming_window.saturating_sub(unseen);
        let for_our_link = matches!(
            (&f.handle, self.remote_handle),
            (Some(h), Some(ours)) if h.0 == ours
        );
        if for_our_link {
            match &self.side {
                Side::Sender(_) => {
                    // §2.6.7: credit = the receiver's delivery-count + its credit − ours,
                    // written as its credit less the deliveries it has not seen yet (no
                    // wrap for a credit of u32::MAX; a count ahead of ours counts as none).
                    let their_count = f.delivery_count.unwrap_or(INITIAL_DELIVERY_COUNT);
                    let unseen = self.delivery_count.wrapping_sub(their_count);
                    let unseen = if unseen > u32::MAX / 2 { 0 } else { unseen };
                    self.link_credit = f.link_credit.unwrap_or(0).saturating_sub(unseen);
                }
                Side::Receiver(_) => {
                    // The broker's delivery-count moves past ours only when it gives up
                    // credit (drain): the credit it used up is gone.
                    if let Some(their_count) = f.delivery_count {
                        let advanced = their_count.wrapping_sub(self.delivery_count);
                        if advanced <= self.link_credit {
                            self.link_credit -= advanced;
                            self.delivery_count = their_count;
                        }
                    }
                }
            }
        }
        self.send_held();
        if for_our_link && f.drain && matches!(self.side, Side::Sender(_)) && self.link_credit > 0 {
            // Nothing held back is left to use the credit: give it back (§2.6.7, drain).
            self.delivery_count = self.delivery_count.wrapping_add(self.link_credit);
            self.link_credit = 0;
            let flow = self.flow_frame(true, true);
            self.send(Performative::Flow(flow), &[]);
        } else if f.echo {
            let flow = self.flow_frame(for_our_link, false);
            self.send(Performative::Flow(flow), &[]);
        }
    }

    // ---- sending -----------------------------------------------------------------------

    /// Transfers `body` as an unsettled message, or holds it back until credit and the
    /// session window allow. Returns whether `out` went from empty to not empty (the
    /// connection task must be woken), or Err once the client has ended.
    pub fn publish(&mut self, body: &[u8]) -> Result<bool, ()> {
        if self.ended.is_some() || self.closing {
            return Err(());
        }
        let was_empty = self.out.is_empty();
        let Side::Sender(s) = &mut self.side else {
            return Err(());
        };
        let mut message = std::mem::take(&mut s.scratch);
        message.clear();
        encode_data_section(&mut message, body);
        if s.held.is_empty() && self.can_transfer(message.len()) {
            self.transfer(&message);
        } else if let Side::Sender(s) = &mut self.side {
            s.held.push_back(Bytes::copy_from_slice(&message));
        }
        if let Side::Sender(s) = &mut self.side {
            s.scratch = message;
        }
        Ok(was_empty && !self.out.is_empty())
    }

    /// Bytes of a message one transfer frame carries.
    fn chunk_bytes(&self) -> usize {
        (self.peer_max_frame as usize)
            .saturating_sub(TRANSFER_OVERHEAD_BYTES)
            .max(1)
    }

    fn can_transfer(&self, message_bytes: usize) -> bool {
        let frames = message_bytes.div_ceil(self.chunk_bytes()).max(1);
        self.link_credit > 0 && self.remote_incoming_window as usize >= frames
    }

    fn send_held(&mut self) {
        loop {
            let Side::Sender(s) = &self.side else {
                return;
            };
            let Some(next_bytes) = s.held.front().map(|m| m.len()) else {
                return;
            };
            if !self.can_transfer(next_bytes) {
                return;
            }
            let Side::Sender(s) = &mut self.side else {
                return;
            };
            let message = s.held.pop_front().unwrap_or_default();
            self.transfer(&message);
        }
    }

    /// One delivery, in as many frames as the broker's max-frame-size needs.
    fn transfer(&mut self, message: &[u8]) {
        let chunk = self.chunk_bytes();
        let Side::Sender(s) = &mut self.side else {
            return;
        };
        let id = s.next_delivery_id;
        s.next_delivery_id = id.wrapping_add(1);
        s.unsettled.push(id);
        self.delivery_count = self.delivery_count.wrapping_add(1);
        self.link_credit -= 1;
        let mut pieces = message.chunks(chunk).peekable();
        let mut first = true;
        loop {
            let piece = pieces.next().unwrap_or(&[]);
            let more = pieces.peek().is_some();
            let transfer = Transfer {
                handle: HANDLE.into(),
                delivery_id: first.then_some(id),
                delivery_tag: first.then(|| Binary::from(id.to_be_bytes().to_vec())),
                message_format: first.then_some(0),
                settled: first.then_some(false),
                more,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
            self.send(Performative::Transfer(transfer), piece);
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            self.remote_incoming_window = self.remote_incoming_window.saturating_sub(1);
            first = false;
            if !more {
                return;
            }
        }
    }

    /// The broker's disposition of our deliveries: accepted is a confirm, any other
    /// outcome a nack; a state that is not an outcome (received) settles nothing.
    fn on_disposition(&mut self, d: Disposition) {
        let Side::Sender(s) = &mut self.side else {
            // The broker settling its own deliveries to a receiver: nothing to do.
            return;
        };
        if d.role != Role::Receiver {
            return;
        }
        let accepted = match &d.state {
            Some(DeliveryState::Accepted(_)) => true,
            Some(DeliveryState::Received(_)) => return,
            Some(_) => false,
            // Settled without an outcome: the broker did not accept it.
            None if d.settled => false,
            None => return,
        };
        let last = d.last.unwrap_or(d.first);
        let settled = s.unsettled.settle(d.first, last);
        let counter = if accepted {
            &s.counters.confirmed
        } else {
            &s.counters.nacked
        };
        if settled > 0 {
            counter.fetch_add(settled, Ordering::AcqRel);
        }
        if !d.settled {
            // rcv-settle-mode first makes the broker settle; one that does not is answered.
            let settle = Disposition {
                role: Role::Sender,
                first: d.first,
                last: d.last,
                settled: true,
                state: d.state,
                batchable: false,
            };
            self.send(Performative::Disposition(settle), &[]);
        }
    }

    /// Deliveries transferred and not yet settled by the broker.
    #[cfg(test)]
    pub fn unsettled(&self) -> usize {
        match &self.side {
            Side::Sender(s) => s.unsettled.len(),
            Side::Receiver(_) => 0,
        }
    }

    // ---- receiving ---------------------------------------------------------------------

    fn on_transfer(&mut self, t: Transfer, frame_payload: Bytes) {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        let Side::Receiver(r) = &mut self.side else {
            let error = codec::error(AmqpError::NotAllowed, "a transfer on a sending link");
            self.close_with("the broker sent a transfer to a sender".into(), Some(error));
            return;
        };
        if self.closing {
            // Detached: the broker settles nothing of it with us and returns it to the
            // queue, where the step's accounting finds it.
            r.partial = None;
            return;
        }
        let (id, settled, message) = match r.partial.take() {
            Some((id, settled, mut bytes)) => {
                if t.aborted {
                    return;
                }
                bytes.extend_from_slice(&frame_payload);
                if t.more {
                    r.partial = Some((id, settled, bytes));
                    return;
                }
                (id, settled, bytes.freeze())
            }
            None => {
                let Some(id) = t.delivery_id else {
                    let error = codec::error(
                        AmqpError::InvalidField,
                        "first transfer of a delivery without a delivery-id",
                    );
                    self.close_with(
                        "the broker sent a delivery without an id".into(),
                        Some(error),
                    );
                    return;
                };
                self.delivery_count = self.delivery_count.wrapping_add(1);
                self.link_credit = self.link_credit.saturating_sub(1);
                let settled = t.settled.unwrap_or(false);
                if t.aborted {
                    return;
                }
                if t.more {
                    r.partial = Some((id, settled, BytesMut::from(&frame_payload[..])));
                    return;
                }
                (id, settled, frame_payload)
            }
        };
        let now_ns = payload::now_ns();
        if let Some(stamp) = data_body(&message).and_then(payload::parse) {
            r.hooks
                .latency
                .lock()
                .saturating_record(payload::flight_us(stamp.sent_ns, now_ns).max(1));
        }
        r.hooks.counters.received.fetch_add(1, Ordering::AcqRel);
        if settled {
            return;
        }
        let run = match r.accepts {
            Some((first, last)) if last.wrapping_add(1) == id => Some((first, id)),
            Some(run) => {
                self.accept(run);
                None
            }
            None => None,
        };
        if let Side::Receiver(r) = &mut self.side {
            r.accepts = Some(run.unwrap_or((id, id)));
        }
    }

    fn accept(&mut self, (first, last): (u32, u32)) {
        let disposition = Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(DeliveryState::Accepted(codec::Accepted {})),
            batchable: false,
        };
        self.send(Performative::Disposition(disposition), &[]);
    }

    /// After every frame of one read: a receiver accepts what it took and tops up its
    /// credit once half is used (and its session window, which each flow reopens).
    pub fn end_of_read(&mut self) {
        let Side::Receiver(r) = &mut self.side else {
            return;
        };
        let prefetch = r.hooks.prefetch;
        if let Some(run) = r.accepts.take() {
            self.accept(run);
        }
        if self.closing {
            return;
        }
        if self.link_credit <= prefetch / 2 {
            self.link_credit = prefetch;
            let flow = self.flow_frame(true, false);
            self.send(Performative::Flow(flow), &[]);
        } else if self.incoming_window <= INCOMING_WINDOW / 2 {
            let flow = self.flow_frame(false, false);
            self.send(Performative::Flow(flow), &[]);
        }
    }
}

#[cfg(test)]
mod tests;
