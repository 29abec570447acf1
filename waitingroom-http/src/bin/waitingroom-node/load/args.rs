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
}
