//! Owns the protocol [`Node`] and its one timer.
//!
//! The node is a single-threaded state machine, so it lives behind one `std::sync::Mutex` that
//! is held only for the duration of one call (never across an `.await`). After every call the
//! driver drains what the node produced: messages go to the per-peer queues of the
//! [`Transport`], events to metrics and logs, and if the node's next deadline moved earlier the
//! timer task is woken. There is no task per visitor: one timer task sleeps until
//! [`Node::poll_timeout`].
//!
//! With a state directory, a call that changed the node's durable state
//! ([`Node::durable_changes`]) writes it to disk before its messages go out and before its
//! caller answers anyone (waitingroom-distributed/README.md#durable-state): a pass is never in
//! a visitor's hands, nor counted by a peer, before the state that counts it survives a crash.
//! Concurrent callers share one write: the one that writes takes the latest state, so the
//! others find theirs on disk already. A write appends the changes since the last one
//! ([`Node::take_durable_delta`]) to a journal, and rewrites the whole state only once the
//! journal has grown as large as it: the cost of keeping stays a constant per visitor let out
//! however many the room holds.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use waitingroom_core::Time;
use waitingroom_distributed::{Durable, DurableDelta, Event, Node, NodeStatus, Transmit};

use super::state_dir::StateDir;
use super::voters_file::Keeper;
use crate::clock::now_ms;
use crate::metrics::{FileLabels, Metrics};
use crate::peer::Transport;
use crate::round_log::RoundLog;

/// The node plus everything that must happen after each call into it.
#[derive(Debug)]
pub struct Driver {
    node: Mutex<Node>,
    /// Woken when the node's next deadline moved earlier than the timer's current target.
    wake: Notify,
    /// The deadline the timer task sleeps until (`u64::MAX`: none). Written under the node lock.
    armed: AtomicU64,
    transport: Arc<Transport>,
    metrics: Arc<Metrics>,
    /// The admission rounds' records (`crate::round_log`).
    rounds: RoundLog,
    /// Where the agreed voters are kept (`super::voters_file`).
    voters_file: Option<Keeper>,
    /// The state directory (`super::state_dir`) and what is on disk.
    state: Option<Kept>,
}

/// What the driver keeps in the state directory, and what is on disk.
#[derive(Debug)]
struct Kept {
    dir: StateDir,
    /// When the releases were last written: the node's change count then, and the time.
    releases: Mutex<(u64, Time)>,
    /// The node's state on disk; its lock is held while writing, so writes never overtake
    /// one another.
    durable: Mutex<Disk>,
    /// The durable-change count on disk, read without waiting for a write in flight.
    written: AtomicU64,
    /// Whether the last write of the node's state failed.
    node_failing: AtomicBool,
    /// Whether the last write of the releases failed.
    releases_failing: AtomicBool,
}

/// The node's state on disk (`super::state_dir`): a whole file and the journal after it.
#[derive(Debug)]
struct Disk {
    /// The durable-change count on disk.
    saved: u64,
    /// The generation of the whole file on disk; None when the next write must be whole (none
    /// yet, or a write failed and its changes are not in the journal).
    generation: Option<u64>,
    /// The bytes of the whole file, and of the journal after it.
    whole_bytes: u64,
    journal_bytes: u64,
}

/// What to write of the node's state.
enum Write {
    Whole(Durable, u64),
    Append(DurableDelta, u64),
}

/// Smallest journal rewritten into a whole file: past it, and past the whole file's own size,
/// the next write is whole (so appending costs a constant per change, rewriting included).
const JOURNAL_MIN_BYTES: u64 = 1 << 20;

impl Disk {
    /// The write that keeps the node's changes since the last: the delta, appended, unless
    /// the journal has grown as large as the whole file or no whole file is known good. Takes
    /// the delta in any case, so that the next one starts here.
    fn next_write(&self, node: &mut Node) -> Write {
        let delta = node.take_durable_delta();
        let journal_full = self.journal_bytes > self.whole_bytes.max(JOURNAL_MIN_BYTES);
        match (self.generation, delta) {
            (Some(generation), Some(delta)) if !journal_full => Write::Append(delta, generation),
            _ => Write::Whole(node.durable(), rand::random()),
        }
    }
}

