//! Questions a node asks the other nodes for the cluster-wide views of its higher layers
//! (the HTTP API's connections, channels, consumers, node figures and message rates, which
//! each node knows only of itself). They travel over the forwarding links
//! ([`Frame::Ask`](super::Frame::Ask) / [`Frame::Answer`](super::Frame::Answer)); the broker
//! carries the bytes and knows nothing of what they mean. The layer that answers registers
//! one [`PeerAnswers`](super::PeerAnswers) with [`ForwardPeers::set_answers`](super::ForwardPeers::set_answers);
//! a node with none answers every question with an empty body.

use super::peers::{AnswerFuture, ForwardPeers, PeerLink};
use bytes::Bytes;
use std::time::Duration;

/// One peer's answer: None when it did not answer within the time asked for, or its link
/// went meanwhile.
#[derive(Debug)]
pub struct PeerAnswer {
    pub node: String,
    pub body: Option<Bytes>,
}

/// Asks every peer this node has a live link to, all at once, and waits at most `timeout`
/// for each. Peers without a link (down, or not reached yet) are not asked.
pub async fn ask_peers(
    peers: &ForwardPeers,
    topic: &str,
    body: Bytes,
    timeout: Duration,
) -> Vec<PeerAnswer> {
    let asked: Vec<_> = peers
        .all()
        .into_iter()
        .filter_map(|peer| {
            peer.current()?;
            let (topic, body) = (topic.to_owned(), body.clone());
            Some(tokio::spawn(async move {
                let answer = ask_peer(&peer, &topic, body, timeout).await;
                PeerAnswer {
                    node: peer.name().to_owned(),
                    body: answer,
                }
            }))
        })
        .collect();
    let mut answers = Vec::with_capacity(asked.len());
    for task in asked {
        if let Ok(answer) = task.await {
            answers.push(answer);
        }
    }
    answers
}

/// Asks one peer; None when it has no live link, or did not answer within `timeout`.
pub async fn ask_peer(
    peer: &PeerLink,
    topic: &str,
    body: Bytes,
    timeout: Duration,
) -> Option<Bytes> {
    peer.current()?.ask(topic, body, timeout).await
}

/// The registered answerer's answer to a peer's question.
pub(super) fn answer(peers: &ForwardPeers, topic: &str, body: Bytes) -> AnswerFuture {
    match peers.answers() {
        Some(answers) => answers.answer(topic, body),
        None => Box::pin(async { Bytes::new() }),
    }
}
