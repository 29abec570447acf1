//! `waitingroom-node load`: real visitors over HTTP, as many as asked, against a cluster.
//!
//! Each visitor joins, checks in whenever the answer says (`refresh_after_ms`), leaves once a
//! check-in says "admitted", and has its pass verified (`GET /api/pass/verify`). At most
//! `--concurrency` visitors are active at once (joined and not finished); each has at most one
//! request in flight, so in-flight requests are bounded by the concurrency too. A visitor is one
//! small tokio task (an async state machine, a few hundred bytes), not a thread; every request
//! takes a keep-alive connection from one shared pool (`client`: hyper's HTTP/1, plain or TLS)
//! and carries the visitor's affinity cookie once the balancer has set one (`affinity`).
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
//! - `retried_later`: requests answered 503 with `Retry-After` and a "retry later" code
//!   (`owner_unavailable`: the node holding the ticket is a member but not answering;
//!   `overloaded`: a node shedding load), asked again after a growing back-off (from the
//!   `Retry-After`, doubled, at most 5 s, plus up to a quarter at random). The room keeps the
//!   visitor's place, so these are not errors (and a leave's retries are not counted against
//!   its attempts);
//! - `max_on_site`: the most passes valid at one instant (from when each pass was handed out,
//!   its `issued_at`, to its `expires_at`): visitors on the site at once, to compare with
//!   `target_on_site` (a pass's `created_at` is its admission, before the pass existed);
//! - latency per endpoint from sending a request to reading its whole answer;
//! - `kendall_tau`: the normalised Kendall-Tau distance between the join order (the first
//!   ticket's join time, then ticket id: the queue's own order) and the order in which these
//!   clients *saw* "admitted" (no ties). It includes the client's own phase: two visitors let
//!   out in the same round see it at their next check-in, up to one refresh interval apart;
//! - `kendall_tau_eviction`: the same join order against the time the cluster let each visitor
//!   out (`eviction_time` in the admitted ticket), pairs with equal eviction times not counted
//!   (a round admits many at once): the cluster's own fairness, free of client phase;
//! - `kendall_tau_arrival`: the order in which the joins were answered, on this client's
//!   clock, against the eviction times (ties in either not counted): unlike the two above,
//!   which take the join times the nodes stamped, it shows nodes whose clocks disagree
//!   reordering visitors (`scripts/clock-skew-test.sh`);
//! - `kendall_tau_thesis`: the thesis' figure, (join ms, client-seen admission ms) with a tie
//!   in either counted as a disagreement.
//!
//! - with visitors who play the rules (`--banked`, `--refresh-elsewhere`, `--replay-leave`,
//!   `--abandon`, `--come-back`: `roles.rs`) or `--origin`: `double_passes` (visitors
//!   handed two different passes for one admission), `origin_accepted`/`origin_refused` (passes
//!   the origin's gate let through or sent to the room), `abandoned` (not lost), `came_back`;
//!   `lapsed` (banked visitors refused once the admission they held on to lapsed unclaimed,
//!   who joined again: refused as they must be); and for every run `rejoined`: visitors whose
//!   ticket was refused (401) while they kept checking in, who joined again as the waiting
//!   page does (each also said on stderr).
//!
//! Every request that fails is asked again after a back-off, as the waiting page does: from
//! the `Retry-After` of a 503 or 429, else from 200 ms; doubled each time up to 5 s, with up to
//! a quarter more at random; within half of what is left of the ticket's life, but never less
//! than 200 ms.
//!
//! Bounded: `--max-seconds` of wall time and `--max-requests` requests in total; when either
//! is reached every visitor stops and the unadmitted ones count as lost.

mod adversary;
mod affinity;
mod args;
mod client;
mod report;
mod roles;
mod shared;
mod visit;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub use args::LoadArgs;
use shared::{Shared, get};

/// Runs the load: sets up, starts the visitors, waits for them, reports.
pub async fn run(args: LoadArgs) -> anyhow::Result<()> {
    let shared = Arc::new(Shared::new(&args)?);
    let progress = (args.progress_s > 0).then(|| progress(shared.clone(), &args));
    start_visitors(&shared, &args).await?;
    let elapsed_s = shared.start.elapsed().as_secs_f64();
    if let Some(p) = progress {
        p.abort();
    }
    if let (Some(path), Some(tokens)) = (&args.save_passes, &shared.pass_tokens) {
        let tokens = tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut text = tokens.join("\n");
        text.push('\n');
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("--save-passes {}: {e}", path.display()))?;
    }
    let r = report::report(&args, &shared, elapsed_s);
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        report::print_text(&r);
    }
    Ok(())
}

/// Starts visitors as places free up, at most `--concurrency` active at once (the first ones
/// spread over the ramp-up), until all have started or the run ends; waits for them all.
async fn start_visitors(shared: &Arc<Shared>, args: &LoadArgs) -> anyhow::Result<()> {
    let places = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.users {
        if args.ramp_up_ms > 0 && i < args.concurrency as u64 {
            let at = Duration::from_millis(args.ramp_up_ms * i / args.concurrency as u64);
            tokio::time::sleep_until((shared.start + at).into()).await;
        }
        let permit = places.clone().acquire_owned().await?;
        if shared.out_of_budget() {
            break;
        }
        let s = shared.clone();
        tasks.spawn(async move {
            visit::visitor(s).await;
            drop(permit);
        });
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// A progress line on stderr every `--progress-s` seconds, until aborted.
fn progress(s: Arc<Shared>, args: &LoadArgs) -> JoinHandle<()> {
    let every = Duration::from_secs(args.progress_s);
    let users = args.users;
    tokio::spawn(async move {
        let mut last_admitted = 0u64;
        loop {
            tokio::time::sleep(every).await;
            let admitted = s
                .admissions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .len() as u64;
            let errors: u64 = s.stats.iter().map(|e| get(&e.errors)).sum();
            eprintln!(
                "load: {:>6.1} s  joined {}/{}  active {}  admitted {} (+{:.0}/s)  errors {}  requests {}",
                s.start.elapsed().as_secs_f64(),
                get(&s.counters.joined),
                users,
                get(&s.counters.active),
                admitted,
                (admitted - last_admitted) as f64 / every.as_secs_f64(),
                errors,
                get(&s.requests),
            );
            last_admitted = admitted;
        }
    })
}
