//! How much the node takes and how long it waits: request bodies, peer traffic, timeouts, joins
//! per client and the proxies whose word about a client's address is believed. Every bound
//! answers someone sending too much or too slowly (waitingroom-http/README.md#abuse-limits).

use clap::Args;
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::defaulted;
use crate::wire::client_addr::Cidr;

layered! {
    /// Transport and abuse limits.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Limits")]
    pub struct LimitOptions {
        /// Largest request body on visitor routes, bytes.
        #[arg(
            long,
            env = "WAITINGROOM_VISITOR_BODY_LIMIT",
            value_name = "BYTES",
            default_value = "16384"
        )]
        pub visitor_body_limit: Option<usize>,
        /// Largest request body on peer routes, bytes; a node also cuts what it sends to fit.
        /// Checked from the signed Content-Length before any body byte is read.
        #[arg(
            long,
            env = "WAITINGROOM_PEER_BODY_LIMIT",
            value_name = "BYTES",
            default_value = "1048576"
        )]
        pub peer_body_limit: Option<usize>,
        /// A peer request is accepted only within this distance of this node's clock, ms: a
        /// captured request is good for this long at most (and its nonce is remembered for
        /// twice as long). Nodes' clocks must agree within it.
        #[arg(
            long,
            env = "WAITINGROOM_PEER_CLOCK_WINDOW_MS",
            value_name = "MS",
            default_value = "5000"
        )]
        pub peer_clock_window_ms: Option<u64>,
        /// `/readyz` fails while a member's clock is measured (on the SWIM probes) further than
        /// this from this node's, beyond the measurement's error, ms: the balancer takes the
        /// node out before peers start refusing its requests and tokens. 0: never.
        #[arg(
            long,
            env = "WAITINGROOM_MAX_CLOCK_OFFSET_MS",
            value_name = "MS",
            default_value = "2000"
        )]
        pub max_clock_offset_ms: Option<u64>,
        /// Most peer request nonces remembered against replay (about 40 bytes each). When full
        /// of nonces younger than twice the clock window, peer requests get 503 until some
        /// expire.
        #[arg(
            long,
            env = "WAITINGROOM_PEER_REPLAY_CAPACITY",
            value_name = "N",
            default_value = "262144"
        )]
        pub peer_replay_capacity: Option<usize>,
        /// Most peer requests in progress at once; more get 503 with Retry-After at once (each
        /// may hold up to peer_body_limit of memory).
        #[arg(
            long,
            env = "WAITINGROOM_MAX_PEER_REQUESTS",
            value_name = "N",
            default_value = "64"
        )]
        pub max_peer_requests: Option<usize>,
        /// Most protocol messages queued for one peer; beyond it the oldest are dropped (the
        /// protocol resends what matters).
        #[arg(
            long,
            env = "WAITINGROOM_PEER_QUEUE_LIMIT",
            value_name = "N",
            default_value = "20000"
        )]
        pub peer_queue_limit: Option<usize>,
        /// Most protocol messages in one peer request.
        #[arg(
            long,
            env = "WAITINGROOM_PEER_BATCH_LIMIT",
            value_name = "N",
            default_value = "1024"
        )]
        pub peer_batch_limit: Option<usize>,
        /// Timeout of one peer request, ms.
        #[arg(
            long,
            env = "WAITINGROOM_PEER_TIMEOUT_MS",
            value_name = "MS",
            default_value = "2000"
        )]
        pub peer_timeout_ms: Option<u64>,
        /// Timeout of a visitor request forwarded to the node holding the ticket; past it the
        /// visitor is re-queued here under their original join time, ms.
        #[arg(
            long,
            env = "WAITINGROOM_FORWARD_TIMEOUT_MS",
            value_name = "MS",
            default_value = "1000"
        )]
        pub forward_timeout_ms: Option<u64>,
        /// A request head (request line and headers) must arrive whole within this long of the
        /// connection asking for it, ms; also the longest a kept-alive connection may sit idle
        /// between requests. Slower clients are disconnected.
        #[arg(
            long,
            env = "WAITINGROOM_HEADER_READ_TIMEOUT_MS",
            value_name = "MS",
            default_value = "10000"
        )]
        pub header_read_timeout_ms: Option<u64>,
        /// The longest a request may take from its head to its answer (a slow client's body
        /// included), ms; past it, 408 `request_timeout`. Above forward_timeout_ms, twice over:
        /// a forwarded request may wait for the batch ahead of it.
        #[arg(
            long,
            env = "WAITINGROOM_REQUEST_TIMEOUT_MS",
            value_name = "MS",
            default_value = "10000"
        )]
        pub request_timeout_ms: Option<u64>,
        /// On SIGTERM, how long to keep delivering the farewell before exiting, ms.
        #[arg(
            long,
            env = "WAITINGROOM_SHUTDOWN_GRACE_MS",
            value_name = "MS",
            default_value = "2000"
        )]
        pub shutdown_grace_ms: Option<u64>,
        /// Joins allowed per client per second, each node; 0 = no limit (benchmarks from one
        /// address). The client is the address a trusted proxy reports, else the TCP peer; IPv6
        /// by its /64. Generous for people (one join per visit; hundreds behind one NAT at a
        /// sale's start fit the burst), tight for a flood from one address.
        #[arg(
            long,
            env = "WAITINGROOM_JOIN_RATE_LIMIT",
            value_name = "N",
            default_value = "20"
        )]
        pub join_rate_limit: Option<u32>,
        /// Most joins one client may make at once before the rate applies. Without it: twice
        /// join_rate_limit.
        #[arg(long, env = "WAITINGROOM_JOIN_BURST", value_name = "N")]
        pub join_burst: Option<u32>,
        /// Header in which trusted proxies report the client's address; "" for none. Read only
        /// from trusted_proxies; its entries are read from the last (the one the proxy wrote),
        /// skipping trusted proxies.
        #[arg(
            long,
            env = "WAITINGROOM_CLIENT_IP_HEADER",
            value_name = "NAME",
            default_value = "x-forwarded-for"
        )]
        pub client_ip_header: Option<String>,
        /// Networks of the proxies (balancers) whose client_ip_header is believed,
        /// comma-separated CIDRs or addresses; "" for none. From anyone else the TCP peer
        /// address is the client.
        #[arg(
            long,
            env = "WAITINGROOM_TRUSTED_PROXIES",
            value_name = "CIDR,...",
            value_delimiter = ',',
            default_value = "127.0.0.0/8,::1"
        )]
        pub trusted_proxies: Option<Vec<String>>,
        /// Most requests in progress on the public listener; beyond it a request gets 503
        /// `overloaded` with Retry-After at once instead of waiting behind the others (/livez
        /// and /readyz are never refused).
        #[arg(
            long,
            env = "WAITINGROOM_MAX_PENDING_REQUESTS",
            value_name = "N",
            default_value = "4096"
        )]
        pub max_pending_requests: Option<usize>,
    }
}

