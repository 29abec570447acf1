//! Swarm testing: every seed draws its own random mix of everything the simulator can do, runs
//! it with the room's promises checked after every event (`--strict`), and a failing seed is
//! shrunk to the fewest disturbances and behaviours that still break the same promise.
//!
//! Swarm testing (Groce et al., "Swarm Testing", ISSTA 2012) switches a random subset of the
//! features on for each run rather than all of them at once: a fault that needs quiet around it
//! to show (a lone long partition, a banker in an idle room) is not drowned by the others, and
//! over many seeds every combination comes up. The model is TigerBeetle's simulator, the VOPR
//! (`src/vopr.zig` in tigerbeetle/tigerbeetle), whose `Simulator.Options` are drawn per seed in
//! the same way: which faults, how often, how long, and the workload's shape.
//!
//! A seed's mix is an ordinary [`RunConfig`], so the `waitingroom-sim run …` command it prints
//! replays it exactly, and shrinking drops one option or one scripted event at a time.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use waitingroom_core::Time;
use waitingroom_distributed::{AdmissionMode, Mode, QueueingMethod};

use crate::config::{
    Arrival, Disturbance, Latency, Operated, OperatorAction, PartitionKind, RunConfig, Scripted,
    Target,
};
use crate::seeds::{self, Stream};
use crate::sim;
use crate::sweep;

/// One seed's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// The checks it failed (empty: passed).
    pub failed: Vec<String>,
    /// What failed, in words, with the first samples.
    pub detail: Vec<String>,
    /// The command that replays it.
    pub command: String,
    /// Simulated events.
    pub events: u64,
}

/// The mix of seed `seed`: a configuration with a random subset of the simulator's faults,
/// operator actions and visitor behaviours switched on, with random parameters.
pub fn draw(seed: u64) -> RunConfig {
    let mut rng = seeds::rng(seed, Stream::Swarm);
    let mut cfg = RunConfig {
        seed,
        ..RunConfig::default()
    };
    cfg.checks.strict = true;
    draw_workload(&mut cfg, &mut rng);
    draw_network(&mut cfg, &mut rng);
    draw_protocol(&mut cfg, &mut rng);
    draw_faults(&mut cfg, &mut rng);
    draw_behaviours(&mut cfg, &mut rng);
    draw_operator(&mut cfg, &mut rng);
    fit_users(&mut cfg);
    cfg
}

/// Fewer visitors where the room lets them through slowly (a small target, long stays, a low
/// rate cap), so that every seed can drain in a few simulated minutes; and time enough for
/// the longest partition and freeze.
fn fit_users(cfg: &mut RunConfig) {
    let p = &cfg.protocol;
    let stay = p.pass_expiry_ms.max(cfg.workload.session_ms) + p.eviction_interval_ms;
    let budget = cfg.workload.window_ms + 30_000;
    let mut most = match p.target_on_site {
        Target::Limited(n) => n * budget / stay / 2,
        Target::Unlimited => u64::MAX,
    };
    if let Some(rate) = p.new_users_per_minute {
        most = most.min(rate * budget / 60_000 / 2);
    }
    cfg.workload.users = cfg.workload.users.min(most.max(5));
    cfg.checks.max_time_ms = 3 * cfg.workload.window_ms + 180_000 + drain_ms(cfg);
}

