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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use thiserror::Error;
use tokio::sync::Notify;
use waitingroom_distributed::{Envelope, Transmit};

use crate::config::Limits;
use crate::crypto::{Crypto, HEADER_KID, HEADER_SIGNATURE, HEADER_TIMESTAMP, PeerAuthError};
use crate::driver::now_ms;
use crate::metrics::Metrics;

/// The logical path of batched protocol messages (what signatures cover, whatever URL prefix
/// the advertised address has).
pub const MESSAGES_PATH: &str = "/peer/messages";
/// Logical path of a forwarded check-in.
pub const CHECKIN_PATH: &str = "/peer/visitor/checkin";
/// Logical path of a forwarded leave.
pub const LEAVE_PATH: &str = "/peer/visitor/leave";

/// A sender task with nothing to send for this long exits.
const IDLE_EXIT: Duration = Duration::from_secs(30);
/// Back-off after a failed request, doubled per failure up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(1_000);

#[derive(Debug, Default)]
struct PeerQueue {
    queue: Mutex<VecDeque<Envelope>>,
    ready: Notify,
}

/// Outgoing peer traffic.
#[derive(Debug)]
pub struct Transport {
    client: reqwest::Client,
    crypto: Arc<Crypto>,
    limits: Limits,
    metrics: Arc<Metrics>,
    peers: Mutex<HashMap<String, Arc<PeerQueue>>>,
    /// Peers a request failed to reach since the node last heard of it; the driver tells the
    /// node, which probes them first.
    unreachable: Mutex<Vec<String>>,
}

/// A forwarded request got no usable answer.
#[derive(Debug, Error)]
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
            peers: Mutex::new(HashMap::new()),
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
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        for t in out {
            let peer = match peers.get(&*t.to_addr) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(PeerQueue::default());
                    peers.insert(t.to_addr.to_string(), p.clone());
                    let this = self.clone();
                    let addr = t.to_addr.to_string();
                    let task_peer = p.clone();
                    tokio::spawn(async move { this.sender(addr, task_peer).await });
                    p
                }
            };
            let mut q = peer.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if q.len() >= self.limits.peer_queue {
                q.pop_front();
                self.metrics.peer_dropped.inc();
            }
            q.push_back(t.envelope);
            drop(q);
            peer.ready.notify_one();
        }
    }

    /// Delivers one destination's queue until it has been idle for a while.
    async fn sender(self: Arc<Self>, addr: String, peer: Arc<PeerQueue>) {
        let url = format!("{addr}{MESSAGES_PATH}");
        let mut backoff = BACKOFF_MIN;
        loop {
            let batch: Vec<Envelope> = {
                let mut q = peer.queue.lock().unwrap_or_else(PoisonError::into_inner);
                let n = q.len().min(self.limits.peer_batch);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                tokio::select! {
                    _ = peer.ready.notified() => continue,
                    _ = tokio::time::sleep(IDLE_EXIT) => {
                        // Leave only if nothing arrived meanwhile; checked under the map lock,
                        // which `send_all` holds while it pushes.
                        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
                        let empty = peer.queue.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
                        if empty {
                            if peers.get(&addr).is_some_and(|p| Arc::ptr_eq(p, &peer)) {
                                peers.remove(&addr);
                            }
                            return;
                        }
                        continue;
                    }
                }
            }
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

    /// Forwards a visitor request (`path` is [`CHECKIN_PATH`] or [`LEAVE_PATH`]) to the node at
    /// `addr`. Returns its status and body as they came, or [`Unreachable`] when it did not
    /// answer in time (so the caller can re-queue the visitor here).
    pub async fn forward<T: Serialize>(
        &self,
        addr: &str,
        path: &str,
        request: &T,
    ) -> Result<(StatusCode, Vec<u8>), Unreachable> {
        let body = serde_json::to_vec(request).map_err(|e| Unreachable(e.to_string()))?;
        let url = format!("{addr}{path}");
        let resp = self
            .signed_post(&url, path, body, self.limits.forward_timeout_ms)
            .await?;
        let status =
            StatusCode::from_u16(resp.status().as_u16()).map_err(|e| Unreachable(e.to_string()))?;
        if status.is_server_error() {
            // The owner is there but cannot serve (stopping, or not in the cluster any more):
            // treat it as unreachable so the visitor is served here.
            return Err(Unreachable(format!("status {status}")));
        }
        let bytes = resp.bytes().await.map_err(|e| Unreachable(e.to_string()))?;
        Ok((status, bytes.to_vec()))
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
