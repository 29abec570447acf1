//! Shared state of the HTTP handlers, and the per-client join limit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use waitingroom_core::{NodeId, SettingsError, Time};
use waitingroom_distributed::Node;

use crate::config::ServerConfig;
use crate::crypto::Crypto;
use crate::driver::Driver;
use crate::leaves::RecentLeaves;
use crate::metrics::Metrics;
use crate::page::Page;
use crate::peer::Transport;

/// Everything a handler needs.
#[derive(Debug)]
pub struct App {
    /// The node.
    pub driver: Arc<Driver>,
    /// Keys.
    pub crypto: Arc<Crypto>,
    /// Peer traffic.
    pub transport: Arc<Transport>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Configuration.
    pub cfg: Arc<ServerConfig>,
    /// The waiting page template.
    pub page: Page,
    /// Per-client join limit.
    pub join_limit: RateLimiter,
    /// Passes handed out lately, so a leave whose answer was lost can be repeated.
    pub recent_leaves: RecentLeaves,
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
            page: Page::new(&cfg.branding),
            join_limit: RateLimiter::new(cfg.limits.join_rate_limit),
            recent_leaves: RecentLeaves::default(),
            driver,
            crypto,
            transport,
            metrics,
            cfg,
            stopping: AtomicBool::new(false),
        }
    }

    /// Builds the whole state of one node around `node` (a protocol node, started or not):
    /// metrics, the peer transport (sending with `client`) and the driver. Spawns nothing: the
    /// caller runs [`Driver::run_timer`] and serves [`crate::api::router`].
    pub fn assemble(
        cfg: Arc<ServerConfig>,
        crypto: Arc<Crypto>,
        node: Node,
        client: reqwest::Client,
    ) -> Arc<Self> {
        let metrics = Arc::new(Metrics::new());
        let transport = Arc::new(Transport::new(
            client,
            crypto.clone(),
            cfg.limits.clone(),
            metrics.clone(),
        ));
        let driver = Arc::new(Driver::new(node, transport.clone(), metrics.clone()));
        Arc::new(App::new(driver, crypto, transport, metrics, cfg))
    }

    /// A node that has started a cluster of its own, in this process: for in-process tests and
    /// fuzzing through [`crate::api::router`] (no socket, no signal handling). Its id is
    /// `cfg.node_id` (default 1), its incarnation 1 and its random seed 0, so runs repeat.
    /// No timer task runs: without [`Driver::run_timer`] nobody is let out of the queue.
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

/// A token bucket per client: `rate` per second, bursts of `rate`. 0 disables it.
///
/// Each node keeps its own buckets: behind a balancer spreading one client over N nodes, that
/// client gets up to N times the rate.
///
/// Memory is bounded: when the table grows past [`RateLimiter::MAX_CLIENTS`] every client whose
/// bucket is full again is forgotten (a full bucket is the same as no entry).
#[derive(Debug)]
pub struct RateLimiter {
    rate: u32,
    buckets: Mutex<HashMap<String, (f64, Time)>>,
}

impl RateLimiter {
    /// Most clients remembered before a sweep.
    pub const MAX_CLIENTS: usize = 100_000;

    /// A limiter allowing `rate` per second per client (0: unlimited).
    pub fn new(rate: u32) -> Self {
        RateLimiter {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `client` may act now; takes a token when it may.
    pub fn allow(&self, client: &str, now: Time) -> bool {
        if self.rate == 0 {
            return true;
        }
        let rate = f64::from(self.rate);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= Self::MAX_CLIENTS && !buckets.contains_key(client) {
            let full_after_ms = 1000.0;
            buckets.retain(|_, (_, last)| (now.saturating_sub(*last) as f64) < full_after_ms);
            if buckets.len() >= Self::MAX_CLIENTS {
                // Still full of active clients: refuse newcomers rather than grow.
                return false;
            }
        }
        let (tokens, last) = buckets.entry(client.to_owned()).or_insert((rate, now));
        let elapsed = now.saturating_sub(*last) as f64 / 1000.0;
        *tokens = (*tokens + elapsed * rate).min(rate);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills() {
        let l = RateLimiter::new(2);
        assert!(l.allow("a", 0));
        assert!(l.allow("a", 0));
        assert!(!l.allow("a", 0));
        assert!(l.allow("b", 0), "other clients are not affected");
        assert!(l.allow("a", 500));
        assert!(!l.allow("a", 500));
        assert!(RateLimiter::new(0).allow("a", 0));
    }
}
