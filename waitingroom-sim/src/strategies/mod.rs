//! The waiting rooms visitors can go through: the real protocol and three baselines.
//!
//! The baselines share the visitor model, the eviction interval and the target with the
//! protocol, and decide from perfect knowledge (the ground-truth number on the site); they run
//! no network and ignore disturbances. They differ only in whom an eviction lets out.

mod buckets;
mod central_fifo;
mod qpid;
mod random_sample;

use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use crate::config::{RunConfig, Strategy};
use crate::metrics::{Admission, RunReport};
use crate::room::{Ctx, Reply, Room};
use crate::scheduler::Ev;
use crate::seeds::{self, Stream};

/// The room a configuration asks for.
pub fn build(cfg: &RunConfig) -> Box<dyn Room> {
    let rng = seeds::rng(cfg.seed, Stream::Baseline);
    let n = cfg.workload.users as usize;
    match cfg.strategy {
        Strategy::Qpid => Box::new(qpid::QpidRoom::new(cfg)),
        Strategy::CentralFifo => {
            Box::new(Baseline::new(central_fifo::CentralFifo::default(), n, rng))
        }
        Strategy::Buckets => Box::new(Baseline::new(buckets::Buckets::default(), n, rng)),
        Strategy::RandomSample => Box::new(Baseline::new(
            random_sample::RandomSample::new(cfg.nodes as usize, cfg.sample_d as usize),
            n,
            rng,
        )),
    }
}

/// Whom a baseline lets out next.
pub(crate) trait Discipline {
    /// Queues visitor `v`, who joined at `join` with ticket id `ticket`.
    fn insert(&mut self, v: u32, join: Time, ticket: u64, rng: &mut ChaCha8Rng);
    /// Takes the next visitor to let out.
    fn pop(&mut self, rng: &mut ChaCha8Rng) -> Option<u32>;
    /// Whether nobody is queued.
    fn is_empty(&self) -> bool;
}

/// A baseline waiting room: a queue discipline plus the shared bookkeeping.
pub(crate) struct Baseline<D> {
    discipline: D,
    admitted: Vec<bool>,
    last_seen: Vec<Time>,
    rng: ChaCha8Rng,
    /// Admission sequence number: baselines admit in the order they pop.
    sequence: u64,
}

impl<D: Discipline> Baseline<D> {
    fn new(discipline: D, n: usize, rng: ChaCha8Rng) -> Self {
        Baseline {
            discipline,
            admitted: vec![false; n],
            last_seen: vec![0; n],
            rng,
            sequence: 0,
        }
    }

    fn admit(&mut self, ctx: &mut Ctx, v: u32) {
        self.admitted[v as usize] = true;
        self.sequence += 1;
        let a = Admission::at_once(v, ctx.now, (self.sequence, 0));
        ctx.admitted(a, |_| true);
    }

    /// Whether `v`'s queue entry has expired: they stopped checking in (gave up) long enough
    /// ago, so a real waiting room would have swept them.
    fn expired(&self, ctx: &Ctx, v: u32) -> bool {
        ctx.now >= self.last_seen[v as usize] + ctx.cfg.protocol.ticket_expiry_ms
    }

    fn evict(&mut self, ctx: &mut Ctx) {
        let target = ctx.cfg.protocol.target_on_site.on_site();
        let mut free = target.saturating_sub(ctx.ledger.on_site);
        while free > 0 {
            let Some(v) = self.discipline.pop(&mut self.rng) else {
                break;
            };
            if self.expired(ctx, v) {
                continue;
            }
            self.admit(ctx, v);
            free -= 1;
        }
    }
}

impl<D: Discipline> Room for Baseline<D> {
    fn start(&mut self, ctx: &mut Ctx) {
        let interval = ctx.cfg.protocol.eviction_interval_ms;
        let first = ctx.start.div_ceil(interval) * interval;
        ctx.sched.at(first, Ev::Tick);
    }

    fn join(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        let ticket = ctx.visitors.ticket[v as usize];
        ctx.ledger.joined(v, ctx.now, ticket);
        self.last_seen[v as usize] = ctx.now;
        let p = &ctx.cfg.protocol;
        let room_on_site = ctx.ledger.on_site < p.target_on_site.on_site();
        if p.admit_straight_through && self.discipline.is_empty() && room_on_site {
            self.admit(ctx, v);
            return Reply::Admitted;
        }
        self.discipline.insert(v, ctx.now, ticket, &mut self.rng);
        Reply::Queued
    }

    fn check_in(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        self.last_seen[v as usize] = ctx.now;
        if self.admitted[v as usize] {
            Reply::Admitted
        } else {
            Reply::Queued
        }
    }

    fn leave(&mut self, ctx: &mut Ctx, _v: u32) -> Option<Time> {
        Some(ctx.now + ctx.cfg.protocol.pass_expiry_ms)
    }

    fn refresh_pass(&mut self, ctx: &mut Ctx, _v: u32) -> Option<Time> {
        Some(ctx.now + ctx.cfg.protocol.pass_expiry_ms)
    }

    fn handle(&mut self, ctx: &mut Ctx, ev: Ev) {
        if let Ev::Tick = ev {
            ctx.trace.note(ctx.now, "tick", &[]);
            self.evict(ctx);
            let interval = ctx.cfg.protocol.eviction_interval_ms;
            ctx.sched.at(ctx.now + interval, Ev::Tick);
        }
    }

    fn finish(&mut self, _ctx: &mut Ctx, _report: &mut RunReport) {}
}
