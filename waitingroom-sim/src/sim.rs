//! The discrete-event loop and the visitors' behaviour, shared by every strategy.
//!
//! Simulated time jumps from one event to the next. Visitors arrive, check in every refresh
//! interval (a little late, by the jitter), leave the queue at the check-in that says they are
//! admitted, stay on the site while their pass is valid, and may give up. What answers them is
//! a [`Room`] (`crate::room`): the real protocol cluster or one of the baselines.

use std::time::Instant;

use waitingroom_core::Time;
use waitingroom_distributed::QueueingMethod;

use crate::config::{Disturbance, OperatorAction, RunConfig, Strategy};
use crate::metrics::{Admission, RunReport, peak_memory};
use crate::progress::{self, Progress};
use crate::room::{Ctx, Play, Reply, Room};
use crate::scheduler::Ev;
use crate::strategies;
use crate::trace::Trace;
use crate::visitors::{Phase, Visitors};

/// Runs one simulation.
pub fn run(cfg: &RunConfig) -> RunReport {
    run_traced(cfg, Trace::default())
}

/// Runs one simulation, recording its event trace in `trace`.
pub fn run_traced(cfg: &RunConfig, trace: Trace) -> RunReport {
    run_observed(cfg, trace, &mut Progress::off())
}

/// Runs one simulation, recording its event trace in `trace` and showing `progress`.
pub fn run_observed(cfg: &RunConfig, trace: Trace, progress: &mut Progress) -> RunReport {
    let wall = Instant::now();
    let mut ctx = Ctx::new(cfg, trace);
    let mut room = strategies::build(cfg);
    room.start(&mut ctx);
    let ran = event_loop(&mut ctx, room.as_mut(), progress);
    progress.done();
    let mut report = RunReport {
        seed: cfg.seed,
        strategy: cfg.strategy.to_string(),
        admission: match cfg.strategy {
            Strategy::Qpid => cfg.protocol.admission.to_string(),
            _ => "-".into(),
        },
        nodes: cfg.nodes,
        users: cfg.workload.users,
        target: cfg.protocol.target_on_site.to_string(),
        churn: cfg.faults.churn,
        arrival: cfg.workload.arrival.to_string(),
        sim_time_ms: ran.end.saturating_sub(ctx.start),
        timed_out: ran.timed_out,
        events: ran.events,
        command: cfg.to_command(),
        ..RunReport::default()
    };
    room.finish(&mut ctx, &mut report);
    ctx.measure(&mut report);
    if let Some(p) = ctx.promises.as_mut() {
        p.finish(ran.end);
        report.broken_promises = std::mem::take(&mut p.failed);
        report.violation_samples.append(&mut p.samples);
    }
    ctx.trace.note(
        ran.end,
        "end",
        &[report.admitted, report.lost, report.messages, ran.events],
    );
    ctx.trace.flush();
    report.trace_hash = ctx.trace.hex();
    report.wall_ms = wall.elapsed().as_millis() as u64;
    report.peak_memory = peak_memory();
    report
}

/// How the event loop ended.
struct Ran {
    /// When the last event ran (the time limit if it came first).
    end: Time,
    /// Events processed.
    events: u64,
    /// Whether the time limit came before every visitor was done.
    timed_out: bool,
}

/// Processes events in time order until every visitor is done, nothing is left to happen, or
/// the time limit comes.
fn event_loop(ctx: &mut Ctx, room: &mut dyn Room, progress: &mut Progress) -> Ran {
    if !ctx.visitors.is_empty() {
        ctx.sched.at(ctx.visitors.arrival[0], Ev::Arrive(0));
    }
    let limit = ctx.start.saturating_add(ctx.cfg.time_limit());
    let mut ran = Ran {
        end: ctx.start,
        events: 0,
        timed_out: false,
    };
    while ctx.visitors.unfinished > 0 {
        let Some((t, ev)) = ctx.sched.pop() else {
            break;
        };
        if t > limit {
            ctx.now = limit;
            ran.end = limit;
            ran.timed_out = true;
            break;
        }
        ctx.now = t;
        ran.events += 1;
        let [next, after] = ctx.sched.next_visitors();
        if let Some(after) = after {
            prefetch_index::prefetch_index(&ctx.visitors.phase, after as usize);
            room.prefetch(after);
        }
        if let Some(next) = next {
            std::hint::black_box(ctx.visitors.phase[next as usize]);
            room.touch(next);
        }
        if ran.events % progress::EVERY_EVENTS == 0 {
            let users = ctx.cfg.workload.users;
            progress.tick(ran.events, t - ctx.start, ctx.ledger.admitted, users);
        }
        match ev {
            Ev::Arrive(v) => arrive(ctx, room, v),
            Ev::Visitor(v) => visitor_step(ctx, room, v),
            other => room.handle(ctx, other),
        }
        ran.end = ctx.now;
    }
    ran
}