/// How long the room needs at least to let everyone through at the lowest target and rate
/// cap the operator sets: an admission holds its place to the end of its claim window
/// (the pass lasts that long, whenever the leave is served) or for the stay on the site, so a
/// room whose operator lowers the target to a few places is slow, not stalled.
fn drain_ms(cfg: &RunConfig) -> Time {
    let p = &cfg.protocol;
    let held = (p.ticket_expiry_ms)
        .max(p.pass_expiry_ms + cfg.workload.session_ms)
        .saturating_add(p.eviction_interval_ms);
    let ops = cfg.operator.operator.iter().map(|o| o.what);
    let target = (ops.clone())
        .filter_map(|op| match op {
            OperatorAction::Target(n) => Some(n),
            _ => None,
        })
        .chain(match p.target_on_site {
            Target::Limited(n) => Some(n),
            Target::Unlimited => None,
        })
        .min();
    let rate = (ops.filter_map(|op| match op {
        OperatorAction::Rate(r) => r,
        _ => None,
    }))
    .chain(p.new_users_per_minute)
    .min();
    let users = cfg.workload.users;
    let by_target = target.map_or(0, |n| users.saturating_mul(held) / n.max(1));
    let by_rate = rate.map_or(0, |r| users.saturating_mul(60_000) / r.max(1));
    by_target.max(by_rate)
}

/// A time within the arrival window (and a little after it).
fn when(cfg: &RunConfig, rng: &mut ChaCha8Rng) -> Time {
    rng.random_range(0..cfg.workload.window_ms + cfg.workload.window_ms / 4)
}

fn draw_workload(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let w = &mut cfg.workload;
    cfg.nodes = *pick(rng, &[1, 2, 3, 3, 4, 5, 6, 8, 12]);
    w.users = rng.random_range(30..=600);
    w.window_ms = rng.random_range(3_000..=20_000);
    w.arrival = *pick(rng, &Arrival::ALL);
    w.jitter_ms = *pick(rng, &[0, 0, 50, 300]);
    if rng.random_bool(0.3) {
        w.abandon_probability = rng.random_range(0.02..0.3);
        w.patience_ms = rng.random_range(1_000..=20_000);
    }
    if rng.random_bool(0.5) {
        w.session_ms = rng.random_range(1_000..=15_000);
    }
}

fn draw_protocol(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let wan = matches!(
        cfg.network.latency,
        Latency::Uniform { max, .. } | Latency::Pareto { max, .. } if max > 50
    );
    let p = &mut cfg.protocol;
    p.target_on_site = if rng.random_bool(0.1) {
        Target::Unlimited
    } else {
        Target::Limited(*pick(rng, &[1, 3, 5, 10, 20, 40, 80, 100]))
    };
    p.eviction_interval_ms = *pick(rng, &[250, 500, 1_000]);
    if wan {
        // A round takes a few round trips: on a WAN, rounds a quarter of a second apart are
        // lost one after the other and the room stalls (an open finding; the operator's guide
        // sets rounds a second apart).
        p.eviction_interval_ms = 1_000;
    }
    p.refresh_interval_ms = rng.random_range(300..=1_000);
    p.ticket_expiry_ms = rng.random_range(4_000..=12_000);
    p.pass_expiry_ms = rng.random_range(1_000..=8_000);
    p.admit_straight_through = rng.random_bool(0.5);
    if rng.random_bool(0.2) {
        p.new_users_per_minute = Some(rng.random_range(60..=3_000));
    }
    if rng.random_bool(0.15) {
        p.queueing_method = QueueingMethod::Random;
    }
    // The deleteMin modes run only while nothing limits admission.
    if p.target_on_site == Target::Unlimited && p.new_users_per_minute.is_none() {
        p.admission = *pick(rng, &AdmissionMode::ALL);
    }
}

fn draw_network(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let n = &mut cfg.network;
    n.latency = *pick(
        rng,
        &[
            Latency::Fixed(1),
            Latency::Uniform { min: 1, max: 5 },
            Latency::Uniform { min: 10, max: 20 },
            Latency::Uniform { min: 50, max: 150 },
            Latency::Pareto {
                min: 20,
                alpha: 1.5,
                max: 400,
            },
        ],
    );
    if rng.random_bool(0.4) {
        n.loss_probability = rng.random_range(0.0..0.05);
    }
    if rng.random_bool(0.3) {
        n.duplicate_probability = rng.random_range(0.0..0.05);
    }
    if rng.random_bool(0.3) {
        n.reorder_probability = rng.random_range(0.0..0.1);
        n.reorder_ms = rng.random_range(10..=200);
    }
    n.refused_connections = rng.random_bool(0.5);
}

