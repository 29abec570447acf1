//! The interface between the event loop and a waiting room.
//!
//! A [`Room`] is what answers the simulated visitors: the real protocol cluster or one of the
//! baselines (`crate::strategies`). The event loop (`crate::sim`) calls it for every visitor
//! step and hands it the room's own events; both work on the one [`Ctx`] of a run, and a room
//! tells a visitor what happened with a [`Reply`]. Kept apart from the loop so that the rooms
//! and the loop each depend on this interface and not on each other.

use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use crate::config::RunConfig;
use crate::metrics::{Admission, Ledger, RunReport};
use crate::scheduler::{Ev, Scheduler};
use crate::seeds::{self, Stream};
use crate::trace::Trace;
use crate::visitors::{Phase, Visitors};

/// What a waiting room answered a visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Still queued: come back after the refresh interval.
    Queued,
    /// Let out: leave the queue now.
    Admitted,
    /// Nobody could serve the request right now (no node ready): try again later.
    Unavailable,
    /// The waiting room refused the visitor for good: they lost their place.
    Refused,
}

/// A waiting room the simulated visitors go through.
pub trait Room {
    /// Sets up (starts nodes, schedules ticks and disturbances) before the first event.
    fn start(&mut self, ctx: &mut Ctx);
    /// Visitor `v` arrives.
    fn join(&mut self, ctx: &mut Ctx, v: u32) -> Reply;
    /// Visitor `v` checks in (joins if they could not yet).
    fn check_in(&mut self, ctx: &mut Ctx, v: u32) -> Reply;
    /// Admitted visitor `v` leaves the queue; returns when their pass expires, None if refused.
    fn leave(&mut self, ctx: &mut Ctx, v: u32) -> Option<Time>;
    /// Visitor `v` on the site refreshes their pass; returns its new expiry, None if refused.
    fn refresh_pass(&mut self, ctx: &mut Ctx, v: u32) -> Option<Time>;
    /// When the waiting room asked visitor `v` to check in next, if it said (a real client
    /// follows the ticket's `next_refresh`); None means one refresh interval from now.
    fn next_check_in(&self, _v: u32) -> Option<Time> {
        None
    }
    /// Reads what the next step of visitor `v` reads first, so that its cache misses overlap the
    /// current event's work (in part: a read, unlike a prefetch, still waits for its data)
    /// instead of stalling the next one. A large run is bound by memory latency
    /// (docs/benchmarks.md#simulator-profiles). Changes nothing.
    fn touch(&self, _v: u32) {}
    /// Asks the processor to fetch what [`Room::touch`] will read of visitor `v`, without
    /// waiting for it: one event earlier, so that the touch finds it cached. Changes nothing.
    fn prefetch(&self, _v: u32) {}
    /// An event of the room's own (messages, timers, disturbances, ticks).
    fn handle(&mut self, ctx: &mut Ctx, ev: Ev);
    /// Adds the room's own measurements to the report.
    fn finish(&mut self, ctx: &mut Ctx, report: &mut RunReport);
}

/// The state every room shares: clock, event queue, visitors, ledger, trace.
pub struct Ctx {
    /// The run's configuration.
    pub cfg: RunConfig,
    /// Simulated time.
    pub now: Time,
    /// When the arrival window opens.
    pub start: Time,
    /// Pending events.
    pub sched: Scheduler,
    /// Who joined and was admitted when; who is on the site.
    pub ledger: Ledger,
    /// The visitors.
    pub visitors: Visitors,
    /// Visitor behaviour stream: check-in jitter, load-balancer choices.
    pub rng: ChaCha8Rng,
    /// The event trace.
    pub trace: Trace,
    /// When each visitor's session ends (only with `session_ms > 0`).
    session_end: Vec<Time>,
}

impl Ctx {
    /// A room admitted a visitor (`a`); `alive` tells whether a node process is still running.
    pub fn admitted(&mut self, a: Admission, alive: impl Fn(u32) -> bool) {
        let v = a.v;
        self.trace.note(
            self.now,
            "admit",
            &[u64::from(v), a.decided_at, a.at, u64::from(a.by)],
        );
        let first = self.ledger.admit(a, alive);
        let gone = matches!(
            self.visitors.phase[v as usize],
            Phase::Abandoned | Phase::Refused
        );
        if first && gone {
            // Nobody comes to claim the place: it is held until the claim window closes.
            let at = self.now + self.cfg.protocol.ticket_expiry_ms;
            self.sched.at(at, Ev::Visitor(v));
        }
    }

    /// The state of a run about to start: the visitors drawn, nothing scheduled yet.
    pub(crate) fn new(cfg: &RunConfig, trace: Trace) -> Self {
        let start = cfg.workload.warmup_ms;
        let mut arrivals = seeds::rng(cfg.seed, Stream::Arrivals);
        let visitors = Visitors::generate(&cfg.workload, start, &mut arrivals);
        let n = visitors.len();
        Ctx {
            cfg: cfg.clone(),
            now: 0,
            start,
            sched: Scheduler::default(),
            ledger: Ledger::new(n),
            visitors,
            rng: seeds::rng(cfg.seed, Stream::Visitors),
            trace,
            session_end: if cfg.workload.session_ms > 0 {
                vec![0; n]
            } else {
                Vec::new()
            },
        }
    }

    /// Starts visitor `i`'s session on the site now, when the run simulates sessions.
    pub(crate) fn start_session(&mut self, i: usize) {
        if !self.session_end.is_empty() {
            self.session_end[i] = self.now + self.cfg.workload.session_ms;
        }
    }

    /// When visitor `i`'s session on the site ends; 0 when the run simulates no sessions.
    pub(crate) fn session_end(&self, i: usize) -> Time {
        self.session_end.get(i).copied().unwrap_or(0)
    }
}
