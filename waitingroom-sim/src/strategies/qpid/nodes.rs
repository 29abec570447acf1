//! The node processes of the simulated cluster, by slot: slot `i` holds node id `i + 1`, reached
//! at address `n{i + 1}`. A slot outlives its processes: a restart puts a new process (a new
//! `Node` with a higher incarnation) into the same slot.

use waitingroom_core::{NodeId, Time};
use waitingroom_distributed::released::Release;
use waitingroom_distributed::voters::Voters;
use waitingroom_distributed::{Durable, Node};

/// What a node's state directory holds when its process stops: taken at the stop, as a driver
/// that writes its state before it answers anyone after a change would have it.
pub(super) struct Kept {
    pub(super) durable: Durable,
    pub(super) releases: Vec<Release>,
    /// The voters it last agreed on (the state directory's `voters.json`).
    pub(super) voters: Option<Voters>,
}

/// One node id's place in the cluster: the running node, if any, and its bookkeeping.
#[derive(Default)]
pub(super) struct Slot {
    /// The running node; None while crashed.
    pub(super) node: Option<Node>,
    /// Number of the node process now running in this slot (restarts get a new one).
    pub(super) process: u32,
    /// When this slot's timer event is scheduled (None: not scheduled).
    pub(super) timer_at: Option<Time>,
    /// Highest incarnation this slot has had, so a restart comes back with a higher one.
    pub(super) incarnation: u64,
    /// How far the running process' clock is ahead of true time (`--clock-skew-ms`).
    pub(super) skew: i64,
    /// Steps of the machine's wall clock since the running process started: the process
    /// does not follow them (the server's clock is the wall clock at its start plus monotonic
    /// time since: waitingroom-http/src/clock.rs), the next one started here reads them.
    pub(super) stepped: i64,
    /// The process is stopped (frozen) until then.
    pub(super) frozen_until: Time,
    /// When the running process started.
    pub(super) since: Time,
    /// What the last process that ran here kept (`--state-dir`), once one stopped.
    pub(super) kept: Option<Kept>,
}

impl Slot {
    /// The process' clock at true time `now`.
    pub(super) fn clock(&self, now: Time) -> Time {
        now.saturating_add_signed(self.skew)
    }

    /// True time when the process' clock reads `t`.
    pub(super) fn true_time(&self, t: Time) -> Time {
        t.saturating_add_signed(-self.skew)
    }
}

/// Every slot, and which node processes still run.
#[derive(Default)]
pub(super) struct Nodes {
    /// By slot.
    pub(super) slots: Vec<Slot>,
    /// Whether each node process (by number) is still running.
    pub(super) alive: Vec<bool>,
    /// Whether each slot's node serves visitors (runs and is a member), and those slots in
    /// order, as of the last look at each node (`Nodes::looked_at`, after every call into a
    /// node). The load balancer asks on every visitor operation; asking the nodes themselves
    /// touched every node for every arrival.
    serves: Vec<bool>,
    serving: Vec<u32>,
    /// Freezes so far (none: nothing is ever frozen, and nobody needs to ask).
    pub(super) freezes: u32,
}

impl Nodes {
    /// Whether the node in `slot` serves visitors (runs and is a member).
    pub(super) fn is_serving(&self, slot: usize) -> bool {
        let serves = self.serves.get(slot).copied().unwrap_or(false);
        debug_assert_eq!(
            serves,
            self.asks_serving(slot),
            "a node changed phase unseen"
        );
        serves
    }

    /// Whether the process in `slot` is frozen at `now`.
    pub(super) fn frozen(&self, slot: usize, now: Time) -> bool {
        self.freezes > 0 && self.slots[slot].frozen_until > now
    }

    /// The serving slots, in order.
    pub(super) fn serving(&self) -> &[u32] {
        &self.serving
    }

    /// Notes whether the node in `slot` serves now: called after anything was asked of it.
    pub(super) fn looked_at(&mut self, slot: usize) {
        let serves = self.asks_serving(slot);
        if slot >= self.serves.len() {
            self.serves.resize(slot + 1, false);
        }
        if self.serves[slot] == serves {
            return;
        }
        self.serves[slot] = serves;
        match self.serving.binary_search(&(slot as u32)) {
            Ok(i) => {
                self.serving.remove(i);
            }
            Err(i) => self.serving.insert(i, slot as u32),
        }
    }

    fn asks_serving(&self, slot: usize) -> bool {
        self.slots[slot]
            .node
            .as_ref()
            .is_some_and(|n| n.is_member())
    }

    /// The addresses of the serving nodes but `except`.
    pub(super) fn serving_addrs(&self, except: usize) -> Vec<String> {
        self.serving
            .iter()
            .map(|&s| s as usize)
            .filter(|&s| s != except)
            .map(addr)
            .collect()
    }

    /// The slots whose node runs.
    pub(super) fn alive_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&s| self.slots[s].node.is_some())
            .collect()
    }

    /// The running node in `slot`.
    pub(super) fn node(&mut self, slot: usize) -> &mut Node {
        self.slots[slot]
            .node
            .as_mut()
            .expect("route and forward only pick live nodes")
    }

    /// Stops the node in `slot` abruptly; false if none ran there.
    pub(super) fn stop(&mut self, slot: usize) -> bool {
        let s = &mut self.slots[slot];
        let Some(node) = s.node.take() else {
            return false;
        };
        s.incarnation = s.incarnation.max(node.contact().incarnation);
        s.kept = Some(Kept {
            durable: node.durable(),
            releases: node.releases(),
            voters: node.agreed_voters().cloned(),
        });
        s.timer_at = None;
        self.alive[s.process as usize] = false;
        self.looked_at(slot);
        true
    }

    /// Puts `node` into `slot` as a new process.
    pub(super) fn put(
        &mut self,
        slot: usize,
        node: Node,
        (incarnation, skew, since): (u64, i64, Time),
    ) {
        let process = self.alive.len() as u32;
        self.alive.push(true);
        let s = &mut self.slots[slot];
        s.node = Some(node);
        s.process = process;
        s.timer_at = None;
        s.incarnation = incarnation;
        s.skew = skew;
        s.frozen_until = 0;
        s.since = since;
        self.looked_at(slot);
    }

    /// The clock of the process in `slot` at true time `now`.
    pub(super) fn clock(&self, slot: usize, now: Time) -> Time {
        self.slots[slot].clock(now)
    }
}

/// The address of the node in `slot`.
pub(super) fn addr(slot: usize) -> String {
    format!("n{}", slot + 1)
}

/// The slot of the node at `addr`, if it is one of the first `slots`.
pub(super) fn slot_of_addr(addr: &str, slots: usize) -> Option<usize> {
    let id: usize = addr.strip_prefix('n')?.parse().ok()?;
    (1..=slots).contains(&id).then(|| id - 1)
}

/// The slot of node `id`, if it is one of the first `slots`.
pub(super) fn slot_of_id(id: NodeId, slots: usize) -> Option<usize> {
    let id = usize::try_from(id.0).ok()?;
    (1..=slots).contains(&id).then(|| id - 1)
}