fn draw_faults(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let on = |rng: &mut ChaCha8Rng| rng.random_bool(0.35);
    let f = &mut cfg.faults;
    // Outages of the whole room (a restart of every node, the only node frozen) stay shorter
    // than a ticket's life: a longer one loses the visitors by design, not by a fault.
    let outage = cfg.protocol.ticket_expiry_ms / 2;
    f.restart_delay_ms = rng.random_range(500..=outage);
    f.partition_ms = *pick(rng, &[300, 2_000, 5_000, 15_000, 45_000]);
    f.partition_kind = *pick(rng, &PartitionKind::ALL);
    f.freeze_ms = rng.random_range(300..=outage);
    // A step larger than a ticket's or a pass's life ages them all past it at once: the
    // visitors lose their places and the site its count by design, so steps stay below that.
    let step = (cfg.protocol.ticket_expiry_ms / 4).min(cfg.protocol.pass_expiry_ms / 2);
    f.clock_step_ms = rng.random_range(50..=step.max(50));
    if on(rng) {
        f.churn = rng.random_range(1..=2);
    }
    if on(rng) {
        f.restarts = rng.random_range(1..=2);
    }
    if on(rng) {
        f.partitions = rng.random_range(1..=2);
    }
    if on(rng) {
        f.clock_skew_ms = rng.random_range(10..=2_000);
    }
    let scripted = [
        Disturbance::Freeze,
        Disturbance::RestartAll,
        Disturbance::ClockStep,
        Disturbance::Remove,
        Disturbance::CrashRoot,
        Disturbance::Add,
    ];
    for what in scripted {
        if rng.random_bool(if what == Disturbance::RestartAll {
            0.1
        } else {
            0.25
        }) {
            for _ in 0..rng.random_range(1..=2) {
                let at = when(cfg, rng);
                cfg.faults.script.push(Scripted { at, what });
            }
        }
    }
}

fn draw_behaviours(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let share = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.3) {
            rng.random_range(0.02..0.3)
        } else {
            0.0
        }
    };
    let b = &mut cfg.behaviours;
    b.bankers = share(rng);
    b.bank_ms = rng.random_range(1_000..=30_000);
    b.replayers = share(rng);
    b.wanderers = share(rng);
    b.away_ms = rng.random_range(200..=cfg.protocol.ticket_expiry_ms / 2);
    b.roamers = share(rng);
    b.releasers = share(rng);
    if (b.roamers > 0.0 || b.releasers > 0.0) && cfg.workload.session_ms == 0 {
        // Only visitors with a session keep their pass to refresh or give back.
        cfg.workload.session_ms = rng.random_range(1_000..=15_000);
    }
}