/// Least time between two writes of the releases file: under many releases it is rewritten
/// once a second at most, not at every one.
const RELEASES_WRITE_MS: Time = 1_000;

impl Driver {
    /// Wraps a node that has not been started yet; its round records go to `rounds`.
    pub fn new(
        node: Node,
        transport: Arc<Transport>,
        metrics: Arc<Metrics>,
        rounds: RoundLog,
    ) -> Self {
        Driver {
            node: Mutex::new(node),
            wake: Notify::new(),
            armed: AtomicU64::new(u64::MAX),
            transport,
            metrics,
            rounds,
            voters_file: None,
            state: None,
        }
    }

    /// Keeps what a restart must not forget in `state` from now on (`--state-dir`); the node
    /// was given back what it held.
    pub fn keep_state_in(mut self, dir: StateDir) -> Self {
        let (releases, durable) = {
            let node = self.lock();
            (node.releases_changed(), node.durable_changes())
        };
        self.state = Some(Kept {
            dir,
            releases: Mutex::new((releases, 0)),
            // Nothing counted as written: the first call writes what the node starts from.
            durable: Mutex::new(Disk {
                saved: durable.wrapping_sub(1),
                generation: None,
                whole_bytes: 0,
                journal_bytes: 0,
            }),
            written: AtomicU64::new(durable.wrapping_sub(1)),
            node_failing: AtomicBool::new(false),
            releases_failing: AtomicBool::new(false),
        });
        self
    }

    /// Whether the durable state moved past what is on disk (`changes`: the node's count now).
    fn durable_unsaved(&self, changes: u64) -> bool {
        (self.state.as_ref()).is_some_and(|k| k.written.load(Ordering::Acquire) != changes)
    }

    /// Keeps the node's durable state in the state directory if it changed since last kept:
    /// the changes appended to the journal, or the whole (`Disk::next_write`), taken under the
    /// write lock. A failure is logged and counted, and the next call writes the whole.
    fn save_durable(&self) {
        let Some(kept) = &self.state else {
            return;
        };
        let mut disk = kept.durable.lock().unwrap_or_else(PoisonError::into_inner);
        let (changes, write) = {
            let mut node = self.lock();
            let changes = node.durable_changes();
            if changes == disk.saved {
                return;
            }
            (changes, disk.next_write(&mut node))
        };
        let written = match write {
            Write::Whole(durable, generation) => {
                let bytes = kept.dir.write_durable(&durable, generation);
                bytes.map(|bytes| {
                    disk.generation = Some(generation);
                    (disk.whole_bytes, disk.journal_bytes) = (bytes, 0);
                })
            }
            Write::Append(delta, generation) => {
                let bytes = kept.dir.append_durable(delta, generation);
                bytes.map(|bytes| disk.journal_bytes += bytes)
            }
        };
        (kept.node_failing).store(written.is_err(), Ordering::Release);
        match written {
            Ok(()) => {
                disk.saved = changes;
                kept.written.store(changes, Ordering::Release);
            }
            Err(e) => {
                disk.generation = None;
                self.metrics
                    .state_write_failures
                    .get_or_create(&FileLabels { file: "node" })
                    .inc();
                tracing::error!(error = %e, path = %kept.dir.node_path().display(),
                    "state dir: cannot write the node's state; a restart of the whole cluster \
                     would forget the passes given since")
            }
        }
    }

