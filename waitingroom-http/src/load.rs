//! `waitingroom-node load`: real visitors over HTTP, as many as asked, against a cluster.
//!
//! Each visitor joins, checks in whenever the answer says (`refresh_after_ms`), leaves once a
//! check-in says "admitted", and has its pass verified (`GET /api/pass/verify`). At most
//! `--concurrency` visitors are active at once (joined and not finished); each has at most one
//! request in flight, so in-flight requests are bounded by the concurrency too. A visitor is one
//! small tokio task (an async state machine, a few hundred bytes), not a thread; every request
//! goes through one shared keep-alive `reqwest::Client`.
//!
//! What is measured (all times on this client's clock):
//! - `admitted`: visitors who saw "admitted" in a join or check-in answer; `admitted_per_s` =
//!   admitted / the run's wall time (first join to the last visitor finished, or the deadline);
//! - `lost`: visitors who joined, kept checking in, and never saw "admitted" before the end;
//! - `errors`: requests that failed (transport error, 5xx, or a 4xx other than the expected
//!   401 of an already expired pass); `verify_expired`: pass checks answered 401 because the
//!   pass had already expired when checked (with `pass_expiry_ms` 0 a pass is born expired);
//! - `leave_failed`: admitted visitors who got no pass after every attempt; `pass_lost`: admitted
//!   visitors whose leave was answered 409 `already_left` (an earlier leave went through but its
//!   answer was lost, and the node holding the ticket could not give that pass again: every
//!   attempt carries the same `Idempotency-Key`, which gets it back while that node lives);
//!   `readmissions`: leaves answered 409 `not_admitted` after a check-in said "admitted" (the
//!   visitor checks in again, as the waiting page would);
//!   `error_reasons`: failed requests by endpoint, status and error code;
//! - `max_on_site`: the most passes valid at one instant (from each pass's `created_at` and
//!   `expires_at`): visitors on the site at once, to compare with `target_on_site`;
//! - latency per endpoint from sending a request to reading its whole answer;
//! - `kendall_tau`: the normalised Kendall-Tau distance between the join order (the first
//!   ticket's join time, then ticket id: the queue's own order) and the order in which these
//!   clients *saw* "admitted" (no ties). It includes the client's own phase: two visitors let
//!   out in the same round see it at their next check-in, up to one refresh interval apart;
//! - `kendall_tau_eviction`: the same join order against the time the cluster let each visitor
//!   out (`eviction_time` in the admitted ticket), pairs with equal eviction times not counted
//!   (a round admits many at once): the cluster's own fairness, free of client phase;
//! - `kendall_tau_thesis`: the thesis' figure, (join ms, client-seen admission ms) with a tie
//!   in either counted as a disagreement.
//!
//! Bounded: `--max-seconds` of wall time and `--max-requests` requests in total; when either
//! is reached every visitor stops and the unadmitted ones count as lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use clap::Args;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use waitingroom_core::{Ties, kendall_tau, kendall_tau_permutation};
use waitingroom_http::leaves::IDEMPOTENCY_HEADER;

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Base URL of the cluster (the load balancer); several comma-separated URLs are used in
    /// turn, request by request.
    #[arg(long, value_delimiter = ',', required = true)]
    url: Vec<String>,
    /// Visitors in total.
    #[arg(long, default_value_t = 1000)]
    users: u64,
    /// Most visitors active (joined, not finished) at once; each has at most one request in
    /// flight.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Spread the start of the first `--concurrency` visitors evenly over this many ms (0: all
    /// at once). Later visitors start as soon as a place frees up.
    #[arg(long, default_value_t = 0)]
    ramp_up_ms: u64,
    /// Stop after this many seconds; visitors not admitted by then count as lost.
    #[arg(long, default_value_t = 600)]
    max_seconds: u64,
    /// Stop after this many requests in total. [default: 200 per visitor]
    #[arg(long)]
    max_requests: Option<u64>,
    /// Timeout of one request, ms.
    #[arg(long, default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 2)]
    progress_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Join,
    Checkin,
    Leave,
    Verify,
}