impl Ctx {
    /// Adds what the ledger and the visitors' phases measured to the report.
    fn measure(&self, report: &mut RunReport) {
        let ledger = &self.ledger;
        let interval = self.cfg.protocol.eviction_interval_ms;
        // The baselines have their own orders; only the protocol runs the lottery.
        let method = match self.cfg.strategy {
            Strategy::Qpid => self.cfg.protocol.queueing_method,
            _ => QueueingMethod::Fifo,
        };
        let lottery = method == QueueingMethod::Random;
        let fairness = ledger.fairness(interval);
        report.queueing_method = method.name().to_owned();
        report.kendall_tau_arrival = fairness.strict;
        report.kendall_tau = if lottery {
            ledger.lottery_tau(interval)
        } else {
            fairness.strict
        };
        report.kendall_tau_actual = fairness.actual;
        report.kendall_tau_thesis = fairness.thesis;
        (report.wait_ms_mean, report.wait_ms_max) = ledger.waits();
        report.admitted = ledger.admitted;
        report.double_admissions = ledger.double_admissions;
        report.readmissions = ledger.readmissions;
        report.moved_admissions = ledger.moved_admissions;
        report.max_on_site = ledger.max_on_site;
        let target = self.cfg.protocol.target_on_site.on_site();
        report.max_overshoot = ledger.max_on_site.saturating_sub(target);
        report.max_admitted_per_minute = ledger.max_admitted_within(60_000);
        if let Some(cap) = self.rate_cap() {
            // One round may let out its share at its start and the next round's share a whole
            // interval later: a minute spans at most one round more than its share.
            let burst = (cap * self.cfg.protocol.eviction_interval_ms).div_ceil(60_000);
            report.rate_cap_excess = report.max_admitted_per_minute.saturating_sub(cap + burst);
        }
        for phase in &self.visitors.phase {
            match phase {
                Phase::Waiting => report.lost += 1,
                Phase::Banking => {}
                Phase::Refused => {
                    report.lost += 1;
                    report.refused += 1;
                }
                Phase::Abandoned => report.abandoned += 1,
                Phase::Coming | Phase::OnSite | Phase::Done | Phase::Released => {}
            }
        }
        report.messages_per_admitted = if report.admitted > 0 {
            report.messages as f64 / report.admitted as f64
        } else {
            0.0
        };
    }
}

impl Ctx {
    /// The rate cap a minute of admissions is checked against: the one configured, or with
    /// the operator's changes the largest ever in force (none if it was ever lifted).
    fn rate_cap(&self) -> Option<u64> {
        let changes = self
            .cfg
            .operator
            .operator
            .iter()
            .filter_map(|o| match o.what {
                OperatorAction::Rate(r) => Some(r),
                _ => None,
            });
        std::iter::once(self.cfg.protocol.new_users_per_minute)
            .chain(changes)
            .try_fold(0, |most, cap| cap.map(|c| most.max(c)))
    }
}

fn arrive(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    let next = v as usize + 1;
    if next < ctx.visitors.len() {
        ctx.sched
            .at(ctx.visitors.arrival[next], Ev::Arrive(next as u32));
    }
    ctx.visitors.phase[v as usize] = Phase::Waiting;
    let reply = room.join(ctx, v);
    ctx.trace
        .note(ctx.now, "join", &[u64::from(v), reply as u64]);
    after_reply(ctx, room, v, reply);
}