/// Transport and abuse limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Visitor body limit, bytes.
    pub visitor_body: usize,
    /// Peer body limit, bytes.
    pub peer_body: usize,
    /// Accepted distance of a peer request's timestamp from the clock, ms.
    pub peer_clock_window_ms: u64,
    /// Largest measured clock offset to a member before `/readyz` fails, ms (0: no check).
    pub max_clock_offset_ms: u64,
    /// Most nonces in the replay cache.
    pub peer_replay_capacity: usize,
    /// Most peer requests in progress.
    pub max_peer_requests: usize,
    /// Per-peer queue bound, messages.
    pub peer_queue: usize,
    /// Messages per peer request.
    pub peer_batch: usize,
    /// Peer request timeout, ms.
    pub peer_timeout_ms: u64,
    /// Forwarded visitor request timeout, ms.
    pub forward_timeout_ms: u64,
    /// Header read (and keep-alive idle) timeout, ms.
    pub header_read_timeout_ms: u64,
    /// Whole-request timeout, ms.
    pub request_timeout_ms: u64,
    /// Shutdown grace, ms.
    pub shutdown_grace_ms: u64,
    /// Joins per client per second; 0 = off.
    pub join_rate_limit: u32,
    /// Most joins per client at once.
    pub join_burst: u32,
    /// Header in which trusted proxies report the client address.
    pub client_ip_header: Option<String>,
    /// Proxies whose header is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// Most requests in progress on the public listener.
    pub max_pending_requests: usize,
}