fn draw_operator(cfg: &mut RunConfig, rng: &mut ChaCha8Rng) {
    let window = cfg.workload.window_ms;
    let mut ops = Vec::new();
    // The deleteMin modes run only while nothing limits admission: no target, no rate cap.
    let limits = cfg.protocol.admission == AdmissionMode::Range;
    if limits && rng.random_bool(0.3) {
        for _ in 0..rng.random_range(1..=3) {
            ops.push((
                when(cfg, rng),
                OperatorAction::Target(rng.random_range(1..=120)),
            ));
        }
    }
    if limits && rng.random_bool(0.2) {
        let rate = (!rng.random_bool(0.3)).then(|| rng.random_range(60..=3_000));
        ops.push((when(cfg, rng), OperatorAction::Rate(rate)));
    }
    if rng.random_bool(0.25) {
        // A mode for a while, then back to normal within the window.
        let mode = *pick(rng, &[Mode::QueueAll, Mode::Passthrough, Mode::Reject]);
        let at = rng.random_range(0..window / 2);
        let back = at + rng.random_range(500..=window / 2);
        ops.push((at, OperatorAction::Mode(mode)));
        ops.push((back, OperatorAction::Mode(Mode::Normal)));
    }
    if rng.random_bool(0.15) {
        let at = when(cfg, rng);
        ops.push((at, OperatorAction::Lottery(true)));
        if rng.random_bool(0.5) {
            ops.push((
                at + rng.random_range(500..=10_000),
                OperatorAction::Lottery(false),
            ));
        }
    }
    if rng.random_bool(0.15) {
        let event = OperatorAction::Event {
            prequeue_ms: rng.random_range(0..=window / 3),
            duration_ms: rng.random_range(1_000..=window),
            shuffle: rng.random_bool(0.5),
        };
        ops.push((rng.random_range(0..window / 2), event));
    }
    if rng.random_bool(0.2) {
        for _ in 0..rng.random_range(1..=3) {
            ops.push((when(cfg, rng), OperatorAction::Bypass));
        }
    }
    ops.sort_by_key(|o| o.0);
    cfg.operator.operator = ops
        .into_iter()
        .map(|(at, what)| Operated { at, what })
        .collect();
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, from: &'a [T]) -> &'a T {
    &from[rng.random_range(0..from.len())]
}

/// Whether the run may lose the majority of its voters for good: as many nodes leave for good
/// (crashes, clean removals) as stay. The protocol then stops letting anyone out until an
/// operator resets the voters (waitingroom-distributed/README.md#admission-leases), by
/// design: a stall of such a run is no failure.
fn majority_at_risk(cfg: &RunConfig) -> bool {
    let scripted = (cfg.faults.script.iter())
        .filter(|s| matches!(s.what, Disturbance::Remove | Disturbance::CrashRoot))
        .count() as u32;
    2 * (cfg.faults.churn + scripted) >= cfg.nodes
}

/// Runs one configuration; a panic in the simulator or a node is a failure too. A stall where
/// the majority may be gone for good ([`majority_at_risk`]) is not.
pub fn check(cfg: &RunConfig) -> SeedResult {
    let mut result = run_checked(cfg);
    if majority_at_risk(cfg) {
        result.failed.retain(|f| f != "timed-out" && f != "lost");
        if result.failed.is_empty() {
            result.detail.clear();
        }
    }
    result
}

fn run_checked(cfg: &RunConfig) -> SeedResult {
    let outcome = catch_unwind(AssertUnwindSafe(|| sim::run(cfg)));
    match outcome {
        Ok(report) => {
            let mut detail = report.failures();
            if !detail.is_empty() {
                detail.extend(report.violation_samples.iter().take(3).cloned());
            }
            SeedResult {
                seed: cfg.seed,
                failed: report.failed_checks(),
                detail,
                command: report.command,
                events: report.events,
            }
        }
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            SeedResult {
                seed: cfg.seed,
                failed: vec!["panic".into()],
                detail: vec![format!("panicked: {text}")],
                command: cfg.to_command(),
                events: 0,
            }
        }
    }
}