fn visitor_step(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    let i = v as usize;
    match ctx.visitors.phase[i] {
        Phase::Waiting => {
            if ctx.visitors.gives_up(i, ctx.now) {
                ctx.visitors.phase[i] = Phase::Abandoned;
                ctx.visitors.unfinished -= 1;
                ctx.trace.note(ctx.now, "abandon", &[u64::from(v)]);
                if let Some(at) = ctx.ledger.admitted_at(v) {
                    // Let in without knowing it: the place stays taken until the claim window
                    // of the admission closes.
                    let until = (at + ctx.cfg.protocol.ticket_expiry_ms).max(ctx.now);
                    ctx.sched.at(until, Ev::Visitor(v));
                }
                return;
            }
            if wanders_off(ctx, v) {
                return;
            }
            let reply = room.check_in(ctx, v);
            ctx.trace
                .note(ctx.now, "check-in", &[u64::from(v), reply as u64]);
            after_reply(ctx, room, v, reply);
        }
        Phase::OnSite => on_site_step(ctx, room, v),
        Phase::Banking => banking_step(ctx, room, v),
        Phase::Released => tries_released_pass(ctx, room, v),
        // The claim window of an admission nobody came for has closed: its place is free,
        // unless they were queued again (they hold none) or it was freed already.
        Phase::Abandoned | Phase::Refused => ctx.ledger.lapse(v),
        Phase::Coming | Phase::Done => {}
    }
}

fn after_reply(ctx: &mut Ctx, room: &mut dyn Room, v: u32, reply: Reply) {
    match reply {
        Reply::Queued => {
            ctx.ledger.requeued(v);
            let asked = room.next_check_in(v);
            schedule_check_in(ctx, v, asked);
        }
        Reply::Unavailable => schedule_check_in(ctx, v, None),
        Reply::Admitted => {
            // Queued again after an admission and let out without an admission event.
            ctx.ledger.requeued_let_through(v);
            if !ctx.ledger.is_admitted(v) {
                // Let in without an admission event (straight through): decided right now.
                ctx.ledger.silent_admissions += 1;
                let a = Admission::at_once(v, ctx.now, (ctx.now, u64::from(v)));
                ctx.admitted(a, |_| true);
            }
            if ctx.plays(v, Play::Bank) && !ctx.plays.bank_until.contains_key(&v) {
                start_banking(ctx, room, v);
                return;
            }
            take_pass(ctx, room, v);
        }
        Reply::Refused if sat_out_claim_window(ctx, room, v) => {
            // Refused after they let their admission lapse: they lost nothing they kept.
            ctx.ledger.lapse(v);
            ctx.visitors.phase[v as usize] = Phase::Abandoned;
            ctx.visitors.unfinished -= 1;
        }
        Reply::Refused => {
            ctx.visitors.phase[v as usize] = Phase::Refused;
            ctx.visitors.unfinished -= 1;
            if ctx.ledger.is_admitted(v) {
                // Refused for good after an admission (its claim window closed while their node
                // was away): they hold no place and can get no pass for it.
                ctx.ledger.lapse(v);
            }
        }
        Reply::TurnedAway => {
            ctx.visitors.phase[v as usize] = Phase::Abandoned;
            ctx.visitors.unfinished -= 1;
        }
    }
}

/// Schedules the visitor's next check-in: when the waiting room asked (`asked`, if in the
/// future), else one refresh interval from now; late by up to the jitter either way.
fn schedule_check_in(ctx: &mut Ctx, v: u32, asked: Option<Time>) {
    let at = check_in_due(ctx, asked);
    ctx.sched.at(at, Ev::Visitor(v));
}

/// When a visitor's next check-in is due ([`Visitors::next_check_in`]).
fn check_in_due(ctx: &mut Ctx, asked: Option<Time>) -> Time {
    Visitors::next_check_in(
        ctx.now,
        asked,
        ctx.cfg.protocol.refresh_interval_ms,
        ctx.cfg.workload.jitter_ms,
        &mut ctx.rng,
    )
}

/// An admitted visitor leaves the queue for a pass.
fn take_pass(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    if !try_pass(ctx, room, v) {
        // Could not leave right now (the node just went away): try again soon.
        schedule_check_in(ctx, v, None);
    }
}

