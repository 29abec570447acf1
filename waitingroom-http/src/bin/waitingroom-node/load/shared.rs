//! What the visitors of one load run share: the HTTP client, the run's budget (deadline and
//! request count), and everything measured, in one place the report reads at the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::bail;
use hyper::header::RETRY_AFTER;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use waitingroom_core::Time;
use waitingroom_http::clock::now_ms;

use super::affinity::Affinity;
use super::args::LoadArgs;
use super::client::{Answer, Client};
use super::roles::Mix;
use crate::latency::micros_since;

/// The requests a visitor makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    Join,
    Checkin,
    Leave,
    Verify,
    /// `POST /api/pass/refresh` at a node's own address (adversaries only).
    Refresh,
    /// `GET /` at the origin, with the pass (with `--origin`).
    Origin,
}

impl Endpoint {
    /// Every endpoint, in report order.
    pub(super) const ALL: [Endpoint; 6] = [
        Endpoint::Join,
        Endpoint::Checkin,
        Endpoint::Leave,
        Endpoint::Verify,
        Endpoint::Refresh,
        Endpoint::Origin,
    ];

    /// Whether a run makes these requests only when asked to (they are reported when made).
    pub(super) fn optional(self) -> bool {
        matches!(self, Endpoint::Refresh | Endpoint::Origin)
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Endpoint::Join => "join",
            Endpoint::Checkin => "checkin",
            Endpoint::Leave => "leave",
            Endpoint::Verify => "verify",
            Endpoint::Refresh => "refresh",
            Endpoint::Origin => "origin",
        }
    }

    /// The method and path of its request.
    fn route(self) -> (Method, &'static str) {
        match self {
            Endpoint::Join => (Method::POST, "/api/join"),
            Endpoint::Checkin => (Method::POST, "/api/checkin"),
            Endpoint::Leave => (Method::POST, "/api/leave"),
            Endpoint::Verify => (Method::GET, "/api/pass/verify"),
            Endpoint::Refresh => (Method::POST, "/api/pass/refresh"),
            Endpoint::Origin => (Method::GET, "/"),
        }
    }
}

/// Request latencies (µs) and error counts of one endpoint.
#[derive(Debug, Default)]
pub(super) struct EndpointStats {
    pub(super) latencies_us: Mutex<Vec<u32>>,
    pub(super) errors: AtomicU64,
}

/// The queue's order of a visitor: first ticket's join time, then ticket id.
pub(super) type JoinKey = (u64, u64);

/// One visitor that saw "admitted".
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    pub(super) key: JoinKey,
    /// Client clock, ms since the start, when the join was answered.
    pub(super) joined_ms: u64,
    /// Client clock, ms since the start, when this client saw "admitted".
    pub(super) seen_ms: u64,
    /// The cluster's eviction time from the admitted ticket, Unix ms.
    pub(super) eviction_time: Option<u64>,
}

/// Visitors by what happened to them (see the report's fields of the same names).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) joined: AtomicU64,
    pub(super) not_joined: AtomicU64,
    /// Visitors started and not finished (for the progress line).
    pub(super) active: AtomicU64,
    pub(super) leave_failed: AtomicU64,
    pub(super) verified: AtomicU64,
    pub(super) verify_expired: AtomicU64,
    pub(super) verify_failed: AtomicU64,
    /// Leaves answered 409 `not_admitted` after a check-in said "admitted" (the visitor goes
    /// back to checking in).
    pub(super) readmissions: AtomicU64,
    /// Admitted visitors whose leave was answered 409 `already_left`.
    pub(super) pass_lost: AtomicU64,
    /// Requests answered "retry later" (503 with one of the [`RETRY_LATER`] codes) and asked
    /// again after a back-off: not errors.
    pub(super) retried_later: AtomicU64,
    /// Visitors whose ticket was refused (401) at a check-in and who joined again, as the
    /// waiting page does: their place was lost while they kept checking in.
    pub(super) rejoined: AtomicU64,
    /// Banked visitors refused at a check-in once their unclaimed admission lapsed, who joined
    /// again: refused as they must be, not a place lost.
    pub(super) lapsed: AtomicU64,
    /// Visitors who gave up before they were let in (`--abandon`): not lost.
    pub(super) abandoned: AtomicU64,
    /// Visitors who went away and came back (`--come-back`).
    pub(super) came_back: AtomicU64,
    /// Visitors who were handed two different passes for their one admission.
    pub(super) double_passes: AtomicU64,
    /// Passes the origin let through, and passes it sent back to the room.
    pub(super) origin_accepted: AtomicU64,
    pub(super) origin_refused: AtomicU64,
}

