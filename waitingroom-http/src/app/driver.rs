//! Owns the protocol [`Node`] and its one timer.
//!
//! The node is a single-threaded state machine, so it lives behind one `std::sync::Mutex` that
//! is held only for the duration of one call (never across an `.await`). After every call the
//! driver drains what the node produced: messages go to the per-peer queues of the
//! [`Transport`], events to metrics and logs, and if the node's next deadline moved earlier the
//! timer task is woken. There is no task per visitor: one timer task sleeps until
//! [`Node::poll_timeout`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use waitingroom_core::Time;
use waitingroom_distributed::{Event, Node, NodeStatus, Transmit};

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
    /// The state directory (`super::state_dir`), and when the releases were last written:
    /// the node's change count then, and the time.
    state: Option<(StateDir, Mutex<(u64, Time)>)>,
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
    pub fn keep_state_in(mut self, state: StateDir) -> Self {
        let changes = self.lock().releases_changed();
        self.state = Some((state, Mutex::new((changes, 0))));
        self
    }

    /// Writes the releases to the state directory if they changed since last written (and the
    /// last write is a second old). A failure is logged and counted, and tried again.
    fn save_releases(&self) {
        let Some((state, saved)) = &self.state else {
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
        match state.write_releases(releases) {
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

    /// Whether the voters file could not be written at the last try.
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

    /// Calls `f` with the node and the current time, then delivers its outputs.
    pub fn with<R>(&self, f: impl FnOnce(&mut Node, Time) -> R) -> R {
        let mut out: Vec<Transmit> = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        let unreachable = self.transport.take_unreachable();
        let r = {
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
            r
        };
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