impl LimitOptions {
    /// Transport and abuse limits, each checked.
    pub(super) fn limits(&self) -> Result<Limits, SettingsError> {
        let join_rate_limit = defaulted(&self.join_rate_limit);
        let limits = Limits {
            visitor_body: defaulted(&self.visitor_body_limit),
            peer_body: defaulted(&self.peer_body_limit),
            peer_clock_window_ms: defaulted(&self.peer_clock_window_ms),
            max_clock_offset_ms: defaulted(&self.max_clock_offset_ms),
            peer_replay_capacity: defaulted(&self.peer_replay_capacity),
            max_peer_requests: defaulted(&self.max_peer_requests),
            peer_queue: defaulted(&self.peer_queue_limit),
            peer_batch: defaulted(&self.peer_batch_limit),
            peer_timeout_ms: defaulted(&self.peer_timeout_ms),
            forward_timeout_ms: defaulted(&self.forward_timeout_ms),
            header_read_timeout_ms: defaulted(&self.header_read_timeout_ms),
            request_timeout_ms: defaulted(&self.request_timeout_ms),
            shutdown_grace_ms: defaulted(&self.shutdown_grace_ms),
            join_rate_limit,
            join_burst: self
                .join_burst
                .unwrap_or_else(|| join_rate_limit.saturating_mul(2)),
            client_ip_header: self.client_ip_header()?,
            trusted_proxies: self.trusted_proxies()?,
            max_pending_requests: defaulted(&self.max_pending_requests),
        };
        check(&limits)?;
        Ok(limits)
    }

    /// The header trusted proxies report clients in (`None`: "" was given).
    fn client_ip_header(&self) -> Result<Option<String>, SettingsError> {
        let name = defaulted(&self.client_ip_header)
            .trim()
            .to_ascii_lowercase();
        if name.is_empty() {
            return Ok(None);
        }
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(SettingsError::new(
                "client_ip_header",
                "is not a valid header name",
            ));
        }
        Ok(Some(name))
    }

    /// The networks whose client-address header is believed.
    fn trusted_proxies(&self) -> Result<Vec<Cidr>, SettingsError> {
        defaulted(&self.trusted_proxies)
            .iter()
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
            .map(|c| {
                Cidr::parse(c).ok_or_else(|| {
                    SettingsError::new(
                        "trusted_proxies",
                        format!("`{c}` is not an address or a network like 10.0.0.0/8"),
                    )
                })
            })
            .collect()
    }
}

/// The limits that must not be 0, and the request timeout that must leave room for a forward.
fn check(limits: &Limits) -> Result<(), SettingsError> {
    for (field, value) in [
        ("visitor_body_limit", limits.visitor_body as u64),
        ("peer_body_limit", limits.peer_body as u64),
        ("peer_clock_window_ms", limits.peer_clock_window_ms),
        ("peer_replay_capacity", limits.peer_replay_capacity as u64),
        ("max_peer_requests", limits.max_peer_requests as u64),
        ("peer_queue_limit", limits.peer_queue as u64),
        ("peer_batch_limit", limits.peer_batch as u64),
        ("peer_timeout_ms", limits.peer_timeout_ms),
        ("forward_timeout_ms", limits.forward_timeout_ms),
        ("header_read_timeout_ms", limits.header_read_timeout_ms),
        ("request_timeout_ms", limits.request_timeout_ms),
        ("max_pending_requests", limits.max_pending_requests as u64),
    ] {
        if value == 0 {
            return Err(SettingsError::new(field, "must be greater than 0"));
        }
    }
    if limits.request_timeout_ms <= limits.forward_timeout_ms.saturating_mul(2) {
        return Err(SettingsError::new(
            "request_timeout_ms",
            "must exceed twice forward_timeout_ms (a forwarded request may wait that long)",
        ));
    }
    Ok(())
}