/// Reads a counter.
pub(super) fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Adds one to a counter.
pub(super) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Takes what a mutex holds, leaving it empty.
pub(super) fn take<T: Default>(m: &Mutex<T>) -> T {
    std::mem::take(&mut *m.lock().unwrap_or_else(PoisonError::into_inner))
}

/// What one request came back with.
pub(super) enum Reply {
    Ok(axum::body::Bytes),
    /// An error status with the error body's `code`, and the `Retry-After` of a 503 or 429
    /// (in ms) when it had one.
    Status(StatusCode, String, Option<u64>),
    /// 503 with `Retry-After` and one of the [`RETRY_LATER`] codes: not an error, the room says
    /// "ask again in `after_ms`".
    Later {
        after_ms: u64,
    },
    Failed,
}

impl Reply {
    /// How long to wait after the `n`-th failed request in a row (from 0) that came back with
    /// this reply, as the waiting page does: from the `Retry-After` when there is one, else
    /// from [`RETRY_MS`]; doubled each time, with jitter ([`later_wait_ms`]).
    pub(super) fn backoff_ms(&self, n: u32) -> u64 {
        match self {
            Reply::Status(_, _, Some(after_ms)) => later_wait_ms(*after_ms, n),
            _ => retry_wait_ms(n),
        }
    }
}

/// The 503 codes that mean "retry later, your place is kept": the node holding the visitor's
/// ticket is a member but not answering (`owner_unavailable`), or a node is shedding load
/// (`overloaded`). A client backs off and asks again; neither is a client-visible error.
pub(super) const RETRY_LATER: [&str; 2] = ["owner_unavailable", "overloaded"];

/// The longest a visitor waits before asking again after a "retry later".
const LATER_MAX_MS: u64 = 5_000;

/// How long to wait after the `n`-th "retry later" in a row (from 0) when the room asked for
/// `after_ms`: doubled each time up to [`LATER_MAX_MS`], with up to a quarter more at random so
/// that visitors turned away together do not all come back together.
pub(super) fn later_wait_ms(after_ms: u64, n: u32) -> u64 {
    let wait = after_ms
        .max(RETRY_MS)
        .saturating_mul(1u64 << n.min(6))
        .min(LATER_MAX_MS);
    wait + rand::random::<u64>() % (wait / 4 + 1)
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: String,
}

/// Back-off after a first failed request (no answer, or an error status).
pub(super) const RETRY_MS: u64 = 200;

/// How long to wait after the `n`-th failed request in a row (from 0): [`RETRY_MS`] doubled
/// each time up to [`LATER_MAX_MS`], with up to a quarter more at random (a node that went away
/// under the balancer sends every visitor it served back at the same moment).
pub(super) fn retry_wait_ms(n: u32) -> u64 {
    later_wait_ms(RETRY_MS, n)
}

