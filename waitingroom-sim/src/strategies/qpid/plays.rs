//! The protocol's side of the visitors who play the rules (`BehaviourOptions`): a leave replayed
//! with an old ticket, a pass given back (again while its release is not confirmed) and tried
//! again, and whether every node refuses a given-back pass once its release was confirmed.

use rand::RngExt;
use waitingroom_core::{Pass, Time};
use waitingroom_distributed::{Node, VisitorError, invariants};

use super::nodes::slot_of_id;
use super::{Action, QpidRoom, bump};
use crate::room::Ctx;

/// How many times a check of a given-back pass waits for the live nodes to be one cluster, or
/// for nodes just started or unfrozen to have had the grace.
const APART_WAITS: u32 = 20;

/// How long a client told `release_pending` waits before it gives the pass back again.
const RELEASE_RETRY_MS: Time = 500;

/// Most tries at giving one pass back (two minutes of them): a release never confirmed is no
/// promise, and the pass stays valid until it expires.
const RELEASE_TRIES: u32 = 240;

/// What a check of a given-back pass saw of the cluster so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Apart {
    /// Checks put off so far.
    waits: u32,
    /// The live nodes were not one cluster at the last check: this one comes a grace after.
    was: bool,
}

impl QpidRoom {
    /// A random serving node that is not frozen.
    pub(super) fn any_node(&mut self, ctx: &mut Ctx) -> Option<usize> {
        let serving: Vec<usize> = (self.nodes.serving().iter())
            .map(|&s| s as usize)
            .filter(|&s| !self.nodes.frozen(s, ctx.now))
            .collect();
        (!serving.is_empty()).then(|| serving[ctx.rng.random_range(0..serving.len())])
    }

    /// How long after a pass is given back every node must refuse it: two rounds, with room
    /// for the messages that carry them.
    pub(super) fn release_grace(&self) -> Time {
        5 * self.cfg.protocol.eviction_interval_ms + 1_000
    }

    /// Visitor `v` asks a random node for a pass with the ticket they gave up for one: the
    /// same pass or a refusal, never a second one.
    pub(super) fn replayed_leave(&mut self, ctx: &mut Ctx, v: u32) {
        let Some(ticket) = self.old_tickets.get(&v).cloned() else {
            return;
        };
        let Some(s) = self.any_node(ctx) else {
            return;
        };
        let clock = self.nodes.clock(s, ctx.now);
        let mut r = self.nodes.node(s).leave(clock, &ticket);
        if let Err(VisitorError::Elsewhere(owner)) = &r {
            let nslots = self.nodes.slots.len();
            let o = slot_of_id(owner.id, nslots).filter(|&o| {
                self.nodes.is_serving(o)
                    && !self.nodes.frozen(o, ctx.now)
                    && self.wire.net.connected(s, o)
            });
            r = match o {
                Some(o) => {
                    let clock = self.nodes.clock(o, ctx.now);
                    let r = self.nodes.node(o).leave(clock, &ticket);
                    self.drain(ctx, o);
                    r
                }
                None => self.nodes.node(s).leave_here(clock, &ticket),
            };
        }
        self.drain(ctx, s);
        if let (Ok(pass), Some(p)) = (r, ctx.promises.as_mut()) {
            p.pass_handed(ctx.now, v, &pass, false);
        }
    }

    /// Visitor `v` gives their pass back at their node; whether it took it. A release not
    /// confirmed yet (`release_pending`: the node is cut off from a majority of the voters) is
    /// taken too: the visitor has left, and gives the pass back again until it is confirmed.
    pub(super) fn give_back(&mut self, ctx: &mut Ctx, v: u32) -> bool {
        let Some(pass) = self.visits.passes.get(v as usize).cloned().flatten() else {
            return false;
        };
        let Some(s) = self.route(ctx, v) else {
            return false;
        };
        let r = self.give_back_at(ctx, s, &pass);
        if r == Err(VisitorError::ReleasePending) {
            self.again_later(ctx, pass, 1);
        }
        matches!(r, Ok(()) | Err(VisitorError::ReleasePending))
    }

    /// Gives `pass` back at the node in `slot`. Confirmed, every node must refuse it once the
    /// rounds had time to carry it; not confirmed (`release_pending`), it is no promise yet.
    pub(super) fn give_back_at(
        &mut self,
        ctx: &mut Ctx,
        slot: usize,
        pass: &Pass,
    ) -> Result<(), VisitorError> {
        let clock = self.nodes.clock(slot, ctx.now);
        let r = self.nodes.node(slot).release_pass(clock, pass);
        self.drain(ctx, slot);
        match &r {
            Ok(()) => {
                self.released.push((pass.id, ctx.now));
                let at = ctx.now + self.release_grace();
                let i = self.released.len() - 1;
                self.plan_at(ctx, at, Action::CheckReleased(i, Apart::default()));
            }
            Err(VisitorError::ReleasePending) => {
                bump(&mut self.tallies.protocol_events, "release-pending");
            }
            Err(_) => {}
        }
        r
    }

    /// `pass` was given back but its release not confirmed: it is given back again a little
    /// later (try `tries + 1`), at a random serving node, as a client told `release_pending`
    /// does.
    pub(super) fn again_later(&mut self, ctx: &mut Ctx, pass: Pass, tries: u32) {
        if tries >= RELEASE_TRIES {
            bump(&mut self.tallies.protocol_events, "release-never-confirmed");
            return;
        }
        self.giving_back.push(pass);
        let i = self.giving_back.len() - 1;
        self.plan_at(
            ctx,
            ctx.now + RELEASE_RETRY_MS,
            Action::GiveBackAgain(i, tries),
        );
    }