/// Admitted visitor `v` asks for their pass and goes on the site with it; false if refused.
fn try_pass(ctx: &mut Ctx, room: &mut dyn Room, v: u32) -> bool {
    match room.leave(ctx, v) {
        Some(expires) => {
            let late = after_claim_window(ctx, room, v);
            if late || ctx.ledger.has_lapsed(v) {
                ctx.ledger.place_retaken(v);
                let on_site = ctx.ledger.on_site;
                if let Some(p) = ctx.promises.as_mut() {
                    if late {
                        // A pass from an admission whose claim window had closed: a place
                        // taken without a round letting anyone out.
                        p.fail(ctx.now, "pass-after-lapse", || format!("visitor {v}"));
                    }
                    p.place_taken(ctx.now, on_site);
                }
            }
            enter_site(ctx, v, expires);
            if ctx.plays(v, Play::Replay) {
                room.replay_leave(ctx, v);
            }
            true
        }
        None => false,
    }
}

/// Whether the pass just handed to banker `v` came after their claim window closed: after the
/// window their first admitted ticket named, by the clock of the node that handed it out (each
/// node checks a ticket's times against its own clock; what a skewed or stepped clock does to
/// the site is the over-target checks' business).
fn after_claim_window(ctx: &Ctx, room: &dyn Room, v: u32) -> bool {
    match (ctx.plays.lapses_at.get(&v), room.last_pass_issued_at()) {
        (Some(&(_, end)), Some(issued_at)) => issued_at >= end,
        _ => ctx.ledger.has_lapsed(v),
    }
}

/// Whether banker `v`, refused, still holds the admission they banked and was refused once its
/// claim window could have closed by the clock of the node that refused them: at most the
/// widest spread of two nodes' clocks before it closed by the clock of the node that issued
/// it. Every node checks a ticket's times against its own clock, and the admitted ticket's
/// expiry is the claim window's end (waitingroom-distributed/README.md#one-admission-one-pass),
/// which the banker's check-ins do not move: a banker who sat on their admission until it
/// closed while they could not reach a node (the whole cluster restarting) let it lapse, as
/// one refused while still banking ([`banking_step`]).
fn sat_out_claim_window(ctx: &Ctx, room: &dyn Room, v: u32) -> bool {
    if !ctx.plays.bank_until.contains_key(&v) {
        return false;
    }
    let Some((closes, _)) = room.claim_window_end(v) else {
        // Queued again since: the admission is no longer what they hold.
        return false;
    };
    let f = &ctx.cfg.faults;
    let steps = (f.script.iter())
        .filter(|s| s.what == Disturbance::ClockStep)
        .count() as Time;
    let spread = (2 * f.clock_skew_ms).saturating_add(steps.saturating_mul(f.clock_step_ms));
    ctx.now.saturating_add(spread) >= closes
}

/// A waiting wanderer goes away once, for `away_ms`, skipping their check-ins.
fn wanders_off(ctx: &mut Ctx, v: u32) -> bool {
    if !ctx.plays(v, Play::Wander) || !ctx.plays.wandered.insert(v) {
        return false;
    }
    ctx.sched
        .at(ctx.now + ctx.cfg.behaviours.away_ms.max(1), Ev::Visitor(v));
    true
}

/// A banker was admitted: instead of leaving the queue they keep checking in for `bank_ms`.
/// They count as done (they got in), whatever they do next.
fn start_banking(ctx: &mut Ctx, room: &dyn Room, v: u32) {
    ctx.plays
        .bank_until
        .insert(v, ctx.now + ctx.cfg.behaviours.bank_ms);
    // The claim window the admission's ticket names, else the ticket expiry from the
    // admission.
    let lapse = room.claim_window_end(v).unwrap_or_else(|| {
        let at = ctx.ledger.admitted_at(v).unwrap_or(0) + ctx.cfg.protocol.ticket_expiry_ms;
        (at, at)
    });
    ctx.plays.lapses_at.insert(v, lapse);
    ctx.visitors.phase[v as usize] = Phase::Banking;
    ctx.visitors.unfinished -= 1;
    schedule_banking(ctx, v, None);
}

/// The banker's next step: their next check-in, or the close of their claim window if sooner.
fn schedule_banking(ctx: &mut Ctx, v: u32, asked: Option<Time>) {
    let at = check_in_due(ctx, asked);
    let lapse = lapses_at(ctx, v);
    let at = if !ctx.ledger.has_lapsed(v) && lapse > ctx.now {
        at.min(lapse)
    } else {
        at
    };
    ctx.sched.at(at, Ev::Visitor(v));
}

