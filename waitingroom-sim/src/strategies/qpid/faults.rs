//! The disturbances beyond crashes, additions and partitions: a node frozen (SIGSTOP), the
//! whole cluster restarted, a clock stepped, a node leaving cleanly; and the operator's actions
//! on the running cluster (`--operator`). The swarm draws them; `--script` and `--operator`
//! name them.

use rand::RngExt;
use waitingroom_core::{NodeId, Pass, Settings, SettingsError, TicketId, Time};
use waitingroom_distributed::{
    LiveSettings, Mode, Pause, QueueingMethod, ScheduledEvent, SettingsPatch, VisitorError,
};

use super::nodes::addr;
use super::{Action, QpidRoom, bump};
use crate::config::OperatorAction;
use crate::room::Ctx;
use crate::scheduler::Ev;

/// How long a bypass pass minted by the simulated operator lives.
const BYPASS_MS: Time = 600_000;

/// How often the operator makes one action at most (the first time included) while no round
/// carries it.
const OPERATOR_TRIES: u32 = 5;
/// How long an operator waits before trying again an action that no node could take (none
/// served: the whole cluster restarting).
const OPERATOR_RETRY_MS: Time = 500;

/// How long a node that leaves cleanly keeps running to say goodbye.
const GOODBYE_MS: Time = 1_000;

impl QpidRoom {
    /// Plans `action` at `at`.
    pub(super) fn plan_at(&mut self, ctx: &mut Ctx, at: Time, action: Action) {
        self.plan.push(action);
        ctx.sched.at(at, Ev::Disturb(self.plan.len() as u32 - 1));
    }

    /// A random live node, if more than `keep` run.
    fn victim(&mut self, keep: usize) -> Option<usize> {
        let alive = self.nodes.alive_slots();
        if alive.len() <= keep {
            bump(&mut self.tallies.protocol_events, "disturbance-skipped");
            return None;
        }
        Some(alive[self.rng.random_range(0..alive.len())])
    }

    /// A random live node stops running for `freeze_ms`.
    pub(super) fn freeze(&mut self, ctx: &mut Ctx) {
        let Some(slot) = self.victim(0) else {
            return;
        };
        let until = ctx.now + self.cfg.faults.freeze_ms;
        self.nodes.slots[slot].frozen_until = until;
        self.nodes.freezes += 1;
        ctx.trace.note(ctx.now, "freeze", &[slot as u64 + 1, until]);
    }

    /// Every node stops; all come back `restart_delay_ms` later.
    pub(super) fn restart_all(&mut self, ctx: &mut Ctx) {
        let alive = self.nodes.alive_slots();
        for &slot in &alive {
            self.crash(ctx, slot);
        }
        let at = ctx.now + self.cfg.faults.restart_delay_ms;
        if let Some(&first) = alive.first() {
            self.plan_at(ctx, at, Action::ReviveAll(first, true));
            for &slot in &alive[1..] {
                self.plan_at(ctx, at, Action::ReviveAll(slot, false));
            }
        }
    }

    /// The node in `slot` comes back; `first` starts a new cluster when no node serves, else it
    /// joins the serving nodes (or, when none serve yet, the lowest slot, which started one).
    pub(super) fn revive(&mut self, ctx: &mut Ctx, slot: usize, first: bool) {
        if self.nodes.slots[slot].node.is_some() {
            return;
        }
        // Unless nodes already serve (their own restarts came due meanwhile): an operator
        // starts a second cluster beside a running one by mistake only, and its founder would
        // admit on its own beside it.
        if first && self.nodes.serving().is_empty() {
            self.spawn(ctx, slot, None);
            return;
        }
        let seeds = self.seeds_for(slot);
        self.spawn(ctx, slot, Some(seeds));
    }

    /// Whom a node starting in `slot` asks to join: the serving nodes; when none serves (the
    /// whole cluster is restarting), every other node's address, as a static seed list would
    /// name them, so that it joins the cluster they start rather than one of its own.
    pub(super) fn seeds_for(&self, slot: usize) -> Vec<String> {
        let seeds = self.nodes.serving_addrs(slot);
        if !seeds.is_empty() {
            return seeds;
        }
        (0..self.nodes.slots.len())
            .filter(|&s| s != slot)
            .map(addr)
            .collect()
    }

    /// A random live node's machine clock steps by up to `clock_step_ms` either way: its
    /// process reads it only when it starts again (a restart), as the server does.
    pub(super) fn clock_step(&mut self, ctx: &mut Ctx) {
        let Some(slot) = self.victim(0) else {
            return;
        };
        let bound = i64::try_from(self.cfg.faults.clock_step_ms).unwrap_or(i64::MAX);
        let step = self.rng.random_range(-bound..=bound);
        let s = &mut self.nodes.slots[slot];
        s.stepped = s.stepped.saturating_add(step);
        ctx.trace
            .note(ctx.now, "clock-step", &[slot as u64 + 1, step as u64]);
    }