/// Reads an answer: its body on success, else its status and error code (a "retry later" 503
/// with the wait it asks for).
fn read_reply(answer: Answer) -> Reply {
    let Answer {
        status,
        headers,
        body: b,
    } = answer;
    let retry_after_s = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if status.is_success() {
        return Reply::Ok(b);
    }
    let code = serde_json::from_slice::<ErrorBody>(&b)
        .map(|e| e.code)
        .unwrap_or_default();
    let busy = status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS;
    let after_ms = retry_after_s
        .filter(|_| busy)
        .map(|s| s.saturating_mul(1000));
    match after_ms {
        Some(after_ms)
            if status == StatusCode::SERVICE_UNAVAILABLE
                && RETRY_LATER.contains(&code.as_str()) =>
        {
            Reply::Later { after_ms }
        }
        _ => Reply::Status(status, code, after_ms),
    }
}
/// Most attempts at a join, a leave or a pass check.
const ATTEMPTS: u32 = 10;

/// Everything the visitors share.
pub(super) struct Shared {
    client: Client,
    /// How many of the client's base URLs are `--url`s (then come the `--node-url`s, then the
    /// `--origin`).
    fronts: usize,
    nodes: usize,
    /// The balancer's affinity cookie, `--affinity-cookie`.
    affinity_cookie: String,
    next_url: AtomicU64,
    pub(super) start: Instant,
    deadline: Instant,
    max_requests: u64,
    pub(super) requests: AtomicU64,
    stopped: AtomicBool,
    pub(super) stats: [EndpointStats; 6],
    pub(super) counters: Counters,
    /// Failed requests by endpoint, status and error code.
    pub(super) error_reasons: Mutex<BTreeMap<String, u64>>,
    /// (issued_at, expires_at) of every pass handed out.
    pub(super) passes: Mutex<Vec<(u64, u64)>>,
    /// Every pass handed out, as signed, when `--save-passes` asks for them.
    pub(super) pass_tokens: Option<Mutex<Vec<String>>>,
    /// In the order the clients saw "admitted" (pushed under the lock: that is the order).
    pub(super) admissions: Mutex<Vec<Admission>>,
    /// The visitors who play the rules.
    pub(super) mix: Mix,
}