    /// Writes the releases to the state directory if they changed since last written (and the
    /// last write is a second old). A failure is logged and counted, and tried again.
    fn save_releases(&self) {
        let Some(Kept {
            dir: state,
            releases: saved,
            releases_failing,
            ..
        }) = &self.state
        else {
            return;
        };
        let mut saved = saved.lock().unwrap_or_else(PoisonError::into_inner);
        let now = now_ms();
        let (changes, releases) = {
            let node = self.lock();
            let changes = node.releases_changed();
            if changes == saved.0 || now < saved.1.saturating_add(RELEASES_WRITE_MS) {
                return;
            }
            (changes, node.releases())
        };
        saved.1 = now;
        let count = releases.len();
        let written = state.write_releases(releases);
        releases_failing.store(written.is_err(), Ordering::Release);
        match written {
            Ok(()) => {
                tracing::debug!(count, "releases kept on disk");
                saved.0 = changes;
            }
            Err(e) => {
                self.metrics
                    .state_write_failures
                    .get_or_create(&FileLabels { file: "releases" })
                    .inc();
                tracing::error!(error = %e, path = %state.releases_path().display(),
                    "state dir: cannot write the releases; a restart of the whole cluster \
                     would forget the passes given back since")
            }
        }
    }

    /// Keeps the agreed voters in `path` from now on (`--voters-file`); the node was given back
    /// those the file holds.
    pub fn keep_voters_in(mut self, path: PathBuf) -> Self {
        let saved = self.lock().agreed_voters().cloned();
        self.voters_file = Some(Keeper::new(path, saved));
        self
    }

    /// Leaves the cluster (`Node::shutdown`): the farewell tells every member at once. With a
    /// voters file, the node first hands its vote on (`Node::resignation`), kept on disk before
    /// the farewell carries it, all under the node's lock so that no round moves the voters in
    /// between: a survivor of two then goes on whichever node left. Without one it must not
    /// (its next life would vote again), and a survivor of two whose lower id left pauses.
    pub fn leave_cluster(&self) {
        self.with(|node, now| {
            if let (Some(keeper), Some(next)) = (&self.voters_file, node.resignation()) {
                keeper.save(node.id(), next.clone(), &self.metrics);
                if !keeper.is_failing() {
                    tracing::info!(epoch = next.epoch, voters = ?next.set,
                        "handing this node's vote on to the voters that stay");
                    node.remember_voters(&next);
                }
            }
            node.shutdown(now);
        });
    }

    /// Whether the farewell is through: every reliable message acknowledged, and every message
    /// queued for a peer handed to it (the farewell itself is sent once, unacknowledged: a
    /// process that exits before its sender ran would lose it).
    pub fn is_drained(&self) -> bool {
        self.read(Node::is_drained) && self.transport.is_idle()
    }

    /// Whether the state directory could not be written at the last try (the node's state or
    /// the releases).
    pub fn state_dir_failing(&self) -> bool {
        let failing = |k: &Kept| {
            k.node_failing.load(Ordering::Acquire) || k.releases_failing.load(Ordering::Acquire)
        };
        self.state.as_ref().is_some_and(failing)
    }

    /// Whether the last write of the voters file failed.
    pub fn voters_file_failing(&self) -> bool {
        self.voters_file.as_ref().is_some_and(Keeper::is_failing)
    }

    /// Writes the agreed voters to the voters file if they changed since last written. Called
    /// after each timer (results, which move them, come in between): a few ms late at most.
    fn save_voters(&self) {
        let Some(keeper) = &self.voters_file else {
            return;
        };
        // Compared in place: a copy only when they changed (rarely), not on every timer.
        let (me, now) = {
            let node = self.lock();
            match node.agreed_voters() {
                Some(v) if keeper.needs(v) => (node.id(), v.clone()),
                _ => return,
            }
        };
        keeper.save(me, now, &self.metrics);
    }

    /// The admission rounds' records this node keeps.
    pub fn rounds(&self) -> &RoundLog {
        &self.rounds
    }