    /// A random live node leaves the cluster cleanly, and stops a moment later.
    pub(super) fn remove(&mut self, ctx: &mut Ctx) {
        let Some(slot) = self.victim(1) else {
            return;
        };
        let clock = self.nodes.clock(slot, ctx.now);
        self.nodes.node(slot).shutdown(clock);
        let process = self.nodes.slots[slot].process;
        // It serves nobody from now on: its visitors are re-queued elsewhere under the
        // admissions it made, as after a crash (a readmission, not a double one).
        self.nodes.alive[process as usize] = false;
        ctx.trace.note(ctx.now, "remove", &[slot as u64 + 1]);
        self.drain(ctx, slot);
        self.plan_at(ctx, ctx.now + GOODBYE_MS, Action::Stop(slot, process));
    }

    /// The operator's action `i` (`--operator`), made at a random serving node. When no node
    /// serves (the whole cluster is restarting), the operator tries again a little later, and
    /// makes the actions after it only once it went through, in their order: a restarted
    /// cluster keeps its live settings, so a change dropped would stay undone. Each of those
    /// waits for the answer to the one before (the admin API answers after three rounds), as
    /// an operator making one request at a time does: made at once at two nodes, two changes
    /// are concurrent, and the one written later on the reference clock (or, at the same
    /// instant, by the node with the larger id) ends up on top, whichever the operator meant
    /// last (waitingroom-distributed/README.md#live-settings).
    pub(super) fn operate(&mut self, ctx: &mut Ctx, i: usize) {
        if self.ops_waiting.first().is_some_and(|&first| first != i) {
            self.ops_waiting.push(i);
            return;
        }
        self.operated_last = Some((i, 0));
        if !self.make(ctx, i, false) {
            if self.ops_waiting.is_empty() {
                self.ops_waiting.push(i);
            }
            self.plan_at(ctx, ctx.now + OPERATOR_RETRY_MS, Action::Operate(i));
            return;
        }
        if self.ops_waiting.first() == Some(&i) {
            self.ops_waiting.remove(0);
            if let Some(&next) = self.ops_waiting.first() {
                let answered = ctx.now + 3 * self.settings.eviction_interval_ms;
                self.plan_at(ctx, answered, Action::Operate(next));
            }
        }
    }

    /// The operator asks whether a round carried the version its action `i` made, as the
    /// admin API answers (`"confirmed"`: a round of a root with a majority), and makes the
    /// action again at a serving node if not and nothing newer was made since: a change whose
    /// node died before any round carried it is lost, and one made on the minority side of a
    /// partition is not in force where visitors are let out
    /// (waitingroom-distributed/README.md#live-settings); the operator, told so, makes it again.
    pub(super) fn confirm(&mut self, ctx: &mut Ctx, i: usize, version: u64, author: NodeId) {
        if self
            .operated_last
            .is_none_or(|(last, made)| last != i || made >= OPERATOR_TRIES)
        {
            return;
        }
        let carried = (self.nodes.serving().to_vec().into_iter()).any(|s| {
            let summary = self.nodes.node(s as usize).summary();
            summary.is_some_and(|s| s.grants.is_some() && s.settings.includes(author, version))
        });
        if !carried {
            bump(&mut self.tallies.protocol_events, "operator-again");
            let _ = self.make(ctx, i, true);
        }
    }

    /// The serving nodes the operator may make a change at now. Told that a change was not
    /// confirmed (`again`), the operator makes it at a node whose status does not say it is cut
    /// off from the majority, if one serves.
    fn operable(&mut self, now: Time, again: bool) -> Vec<usize> {
        let serving: Vec<usize> = (self.nodes.serving().iter())
            .map(|&s| s as usize)
            .filter(|&s| !self.nodes.frozen(s, now))
            .collect();
        if !again {
            return serving;
        }
        let majority: Vec<usize> = (serving.iter().copied())
            .filter(|&s| {
                let clock = self.nodes.clock(s, now);
                self.nodes.node(s).pause(clock) != Some(Pause::NoMajority)
            })
            .collect();
        if majority.is_empty() {
            serving
        } else {
            majority
        }
    }

