//! One node's state, assembled: [`App`] is what every handler gets. It exists so that the parts
//! a request touches are built once, in one place, and shared.
//!
//! - `operations.rs`: what a node does for a visitor (join, check in, leave, passes), as the
//!   visitor API and the waiting page both call it: verify the token, ask the node, forward to
//!   the node holding the ticket, sign the answer;
//! - `driver.rs`: owns the protocol [`Node`] and its one timer;
//! - `leaves.rs`: passes kept a minute so a leave whose answer was lost can be repeated;
//! - `rate_limit.rs`: the per-client join limit;
//! - `voters_file.rs`: the majority rule's voters, kept on disk across restarts;
//! - `readiness.rs`: whether a balancer should send visitors here (`/readyz`), and why not;
//! - `records_sync.rs`: the round records this node missed, filled in from its peers;
//! - `state_dir.rs`: `--state-dir`, what a restart must not forget (the passes given back).

pub(crate) mod driver;
pub(crate) mod leaves;
pub(crate) mod operations;
pub(crate) mod rate_limit;
pub(crate) mod readiness;
pub(crate) mod records_sync;
pub(crate) mod state_dir;
pub(crate) mod voters_file;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use waitingroom_core::{NodeId, SettingsError};
use waitingroom_distributed::Node;

use crate::config::ServerConfig;
use crate::crypto::Crypto;
use crate::html::Page;
use crate::metrics::Metrics;
use crate::peer::Transport;
use crate::peer::auth::PeerAuthError;
use crate::peer::replay::ReplayCache;
use crate::round_log::RoundLog;
use driver::Driver;
use leaves::RecentLeaves;
use rate_limit::RateLimiter;

/// Why a request may be shed at once with 503 (`waitingroom_requests_shed_total{reason}`):
/// too many in progress on the public routes, too many peer requests, a full replay cache.
pub const SHED_REASONS: [&str; 3] = ["overloaded", "peer_busy", "replay_cache_full"];

/// Everything a handler needs.
#[derive(Debug)]
pub struct App {
    /// The node.
    pub(crate) driver: Arc<Driver>,
    /// Keys.
    pub crypto: Arc<Crypto>,
    /// Peer traffic.
    pub(crate) transport: Arc<Transport>,
    /// Metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// Configuration.
    pub(crate) cfg: Arc<ServerConfig>,
    /// The waiting page template.
    pub(crate) page: Page,
    /// Per-client join limit.
    pub(crate) join_limit: RateLimiter,
    /// Passes handed out lately, so a leave whose answer was lost can be repeated.
    pub(crate) recent_leaves: RecentLeaves,
    /// Nonces of the peer requests accepted lately (see [`crate::peer::auth`]).
    pub(crate) replay: ReplayCache,
    /// One permit per peer request in progress (`max_peer_requests`).
    pub(crate) peer_slots: Arc<tokio::sync::Semaphore>,
    /// Requests in progress on the public routes (`max_pending_requests`).
    pub(crate) pending: AtomicUsize,
    /// The last readiness answer (`readiness`).
    readiness: readiness::Readiness,
    stopping: AtomicBool,
}

impl App {
    /// Assembles the state.
    pub fn new(
        driver: Arc<Driver>,
        crypto: Arc<Crypto>,
        transport: Arc<Transport>,
        metrics: Arc<Metrics>,
        cfg: Arc<ServerConfig>,
    ) -> Self {
        App {
            page: Page::new(
                &cfg.branding,
                &cfg.cookies.leave_key,
                cfg.settings.ticket_expiry_ms,
            ),
            join_limit: RateLimiter::new(cfg.limits.join_rate_limit, cfg.limits.join_burst),
            pending: AtomicUsize::new(0),
            recent_leaves: RecentLeaves::default(),
            replay: ReplayCache::new(
                cfg.limits.peer_replay_capacity,
                cfg.limits.peer_clock_window_ms,
            ),
            peer_slots: Arc::new(tokio::sync::Semaphore::new(cfg.limits.max_peer_requests)),
            driver,
            crypto,
            transport,
            metrics,
            cfg,
            readiness: readiness::Readiness::default(),
            stopping: AtomicBool::new(false),
        }
    }

    /// Builds the whole state of one node around `node` (a protocol node, started or not):
    /// metrics, the peer transport (sending with `client`) and the driver. Spawns nothing: the
    /// caller runs `Driver::run_timer` and serves [`crate::api::router`]. The caller gave the
    /// node back what its files keep (`voters_file::restore`, the state directory's releases):
    /// a file that cannot be read back stops the start there.
    pub fn assemble(
        cfg: Arc<ServerConfig>,
        crypto: Arc<Crypto>,
        node: Node,
        client: reqwest::Client,
    ) -> Arc<Self> {
        let metrics = Arc::new(Metrics::new());
        Metrics::declare(&metrics.peer_auth_failures, &PeerAuthError::REASONS);
        Metrics::declare(&metrics.shed, &SHED_REASONS);
        metrics.set_readiness(&readiness::REASONS, Some("not_ready"));
        let transport = Arc::new(Transport::new(
            client,
            crypto.clone(),
            cfg.limits.clone(),
            metrics.clone(),
            node.id(),
        ));
        let kept = cfg.rounds_kept;
        let rounds = match &cfg.rounds_log {
            Some(path) => RoundLog::with_file(crypto.clone(), kept, path).unwrap_or_else(|e| {
                tracing::error!(error = %e, path = %path.display(),
                    "rounds log: cannot read it; keeping records in memory only");
                RoundLog::new(crypto.clone(), kept)
            }),
            None => RoundLog::new(crypto.clone(), kept),
        };
        let mut node = node;
        if let Some((round, link)) = rounds.last() {
            // After a restart, a record this node decides as root follows the last one logged.
            node.resume_records(round, link);
        }
        let driver = Driver::new(node, transport.clone(), metrics.clone(), rounds);
        let driver = match &cfg.voters_file {
            Some(path) => driver.keep_voters_in(path.clone()),
            None => driver,
        };
        let driver = Arc::new(match &cfg.state_dir {
            Some(dir) => driver.keep_state_in(state_dir::StateDir::new(dir.clone())),
            None => driver,
        });
        Arc::new(App::new(driver, crypto, transport, metrics, cfg))
    }

    /// A node that has started a cluster of its own, in this process: for in-process tests and
    /// fuzzing through [`crate::api::router`] (no socket, no signal handling). Its id is
    /// `cfg.node_id` (default 1), its incarnation 1 and its random seed 0, so runs repeat.
    /// No timer task runs: without `Driver::run_timer` nobody is let out of the queue.
    pub fn single_node(
        cfg: ServerConfig,
        crypto: Crypto,
        client: reqwest::Client,
    ) -> Result<Arc<Self>, SettingsError> {
        let id = cfg.node_id.unwrap_or(NodeId(1));
        let addr = cfg
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{}", cfg.listen));
        let node = Node::new(cfg.node_config(id, 1, &addr, 0))?;
        let app = Self::assemble(Arc::new(cfg), Arc::new(crypto), node, client);
        // A lone member sends nothing when it starts, so this needs no runtime.
        app.driver.with(|node, now| node.start_cluster(now));
        Ok(app)
    }

    /// From now on visitor routes answer 503 and `/readyz` fails, so balancers move away.
    pub fn begin_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}
