//! The load run's report: what was measured, as one JSON object or as text (the fields are
//! explained at the top of [`super`]).

use std::collections::BTreeMap;

use serde::Serialize;
use waitingroom_core::{Ties, kendall_tau, kendall_tau_permutation};

use super::args::LoadArgs;
use super::shared::{Admission, Endpoint, JoinKey, Shared, get, take};
use crate::latency::{max_ms, percentile_ms};

#[derive(Debug, Serialize)]
pub(super) struct EndpointReport {
    requests: u64,
    errors: u64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
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
    retried_later: u64,
    rejoined: u64,
    lapsed: u64,
    abandoned: u64,
    came_back: u64,
    double_passes: u64,
    origin_accepted: u64,
    origin_refused: u64,
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
    kendall_tau_arrival: f64,
    kendall_tau_thesis: f64,
    endpoints: BTreeMap<&'static str, EndpointReport>,
    error_reasons: BTreeMap<String, u64>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The report of a run that took `elapsed_s`, from everything the visitors recorded.
pub(super) fn report(args: &LoadArgs, s: &Shared, elapsed_s: f64) -> Report {
    let admissions = take(&s.admissions);
    let (kendall_tau, kendall_tau_eviction, kendall_tau_thesis) = fairness(&admissions);
    let kendall_tau_arrival = arrival_fairness(&admissions);
    let (endpoints, all, errors) = endpoint_reports(s);
    let c = &s.counters;
    let joined = get(&c.joined);
    let admitted = admissions.len() as u64;
    let requests = all.len() as u64;
    Report {
        users: args.users,
        concurrency: args.concurrency,
        joined,
        not_joined: get(&c.not_joined),
        admitted,
        lost: joined.saturating_sub(admitted + get(&c.abandoned)),
        errors,
        leave_failed: get(&c.leave_failed),
        readmissions: get(&c.readmissions),
        pass_lost: get(&c.pass_lost),
        retried_later: get(&c.retried_later),
        rejoined: get(&c.rejoined),
        lapsed: get(&c.lapsed),
        abandoned: get(&c.abandoned),
        came_back: get(&c.came_back),
        double_passes: get(&c.double_passes),
        origin_accepted: get(&c.origin_accepted),
        origin_refused: get(&c.origin_refused),
        max_on_site: max_on_site(&take(&s.passes)),
        verified: get(&c.verified),
        verify_expired: get(&c.verify_expired),
        verify_failed: get(&c.verify_failed),
        requests,
        duration_s: round3(elapsed_s),
        admitted_per_s: round3(admitted as f64 / elapsed_s),
        requests_per_s: round3(requests as f64 / elapsed_s),
        p50_ms: percentile_ms(&all, 0.50),
        p99_ms: percentile_ms(&all, 0.99),
        kendall_tau,
        kendall_tau_eviction,
        kendall_tau_arrival,
        kendall_tau_thesis,
        endpoints,
        error_reasons: take(&s.error_reasons),
    }
}

/// Normalised Kendall-Tau distances from the join order: to the order the clients saw
/// "admitted" in, to the cluster's eviction times (equal times not compared), and the
/// thesis' figure (join ms against seen ms, a tie in either counted as a disagreement).
fn fairness(admissions: &[Admission]) -> (f64, f64, f64) {
    let seen_order: Vec<JoinKey> = admissions.iter().map(|a| a.key).collect();
    let by_eviction: Vec<(JoinKey, u64)> = admissions
        .iter()
        .filter_map(|a| Some((a.key, a.eviction_time?)))
        .collect();
    let thesis: Vec<(u64, u64)> = admissions.iter().map(|a| (a.key.0, a.seen_ms)).collect();
    (
        kendall_tau_permutation(&seen_order),
        kendall_tau(&by_eviction, Ties::Ignore),
        kendall_tau(&thesis, Ties::CountAsDiscordant),
    )
}

/// Normalised Kendall-Tau distance between the order in which the client's joins were
/// answered (its own clock: true arrival, whatever the nodes' clocks say) and the cluster's
/// eviction times, pairs equal in either not counted. Unlike the figures above, which take the
/// join times the nodes stamped, this one sees nodes whose clocks disagree reorder visitors.
fn arrival_fairness(admissions: &[Admission]) -> f64 {
    let pairs: Vec<(u64, u64)> = admissions
        .iter()
        .filter_map(|a| Some((a.joined_ms, a.eviction_time?)))
        .collect();
    kendall_tau(&pairs, Ties::Ignore)
}

/// Latency and errors per endpoint; every latency, sorted; the errors in all.
fn endpoint_reports(s: &Shared) -> (BTreeMap<&'static str, EndpointReport>, Vec<u32>, u64) {
    let mut endpoints = BTreeMap::new();
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0;
    for ep in Endpoint::ALL {
        let st = &s.stats[ep as usize];
        let mut l = take(&st.latencies_us);
        if l.is_empty() && ep.optional() {
            continue;
        }
        l.sort_unstable();
        let e = get(&st.errors);
        errors += e;
        endpoints.insert(
            ep.name(),
            EndpointReport {
                requests: l.len() as u64,
                errors: e,
                p50_ms: percentile_ms(&l, 0.50),
                p90_ms: percentile_ms(&l, 0.90),
                p99_ms: percentile_ms(&l, 0.99),
                max_ms: max_ms(&l),
            },
        );
        all.extend(l);
    }
    all.sort_unstable();
    (endpoints, all, errors)
}

/// The most passes valid at one instant: visitors on the site at once, as the passes say
/// (handed out at `issued_at`, valid until `expires_at`, both on the nodes' clocks).
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

/// The report as text lines.
pub(super) fn print_text(r: &Report) {
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
    if r.retried_later > 0 {
        println!(
            "answered \"retry later\" (503 owner_unavailable or overloaded; asked again after a back-off, not errors): {}",
            r.retried_later
        );
    }
    if r.readmissions > 0 {
        println!(
            "leaves answered not_admitted after an admission (visitor checked in again): {}",
            r.readmissions
        );
    }
    if r.rejoined + r.lapsed + r.abandoned + r.came_back + r.double_passes > 0 {
        println!(
            "tickets refused while checking in (joined again) {}; banked admissions lapsed (joined again) {}; abandoned {}; came back {}; handed two different passes {}",
            r.rejoined, r.lapsed, r.abandoned, r.came_back, r.double_passes
        );
    }
    if r.origin_accepted + r.origin_refused > 0 {
        println!(
            "origin: {} passes let through, {} sent to the room",
            r.origin_accepted, r.origin_refused
        );
    }
    for (name, e) in &r.endpoints {
        println!(
            "  {name:<8} {:>8} requests, {:>5} errors; p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>8.2} ms",
            e.requests, e.errors, e.p50_ms, e.p90_ms, e.p99_ms, e.max_ms
        );
    }
    println!(
        "fairness (normalised Kendall-Tau vs join order): client-seen admission order {:.6}; cluster eviction time {:.6}; thesis' (ties count) {:.6}; eviction vs arrival on the client's clock {:.6}",
        r.kendall_tau, r.kendall_tau_eviction, r.kendall_tau_thesis, r.kendall_tau_arrival
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
