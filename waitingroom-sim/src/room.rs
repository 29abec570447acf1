//! The interface between the event loop and a waiting room.
//!
//! A [`Room`] is what answers the simulated visitors: the real protocol cluster or one of the
//! baselines (`crate::strategies`). The event loop (`crate::sim`) calls it for every visitor
//! step and hands it the room's own events; both work on the one [`Ctx`] of a run, and a room
//! tells a visitor what happened with a [`Reply`]. Kept apart from the loop so that the rooms
//! and the loop each depend on this interface and not on each other.

use std::collections::{HashMap, HashSet};

use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use crate::config::RunConfig;
use crate::metrics::{Admission, Ledger, RunReport};
use crate::promises::Promises;
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
    /// The room is closed to newcomers (mode `reject`, an event over): turned away at the
    /// door, they lost no place.
    TurnedAway,
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
    /// Visitor `v`, who just got their pass, asks a random node for a pass again with the
    /// ticket they gave up for it (a replayed leave). Rooms without passes do nothing.
    fn replay_leave(&mut self, _ctx: &mut Ctx, _v: u32) {}
    /// Visitor `v` gives their pass back early; returns whether a node took it back.
    fn release_pass(&mut self, _ctx: &mut Ctx, _v: u32) -> bool {
        false
    }
    /// Visitor `v` tries the pass they gave back, and every node is asked whether it still
    /// takes it: each must refuse it.
    fn check_released(&mut self, _ctx: &mut Ctx, _v: u32) {}
    /// When the waiting room asked visitor `v` to check in next, if it said (a real client
    /// follows the ticket's `next_refresh`); None means one refresh interval from now.
    fn next_check_in(&self, _v: u32) -> Option<Time> {
        None
    }
    /// When the claim window of admitted visitor `v` closes, as their ticket says (a real
    /// client reads its expiry): in true time, and as the reading of a node's clock that the
    /// nodes check it against. None: the ticket expiry after their admission.
    fn claim_window_end(&self, _v: u32) -> Option<(Time, Time)> {
        None
    }
    /// What the clock of the node that handed out the latest pass read when it did, if the
    /// nodes have clocks of their own.
    fn last_pass_issued_at(&self) -> Option<Time> {
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
    /// The room's promises, checked as the run goes (`--strict`).
    pub promises: Option<Box<Promises>>,
    /// What the visitors who play the rules are up to.
    pub plays: Plays,
}

/// A way of playing the rules (`BehaviourOptions`), drawn per visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Play {
    /// Keeps checking in once admitted, then asks for a pass late.
    Bank = 1,
    /// Refreshes their pass at random nodes.
    Roam = 2,
    /// Asks for a pass again with their old ticket.
    Replay = 3,
    /// Gives their pass back early, then tries it again.
    Release = 4,
    /// Goes away once while waiting, and comes back.
    Wander = 5,
}

/// The state of the visitors who play the rules.
#[derive(Default)]
pub struct Plays {
    /// Bankers banking: until when.
    pub bank_until: HashMap<u32, Time>,
    /// When each banker's admission lapses: the close of the claim window their ticket named
    /// when they started banking (later tickets cannot move it), in true time and as the
    /// clock reading the nodes check it against.
    pub lapses_at: HashMap<u32, (Time, Time)>,
    /// Wanderers who went away already.
    pub wandered: HashSet<u32>,
    /// Releasers who gave their pass back already.
    pub released: HashSet<u32>,
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
        let (on_site, lapsed) = (self.ledger.on_site, self.ledger.has_lapsed(v));
        self.ledger.admit(a, alive);
        if let Some(p) = self.promises.as_mut() {
            if lapsed && !self.ledger.has_lapsed(v) {
                p.admitted_again(v);
            }
            if self.ledger.on_site > on_site {
                p.place_taken(self.now, self.ledger.on_site);
            }
        }
        let gone = matches!(
            self.visitors.phase[v as usize],
            Phase::Abandoned | Phase::Refused
        );
        if gone && self.ledger.on_site > on_site {
            // Nobody comes to claim the place (a first admission, or one that let them out
            // again after they were queued again): it is held until the claim window closes.
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
            promises: cfg.checks.strict.then(|| {
                let p = &cfg.protocol;
                // Grants handed out under an older target, and admissions not yet claimed,
                // live about this long.
                let window = p.pass_expiry_ms
                    + p.ticket_expiry_ms
                    + 3 * p.eviction_interval_ms
                    + p.refresh_interval_ms;
                Box::new(Promises::new(p.target_on_site.on_site(), window))
            }),
            plays: Plays::default(),
        }
    }

    /// Starts visitor `i`'s session on the site now, when the run simulates sessions.
    pub(crate) fn start_session(&mut self, i: usize) {
        if !self.session_end.is_empty() {
            self.session_end[i] = self.now + self.cfg.workload.session_ms;
        }
    }

    /// Whether visitor `v` plays the rules in way `play` (drawn from the seed and the
    /// visitor, so that it draws from no stream).
    pub fn plays(&self, v: u32, play: Play) -> bool {
        let b = &self.cfg.behaviours;
        let share = match play {
            Play::Bank => b.bankers,
            Play::Roam => b.roamers,
            Play::Replay => b.replayers,
            Play::Release => b.releasers,
            Play::Wander => b.wanderers,
        };
        if share <= 0.0 {
            return false;
        }
        let word = seeds::mix(seeds::mix(self.cfg.seed ^ 0x5157_4152_4d00) ^ u64::from(v) << 8)
            ^ play as u64;
        (seeds::mix(word) >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - share
    }

    /// The places a check of grants may count on: the target, or the largest in force lately
    /// when the operator changed it.
    pub fn target_bound(&self) -> u64 {
        let extra = self.cfg.workload.session_ms;
        self.promises
            .as_ref()
            .map_or(self.cfg.protocol.target_on_site.on_site(), |p| {
                p.bound(self.now, extra)
            })
    }

    /// When visitor `i`'s session on the site ends; 0 when the run simulates no sessions.
    pub(crate) fn session_end(&self, i: usize) -> Time {
        self.session_end.get(i).copied().unwrap_or(0)
    }
}
