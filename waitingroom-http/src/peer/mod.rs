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
//! Every peer request is authenticated from its headers (see [`auth`]): bound to its
//! destination node and incarnation, a nonce and a timestamp. So a batch goes to one
//! destination (id and incarnation) only, and no request is larger than `peer_body_limit`: the
//! messages queued for one address are cut into such requests. Answers to forwarded visitor
//! requests are authenticated by the owner and checked here before they are believed.
//!
//! [`auth`] is what a peer request's MAC covers, checked from its headers before its body is
//! read; [`replay`] the nonces of recent peer requests; `outbox` the per-destination queues.

pub mod auth;
mod outbox;
pub mod replay;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::oneshot;
use waitingroom_core::{NodeId, Pass, Ticket};
use waitingroom_distributed::{Contact, Envelope, Transmit};

use crate::clock::now_ms;
use crate::config::Limits;
use crate::crypto::Crypto;
use crate::metrics::Metrics;
use auth::{ReplyHead, RequestHead, Route, Standing};
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
    /// A pass refresh, at the node counting the pass.
    Refresh,
}

impl ForwardOp {
    /// The logical path of one such request sent alone (nodes send them in batches, to
    /// [`FORWARD_PATH`]; the single routes stay served).
    pub fn path(self) -> &'static str {
        match self {
            ForwardOp::Checkin => CHECKIN_PATH,
            ForwardOp::Leave => LEAVE_PATH,
            // Sent in batches only.
            ForwardOp::Refresh => FORWARD_PATH,
        }
    }
}

/// One forwarded visitor request: the ticket (check-in, leave) or the pass (refresh) as the
/// forwarding node verified it (the batch is authenticated, so the owner need not check the
/// token's signature again).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardItem {
    /// Check-in, leave or refresh.
    pub op: ForwardOp,
    /// The verified ticket, of a check-in or leave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Ticket>,
    /// The verified pass, of a refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Pass>,
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

/// Most bytes one forwarded item, or its answer, takes as JSON: a ticket's claims or a signed
/// token plus a few fields (a token is at most a few hundred bytes). A forwarded batch holds at
/// most `peer_body_limit / FORWARD_ITEM_MAX` items, so the request and its answer each fit the
/// peer body limit.
const FORWARD_ITEM_MAX: usize = 1024;

/// Outgoing peer traffic.
#[derive(Debug)]
pub struct Transport {
    client: reqwest::Client,
    crypto: Arc<Crypto>,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// This node, the sender of every request.
    me: NodeId,
    /// Protocol messages, per peer address.
    peers: Outboxes<Envelope>,
    /// Forwarded visitor requests waiting for the batch to their owner, per owner (address,
    /// id and incarnation).
    forwards: Outboxes<(ForwardItem, Responder)>,
    /// Peers a request failed to reach since the node last heard of it; the driver tells the
    /// node, which probes them first.
    unreachable: Mutex<Vec<String>>,
    /// Whether peers take this node's signatures.
    standing: Standing,
    /// Protocol messages queued or in flight: a node shutting down waits for them.
    in_transit: AtomicUsize,
}

/// A forwarded request got no usable answer.
#[derive(Debug, Clone, Error)]
#[error("peer did not answer: {0}")]
pub struct Unreachable(String);

impl Transport {
    /// A transport for node `me`, using `client` for every peer request.
    pub fn new(
        client: reqwest::Client,
        crypto: Arc<Crypto>,
        limits: Limits,
        metrics: Arc<Metrics>,
        me: NodeId,
    ) -> Self {
        Transport {
            client,
            crypto,
            limits,
            metrics,
            me,
            peers: Outboxes::default(),
            forwards: Outboxes::default(),
            unreachable: Mutex::new(Vec::new()),
            standing: Standing::default(),
            in_transit: AtomicUsize::new(0),
        }
    }

    /// The client every peer request goes with (its TLS settings included): for the requests
    /// that are not protocol messages (`crate::app::records_sync`).
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Whether peers take this node's signatures: what they answered its requests, and the
    /// valid requests it heard (the peer routes note those).
    pub fn standing(&self) -> &Standing {
        &self.standing
    }