impl Shared {
    /// Checks the arguments and starts the run's clock.
    pub(super) fn new(args: &LoadArgs) -> anyhow::Result<Self> {
        if args.concurrency == 0 || args.users == 0 || args.max_seconds == 0 {
            bail!("--users, --concurrency and --max-seconds must be at least 1");
        }
        let urls: Vec<String> = args
            .url
            .iter()
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            bail!("--url is required");
        }
        let fronts = urls.len();
        let nodes = args.adversaries.node_url.len();
        let all: Vec<String> = urls
            .into_iter()
            .chain(args.adversaries.node_url.iter().cloned())
            .chain(args.origin.iter().cloned())
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .collect();
        let client = Client::new(&all, Duration::from_millis(args.request_timeout_ms))?;
        let start = Instant::now();
        Ok(Shared {
            client,
            fronts,
            nodes,
            affinity_cookie: args.affinity_cookie.trim().to_owned(),
            next_url: AtomicU64::new(0),
            start,
            deadline: start + Duration::from_secs(args.max_seconds),
            max_requests: args.max_requests.unwrap_or(args.users.saturating_mul(200)),
            requests: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            stats: Default::default(),
            counters: Counters::default(),
            error_reasons: Mutex::new(BTreeMap::new()),
            passes: Mutex::new(Vec::new()),
            pass_tokens: args.save_passes.as_ref().map(|_| Mutex::new(Vec::new())),
            admissions: Mutex::new(Vec::with_capacity(args.users as usize)),
            mix: Mix::new(&args.adversaries)?,
        })
    }

    /// Which `--url` the next request goes to: each in turn.
    fn next_target(&self) -> usize {
        self.next_url.fetch_add(1, Ordering::Relaxed) as usize % self.fronts
    }

    /// How many `--node-url`s there are.
    pub(super) fn nodes(&self) -> usize {
        self.nodes
    }

    /// Whether there is an `--origin` to show passes to.
    pub(super) fn has_origin(&self) -> bool {
        self.client.targets() > self.fronts + self.nodes
    }

    /// Whether the run is over (deadline or request budget reached; then for good).
    pub(super) fn out_of_budget(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= self.deadline
            || self.requests.load(Ordering::Relaxed) >= self.max_requests
        {
            self.stopped.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Sends one request to the `--url`s with the visitor's affinity cookie (which keeps what
    /// the answer sets) and records its latency; `None` when the budget is spent.
    pub(super) async fn request(
        &self,
        ep: Endpoint,
        sent: (Option<&str>, Option<(&str, &str)>),
        affinity: &mut Affinity,
    ) -> Option<Reply> {
        self.request_to(self.next_target(), ep, sent, affinity)
            .await
    }

    /// As [`Shared::request`], to `--node-url` number `node`.
    pub(super) async fn request_node(
        &self,
        node: usize,
        ep: Endpoint,
        sent: (Option<&str>, Option<(&str, &str)>),
    ) -> Option<Reply> {
        let target = self.fronts + node % self.nodes.max(1);
        self.request_to(target, ep, sent, &mut Affinity::default())
            .await
    }

    /// As [`Shared::request`], to the `--origin`.
    pub(super) async fn request_origin(&self, header: (&str, &str)) -> Option<Reply> {
        let target = self.fronts + self.nodes;
        let sent = (None, Some(header));
        self.request_to(target, Endpoint::Origin, sent, &mut Affinity::default())
            .await
    }

    /// Sends one request to base URL `target`.
    async fn request_to(
        &self,
        target: usize,
        ep: Endpoint,
        (body, header): (Option<&str>, Option<(&str, &str)>),
        affinity: &mut Affinity,
    ) -> Option<Reply> {
        if self.out_of_budget() {
            return None;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut headers = Vec::with_capacity(2);
        headers.extend(header);
        if let Some(cookie) = affinity.header() {
            headers.push(("cookie", cookie));
        }
        let t0 = Instant::now();
        let sent = self.client.send(target, ep.route(), &headers, body);
        let reply = match sent.await {
            Ok(answer) => {
                affinity.store(&answer.headers, &self.affinity_cookie);
                read_reply(answer)
            }
            Err(_) => Reply::Failed,
        };
        let us = micros_since(t0);
        self.stats[ep as usize]
            .latencies_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(us);
        Some(reply)
    }

    /// Sends `ep` until `read` makes something of an answer (it gets the reply and the Unix ms
    /// the request was sent at, and counts what it does not accept): at most [`ATTEMPTS`]
    /// times, backing off ([`retry_wait_ms`]). `None` when every attempt failed or the run ended.
    ///
    /// A "retry later" answer ([`Reply::Later`]) is not an attempt: `read` never sees it, the
    /// request is sent again after a growing back-off ([`later_wait_ms`]) until the run ends.
    pub(super) async fn attempts<T>(
        &self,
        ep: Endpoint,
        sent: (Option<&str>, Option<(&str, &str)>),
        affinity: &mut Affinity,
        read: impl FnMut(Reply, Time) -> Option<T>,
    ) -> Option<T> {
        self.attempts_within(ep, sent, affinity, |wait| wait, read)
            .await
    }

    /// As [`Shared::attempts`], each back-off shortened by `cap` (a token's remaining life).
    pub(super) async fn attempts_within<T>(
        &self,
        ep: Endpoint,
        (body, header): (Option<&str>, Option<(&str, &str)>),
        affinity: &mut Affinity,
        cap: impl Fn(u64) -> u64,
        mut read: impl FnMut(Reply, Time) -> Option<T>,
    ) -> Option<T> {
        let (mut attempt, mut later) = (0, 0);
        while attempt < ATTEMPTS {
            let sent_ms = now_ms();
            let wait = match self.request(ep, (body, header), affinity).await? {
                Reply::Later { after_ms } => {
                    inc(&self.counters.retried_later);
                    later += 1;
                    later_wait_ms(after_ms, later - 1)
                }
                reply => {
                    let wait = reply.backoff_ms(attempt);
                    if let Some(t) = read(reply, sent_ms) {
                        return Some(t);
                    }
                    attempt += 1;
                    wait
                }
            };
            if !self.sleep(cap(wait)).await {
                return None;
            }
        }
        None
    }

    /// Counts a failed request of `ep`, by reason (`status code`, or `transport`).
    pub(super) fn error(&self, ep: Endpoint, reply: Option<&Reply>) {
        self.stats[ep as usize]
            .errors
            .fetch_add(1, Ordering::Relaxed);
        let reason = match reply {
            Some(Reply::Status(status, code, _)) => {
                format!("{} {} {code}", ep.name(), status.as_u16())
            }
            Some(Reply::Failed) => format!("{} transport", ep.name()),
            Some(Reply::Later { .. }) => format!("{} retry later", ep.name()),
            _ => format!("{} bad answer", ep.name()),
        };
        *self
            .error_reasons
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason)
            .or_default() += 1;
    }

    /// Waits `ms`, or less if the run ends first; false when the run has ended.
    pub(super) async fn sleep(&self, ms: u64) -> bool {
        let until = (Instant::now() + Duration::from_millis(ms)).min(self.deadline);
        tokio::time::sleep_until(until.into()).await;
        !self.out_of_budget()
    }

    /// Client clock, ms since the start of the run.
    pub(super) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records a pass handed out (at `issued_at`, valid until `expires_at`).
    pub(super) fn handed(&self, issued_at: u64, expires_at: u64, token: &str) {
        self.passes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((issued_at, expires_at));
        if let Some(tokens) = &self.pass_tokens {
            tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(token.to_owned());
        }
    }

    /// Records that a visitor who joined at `joined_ms` saw "admitted", now.
    pub(super) fn seen_admitted(&self, key: JoinKey, joined_ms: u64, eviction_time: Option<u64>) {
        let seen_ms = self.start.elapsed().as_millis() as u64;
        self.admissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Admission {
                key,
                joined_ms,
                seen_ms,
                eviction_time,
            });
    }
}