    fn lock(&self) -> MutexGuard<'_, Node> {
        // A panic while holding the lock would be a bug in the protocol crate; keep serving
        // rather than turning every later request into a panic too.
        self.node.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the node and the current time, keeps the durable state if it changed,
    /// then delivers its outputs.
    pub fn with<R>(&self, f: impl FnOnce(&mut Node, Time) -> R) -> R {
        let mut out: Vec<Transmit> = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        let unreachable = self.transport.take_unreachable();
        let (r, unsaved) = {
            let mut node = self.lock();
            for addr in &unreachable {
                node.report_unreachable(addr);
            }
            let r = f(&mut node, now_ms());
            while let Some(t) = node.poll_transmit() {
                out.push(t);
            }
            while let Some(e) = node.poll_event() {
                events.push(e);
            }
            let deadline = node.poll_timeout().unwrap_or(u64::MAX);
            if deadline < self.armed.load(Ordering::Acquire) {
                self.armed.store(deadline, Ordering::Release);
                self.wake.notify_one();
            }
            (r, self.durable_unsaved(node.durable_changes()))
        };
        if unsaved {
            self.save_durable();
        }
        if !out.is_empty() {
            self.transport.send_all(out);
        }
        for e in events {
            self.on_event(e);
        }
        r
    }

    /// Reads the node without changing it.
    pub fn read<R>(&self, f: impl FnOnce(&Node) -> R) -> R {
        f(&self.lock())
    }

    /// The node's status for operators.
    pub fn status(&self) -> NodeStatus {
        self.read(|node| node.status(now_ms()))
    }

    /// Runs the node's timer until the process exits: sleeps until the next deadline (or until
    /// woken because it moved), then fires it.
    pub async fn run_timer(self: Arc<Self>) {
        loop {
            let deadline = {
                let node = self.lock();
                let d = node.poll_timeout().unwrap_or(u64::MAX);
                self.armed.store(d, Ordering::Release);
                d
            };
            let now = now_ms();
            if deadline <= now {
                self.with(|node, now| node.handle_timeout(now));
                self.save_voters();
                self.save_releases();
                continue;
            }
            let sleep = Duration::from_millis((deadline - now).min(60_000));
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    fn on_event(&self, e: Event) {
        match e {
            Event::Admitted { key, at, .. } => self.metrics.on_admitted(key.join_time, at),
            Event::Joined { version } => tracing::info!(version, "joined the cluster"),
            Event::Rejoining => tracing::warn!("the cluster dropped this node; rejoining"),
            Event::MemberAdded(c) => {
                tracing::info!(id = c.id.0, addr = %c.addr, "member added")
            }
            Event::MemberRemoved(c) => {
                tracing::info!(id = c.id.0, addr = %c.addr, "member removed")
            }
            Event::MemberFailed(c) => {
                tracing::warn!(id = c.id.0, addr = %c.addr, "member failed (no probe answer)")
            }
            Event::CountCompleted(s) => {
                self.metrics.on_round_completed();
                tracing::debug!(
                    queued = s.queued,
                    on_site = s.on_site,
                    admitted = s.admitted,
                    members = s.members,
                    "count completed"
                )
            }
            Event::TreeRepaired => {
                self.metrics.on_tree_repaired();
                tracing::warn!("no count seen for too long: tree rebuilt")
            }
            Event::AdmissionPaused(why) => {
                tracing::warn!(
                    reason = why.as_str(),
                    "admission paused: letting nobody out"
                )
            }
            Event::AdmissionResumed => tracing::info!("admission resumed"),
            Event::RoundRecorded(record) => {
                let link = self.rounds.record(&record);
                self.with(|node, _| node.record_linked(record.round, link));
            }
            Event::SettingsChanged(l) => tracing::info!(
                version = l.version,
                author = l.author.0,
                target_on_site = l.target_on_site,
                new_users_per_minute = l.new_users_per_minute,
                mode = l.mode.name(),
                pass_expiry_ms = l.pass_expiry_ms,
                session_duration_ms = l.session_duration_ms,
                "live settings changed"
            ),
            Event::SettingsChangeDropped { field, reason } => tracing::warn!(
                field,
                reason,
                "an operator's change made here no longer fits on top of a concurrent one: dropped"
            ),
        }
    }
}