    /// The shared HTTP client, configured for peers (keep-alive, no proxy), closing idle
    /// connections after 5 s: half the peers' default header read timeout (see
    /// [`Transport::build_client_with_idle`]).
    pub fn build_client() -> reqwest::Client {
        Self::build_client_with_idle(Duration::from_secs(5))
    }

    /// The same, closing idle connections after `idle`: below the peers' own idle limit (their
    /// header read timeout), so a request is never sent down a connection the other side is
    /// closing.
    pub fn build_client_with_idle(idle: Duration) -> reqwest::Client {
        Self::build_client_with(idle, None)
    }

    /// The same, calling peers over mutual TLS with `tls` when given (`crypto/tls.rs`).
    pub fn build_client_with(idle: Duration, tls: Option<rustls::ClientConfig>) -> reqwest::Client {
        let builder = crate::crypto::tls::client_builder()
            .no_proxy()
            .pool_idle_timeout(idle)
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_millis(500));
        let tls = tls.unwrap_or_else(crate::crypto::tls::plain_peer_config);
        builder
            .tls_backend_preconfigured(tls)
            .build()
            // Only TLS back-end initialisation can fail, and it is handed a finished one.
            .expect("a client with a preconfigured TLS configuration builds")
    }

    /// Queues messages for delivery. Never blocks on the network.
    pub fn send_all(self: &Arc<Self>, out: Vec<Transmit>) {
        let mut peers = self.peers.lock();
        for t in out {
            let peer = Outboxes::get_or_start(&mut peers, &t.to_addr, |addr, q| {
                let this = self.clone();
                tokio::spawn(async move { this.sender(addr, q).await });
            });
            self.in_transit.fetch_add(1, Ordering::AcqRel);
            if peer.push(t.envelope, self.limits.peer_queue) {
                self.in_transit.fetch_sub(1, Ordering::AcqRel);
                self.metrics.peer_dropped.inc();
            }
        }
    }

    /// Delivers one destination's queue until it has been idle for a while: each batch taken
    /// leaves as one request per destination node, cut to the body limit.
    async fn sender(self: Arc<Self>, addr: String, peer: Arc<Outbox<Envelope>>) {
        let url = format!("{addr}{MESSAGES_PATH}");
        let mut backoff = BACKOFF_MIN;
        let max = self.limits.peer_batch;
        while let Some(batch) = self.peers.next_batch(&addr, &peer, max).await {
            let taken = batch.len();
            let mut failed = false;
            for (to, envelopes) in by_destination(batch) {
                let (chunks, too_big) = json_chunks(&envelopes, self.limits.peer_body);
                if too_big > 0 {
                    tracing::warn!(peer = %addr, too_big, "protocol message larger than peer_body_limit dropped");
                    self.metrics.peer_dropped.inc_by(too_big as u64);
                }
                for (range, body) in chunks {
                    let sent = &envelopes[range];
                    if let Err(e) = self.post_batch(&url, to, body).await {
                        failed = true;
                        self.report_unreachable(&addr);
                        self.metrics.peer_failures.inc();
                        self.metrics.peer_dropped.inc_by(sent.len() as u64);
                        tracing::debug!(peer = %addr, error = %e, dropped = sent.len(), "peer delivery failed");
                    } else {
                        for env in sent {
                            Metrics::count_type(&self.metrics.peer_sent, &env.body);
                        }
                    }
                }
            }
            // Delivered or given up on: either way no longer in transit.
            self.in_transit.fetch_sub(taken, Ordering::AcqRel);
            if failed {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            } else {
                backoff = BACKOFF_MIN;
            }
        }
    }

    /// Whether every protocol message queued has been delivered or given up on.
    pub fn is_idle(&self) -> bool {
        self.in_transit.load(Ordering::Acquire) == 0
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

    async fn post_batch(
        &self,
        url: &str,
        to: (NodeId, u64),
        body: Vec<u8>,
    ) -> Result<(), Unreachable> {
        let route = Route {
            path: MESSAGES_PATH,
            from: self.me,
            to: to.0,
            to_incarnation: to.1,
        };
        let (resp, _) = self
            .signed_post(url, route, body, self.limits.peer_timeout_ms)
            .await?;
        if resp.status().is_success() {
            self.standing.heard(now_ms());
            Ok(())
        } else {
            let status = resp.status();
            let text = read_limited(resp, 4096).await.unwrap_or_default();
            if status == StatusCode::UNAUTHORIZED {
                self.standing.refused(now_ms());
                tracing::warn!(%url, "peer refused our signature: do all nodes use the same cluster key, and agree on the time?");
            }
            Err(Unreachable(format!(
                "status {status}: {}",
                String::from_utf8_lossy(&text)
            )))
        }
    }

    /// POSTs `body` to `url` along `route`, authenticated; the answer and the request's nonce.
    async fn signed_post(
        &self,
        url: &str,
        route: Route<'_>,
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<(reqwest::Response, u64), Unreachable> {
        // The OS-seeded generator: a nonce only has to differ from every other one.
        let nonce: u64 = rand::random();
        // A request to destination 0 is bound to the URL it goes to (`auth::peer_address`).
        let base = url.strip_suffix(route.path).unwrap_or(url);
        let (head, mac) = RequestHead::sign_to(&self.crypto, route, base, now_ms(), nonce, &body);
        let mut req = self
            .client
            .post(url)
            .timeout(Duration::from_millis(timeout_ms))
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in head.headers(&mac) {
            req = req.header(name, value);
        }
        let resp = req
            .body(body)
            .send()
            .await
            .map_err(|e| Unreachable(e.to_string()))?;
        Ok((resp, nonce))
    }
}

/// The envelopes of one batch by destination (id, incarnation), in order of first appearance,
/// each group in its original order.
fn by_destination(batch: Vec<Envelope>) -> Vec<((NodeId, u64), Vec<Envelope>)> {
    let mut groups: Vec<((NodeId, u64), Vec<Envelope>)> = Vec::new();
    for env in batch {
        let to = (env.to, env.to_incarnation);
        match groups.iter_mut().find(|(k, _)| *k == to) {
            Some((_, g)) => g.push(env),
            None => groups.push((to, vec![env])),
        }
    }
    groups
}

/// One request's worth of a batch: which items, and their JSON array.
type Chunk = (std::ops::Range<usize>, Vec<u8>);

/// `items` as JSON arrays of at most `limit` bytes each, with the range of items each holds, in
/// order; and how many items were left out because one alone is over the limit.
fn json_chunks<T: Serialize>(items: &[T], limit: usize) -> (Vec<Chunk>, usize) {
    let mut chunks = Vec::new();
    let mut too_big = 0;
    let mut start = 0;
    let mut body = b"[".to_vec();
    for (i, item) in items.iter().enumerate() {
        let Ok(json) = serde_json::to_vec(item) else {
            too_big += 1;
            continue;
        };
        if json.len() + 2 > limit {
            too_big += 1;
            continue;
        }
        if body.len() > 1 && body.len() + 1 + json.len() + 1 > limit {
            body.push(b']');
            chunks.push((start..i, std::mem::replace(&mut body, b"[".to_vec())));
            start = i;
        }
        if body.len() > 1 {
            body.push(b',');
        }
        body.extend_from_slice(&json);
    }
    if body.len() > 1 {
        body.push(b']');
        chunks.push((start..items.len(), body));
    }
    (chunks, too_big)
}

/// A response's body, up to `limit` bytes (more is an error, and stops the reading).
async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, Unreachable> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(Unreachable(format!("answer larger than {limit} bytes")));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| Unreachable(e.to_string()))? {
        if out.len() + chunk.len() > limit {
            return Err(Unreachable(format!("answer larger than {limit} bytes")));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

impl Transport {
    /// Forwards a visitor request to `owner`, batched with the others going there: one sender
    /// task per owner posts everything queued as one request to [`FORWARD_PATH`] (while a batch
    /// is in flight the next one fills up), so under load a forward costs a fraction of an HTTP
    /// exchange. Returns the owner's status and body, or [`Unreachable`] when it did not answer
    /// in time, answered with a server error, or its answer did not authenticate.
    pub async fn forward_batched(
        self: &Arc<Self>,
        owner: &Contact,
        item: ForwardItem,
    ) -> Result<(StatusCode, serde_json::Value), Unreachable> {
        let (tx, rx) = oneshot::channel();
        {
            let mut owners = self.forwards.lock();
            let key = format!("{} {} {}", owner.addr, owner.id.0, owner.incarnation);
            let q = Outboxes::get_or_start(&mut owners, &key, |key, q| {
                let this = self.clone();
                let owner = owner.clone();
                tokio::spawn(async move { this.forward_sender(key, owner, q).await });
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
        key: String,
        owner: Contact,
        q: Arc<Outbox<(ForwardItem, Responder)>>,
    ) {
        let url = format!("{}{FORWARD_PATH}", owner.addr);
        let max = self
            .limits
            .peer_batch
            .min(self.limits.peer_body / FORWARD_ITEM_MAX)
            .max(1);
        while let Some(batch) = self.forwards.next_batch(&key, &q, max).await {
            let (items, responders): (Vec<ForwardItem>, Vec<Responder>) = batch.into_iter().unzip();
            let result = self
                .post_forwards(&url, &owner, &items)
                .await
                .and_then(|replies| {
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

    /// One forwarded batch to `owner`; its answers, once the owner's MAC over them checks out.
    async fn post_forwards(
        &self,
        url: &str,
        owner: &Contact,
        items: &[ForwardItem],
    ) -> Result<Vec<ForwardReply>, Unreachable> {
        let body = serde_json::to_vec(items).map_err(|e| Unreachable(e.to_string()))?;
        let route = Route {
            path: FORWARD_PATH,
            from: self.me,
            to: owner.id,
            to_incarnation: owner.incarnation,
        };
        let (resp, nonce) = self
            .signed_post(url, route, body, self.limits.forward_timeout_ms)
            .await?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED {
            self.standing.refused(now_ms());
        }
        if !status.is_success() {
            return Err(Unreachable(format!("status {status}")));
        }
        self.standing.heard(now_ms());
        let headers = resp.headers().clone();
        let bytes = read_limited(resp, self.limits.peer_body).await?;
        ReplyHead::check(
            &self.crypto,
            nonce,
            owner.id,
            status.as_u16(),
            &headers,
            &bytes,
        )
        .map_err(|e| {
            self.metrics.count_auth_failure(e.reason());
            tracing::warn!(%url, error = %e, "answer to a forwarded request refused");
            Unreachable(format!("unauthenticated answer: {e}"))
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Unreachable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(peer_queue: usize) -> Limits {
        let mut l = crate::config::Options {
            network: crate::config::NetworkOptions {
                key_file: Some("unused".into()),
                ..Default::default()
            },
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
            NodeId(1),
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

    /// A batch leaves as one request per destination, each cut to the body limit; a message
    /// that alone is over the limit is left out (and counted by the caller).
    #[test]
    fn batches_split_by_destination_and_size() {
        let batch: Vec<Envelope> = [5, 6, 5, 5, 6].into_iter().map(envelope).collect();
        let groups = by_destination(batch);
        let tos: Vec<(u64, usize)> = groups.iter().map(|((to, _), g)| (to.0, g.len())).collect();
        assert_eq!(tos, [(5, 3), (6, 2)]);
        let one = serde_json::to_vec(&groups[0].1[0]).unwrap().len();
        // Room for two messages per request, not three.
        let (chunks, too_big) = json_chunks(&groups[0].1, 2 * one + 3);
        assert_eq!(too_big, 0);
        let ranges: Vec<_> = chunks.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(ranges, [0..2, 2..3]);
        for (range, body) in &chunks {
            assert!(body.len() <= 2 * one + 3);
            let back: Vec<Envelope> = serde_json::from_slice(body).unwrap();
            assert_eq!(back, groups[0].1[range.clone()]);
        }
        let (chunks, too_big) = json_chunks(&groups[0].1, one);
        assert!(chunks.is_empty());
        assert_eq!(too_big, 3);
    }
}
