//! Node-to-node transport over HTTP: batched, bounded, signed.
//!
//! Outgoing protocol messages go into one bounded queue per destination address. One sender
//! task per destination takes everything queued (up to the batch limit) and POSTs it as one JSON
//! array to `{addr}/peer/messages`, over the one shared keep-alive `reqwest::Client`. While a
//! request is in flight new messages pile up and leave together in the next one, so a busy link
//! costs few requests. A slow or dead peer never blocks the node: the node only ever pushes into
//! a queue; when a queue is full its oldest messages are dropped (and counted), and a failed
//! request drops its batch — the protocol's reliable channel resends what matters and SWIM
//! notices a dead peer. Sender tasks of idle destinations exit and free their queue.
//!
//! Every peer request is signed with the cluster key (see [`crate::crypto`]).

mod outbox;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::oneshot;
use waitingroom_core::Ticket;
use waitingroom_distributed::{Envelope, Transmit};

use crate::clock::now_ms;
use crate::config::Limits;
use crate::crypto::{Crypto, HEADER_KID, HEADER_SIGNATURE, HEADER_TIMESTAMP, PeerAuthError};
use crate::metrics::Metrics;
use outbox::{Outbox, Outboxes};

/// The logical path of batched protocol messages (what signatures cover, whatever URL prefix
/// the advertised address has).
pub const MESSAGES_PATH: &str = "/peer/messages";
/// Logical path of a forwarded check-in.
pub const CHECKIN_PATH: &str = "/peer/visitor/checkin";
/// Logical path of a forwarded leave.
pub const LEAVE_PATH: &str = "/peer/visitor/leave";
/// Logical path of a batch of forwarded check-ins and leaves.
pub const FORWARD_PATH: &str = "/peer/visitor/batch";

/// What a forwarded visitor request asks of the node holding the ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardOp {
    /// A check-in.
    Checkin,
    /// A leave (ticket for a pass).
    Leave,
}

impl ForwardOp {
    /// The logical path of one such request sent alone (nodes send them in batches, to
    /// [`FORWARD_PATH`]; the single routes stay served).
    pub fn path(self) -> &'static str {
        match self {
            ForwardOp::Checkin => CHECKIN_PATH,
            ForwardOp::Leave => LEAVE_PATH,
        }
    }
}

/// One forwarded visitor request: the ticket as the forwarding node verified it (the batch is
/// authenticated, so the owner need not check the token's signature again).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardItem {
    /// Check-in or leave.
    pub op: ForwardOp,
    /// The verified ticket.
    pub claims: Ticket,
    /// A leave's `Idempotency-Key`, if the visitor sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// The owner's answer to one [`ForwardItem`]: the status and JSON body it would have sent the
/// visitor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardReply {
    /// HTTP status.
    pub status: u16,
    /// The answer, or the error body.
    pub body: serde_json::Value,
}

type Responder = oneshot::Sender<Result<ForwardReply, Unreachable>>;

/// Back-off after a failed request, doubled per failure up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1_000);

/// Outgoing peer traffic.
#[derive(Debug)]
pub struct Transport {
    client: reqwest::Client,
    crypto: Arc<Crypto>,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// Protocol messages, per peer address.
    peers: Outboxes<Envelope>,
    /// Forwarded visitor requests waiting for the batch to their owner, per owner address.
    forwards: Outboxes<(ForwardItem, Responder)>,
    /// Peers a request failed to reach since the node last heard of it; the driver tells the
    /// node, which probes them first.
    unreachable: Mutex<Vec<String>>,
}

/// A forwarded request got no usable answer.
#[derive(Debug, Clone, Error)]
#[error("peer did not answer: {0}")]
pub struct Unreachable(String);