/// The ways to make a configuration simpler: each drops one scripted disturbance, one
/// operator action, or switches one fault, network trouble or behaviour off.
fn simpler(cfg: &RunConfig) -> Vec<RunConfig> {
    let mut out = Vec::new();
    for i in 0..cfg.faults.script.len() {
        let mut c = cfg.clone();
        c.faults.script.remove(i);
        out.push(c);
    }
    let ops = &cfg.operator.operator;
    for i in 0..ops.len() {
        let mut c = cfg.clone();
        match ops[i].what {
            // A mode goes with the return to normal after it: dropped together, and never
            // the return alone (a room left in queue_all lets nobody out, by design).
            OperatorAction::Mode(Mode::Normal) => continue,
            OperatorAction::Mode(_) => {
                let back =
                    (i + 1..ops.len()).find(|&j| ops[j].what == OperatorAction::Mode(Mode::Normal));
                if let Some(j) = back {
                    c.operator.operator.remove(j);
                }
            }
            _ => {}
        }
        c.operator.operator.remove(i);
        out.push(c);
    }
    let default = RunConfig::default();
    let knobs: [fn(&mut RunConfig, &RunConfig); 18] = [
        |c, d| c.faults.churn = d.faults.churn,
        |c, d| c.faults.restarts = d.faults.restarts,
        |c, d| c.faults.partitions = d.faults.partitions,
        |c, d| c.faults.clock_skew_ms = d.faults.clock_skew_ms,
        |c, d| c.network.loss_probability = d.network.loss_probability,
        |c, d| c.network.duplicate_probability = d.network.duplicate_probability,
        |c, d| c.network.reorder_probability = d.network.reorder_probability,
        |c, d| c.network.refused_connections = d.network.refused_connections,
        |c, d| c.behaviours.bankers = d.behaviours.bankers,
        |c, d| c.behaviours.roamers = d.behaviours.roamers,
        |c, d| c.behaviours.replayers = d.behaviours.replayers,
        |c, d| c.behaviours.releasers = d.behaviours.releasers,
        |c, d| c.behaviours.wanderers = d.behaviours.wanderers,
        |c, d| c.workload.abandon_probability = d.workload.abandon_probability,
        |c, d| c.workload.jitter_ms = d.workload.jitter_ms,
        |c, d| c.protocol.new_users_per_minute = d.protocol.new_users_per_minute,
        |c, d| c.protocol.queueing_method = d.protocol.queueing_method,
        |c, d| c.protocol.admit_straight_through = d.protocol.admit_straight_through,
    ];
    for knob in knobs {
        let mut c = cfg.clone();
        knob(&mut c, &default);
        if c != *cfg {
            out.push(c);
        }
    }
    out
}

/// Shrinks a configuration that fails `check`: drops what it can, one thing at a time, while
/// the run still fails that check. Returns the smallest configuration found and the runs it
/// took.
pub fn shrink(cfg: &RunConfig, check_name: &str) -> (RunConfig, u32) {
    let mut best = cfg.clone();
    let mut runs = 0;
    loop {
        let mut smaller = None;
        for candidate in simpler(&best) {
            runs += 1;
            if self::check(&candidate)
                .failed
                .iter()
                .any(|f| f == check_name)
            {
                smaller = Some(candidate);
                break;
            }
        }
        match smaller {
            Some(c) => best = c,
            None => return (best, runs),
        }
    }
}

/// What a swarm run found.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that failed.
    pub failures: u64,
    /// Which, in order.
    pub failing_seeds: Vec<u64>,
    /// Failing seeds by check (a seed may fail several).
    pub by_check: BTreeMap<String, u64>,
    /// Wall time.
    pub wall_s: f64,
    /// Seeds per second of wall time.
    pub seeds_per_s: f64,
    /// Simulated events per seed, on average.
    pub events_per_seed: f64,
    /// The first failing seeds of each check, shrunk: seed, check, the command that replays
    /// the smallest configuration that still fails it.
    pub shrunk: Vec<(u64, String, String)>,
}