#[cfg(test)]
mod tests {
    use hyper::HeaderMap;
    use hyper::header::HeaderValue;

    use super::*;

    fn answer(status: StatusCode, retry_after: Option<&str>, code: &str) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        }
        Answer {
            status,
            headers,
            body: format!("{{\"code\":\"{code}\"}}").into(),
        }
    }

    #[test]
    fn any_busy_answer_is_asked_again_after_its_retry_after() {
        // Not a "retry later" code, but a 503 with Retry-After: wait as asked (plus jitter).
        let reply = read_reply(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("2"),
            "no_majority",
        ));
        assert!(matches!(&reply, Reply::Status(_, code, Some(2_000)) if code == "no_majority"));
        let wait = reply.backoff_ms(0);
        assert!((2_000..=2_500).contains(&wait), "{wait}");
        // Doubled on the next failure in a row.
        assert!(reply.backoff_ms(1) >= 4_000);
        // 429 too (a join limit).
        let reply = read_reply(answer(
            StatusCode::TOO_MANY_REQUESTS,
            Some("1"),
            "rate_limited",
        ));
        assert!(reply.backoff_ms(0) >= 1_000);
        // Without Retry-After (an expired ticket, a balancer's bare 503): from RETRY_MS.
        let reply = read_reply(answer(StatusCode::UNAUTHORIZED, None, "expired_token"));
        assert!(matches!(
            reply,
            Reply::Status(StatusCode::UNAUTHORIZED, _, None)
        ));
        assert!(reply.backoff_ms(0) >= RETRY_MS);
        // The "retry later" codes stay what they were.
        let reply = read_reply(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("1"),
            "overloaded",
        ));
        assert!(matches!(reply, Reply::Later { after_ms: 1_000 }));
    }
}
