//! The flags of `waitingroom-node load` (see the module above for what is measured).

use clap::Args;

/// The flags of `waitingroom-node load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Base URL of the cluster (the load balancer), `http://` or `https://` (checked against
    /// the system's certificate authorities); several comma-separated URLs are used in turn,
    /// request by request.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(super) url: Vec<String>,
    /// Visitors in total.
    #[arg(long, default_value_t = 1000)]
    pub(super) users: u64,
    /// Most visitors active (joined, not finished) at once; each has at most one request in
    /// flight.
    #[arg(long, default_value_t = 100)]
    pub(super) concurrency: usize,
    /// Spread the start of the first `--concurrency` visitors evenly over this many ms (0: all
    /// at once). Later visitors start as soon as a place frees up.
    #[arg(long, default_value_t = 0)]
    pub(super) ramp_up_ms: u64,
    /// Stop after this many seconds; visitors not admitted by then count as lost.
    #[arg(long, default_value_t = 600)]
    pub(super) max_seconds: u64,
    /// Stop after this many requests in total. [default: 200 per visitor]
    #[arg(long)]
    pub(super) max_requests: Option<u64>,
    /// Timeout of one request, ms.
    #[arg(long, default_value_t = 10_000)]
    pub(super) request_timeout_ms: u64,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub(super) json: bool,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 2)]
    pub(super) progress_s: u64,
    /// Write every pass handed out to this file, one JWS per line (for `waitingroom-node
    /// audit --passes`).
    #[arg(long, value_name = "FILE")]
    pub(super) save_passes: Option<std::path::PathBuf>,
    /// The balancer's affinity cookie (`scripts/cluster.sh`'s HAProxy sets `wr_node`): each
    /// visitor keeps it and sends it back, as a browser would, so that the balancer sends it to
    /// the node holding its ticket. No other cookie is kept: tickets travel in request bodies.
    /// Empty: none.
    #[arg(long, default_value = "wr_node", value_name = "NAME")]
    pub(super) affinity_cookie: String,
    /// Threads driving the visitors. One carries thousands of visitors at once and leaves the
    /// other cores to the cluster when both run on one machine; give it more on a machine of
    /// its own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also show every pass to this origin (`waitingroom-node origin`: `GET /` with the pass
    /// as a bearer token), which counts the passes valid at once as the site sees them.
    #[arg(long, value_name = "URL")]
    pub(super) origin: Option<String>,
    #[command(flatten)]
    pub(super) adversaries: Adversaries,
}

/// Visitors who play the rules, each a fraction of all visitors (drawn per visitor; the
/// fractions add up to at most 1, the rest are honest). See `adversary.rs`.
#[derive(Debug, Args)]
pub(super) struct Adversaries {
    /// Admitted visitors who keep checking in with the admitted ticket for `--bank-ms` before
    /// they leave.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub(super) banked: f64,
    /// How long a banked visitor keeps checking in after its admission, ms.
    #[arg(long, default_value_t = 25_000, value_name = "MS")]
    pub(super) bank_ms: u64,
    /// Visitors who refresh their first pass, again and again, at every node of `--node-url`.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub(super) refresh_elsewhere: f64,
    /// The nodes' own public base URLs (not the balancer's), for `--refresh-elsewhere`.
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub(super) node_url: Vec<String>,
    /// Visitors who leave twice with their ticket: once with the same Idempotency-Key, once
    /// with a new one.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub(super) replay_leave: f64,
    /// Visitors who stop checking in after a few check-ins and never come back (not lost).
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub(super) abandon: f64,
    /// Visitors who go away after a few check-ins for up to `--away-ms` and then come back
    /// with the ticket they had (joining again, as the page does, when it expired meanwhile).
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub(super) come_back: f64,
    /// The longest a `--come-back` visitor stays away, ms.
    #[arg(long, default_value_t = 20_000, value_name = "MS")]
    pub(super) away_ms: u64,
}