/// Runs seeds `start .. start + seeds`, `jobs` at a time, and shrinks the first `shrink_first`
/// failing seeds of each check. Returns the summary and every failing seed's result.
pub fn run(start: u64, seeds: u64, jobs: usize, shrink_first: usize) -> (Summary, Vec<SeedResult>) {
    let began = Instant::now();
    let results = sweep::run_each(seeds as usize, jobs, true, |i| {
        check(&draw(start.wrapping_add(i as u64)))
    });
    let wall = began.elapsed().as_secs_f64();
    let events: u64 = results.iter().map(|r| r.events).sum();
    let failing: Vec<SeedResult> = results
        .into_iter()
        .filter(|r| !r.failed.is_empty())
        .collect();
    let mut by_check = BTreeMap::new();
    for r in &failing {
        for f in &r.failed {
            *by_check.entry(f.clone()).or_insert(0) += 1;
        }
    }
    // The first failing seeds of each check, shrunk for that check.
    let shrunk = by_check
        .keys()
        .flat_map(|check| {
            (failing.iter())
                .filter(move |r| r.failed.contains(check))
                .take(shrink_first)
                .map(move |r| (r.seed, check))
        })
        .map(|(seed, check)| {
            let (small, _) = shrink(&draw(seed), check);
            (seed, check.clone(), small.to_command())
        })
        .collect();
    let summary = Summary {
        seeds,
        failures: failing.len() as u64,
        failing_seeds: failing.iter().map(|r| r.seed).collect(),
        by_check,
        wall_s: wall,
        seeds_per_s: seeds as f64 / wall.max(1e-9),
        events_per_seed: events as f64 / seeds.max(1) as f64,
        shrunk,
    };
    (summary, failing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_mix_every_time_and_it_replays() {
        let a = draw(42);
        assert_eq!(a, draw(42));
        assert_ne!(a, draw(43));
        a.validate().unwrap();
        let words: Vec<String> = a
            .to_command()
            .split_whitespace()
            .skip(2)
            .map(str::to_owned)
            .collect();
        assert_eq!(RunConfig::from_flags(words).unwrap(), a);
    }

    #[test]
    fn every_mix_is_valid_and_the_features_all_come_up() {
        let mixes: Vec<RunConfig> = (0..300).map(draw).collect();
        for m in &mixes {
            m.validate().unwrap();
        }
        let some = |f: &dyn Fn(&RunConfig) -> bool| mixes.iter().any(f);
        assert!(some(&|m| m
            .faults
            .script
            .iter()
            .any(|s| s.what == Disturbance::Freeze)));
        assert!(some(&|m| m
            .faults
            .script
            .iter()
            .any(|s| s.what == Disturbance::RestartAll)));
        assert!(some(
            &|m| m.behaviours.bankers > 0.0 && m.behaviours.releasers > 0.0
        ));
        assert!(some(&|m| m
            .operator
            .operator
            .iter()
            .any(|o| o.what == OperatorAction::Bypass)));
        assert!(some(
            &|m| m.faults.partitions > 0 && m.network.loss_probability > 0.0
        ));
    }

    #[test]
    fn a_room_the_operator_narrows_is_given_the_time_to_drain() {
        // 386 visitors, then target 17 with admissions holding their places for a claim
        // window of 9 s: the room needs more than three minutes, and is slow, not stalled.
        let cfg = draw(617);
        assert!(
            cfg.operator
                .operator
                .iter()
                .any(|o| o.what == OperatorAction::Target(17))
        );
        passes(&cfg);
    }

    #[test]
    fn a_whole_cluster_restart_joins_the_nodes_already_back() {
        // Two nodes whose own restarts came due during a whole-cluster restart serve again
        // when the rest come back: the first of those must join them, not found a cluster of
        // its own whose founder admits a visitor the others admit too.
        let cfg = draw(557);
        assert!(
            cfg.faults
                .script
                .iter()
                .any(|s| s.what == Disturbance::RestartAll)
        );
        passes(&cfg);
    }

    /// The run passes every check.
    fn passes(cfg: &RunConfig) {
        let r = check(cfg);
        assert!(r.failed.is_empty(), "{:?} {:?}", r.failed, r.detail);
    }

    #[test]
    fn an_operator_change_lost_with_its_node_is_made_again() {
        // The room is switched to queue-all, then back to normal at the root, which crashes
        // before any round carried the change: unconfirmed, the operator makes it again.
        let flags = "--seed 948 --nodes 5 --users 19 --window-ms 8131 --latency 1 --churn 0 \
            --script crash-root@6727 --bank-ms 18101 --replayers 0.22255369571208514 \
            --away-ms 2761 --target-on-site 5 --refresh-interval-ms 999 \
            --ticket-expiry-ms 11881 --pass-expiry-ms 3977 \
            --operator event=324:1589:shuffle@3046 --operator mode=queue_all@3942 \
            --operator mode=normal@6462 --max-time-ms 204393 --strict";
        passes(&RunConfig::from_flags(flags.split_whitespace()).unwrap());
    }

    #[test]
    fn a_banker_refused_after_their_claim_window_closed_gave_it_up() {
        // Bankers learn of their admission a check-in after it was made, so banking 5.2 s of
        // a 5.5-s claim window takes some of them past its close: the room refuses their
        // pass, as it should, and they lost nothing they kept.
        let flags = "--seed 162 --nodes 5 --users 393 --arrival flash --window-ms 13051 \
            --session-ms 14539 --churn 0 --bankers 0.2649411074575596 --bank-ms 5230 \
            --target-on-site unlimited --refresh-interval-ms 304 --ticket-expiry-ms 5520 \
            --pass-expiry-ms 4175 --eviction-interval-ms 250 --max-time-ms 219153 --strict";
        passes(&RunConfig::from_flags(flags.split_whitespace()).unwrap());
    }

    #[test]
    fn a_banker_the_cluster_cannot_answer_goes_on_banking() {
        // The whole cluster restarts while bankers keep their admissions: unanswered, they
        // bank on (they never rejoined the line), and when their claim window closed meanwhile
        // the refusal that follows is their own choice.
        let flags = "--seed 653 --nodes 6 --users 135 --window-ms 9774 --churn 0 \
            --restart-delay-ms 1742 --script restart-all@11455 \
            --bankers 0.044379318481178764 --bank-ms 20387 --target-on-site 20 \
            --refresh-interval-ms 895 --ticket-expiry-ms 8985 --pass-expiry-ms 2685 \
            --eviction-interval-ms 250 --operator target=68@2862 --max-time-ms 271658 --strict";
        passes(&RunConfig::from_flags(flags.split_whitespace()).unwrap());
    }

    #[test]
    fn a_pass_within_the_claim_window_by_the_clock_that_checks_it_is_no_lapse() {
        // A node's clock steps back after it admitted a banker: the pass it hands out just
        // before its own clock reaches the window's close comes after it in true time.
        let flags = "--seed 929 --nodes 3 --users 367 --arrival poisson --window-ms 14016 \
            --churn 0 --script clock-step@8385 --clock-step-ms 117 \
            --bankers 0.2860626674967178 --bank-ms 6328 --target-on-site unlimited \
            --refresh-interval-ms 965 --ticket-expiry-ms 7583 --pass-expiry-ms 5738 \
            --eviction-interval-ms 250 --max-time-ms 244002 --strict";
        passes(&RunConfig::from_flags(flags.split_whitespace()).unwrap());
    }

    #[test]
    fn shrinking_keeps_the_failure_and_drops_the_rest() {
        // A run cut off long before its visitors are through fails `timed-out` whatever
        // else goes on; the disturbances and the lossy network around it are not needed.
        let cfg = RunConfig::from_flags([
            "--users",
            "100",
            "--nodes",
            "3",
            "--window-ms",
            "3000",
            "--max-time-ms",
            "500",
            "--script",
            "add@100",
            "--script",
            "freeze@200",
            "--loss",
            "0.01",
            "--strict",
            "--operator",
            "target=5@300",
        ])
        .unwrap();
        assert_eq!(check(&cfg).failed, vec!["timed-out"]);
        let (small, runs) = shrink(&cfg, "timed-out");
        assert!(runs >= 4, "{runs}");
        assert!(small.faults.script.is_empty(), "{}", small.to_command());
        assert!(small.operator.operator.is_empty(), "{}", small.to_command());
        assert_eq!(small.network.loss_probability, 0.0);
        assert_eq!(check(&small).failed, vec!["timed-out"]);
    }
}
