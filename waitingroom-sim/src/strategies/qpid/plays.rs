//! The protocol's side of the visitors who play the rules (`BehaviourOptions`): a leave replayed
//! with an old ticket, a pass given back and tried again, and whether every node refuses a
//! given-back pass.

use rand::RngExt;
use waitingroom_core::{TicketId, Time};
use waitingroom_distributed::VisitorError;

use super::nodes::slot_of_id;
use super::{Action, QpidRoom};
use crate::room::Ctx;

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

    /// Visitor `v` gives their pass back at their node; whether it took it.
    pub(super) fn give_back(&mut self, ctx: &mut Ctx, v: u32) -> bool {
        let Some(pass) = self.visits.passes.get(v as usize).cloned().flatten() else {
            return false;
        };
        let Some(s) = self.route(ctx, v) else {
            return false;
        };
        let clock = self.nodes.clock(s, ctx.now);
        let r = self.nodes.node(s).release_pass(clock, &pass);
        self.drain(ctx, s);
        if r.is_ok() {
            self.released.push(pass.id);
        }
        r.is_ok()
    }

    /// Visitor `v` tries their given-back pass at a random node, and every node is asked
    /// whether it refuses it.
    pub(super) fn try_given_back(&mut self, ctx: &mut Ctx, v: u32) {
        let Some(pass) = self.visits.passes.get(v as usize).cloned().flatten() else {
            return;
        };
        if let Some(s) = self.any_node(ctx) {
            let clock = self.nodes.clock(s, ctx.now);
            let r = self.nodes.node(s).refresh_pass(clock, &pass);
            self.drain(ctx, s);
            if r.is_ok()
                && let Some(p) = ctx.promises.as_mut()
            {
                p.fail(ctx.now, "released-pass-refreshed", || {
                    format!("visitor {v}'s given-back pass refreshed at node {}", s + 1)
                });
            }
        }
        self.check_refused(ctx, pass.id);
    }

    /// Every running member must refuse the given-back pass `id`, once the rounds had time to
    /// reach it: the check waits while a partition cuts the cluster and for the grace after it
    /// heals, and leaves out the nodes frozen or started within the grace.
    pub(super) fn check_refused(&mut self, ctx: &mut Ctx, id: TicketId) {
        let grace = self.release_grace();
        let settled = self.healed_at + grace;
        if self.wire.net.partitioned() || ctx.now < settled {
            let i = self.released.iter().position(|&r| r == id).unwrap_or(0);
            let at = ctx.now.max(settled) + grace;
            self.plan_at(ctx, at, Action::CheckReleased(i));
            return;
        }
        let recent = ctx.now.saturating_sub(grace);
        let now = ctx.now;
        let accepting: Vec<u64> = (self.nodes.slots.iter().enumerate())
            .filter(|(_, slot)| {
                slot.node
                    .as_ref()
                    .is_some_and(|n| n.is_member() && !n.is_released(id))
                    && slot.frozen_until <= recent
                    && slot.since <= recent
            })
            .map(|(s, _)| s as u64 + 1)
            .collect();
        if !accepting.is_empty()
            && let Some(p) = ctx.promises.as_mut()
        {
            p.fail(now, "released-pass-accepted", || {
                format!(
                    "pass {} given back, still taken by nodes {accepting:?}",
                    id.0
                )
            });
        }
    }
}