/// When banker `v`'s admission lapses ([`Plays::lapses_at`]).
fn lapses_at(ctx: &Ctx, v: u32) -> Time {
    ctx.plays.lapses_at.get(&v).map_or(0, |&(at, _)| at)
}

fn banking_step(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    if ctx.now >= lapses_at(ctx, v) {
        ctx.ledger.lapse(v);
    }
    let until = ctx.plays.bank_until.get(&v).copied().unwrap_or(0);
    let back_in_line = |ctx: &mut Ctx| {
        ctx.visitors.phase[v as usize] = Phase::Waiting;
        ctx.visitors.unfinished += 1;
    };
    if ctx.now >= until {
        back_in_line(ctx);
        if try_pass(ctx, room, v) {
            return;
        }
        if ctx.ledger.has_lapsed(v) {
            // Refused after they let their admission lapse: they lost nothing they kept.
            ctx.visitors.phase[v as usize] = Phase::Abandoned;
            ctx.visitors.unfinished -= 1;
        } else {
            schedule_check_in(ctx, v, None);
        }
        return;
    }
    match room.check_in(ctx, v) {
        Reply::Admitted => {
            let asked = room.next_check_in(v);
            schedule_banking(ctx, v, asked);
        }
        Reply::Refused => {
            // Refused after they let their admission lapse: they lost nothing they kept.
            ctx.ledger.lapse(v);
            ctx.visitors.phase[v as usize] = Phase::Abandoned;
        }
        // Nobody could answer (every node down): they keep banking, their admission's claim
        // window running, and try again at their next check-in.
        Reply::Unavailable => schedule_banking(ctx, v, None),
        reply => {
            // Queued again: they wait for a round like anyone else.
            back_in_line(ctx);
            after_reply(ctx, room, v, reply);
        }
    }
}

/// A releaser tries the pass they gave back, at a random node, and every node is asked
/// whether it still takes it: each must refuse it.
fn tries_released_pass(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    ctx.visitors.phase[v as usize] = Phase::Done;
    room.check_released(ctx, v);
}

fn enter_site(ctx: &mut Ctx, v: u32, expires: Time) {
    let i = v as usize;
    ctx.visitors.phase[i] = Phase::OnSite;
    ctx.visitors.unfinished -= 1;
    ctx.visitors.pass_expires[i] = expires;
    ctx.start_session(i);
    schedule_on_site(ctx, v);
}

/// The next thing a visitor on the site does: refresh their pass halfway through its life
/// while their session lasts, or walk away when it has expired.
fn schedule_on_site(ctx: &mut Ctx, v: u32) {
    let i = v as usize;
    let expires = ctx.visitors.pass_expires[i];
    if expires <= ctx.now {
        ctx.ledger.place_freed();
        ctx.visitors.phase[i] = Phase::Done;
        return;
    }
    let session_end = ctx.session_end(i);
    let refresh_at = ctx.now + (ctx.cfg.protocol.pass_expiry_ms / 2).max(1);
    let at = if session_end > ctx.now && refresh_at < expires {
        refresh_at.min(session_end)
    } else {
        expires
    };
    ctx.sched.at(at, Ev::Visitor(v));
}

fn on_site_step(ctx: &mut Ctx, room: &mut dyn Room, v: u32) {
    let i = v as usize;
    let session_end = ctx.session_end(i);
    if ctx.plays(v, Play::Release)
        && ctx.now < ctx.visitors.pass_expires[i]
        && !ctx.plays.released.contains(&v)
        && room.release_pass(ctx, v)
    {
        ctx.plays.released.insert(v);
        ctx.ledger.place_freed();
        ctx.visitors.phase[i] = Phase::Released;
        // Every node must refuse it within two rounds; give the rounds time to get through.
        let grace = 5 * ctx.cfg.protocol.eviction_interval_ms + 1_000;
        ctx.sched.at(ctx.now + grace, Ev::Visitor(v));
        return;
    }
    if ctx.now < ctx.visitors.pass_expires[i]
        && ctx.now < session_end
        && let Some(expires) = room.refresh_pass(ctx, v)
    {
        ctx.visitors.pass_expires[i] = expires;
    }
    schedule_on_site(ctx, v);
}