const ENDPOINTS: [Endpoint; 4] = [
    Endpoint::Join,
    Endpoint::Checkin,
    Endpoint::Leave,
    Endpoint::Verify,
];

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Join => "join",
            Endpoint::Checkin => "checkin",
            Endpoint::Leave => "leave",
            Endpoint::Verify => "verify",
        }
    }
}

/// Request latencies (µs) and error counts of one endpoint.
#[derive(Debug, Default)]
struct EndpointStats {
    latencies_us: Mutex<Vec<u32>>,
    errors: AtomicU64,
}

/// The queue's order of a visitor: first ticket's join time, then ticket id.
type JoinKey = (u64, u64);

#[derive(Debug, Clone, Copy)]
struct Admission {
    key: JoinKey,
    /// Client clock, ms since the start, when this client saw "admitted".
    seen_ms: u64,
    /// The cluster's eviction time from the admitted ticket, Unix ms.
    eviction_time: Option<u64>,
}

/// Everything the visitors share.
struct Shared {
    client: reqwest::Client,
    urls: Vec<String>,
    next_url: AtomicU64,
    start: Instant,
    deadline: Instant,
    max_requests: u64,
    requests: AtomicU64,
    stopped: AtomicBool,
    stats: [EndpointStats; 4],
    joined: AtomicU64,
    not_joined: AtomicU64,
    active: AtomicU64,
    finished: AtomicU64,
    leave_failed: AtomicU64,
    verified: AtomicU64,
    verify_expired: AtomicU64,
    verify_failed: AtomicU64,
    /// Failed requests by endpoint, status and error code.
    error_reasons: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Leaves answered 409 `not_admitted` after a check-in said "admitted" (the visitor goes back
    /// to checking in).
    readmissions: AtomicU64,
    /// Admitted visitors whose leave was answered 409 `already_left` (see `visit`).
    pass_lost: AtomicU64,
    /// (created_at, expires_at) of every pass handed out.
    passes: Mutex<Vec<(u64, u64)>>,
    /// In the order the clients saw "admitted" (pushed under the lock: that is the order).
    admissions: Mutex<Vec<Admission>>,
}

#[derive(Debug, Deserialize)]
struct VisitorAnswer {
    status: String,
    ticket: String,
    #[serde(default)]
    refresh_after_ms: u64,
}

#[derive(Debug, Deserialize)]
struct PassAnswer {
    pass: String,
    expires_at_ms: u64,
}

#[derive(Debug, Deserialize)]
struct TicketClaims {
    id: String,
    join_time: u64,
    #[serde(default)]
    eviction_time: Option<u64>,
}

/// The claims of a ticket, read without checking the signature (the client only needs to know
/// its place; the nodes check signatures).
fn claims(token: &str) -> Option<TicketClaims> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[derive(Debug, Deserialize)]
struct PassClaims {
    created_at: u64,
    expires_at: u64,
}

fn pass_claims(token: &str) -> Option<PassClaims> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

/// The most passes valid at one instant: visitors on the site at once, as the passes say
/// (issued at `created_at`, valid until `expires_at`, both on the nodes' clocks).
fn max_on_site(passes: &[(u64, u64)]) -> u64 {
    // +1 at creation, -1 at expiry; at equal times the expiry goes first (valid until, not at).
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(passes.len() * 2);
    for &(from, until) in passes {
        if until > from {
            events.push((from, 1));
            events.push((until, -1));
        }
    }
    events.sort_unstable();
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as u64
}

fn join_key(c: &TicketClaims) -> Option<JoinKey> {
    Some((c.join_time, u64::from_str_radix(&c.id, 16).ok()?))
}

/// What one request came back with.
enum Outcome {
    Ok(axum::body::Bytes),
    /// An error status with the error body's `code`.
    Status(StatusCode, String),
    Failed,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: String,
}

impl Shared {
    fn url(&self, path: &str) -> String {
        let i = self.next_url.fetch_add(1, Ordering::Relaxed) as usize % self.urls.len();
        format!("{}{path}", self.urls[i])
    }