    /// Gives the pass `giving_back[i]` back again (its try `tries + 1`), at a random serving
    /// node drawn from a stream of its own, so that the disturbances drawn after it stay those
    /// of a run whose releases were all confirmed at once.
    pub(super) fn give_back_again(&mut self, ctx: &mut Ctx, i: usize, tries: u32) {
        let pass = self.giving_back[i].clone();
        let serving: Vec<usize> = (self.nodes.serving().iter())
            .map(|&s| s as usize)
            .filter(|&s| !self.nodes.frozen(s, ctx.now))
            .collect();
        if serving.is_empty() {
            self.again_later(ctx, pass, tries + 1);
            return;
        }
        let slot = serving[self.operator_rng.random_range(0..serving.len())];
        if self.give_back_at(ctx, slot, &pass) == Err(VisitorError::ReleasePending) {
            self.again_later(ctx, pass, tries + 1);
        }
    }

    /// Visitor `v` tries their given-back pass at a random node, and every node is asked
    /// whether it refuses it. Only a release confirmed to the visitor a grace ago is a promise
    /// (one answered `release_pending` is given back again, and checked once confirmed), and a
    /// refresh counts against it only at a node the release had time to reach
    /// (`check_refused` says which).
    pub(super) fn try_given_back(&mut self, ctx: &mut Ctx, v: u32) {
        let Some(pass) = self.visits.passes.get(v as usize).cloned().flatten() else {
            return;
        };
        let grace = self.release_grace();
        let confirmed =
            (self.released.iter()).position(|&(id, at)| id == pass.id && at + grace <= ctx.now);
        if let Some(s) = self.any_node(ctx) {
            let clock = self.nodes.clock(s, ctx.now);
            let r = self.nodes.node(s).refresh_pass(clock, &pass);
            self.drain(ctx, s);
            let reached = self.settled(ctx.now) && self.one_cluster() && self.reached(s, ctx.now);
            if r.is_ok()
                && reached
                && confirmed.is_some()
                && let Some(p) = ctx.promises.as_mut()
            {
                p.fail(ctx.now, "released-pass-refreshed", || {
                    format!("visitor {v}'s given-back pass refreshed at node {}", s + 1)
                });
            }
        }
        if let Some(i) = confirmed {
            self.check_refused(ctx, i, Apart::default());
        }
    }

    /// Whether the network is whole and has been for the grace.
    fn settled(&self, now: Time) -> bool {
        !self.wire.net.partitioned() && now >= self.healed_at + self.release_grace()
    }

    /// Whether the live nodes are one cluster: a node in a cluster of its own (formed apart,
    /// or left behind by a restart) hears of a release taken in the other only once they
    /// merge, and must refuse it within the grace after that.
    fn one_cluster(&self) -> bool {
        let live: Vec<&Node> = (self.nodes.slots.iter())
            .filter_map(|slot| slot.node.as_ref())
            .collect();
        invariants::converged(&live)
    }

    /// Whether the node in `slot` ran, unfrozen, for the whole grace before `now`.
    fn reached(&self, slot: usize, now: Time) -> bool {
        let recent = now.saturating_sub(self.release_grace());
        let slot = &self.nodes.slots[slot];
        slot.frozen_until <= recent && slot.since <= recent
    }

    /// Every running member must refuse the given-back pass `released[i]`, once the rounds had
    /// time to reach it: the check waits while a partition cuts the cluster and for the grace
    /// after it heals, looks again at the nodes frozen or started within the grace once they
    /// had it, and while the live nodes are not one cluster waits for them to be one and for
    /// the grace after that (at most [`APART_WAITS`] times: a cluster that stays apart breaks
    /// the promise too).
    pub(super) fn check_refused(&mut self, ctx: &mut Ctx, i: usize, apart: Apart) {
        let grace = self.release_grace();
        let settled = self.healed_at + grace;
        if !self.settled(ctx.now) {
            let at = ctx.now.max(settled) + grace;
            self.plan_at(ctx, at, Action::CheckReleased(i, apart));
            return;
        }
        let (id, _) = self.released[i];
        let now = ctx.now;
        let (accepting, fresh): (Vec<usize>, Vec<usize>) = (0..self.nodes.slots.len())
            .filter(|&s| {
                (self.nodes.slots[s].node.as_ref())
                    .is_some_and(|n| n.is_member() && !n.is_released(id))
            })
            .partition(|&s| self.reached(s, now));
        let one = self.one_cluster();
        let wait = !accepting.is_empty() && (!one || apart.was) || !fresh.is_empty();
        if wait && apart.waits < APART_WAITS {
            let next = Apart {
                waits: apart.waits + 1,
                was: !one,
            };
            self.plan_at(ctx, now + grace, Action::CheckReleased(i, next));
            return;
        }
        if accepting.is_empty() {
            return;
        }
        let accepting: Vec<u64> = accepting.iter().map(|&s| s as u64 + 1).collect();
        if let Some(p) = ctx.promises.as_mut() {
            p.fail(now, "released-pass-accepted", || {
                format!(
                    "pass {} given back, still taken by nodes {accepting:?}",
                    id.0
                )
            });
        }
    }
}