impl Transport {
    /// A transport using `client` for every peer request.
    pub fn new(
        client: reqwest::Client,
        crypto: Arc<Crypto>,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> Self {
        Transport {
            client,
            crypto,
            limits,
            metrics,
            peers: Outboxes::default(),
            forwards: Outboxes::default(),
            unreachable: Mutex::new(Vec::new()),
        }
    }

    /// The shared HTTP client, configured for peers (keep-alive, no proxy).
    pub fn build_client() -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_millis(500))
            .build()
            // Only TLS back-end initialisation can fail, and this build has none.
            .unwrap_or_default()
    }

    /// Queues messages for delivery. Never blocks on the network.
    pub fn send_all(self: &Arc<Self>, out: Vec<Transmit>) {
        let mut peers = self.peers.lock();
        for t in out {
            let peer = Outboxes::get_or_start(&mut peers, &t.to_addr, |addr, q| {
                let this = self.clone();
                tokio::spawn(async move { this.sender(addr, q).await });
            });
            if peer.push(t.envelope, self.limits.peer_queue) {
                self.metrics.peer_dropped.inc();
            }
        }
    }

    /// Delivers one destination's queue until it has been idle for a while.
    async fn sender(self: Arc<Self>, addr: String, peer: Arc<Outbox<Envelope>>) {
        let url = format!("{addr}{MESSAGES_PATH}");
        let mut backoff = BACKOFF_MIN;
        let max = self.limits.peer_batch;
        while let Some(batch) = self.peers.next_batch(&addr, &peer, max).await {
            match self.post_batch(&url, &batch).await {
                Ok(()) => {
                    backoff = BACKOFF_MIN;
                    for env in &batch {
                        Metrics::count_type(&self.metrics.peer_sent, &env.body);
                    }
                }
                Err(e) => {
                    self.report_unreachable(&addr);
                    self.metrics.peer_failures.inc();
                    self.metrics.peer_dropped.inc_by(batch.len() as u64);
                    tracing::debug!(peer = %addr, error = %e, dropped = batch.len(), "peer delivery failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    /// Notes that `addr` did not answer.
    pub fn report_unreachable(&self, addr: &str) {
        let mut u = self
            .unreachable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !u.iter().any(|a| a == addr) {
            u.push(addr.to_string());
        }
    }

    /// The peers that did not answer since the last call.
    pub fn take_unreachable(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .unreachable
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    async fn post_batch(&self, url: &str, batch: &[Envelope]) -> Result<(), Unreachable> {
        let body = serde_json::to_vec(batch).map_err(|e| Unreachable(e.to_string()))?;
        let resp = self
            .signed_post(url, MESSAGES_PATH, body, self.limits.peer_timeout_ms)
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            if status == StatusCode::UNAUTHORIZED {
                tracing::warn!(%url, "peer refused our signature: do all nodes use the same cluster key?");
            }
            Err(Unreachable(format!("status {status}: {text}")))
        }
    }

    async fn signed_post(
        &self,
        url: &str,
        path: &str,
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<reqwest::Response, Unreachable> {
        let sig = self.crypto.sign_request("POST", path, now_ms(), &body);
        self.client
            .post(url)
            .timeout(Duration::from_millis(timeout_ms))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(HEADER_KID, sig.kid)
            .header(HEADER_TIMESTAMP, sig.timestamp.to_string())
            .header(HEADER_SIGNATURE, sig.signature)
            .body(body)
            .send()
            .await
            .map_err(|e| Unreachable(e.to_string()))
    }
}

impl Transport {
    /// Forwards a visitor request to the node at `addr`, batched with the others going there:
    /// one sender task per owner posts everything queued as one request to [`FORWARD_PATH`]
    /// (while a batch is in flight the next one fills up), so under load a forward costs a
    /// fraction of an HTTP exchange. Returns the owner's status and body, or [`Unreachable`]
    /// when it did not answer in time or answered with a server error (so the caller can serve
    /// the visitor here).
    pub async fn forward_batched(
        self: &Arc<Self>,
        addr: &str,
        item: ForwardItem,
    ) -> Result<(StatusCode, serde_json::Value), Unreachable> {
        let (tx, rx) = oneshot::channel();
        {
            let mut owners = self.forwards.lock();
            let q = Outboxes::get_or_start(&mut owners, addr, |addr, q| {
                let this = self.clone();
                tokio::spawn(async move { this.forward_sender(addr, q).await });
            });
            // Unbounded: each item is a visitor request waiting for its answer.
            q.push((item, tx), usize::MAX);
        }
        // A batch waits at most for the one in flight before it: twice the request timeout.
        let wait = Duration::from_millis(self.limits.forward_timeout_ms.saturating_mul(2));
        let reply = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(Unreachable("forwarding task ended".into())),
            Err(_) => return Err(Unreachable("no answer in time".into())),
        };
        let status = StatusCode::from_u16(reply.status).map_err(|e| Unreachable(e.to_string()))?;
        if status.is_server_error() {
            // The owner is there but cannot serve (stopping, or not in the cluster any more).
            return Err(Unreachable(format!("status {status}")));
        }
        Ok((status, reply.body))
    }

    /// Posts one owner's forwarded requests in batches until it has been idle for a while.
    async fn forward_sender(
        self: Arc<Self>,
        addr: String,
        q: Arc<Outbox<(ForwardItem, Responder)>>,
    ) {
        let url = format!("{addr}{FORWARD_PATH}");
        let max = self.limits.peer_batch;
        while let Some(batch) = self.forwards.next_batch(&addr, &q, max).await {
            let (items, responders): (Vec<ForwardItem>, Vec<Responder>) = batch.into_iter().unzip();
            let result = self.post_forwards(&url, &items).await.and_then(|replies| {
                if replies.len() == responders.len() {
                    Ok(replies)
                } else {
                    Err(Unreachable(format!(
                        "{} answers to {} forwarded requests",
                        replies.len(),
                        responders.len()
                    )))
                }
            });
            match result {
                Ok(replies) => {
                    for (tx, r) in responders.into_iter().zip(replies) {
                        let _ = tx.send(Ok(r));
                    }
                }
                Err(e) => {
                    for tx in responders {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    async fn post_forwards(
        &self,
        url: &str,
        items: &[ForwardItem],
    ) -> Result<Vec<ForwardReply>, Unreachable> {
        let body = serde_json::to_vec(items).map_err(|e| Unreachable(e.to_string()))?;
        let resp = self
            .signed_post(url, FORWARD_PATH, body, self.limits.forward_timeout_ms)
            .await?;
        if !resp.status().is_success() {
            return Err(Unreachable(format!("status {}", resp.status())));
        }
        let bytes = resp.bytes().await.map_err(|e| Unreachable(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| Unreachable(e.to_string()))
    }
}

/// Checks that a peer request carries a valid cluster signature over `path` and `body`.
pub fn authenticate(
    crypto: &Crypto,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), PeerAuthError> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    crypto.verify_request(
        "POST",
        path,
        (h(HEADER_KID), h(HEADER_TIMESTAMP), h(HEADER_SIGNATURE)),
        body,
        now_ms(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(peer_queue: usize) -> Limits {
        let mut l = crate::config::Options {
            key_file: Some("unused".into()),
            ..Default::default()
        }
        .resolve()
        .expect("defaults resolve")
        .limits;
        l.peer_queue = peer_queue;
        l
    }

    fn envelope(to: u64) -> Envelope {
        let contact = serde_json::json!({"id": 7, "incarnation": 1, "addr": "http://127.0.0.1:9"});
        serde_json::from_value(serde_json::json!({
            "from": contact, "to": to, "to_incarnation": 0,
            "body": {"JoinRequest": {"contact": contact}}
        }))
        .expect("an envelope")
    }

    /// A peer that does not keep up costs at most `peer_queue_limit` messages of memory: the
    /// oldest are dropped (and counted), the newest kept.
    #[tokio::test]
    async fn queue_per_peer_is_bounded_and_drops_the_oldest() {
        let metrics = Arc::new(Metrics::new());
        let t = Arc::new(Transport::new(
            Transport::build_client(),
            Arc::new(Crypto::generate()),
            limits(3),
            metrics.clone(),
        ));
        let addr: Arc<str> = Arc::from("http://127.0.0.1:9");
        // The sender task is spawned but, on this one-thread runtime, cannot run before the
        // queue is inspected (nothing here awaits).
        t.send_all(
            (0..10)
                .map(|to| Transmit {
                    to_addr: addr.clone(),
                    envelope: envelope(to),
                })
                .collect(),
        );
        let kept: Vec<u64> = t.peers.lock()[&*addr]
            .queued()
            .iter()
            .map(|e| e.to.0)
            .collect();
        assert_eq!(kept, [7, 8, 9]);
        assert_eq!(metrics.peer_dropped.get(), 7);
    }
}