    fn out_of_budget(&self) -> bool {
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

    /// Sends one request and records its latency; `None` when the budget is spent.
    async fn request(
        &self,
        ep: Endpoint,
        body: Option<String>,
        header: Option<(&str, &str)>,
    ) -> Option<Outcome> {
        if self.out_of_budget() {
            return None;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let req = match ep {
            Endpoint::Join => self.client.post(self.url("/api/join")),
            Endpoint::Checkin => self.client.post(self.url("/api/checkin")),
            Endpoint::Leave => self.client.post(self.url("/api/leave")),
            Endpoint::Verify => self.client.get(self.url("/api/pass/verify")),
        };
        let req = match body {
            Some(b) => req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b),
            None => req,
        };
        let req = match header {
            Some((name, value)) => req.header(name, value),
            None => req,
        };
        let t0 = Instant::now();
        let outcome = match req.send().await {
            Ok(resp) => {
                let status = resp.status();
                match resp.bytes().await {
                    Ok(b) if status.is_success() => Outcome::Ok(b),
                    Ok(b) => Outcome::Status(
                        status,
                        serde_json::from_slice::<ErrorBody>(&b)
                            .map(|e| e.code)
                            .unwrap_or_default(),
                    ),
                    Err(_) => Outcome::Failed,
                }
            }
            Err(_) => Outcome::Failed,
        };
        let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        self.stats[ep as usize]
            .latencies_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(us);
        Some(outcome)
    }

    /// Counts a failed request of `ep`, by reason (`status code`, or `transport`).
    fn error(&self, ep: Endpoint, outcome: Option<&Outcome>) {
        self.stats[ep as usize]
            .errors
            .fetch_add(1, Ordering::Relaxed);
        let reason = match outcome {
            Some(Outcome::Status(status, code)) => {
                format!("{} {} {code}", ep.name(), status.as_u16())
            }
            Some(Outcome::Failed) => format!("{} transport", ep.name()),
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
    async fn sleep(&self, ms: u64) -> bool {
        let until = (Instant::now() + Duration::from_millis(ms)).min(self.deadline);
        tokio::time::sleep_until(until.into()).await;
        !self.out_of_budget()
    }

    fn seen_admitted(&self, key: JoinKey, ticket: &TicketClaims) {
        let seen_ms = self.start.elapsed().as_millis() as u64;
        self.admissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Admission {
                key,
                seen_ms,
                eviction_time: ticket.eviction_time,
            });
    }
}

/// Back-off after a failed request.
const RETRY_MS: u64 = 200;
/// Most attempts at a join, a leave or a pass check.
const ATTEMPTS: u32 = 10;

fn body(ticket: &str) -> String {
    // Tokens are base64url and dots: no JSON escaping needed.
    format!("{{\"ticket\":\"{ticket}\"}}")
}

/// One visitor, start to end.
async fn visitor(s: Arc<Shared>) {
    s.active.fetch_add(1, Ordering::Relaxed);
    visit(&s).await;
    s.active.fetch_sub(1, Ordering::Relaxed);
    s.finished.fetch_add(1, Ordering::Relaxed);
}

async fn visit(s: &Shared) {
    // Join.
    let mut answer = None;
    for _ in 0..ATTEMPTS {
        match s.request(Endpoint::Join, None, None).await {
            None => break,
            Some(Outcome::Ok(b)) => match serde_json::from_slice::<VisitorAnswer>(&b) {
                Ok(a) => {
                    answer = Some(a);
                    break;
                }
                Err(_) => s.error(Endpoint::Join, None),
            },
            Some(o) => s.error(Endpoint::Join, Some(&o)),
        }
        if !s.sleep(RETRY_MS).await {
            break;
        }
    }
    let Some(mut answer) = answer else {
        s.not_joined.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some(key) = claims(&answer.ticket).as_ref().and_then(join_key) else {
        s.error(Endpoint::Join, None);
        s.not_joined.fetch_add(1, Ordering::Relaxed);
        return;
    };
    s.joined.fetch_add(1, Ordering::Relaxed);

    let mut ticket = answer.ticket.clone();
    let mut seen = false;
    let pass = 'visit: loop {
        // Check in until admitted (or the run ends: then this visitor is lost).
        while answer.status != "admitted" {
            if !s.sleep(answer.refresh_after_ms).await {
                return;
            }
            match s
                .request(Endpoint::Checkin, Some(body(&ticket)), None)
                .await
            {
                None => return,
                Some(Outcome::Ok(b)) => match serde_json::from_slice::<VisitorAnswer>(&b) {
                    Ok(a) => {
                        ticket = a.ticket.clone();
                        answer = a;
                    }
                    Err(_) => {
                        s.error(Endpoint::Checkin, None);
                        answer.refresh_after_ms = RETRY_MS;
                    }
                },
                Some(o) => {
                    // Keep the ticket and try again soon: a node may be down or stopping.
                    s.error(Endpoint::Checkin, Some(&o));
                    answer.refresh_after_ms = RETRY_MS;
                }
            }
        }
        if !seen {
            seen = true;
            let c = claims(&ticket);
            s.seen_admitted(
                key,
                c.as_ref().unwrap_or(&TicketClaims {
                    id: String::new(),
                    join_time: key.0,
                    eviction_time: None,
                }),
            );
        }

        // Leave: exchange the ticket for a pass. Every attempt carries the same key, so a
        // repeat whose first answer was lost gets that pass again.
        let leave_key = format!("{:016x}", rand::random::<u64>());
        for _ in 0..ATTEMPTS {
            let header = Some((IDEMPOTENCY_HEADER, leave_key.as_str()));
            match s
                .request(Endpoint::Leave, Some(body(&ticket)), header)
                .await
            {
                None => break 'visit None,
                Some(Outcome::Ok(b)) => match serde_json::from_slice::<PassAnswer>(&b) {
                    Ok(p) => break 'visit Some(p),
                    Err(_) => s.error(Endpoint::Leave, None),
                },
                Some(Outcome::Status(StatusCode::CONFLICT, code)) if code == "not_admitted" => {
                    // The node answering holds the visitor as queued (re-queued there while
                    // the node that let them out was unreachable): check in again, as the
                    // waiting page would.
                    s.readmissions.fetch_add(1, Ordering::Relaxed);
                    answer.status = "queued".into();
                    answer.refresh_after_ms = RETRY_MS;
                    continue 'visit;
                }
                Some(o @ Outcome::Status(StatusCode::CONFLICT, _)) => {
                    // `already_left`: an earlier leave went through, its answer was lost, and
                    // the node holding the ticket no longer has that pass to give again (it
                    // died too, or the minute it keeps passes for is over).
                    s.error(Endpoint::Leave, Some(&o));
                    s.pass_lost.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Some(o) => s.error(Endpoint::Leave, Some(&o)),
            }
            if !s.sleep(RETRY_MS).await {
                break 'visit None;
            }
        }
        break None;
    };
    let Some(pass) = pass else {
        s.leave_failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if let Some(c) = pass_claims(&pass.pass) {
        s.passes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((c.created_at, c.expires_at));
    }

    // Verify the pass as an origin's gate would.
    for _ in 0..ATTEMPTS {
        let now = waitingroom_http::clock::now_ms();
        let bearer = format!("Bearer {}", pass.pass);
        let header = Some((reqwest::header::AUTHORIZATION.as_str(), bearer.as_str()));
        match s.request(Endpoint::Verify, None, header).await {
            None => break,
            Some(Outcome::Ok(_)) => {
                s.verified.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(Outcome::Status(StatusCode::UNAUTHORIZED, _)) if pass.expires_at_ms <= now => {
                // Expired before it was checked (pass_expiry_ms 0): refused, as it must be.
                s.verify_expired.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(o) => s.error(Endpoint::Verify, Some(&o)),
        }
        if !s.sleep(RETRY_MS).await {
            break;
        }
    }
    s.verify_failed.fetch_add(1, Ordering::Relaxed);
}

#[derive(Debug, Serialize)]
struct EndpointReport {
    requests: u64,
    errors: u64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    users: u64,
    concurrency: usize,
    joined: u64,
    not_joined: u64,
    admitted: u64,
    lost: u64,
    errors: u64,
    leave_failed: u64,
    readmissions: u64,
    pass_lost: u64,
    max_on_site: u64,
    verified: u64,
    verify_expired: u64,
    verify_failed: u64,
    requests: u64,
    duration_s: f64,
    admitted_per_s: f64,
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    kendall_tau: f64,
    kendall_tau_eviction: f64,
    kendall_tau_thesis: f64,
    endpoints: std::collections::BTreeMap<&'static str, EndpointReport>,
    error_reasons: std::collections::BTreeMap<String, u64>,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub async fn run(args: LoadArgs) -> anyhow::Result<()> {
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
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(args.concurrency)
        .pool_idle_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .timeout(Duration::from_millis(args.request_timeout_ms))
        .build()
        .context("cannot build the HTTP client")?;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        client,
        urls,
        next_url: AtomicU64::new(0),
        start,
        deadline: start + Duration::from_secs(args.max_seconds),
        max_requests: args.max_requests.unwrap_or(args.users.saturating_mul(200)),
        requests: AtomicU64::new(0),
        stopped: AtomicBool::new(false),
        stats: Default::default(),
        joined: AtomicU64::new(0),
        not_joined: AtomicU64::new(0),
        active: AtomicU64::new(0),
        finished: AtomicU64::new(0),
        leave_failed: AtomicU64::new(0),
        verified: AtomicU64::new(0),
        verify_expired: AtomicU64::new(0),
        verify_failed: AtomicU64::new(0),
        error_reasons: Mutex::new(std::collections::BTreeMap::new()),
        readmissions: AtomicU64::new(0),
        pass_lost: AtomicU64::new(0),
        passes: Mutex::new(Vec::new()),
        admissions: Mutex::new(Vec::with_capacity(args.users as usize)),
    });

    let progress = (args.progress_s > 0).then(|| {
        let s = shared.clone();
        let every = Duration::from_secs(args.progress_s);
        let users = args.users;
        tokio::spawn(async move {
            let mut last_admitted = 0u64;
            loop {
                tokio::time::sleep(every).await;
                let admitted = s
                    .admissions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len() as u64;
                let errors: u64 = s
                    .stats
                    .iter()
                    .map(|e| e.errors.load(Ordering::Relaxed))
                    .sum();
                eprintln!(
                    "load: {:>6.1} s  joined {}/{}  active {}  admitted {} (+{:.0}/s)  errors {}  requests {}",
                    s.start.elapsed().as_secs_f64(),
                    s.joined.load(Ordering::Relaxed),
                    users,
                    s.active.load(Ordering::Relaxed),
                    admitted,
                    (admitted - last_admitted) as f64 / every.as_secs_f64(),
                    errors,
                    s.requests.load(Ordering::Relaxed),
                );
                last_admitted = admitted;
            }
        })
    });

    // Start visitors as places free up: at most `concurrency` active at once.
    let places = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.users {
        if args.ramp_up_ms > 0 && i < args.concurrency as u64 {
            let at = Duration::from_millis(args.ramp_up_ms * i / args.concurrency as u64);
            tokio::time::sleep_until((start + at).into()).await;
        }
        let permit = places.clone().acquire_owned().await?;
        if shared.out_of_budget() {
            break;
        }
        let s = shared.clone();
        tasks.spawn(async move {
            visitor(s).await;
            drop(permit);
        });
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(p) = progress {
        p.abort();
    }

    let s = &*shared;
    let admissions =
        std::mem::take(&mut *s.admissions.lock().unwrap_or_else(PoisonError::into_inner));
    let joined = s.joined.load(Ordering::Relaxed);
    let admitted = admissions.len() as u64;
    let seen_order: Vec<JoinKey> = admissions.iter().map(|a| a.key).collect();
    let tau_seen = kendall_tau_permutation(&seen_order);
    let by_eviction: Vec<(JoinKey, u64)> = admissions
        .iter()
        .filter_map(|a| Some((a.key, a.eviction_time?)))
        .collect();
    let kendall_tau_eviction = kendall_tau(&by_eviction, Ties::Ignore);
    let thesis: Vec<(u64, u64)> = admissions.iter().map(|a| (a.key.0, a.seen_ms)).collect();
    let kendall_tau_thesis = kendall_tau(&thesis, Ties::CountAsDiscordant);

    let mut endpoints = std::collections::BTreeMap::new();
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0;
    for ep in ENDPOINTS {
        let st = &s.stats[ep as usize];
        let mut l = std::mem::take(
            &mut *st
                .latencies_us
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        l.sort_unstable();
        let e = st.errors.load(Ordering::Relaxed);
        errors += e;
        endpoints.insert(
            ep.name(),
            EndpointReport {
                requests: l.len() as u64,
                errors: e,
                p50_ms: percentile(&l, 0.50),
                p90_ms: percentile(&l, 0.90),
                p99_ms: percentile(&l, 0.99),
                max_ms: l.last().map_or(0.0, |&m| f64::from(m) / 1000.0),
            },
        );
        all.extend(l);
    }
    all.sort_unstable();
    let requests = all.len() as u64;
    let r = Report {
        users: args.users,
        concurrency: args.concurrency,
        joined,
        not_joined: s.not_joined.load(Ordering::Relaxed),
        admitted,
        lost: joined.saturating_sub(admitted),
        errors,
        leave_failed: s.leave_failed.load(Ordering::Relaxed),
        readmissions: s.readmissions.load(Ordering::Relaxed),
        pass_lost: s.pass_lost.load(Ordering::Relaxed),
        max_on_site: max_on_site(&s.passes.lock().unwrap_or_else(PoisonError::into_inner)),
        verified: s.verified.load(Ordering::Relaxed),
        verify_expired: s.verify_expired.load(Ordering::Relaxed),
        verify_failed: s.verify_failed.load(Ordering::Relaxed),
        requests,
        duration_s: round3(elapsed),
        admitted_per_s: round3(admitted as f64 / elapsed),
        requests_per_s: round3(requests as f64 / elapsed),
        p50_ms: percentile(&all, 0.50),
        p99_ms: percentile(&all, 0.99),
        kendall_tau: tau_seen,
        kendall_tau_eviction,
        kendall_tau_thesis,
        endpoints,
        error_reasons: std::mem::take(
            &mut *s
                .error_reasons
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        ),
    };
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_text(&r);
    }
    Ok(())
}

fn print_text(r: &Report) {
    println!(
        "visitors: {} joined of {} ({} at once); admitted {} = {:.1}/s over {:.1} s; lost {}; not joined {}",
        r.joined,
        r.users,
        r.concurrency,
        r.admitted,
        r.admitted_per_s,
        r.duration_s,
        r.lost,
        r.not_joined
    );
    println!(
        "passes: {} verified, {} already expired (401 expected with pass expiry 0), {} failed; leaves failed {}, passes lost (409 already_left) {}",
        r.verified, r.verify_expired, r.verify_failed, r.leave_failed, r.pass_lost
    );
    println!(
        "most visitors on the site at once (passes valid at one instant): {}",
        r.max_on_site
    );
    println!(
        "requests: {} ({:.0}/s), errors {}; latency p50 {:.2} ms, p99 {:.2} ms",
        r.requests, r.requests_per_s, r.errors, r.p50_ms, r.p99_ms
    );
    if !r.error_reasons.is_empty() {
        let reasons: Vec<String> = r
            .error_reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        println!("errors by reason: {}", reasons.join(", "));
    }
    if r.readmissions > 0 {
        println!(
            "leaves answered not_admitted after an admission (visitor checked in again): {}",
            r.readmissions
        );
    }
    for (name, e) in &r.endpoints {
        println!(
            "  {name:<8} {:>8} requests, {:>5} errors; p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>8.2} ms",
            e.requests, e.errors, e.p50_ms, e.p90_ms, e.p99_ms, e.max_ms
        );
    }
    println!(
        "fairness (normalised Kendall-Tau vs join order): client-seen admission order {:.6}; cluster eviction time {:.6}; thesis' (ties count) {:.6}",
        r.kendall_tau, r.kendall_tau_eviction, r.kendall_tau_thesis
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_on_site_counts_overlaps() {
        assert_eq!(max_on_site(&[]), 0);
        assert_eq!(max_on_site(&[(0, 10), (5, 15), (10, 20)]), 2);
        assert_eq!(max_on_site(&[(0, 10), (1, 9), (2, 8)]), 3);
        // Born expired (pass expiry 0): never on the site.
        assert_eq!(max_on_site(&[(5, 5), (6, 6)]), 0);
    }
}