    /// Makes the operator's action `i` at a random serving node and plans the look at
    /// whether a round carried it. The node and seed of an action made `again` come from
    /// a stream of their own, so that the disturbances drawn after it stay those of a run
    /// whose operator needed no second try. Returns false when no node served to take it.
    fn make(&mut self, ctx: &mut Ctx, i: usize, again: bool) -> bool {
        let Some(op) = self.cfg.operator.operator.get(i).map(|o| o.what) else {
            return true;
        };
        if let Some((_, made)) = self.operated_last.as_mut() {
            *made += 1;
        }
        let serving = self.operable(ctx.now, again);
        if serving.is_empty() {
            bump(&mut self.tallies.protocol_events, "operator-skipped");
            return false;
        }
        let rng = if again {
            &mut self.operator_rng
        } else {
            &mut self.rng
        };
        let slot = serving[rng.random_range(0..serving.len())];
        let seed: [u8; 32] = rng.random();
        let clock = self.nodes.clock(slot, ctx.now);
        let mut patch = SettingsPatch::default();
        match op {
            OperatorAction::Target(n) => patch.target_on_site = Some(n),
            OperatorAction::Rate(r) => patch.new_users_per_minute = Some(r),
            OperatorAction::Mode(m) => patch.mode = Some(m),
            OperatorAction::Lottery(on) => {
                patch.queueing_method = Some(if on {
                    QueueingMethod::Random
                } else {
                    QueueingMethod::Fifo
                })
            }
            OperatorAction::Event {
                prequeue_ms,
                duration_ms,
                shuffle,
            } => {
                let node = self.nodes.node(slot);
                let now = node.reference_time(clock);
                let event = ScheduledEvent {
                    name: format!("e{i}"),
                    prequeue_start_ms: now,
                    start_ms: now + prequeue_ms,
                    end_ms: now + prequeue_ms + duration_ms,
                    shuffle_at_start: shuffle,
                    settings: Default::default(),
                    seed: None,
                };
                let r = node.add_event(clock, event, seed);
                self.made(ctx, i, slot, r);
                return true;
            }
            OperatorAction::Bypass => {
                self.bypass(ctx, slot, seed);
                return true;
            }
        }
        let r = self.nodes.node(slot).change_settings(clock, &patch, seed);
        if r.is_ok() {
            self.follow_target(ctx, op);
        }
        self.made(ctx, i, slot, r);
        true
    }

    /// The operator's action `i` was made at `slot` with result `r`: plans the look at whether
    /// a round carried it when the admin API would answer (after three rounds).
    fn made(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        slot: usize,
        r: Result<LiveSettings, SettingsError>,
    ) {
        match r {
            Ok(v) => {
                let at = ctx.now + 3 * self.settings.eviction_interval_ms;
                self.plan_at(ctx, at, Action::Confirm(i, v.version, v.author));
                self.operated(ctx, slot, None);
            }
            Err(e) => self.operated(ctx, slot, Some(e.to_string())),
        }
    }

    /// Tells the promises' checks which target bounds admissions after `op`.
    fn follow_target(&mut self, ctx: &mut Ctx, op: OperatorAction) {
        let bound = match op {
            OperatorAction::Target(n) => {
                self.target = n;
                (!self.passthrough).then_some(n)
            }
            OperatorAction::Mode(m) => {
                let was = std::mem::replace(&mut self.passthrough, m == Mode::Passthrough);
                match (was, self.passthrough) {
                    (false, true) => Some(Settings::UNLIMITED),
                    (true, false) => Some(self.target),
                    _ => None,
                }
            }
            _ => None,
        };
        if let (Some(bound), Some(p)) = (bound, ctx.promises.as_mut()) {
            p.target_changed(ctx.now, bound);
        }
    }

    fn operated(&mut self, ctx: &mut Ctx, slot: usize, refused: Option<String>) {
        ctx.trace.note(ctx.now, "operator", &[slot as u64 + 1]);
        if let Some(e) = refused {
            bump(
                &mut self.tallies.protocol_events,
                &format!("operator-refused: {e}"),
            );
        }
        self.drain(ctx, slot);
    }

    /// Mints a bypass pass and gives it back at the node in `slot`: every node must refuse it
    /// once the rounds have carried the release, once it is confirmed.
    fn bypass(&mut self, ctx: &mut Ctx, slot: usize, seed: [u8; 32]) {
        let clock = self.nodes.clock(slot, ctx.now);
        let id = u64::from_le_bytes(seed[..8].try_into().expect("8 bytes"));
        let pass = Pass {
            id: TicketId(id),
            node: NodeId(0),
            queue_join_time: clock,
            created_at: clock,
            issued_at: clock,
            expires_at: clock + BYPASS_MS,
            eviction_time: clock,
            round: None,
            draw: None,
        };
        let r = self.give_back_at(ctx, slot, &pass);
        self.operated(ctx, slot, r.clone().err().map(|e| e.to_string()));
        if r == Err(VisitorError::ReleasePending) {
            // Not confirmed: the operator gives it back again until it is.
            self.again_later(ctx, pass, 1);
        }
    }
}
