//! Node configuration: one flat set of settings read from a TOML file, `WAITINGROOM_*`
//! environment variables and command-line flags (flags win, then the environment, then the
//! file, then the defaults).
//!
//! [`Options`] is both the clap argument group and the TOML document, so a setting has the same
//! name everywhere: flag `--target-on-site`, variable `WAITINGROOM_TARGET_ON_SITE`, file key
//! `target_on_site`, and its doc comment is its `--help` text.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use thiserror::Error;
use waitingroom_core::{NodeId, Settings, SettingsError, Time};
use waitingroom_distributed::{AdmissionMode, Mode, NodeConfig, leased_if_limited};

use crate::client_addr::Cidr;
use crate::cookies::{CookieOptions, SameSite};
use crate::i18n::Lang;
use crate::tls::{InternalTls, TlsFiles};

/// Every setting of `waitingroom-node run`; `None` means "not given here".
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    // ---- network and identity ----
    /// Address of the public listener: visitors, the waiting page, passes, the JWKS, /livez and
    /// /readyz. Port 0 picks a free port (printed on stdout as `listening on http://ADDR`).
    /// Without --internal-listen it serves the internal routes too, which is allowed only on a
    /// loopback address. (default: 127.0.0.1:8080)
    #[arg(long, env = "WAITINGROOM_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Address of the internal listener: peer traffic (/peer/...), /metrics, /api/cluster (and
    /// /livez, /readyz); the public listener answers 404 on those. Keep it on a network only
    /// the nodes and operators reach. Port 0 picks a free port (printed as `internal listening
    /// on http://ADDR`). Required unless --listen is a loopback address. (default: none: one
    /// port, loopback only)
    #[arg(long, env = "WAITINGROOM_INTERNAL_LISTEN", value_name = "ADDR")]
    pub internal_listen: Option<SocketAddr>,
    /// Base URL other nodes use to reach this one: its internal listener; https:// with
    /// --internal-tls-cert, else http://. Required when that listener is on 0.0.0.0 or ::.
    /// (default: the scheme + the internal listener's address, or the public one's without
    /// --internal-listen)
    #[arg(long, env = "WAITINGROOM_ADVERTISE", value_name = "URL")]
    pub advertise: Option<String>,
    /// Mutual TLS on the internal listener: this node's certificate chain (PEM). With
    /// --internal-tls-key and --internal-tls-ca, the internal listener speaks only TLS and
    /// takes only clients with a certificate from that CA, and this node calls its peers over
    /// https:// with this certificate. The certificate must name the host of --advertise (an
    /// IP SAN for an address). (default: none: plain http:// on a private network)
    #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_CERT", value_name = "PATH")]
    pub internal_tls_cert: Option<PathBuf>,
    /// Mutual TLS: this node's private key (PEM). (default: none)
    #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_KEY", value_name = "PATH")]
    pub internal_tls_key: Option<PathBuf>,
    /// Mutual TLS: the CA certificate (PEM) that signs every node's certificate and those of
    /// operators' tools; the only one trusted on the internal listener. (default: none)
    #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_CA", value_name = "PATH")]
    pub internal_tls_ca: Option<PathBuf>,
    /// This node's id, unique in the cluster and never 0. (default: derived from the
    /// advertised URL)
    #[arg(long, env = "WAITINGROOM_NODE_ID", value_name = "ID")]
    pub node_id: Option<u64>,
    /// Internal base URLs of cluster members to join through (comma-separated): https:// with
    /// --internal-tls-cert, else http://.
    /// Empty: start a new cluster. (default: empty)
    #[arg(
        long,
        env = "WAITINGROOM_PEERS",
        value_name = "URL,...",
        value_delimiter = ','
    )]
    pub peers: Option<Vec<String>>,
    /// Find peers in DNS: every A/AAAA record of NAME (a Kubernetes headless Service) is a
    /// peer at http://ADDRESS:PORT, looked up at start and every dns_interval_ms; a node that
    /// finds nobody starts a cluster, clusters that formed apart merge once they see each
    /// other. PORT defaults to this node's peer port. Used with or instead of --peers.
    /// (default: none)
    #[arg(long, env = "WAITINGROOM_PEERS_DNS", value_name = "NAME[:PORT]")]
    pub peers_dns: Option<String>,
    /// DNS server for --peers-dns instead of the system's (/etc/resolv.conf). (default: the
    /// system's)
    #[arg(long, env = "WAITINGROOM_DNS_SERVER", value_name = "ADDR:PORT")]
    pub dns_server: Option<SocketAddr>,
    /// How often --peers-dns is looked up again, ms. (default: 5000)
    #[arg(long, env = "WAITINGROOM_DNS_INTERVAL_MS", value_name = "MS")]
    pub dns_interval_ms: Option<u64>,
    /// File holding the cluster signing key (PKCS#8 PEM, from `waitingroom-node keygen`);
    /// every node of a cluster uses the same key. Required.
    #[arg(long, env = "WAITINGROOM_KEY_FILE", value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Files holding earlier cluster keys still accepted during a key rotation (repeatable, or
    /// comma-separated): tickets, passes and peer requests they made keep verifying, and the
    /// JWKS publishes their public halves; nothing new is signed with them. (default: none)
    #[arg(
        long,
        env = "WAITINGROOM_EXTRA_VERIFY_KEY",
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub extra_verify_key: Option<Vec<PathBuf>>,
    /// Where admitted visitors are sent: the protected site. (default: /)
    #[arg(long, env = "WAITINGROOM_ORIGIN_URL", value_name = "URL")]
    pub origin_url: Option<String>,
    /// The URL visitors reach the room at (e.g. https://queue.shop.example). Joins from pages
    /// of any other origin are refused (403 cross_site). (default: none: a join's Origin must
    /// match its Host header)
    #[arg(long, env = "WAITINGROOM_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    // ---- waiting room ----
    /// How many visitors may be on the site at once; "unlimited" for no limit. (default: 100)
    #[arg(long, env = "WAITINGROOM_TARGET_ON_SITE", value_name = "N|unlimited", value_parser = parse_target)]
    #[serde(default, deserialize_with = "de_target")]
    pub target_on_site: Option<u64>,
    /// How often a waiting visitor's client checks in, ms. (default: 2000)
    #[arg(long, env = "WAITINGROOM_REFRESH_INTERVAL_MS", value_name = "MS")]
    pub refresh_interval_ms: Option<Time>,
    /// A ticket not refreshed for this long is refused and its place dropped, ms; must exceed
    /// refresh_interval_ms. (default: 30000)
    #[arg(long, env = "WAITINGROOM_TICKET_EXPIRY_MS", value_name = "MS")]
    pub ticket_expiry_ms: Option<Time>,
    /// How long a pass stays valid without a refresh, ms; 0: passes expire at once (nobody
    /// counts as on the site). (default: 600000)
    #[arg(long, env = "WAITINGROOM_PASS_EXPIRY_MS", value_name = "MS")]
    pub pass_expiry_ms: Option<Time>,
    /// The longest a pass lives from its creation, refreshes included; at least pass_expiry_ms.
    /// Past it a refresh is refused (403 pass_lifetime_over): one admission is one visit, not
    /// a season ticket. (default: 14400000, four hours)
    #[arg(long, env = "WAITINGROOM_PASS_MAX_LIFETIME_MS", value_name = "MS")]
    pub pass_max_lifetime_ms: Option<Time>,
    /// How often visitors are let out of the queue, ms; the same on every node. (default: 1000)
    #[arg(long, env = "WAITINGROOM_EVICTION_INTERVAL_MS", value_name = "MS")]
    pub eviction_interval_ms: Option<Time>,
    /// How often expired tickets and passes are swept, ms. (default: 1000)
    #[arg(long, env = "WAITINGROOM_CLEANUP_INTERVAL_MS", value_name = "MS")]
    pub cleanup_interval_ms: Option<Time>,
    /// Admit a joining visitor at once while the site has room and nobody waits (false: queue
    /// everyone, as in the thesis). (default: true)
    #[arg(long, env = "WAITINGROOM_ADMIT_STRAIGHT_THROUGH", value_name = "BOOL")]
    pub admit_straight_through: Option<bool>,
    /// What the room does with visitors: normal (queue while the site is full), queue_all
    /// (everyone queues, nobody is let out), passthrough (everyone in at once, with a pass) or
    /// reject (new visitors turned away). A live setting: change it while the cluster runs
    /// with `waitingroom-node admin set mode=...`. (default: normal)
    #[arg(long, env = "WAITINGROOM_MODE", value_name = "MODE", value_parser = room_mode())]
    pub mode: Option<Mode>,
    /// Most visitors let out per minute, cluster-wide, spread evenly over the eviction rounds;
    /// alongside target_on_site, the smaller wins. A live setting. (default: no cap)
    #[arg(long, env = "WAITINGROOM_NEW_USERS_PER_MINUTE", value_name = "N")]
    pub new_users_per_minute: Option<u64>,
    /// File holding the bearer token of the admin API (/admin/... on the internal listener:
    /// `Authorization: Bearer TOKEN`); at least 16 characters, surrounding whitespace ignored.
    /// Without it the admin API is off (404). (default: none)
    #[arg(long, env = "WAITINGROOM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// Append every admission round's signed record to this file (one JWS per line), and
    /// publish and go on from the ones it holds after a restart (README, "Fairness records").
    /// (default: none, the last 100,000 in memory only)
    #[arg(long, env = "WAITINGROOM_ROUNDS_LOG", value_name = "PATH")]
    pub rounds_log: Option<PathBuf>,
    /// Round records kept in memory and published at /api/rounds (the newest; about 0.5 KB
    /// each). (default: 100000)
    #[arg(long, env = "WAITINGROOM_ROUNDS_KEPT", value_name = "N")]
    pub rounds_kept: Option<usize>,
    /// Keep the voters the cluster last agreed on in this file (JSON, rewritten when they
    /// change) and read them back at start: a restarted node then needs a majority of them
    /// again, instead of counting as a new cluster with whoever it finds (README, "Admission
    /// leases"). A file written by another node id is ignored. (default: none, in memory)
    #[arg(long, env = "WAITINGROOM_VOTERS_FILE", value_name = "PATH")]
    pub voters_file: Option<PathBuf>,

    // ---- protocol ----
    /// How the root lets visitors out: range (one message per tree edge per round), batched
    /// (QPID deleteMin in batches) or sequential (one at a time, as in the thesis). The last two
    /// are not leased: only with --target-on-site unlimited and no rate cap. (default: range)
    #[arg(long, env = "WAITINGROOM_ADMISSION", value_name = "MODE", value_parser = admission_mode())]
    pub admission: Option<AdmissionMode>,
    /// SWIM: how often one member is probed, ms. (default: 500)
    #[arg(long, env = "WAITINGROOM_PROBE_INTERVAL_MS", value_name = "MS")]
    pub probe_interval_ms: Option<Time>,
    /// SWIM: how long to wait for a probe answer before asking others, ms; below
    /// probe_interval_ms. (default: 200)
    #[arg(long, env = "WAITINGROOM_PROBE_TIMEOUT_MS", value_name = "MS")]
    pub probe_timeout_ms: Option<Time>,
    /// SWIM: members asked to probe indirectly. (default: 3)
    #[arg(long, env = "WAITINGROOM_INDIRECT_PROBES", value_name = "N")]
    pub indirect_probes: Option<usize>,
    /// SWIM: extra failed probe rounds before a member is declared dead. (default: 1)
    #[arg(long, env = "WAITINGROOM_SUSPECT_ROUNDS", value_name = "N")]
    pub suspect_rounds: Option<u32>,
    /// Resend an unacknowledged protocol message after this long, ms. (default: 100)
    #[arg(long, env = "WAITINGROOM_RETRANSMIT_MS", value_name = "MS")]
    pub retransmit_ms: Option<Time>,
    /// A joining node asks again after this long without an answer, ms. (default: 500)
    #[arg(long, env = "WAITINGROOM_JOIN_RETRY_MS", value_name = "MS")]
    pub join_retry_ms: Option<Time>,
    /// A joining node that no seed answers for this long starts a cluster of its own (and
    /// merges with the others once they can talk), ms. (default: 10000)
    #[arg(long, env = "WAITINGROOM_JOIN_TIMEOUT_MS", value_name = "MS")]
    pub join_timeout_ms: Option<Time>,
    /// Most neighbours a node gets in the spanning tree (at least 2). (default: 4)
    #[arg(long, env = "WAITINGROOM_MAX_TREE_DEGREE", value_name = "N")]
    pub max_tree_degree: Option<usize>,
    /// Range admission: most keys per count reply and per round when places are limited.
    /// (default: 1024)
    #[arg(long, env = "WAITINGROOM_SELECT_LIMIT", value_name = "N")]
    pub select_limit: Option<u32>,
    /// Rebuild the tree after this many eviction intervals without a count while visitors
    /// wait (a safety net; at least 2). (default: 10)
    #[arg(long, env = "WAITINGROOM_WATCHDOG_ROUNDS", value_name = "N")]
    pub watchdog_rounds: Option<u32>,

    // ---- transport and limits ----
    /// Largest request body on visitor routes, bytes. (default: 16384)
    #[arg(long, env = "WAITINGROOM_VISITOR_BODY_LIMIT", value_name = "BYTES")]
    pub visitor_body_limit: Option<usize>,
    /// Largest request body on peer routes, bytes; a node also cuts what it sends to fit.
    /// Checked from the signed Content-Length before any body byte is read. (default: 1048576)
    #[arg(long, env = "WAITINGROOM_PEER_BODY_LIMIT", value_name = "BYTES")]
    pub peer_body_limit: Option<usize>,
    /// A peer request is accepted only within this distance of this node's clock, ms: a
    /// captured request is good for this long at most (and its nonce is remembered for twice
    /// as long). Nodes' clocks must agree within it. (default: 5000)
    #[arg(long, env = "WAITINGROOM_PEER_CLOCK_WINDOW_MS", value_name = "MS")]
    pub peer_clock_window_ms: Option<u64>,
    /// `/readyz` fails while a member's clock is measured (on the SWIM probes) further than this
    /// from this node's, beyond the measurement's error, ms: the balancer takes the node out
    /// before peers start refusing its requests and tokens. 0: never. (default: 2000)
    #[arg(long, env = "WAITINGROOM_MAX_CLOCK_OFFSET_MS", value_name = "MS")]
    pub max_clock_offset_ms: Option<u64>,
    /// Most peer request nonces remembered against replay (about 40 bytes each). When full of
    /// nonces younger than twice the clock window, peer requests get 503 until some expire.
    /// (default: 262144)
    #[arg(long, env = "WAITINGROOM_PEER_REPLAY_CAPACITY", value_name = "N")]
    pub peer_replay_capacity: Option<usize>,
    /// Most peer requests in progress at once; more get 503 with Retry-After at once (each may
    /// hold up to peer_body_limit of memory). (default: 64)
    #[arg(long, env = "WAITINGROOM_MAX_PEER_REQUESTS", value_name = "N")]
    pub max_peer_requests: Option<usize>,
    /// Most protocol messages queued for one peer; beyond it the oldest are dropped (the
    /// protocol resends what matters). (default: 20000)
    #[arg(long, env = "WAITINGROOM_PEER_QUEUE_LIMIT", value_name = "N")]
    pub peer_queue_limit: Option<usize>,
    /// Most protocol messages in one peer request. (default: 1024)
    #[arg(long, env = "WAITINGROOM_PEER_BATCH_LIMIT", value_name = "N")]
    pub peer_batch_limit: Option<usize>,
    /// Timeout of one peer request, ms. (default: 2000)
    #[arg(long, env = "WAITINGROOM_PEER_TIMEOUT_MS", value_name = "MS")]
    pub peer_timeout_ms: Option<u64>,
    /// Timeout of a visitor request forwarded to the node holding the ticket; past it the
    /// visitor is re-queued here under their original join time, ms. (default: 1000)
    #[arg(long, env = "WAITINGROOM_FORWARD_TIMEOUT_MS", value_name = "MS")]
    pub forward_timeout_ms: Option<u64>,
    /// A request head (request line and headers) must arrive whole within this long of the
    /// connection asking for it, ms; also the longest a kept-alive connection may sit idle
    /// between requests. Slower clients are disconnected. (default: 10000)
    #[arg(long, env = "WAITINGROOM_HEADER_READ_TIMEOUT_MS", value_name = "MS")]
    pub header_read_timeout_ms: Option<u64>,
    /// The longest a request may take from its head to its answer (a slow client's body
    /// included), ms; past it, 408 `request_timeout`. Above forward_timeout_ms, twice over: a
    /// forwarded request may wait for the batch ahead of it. (default: 10000)
    #[arg(long, env = "WAITINGROOM_REQUEST_TIMEOUT_MS", value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
    /// On SIGTERM, how long to keep delivering the farewell before exiting, ms.
    /// (default: 2000)
    #[arg(long, env = "WAITINGROOM_SHUTDOWN_GRACE_MS", value_name = "MS")]
    pub shutdown_grace_ms: Option<u64>,
    /// Joins allowed per client per second, each node; 0 = no limit (benchmarks from one
    /// address). The client is the address a trusted proxy reports, else the TCP peer; IPv6 by
    /// its /64. Generous for people (one join per visit; hundreds behind one NAT at a sale's
    /// start fit the burst), tight for a flood from one address. (default: 20)
    #[arg(long, env = "WAITINGROOM_JOIN_RATE_LIMIT", value_name = "N")]
    pub join_rate_limit: Option<u32>,
    /// Most joins one client may make at once before the rate applies. (default: twice
    /// join_rate_limit)
    #[arg(long, env = "WAITINGROOM_JOIN_BURST", value_name = "N")]
    pub join_burst: Option<u32>,
    /// Header in which trusted proxies report the client's address; "" for none. Read only
    /// from trusted_proxies; its entries are read from the last (the one the proxy wrote),
    /// skipping trusted proxies. (default: x-forwarded-for)
    #[arg(long, env = "WAITINGROOM_CLIENT_IP_HEADER", value_name = "NAME")]
    pub client_ip_header: Option<String>,
    /// Networks of the proxies (balancers) whose client_ip_header is believed, comma-separated
    /// CIDRs or addresses; "" for none. From anyone else the TCP peer address is the client.
    /// (default: 127.0.0.0/8,::1)
    #[arg(
        long,
        env = "WAITINGROOM_TRUSTED_PROXIES",
        value_name = "CIDR,...",
        value_delimiter = ','
    )]
    pub trusted_proxies: Option<Vec<String>>,
    /// Most requests in progress on the public listener; beyond it a request gets 503
    /// `overloaded` with Retry-After at once instead of waiting behind the others (/livez and
    /// /readyz are never refused). (default: 4096)
    #[arg(long, env = "WAITINGROOM_MAX_PENDING_REQUESTS", value_name = "N")]
    pub max_pending_requests: Option<usize>,
    /// Mark cookies `Secure` (browsers send them over HTTPS only). Always on when public_url
    /// is https. (default: false, or true with an https public_url)
    #[arg(long, env = "WAITINGROOM_COOKIE_SECURE", value_name = "BOOL")]
    pub cookie_secure: Option<bool>,
    /// Cookie `Domain` (e.g. example.com: the ticket and pass cookies then reach every host
    /// under it, say an origin on shop.example.com). (default: none, the room's host only)
    #[arg(long, env = "WAITINGROOM_COOKIE_DOMAIN", value_name = "DOMAIN")]
    pub cookie_domain: Option<String>,
    /// Appended to every cookie's name (`wr_ticket_SUFFIX`, `wr_pass_SUFFIX`,
    /// `wr_leave_key_SUFFIX`): two rooms on one domain keep their visitors apart. Letters,
    /// digits, `-`, `_`; up to 32. (default: none)
    #[arg(long, env = "WAITINGROOM_COOKIE_NAME_SUFFIX", value_name = "SUFFIX")]
    pub cookie_name_suffix: Option<String>,
    /// Cookie `SameSite`: lax, strict or none (none needs cookie_secure: a room embedded in
    /// another site). (default: lax)
    #[arg(long, env = "WAITINGROOM_COOKIE_SAMESITE", value_name = "MODE")]
    pub cookie_samesite: Option<SameSite>,

    // ---- logs and page ----
    /// Log format: text or json. (default: text)
    #[arg(long, env = "WAITINGROOM_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter, tracing-subscriber syntax (e.g. info, waitingroom=debug). (default: info)
    #[arg(long, env = "WAITINGROOM_LOG_LEVEL", value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Waiting page: title and heading, in every language. (default: "You are in the queue",
    /// in the visitor's language)
    #[arg(long, env = "WAITINGROOM_PAGE_TITLE", value_name = "TEXT")]
    pub page_title: Option<String>,
    /// Waiting page: the explanation under the heading, in every language. (default: a short
    /// explanation, in the visitor's language)
    #[arg(long, env = "WAITINGROOM_PAGE_TEXT", value_name = "TEXT")]
    pub page_text: Option<String>,
    /// Waiting page: background colour (CSS colour). (default: #f7f7f2)
    #[arg(long, env = "WAITINGROOM_PAGE_BACKGROUND", value_name = "COLOUR")]
    pub page_background: Option<String>,
    /// Waiting page: text colour (CSS colour). (default: #1d1d1b)
    #[arg(long, env = "WAITINGROOM_PAGE_FOREGROUND", value_name = "COLOUR")]
    pub page_foreground: Option<String>,
    /// Waiting page: accent colour for the position and the progress bar. (default: #0b5cad)
    #[arg(long, env = "WAITINGROOM_PAGE_ACCENT", value_name = "COLOUR")]
    pub page_accent: Option<String>,
    /// Waiting page language: en, de, fr or es for every visitor; auto: each visitor's
    /// Accept-Language (English when it names none of them). (default: auto)
    #[arg(long, env = "WAITINGROOM_PAGE_LANGUAGE", value_name = "LANG")]
    pub page_language: Option<String>,
    /// A whole HTML template for the waiting page, with {{placeholders}} (see the README).
    /// (default: the built-in page)
    #[arg(long, env = "WAITINGROOM_PAGE_TEMPLATE", value_name = "PATH")]
    pub page_template: Option<PathBuf>,
}

/// `--mode` takes the protocol's own names for the room's modes ([`Mode::name`]).
fn room_mode() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::ALL.map(Mode::name)).try_map(|name| name.parse::<Mode>())
}

/// `--admission` takes the protocol's own names for its modes ([`AdmissionMode::name`]).
fn admission_mode() -> impl TypedValueParser<Value = AdmissionMode> {
    PossibleValuesParser::new(AdmissionMode::ALL.map(AdmissionMode::name))
        .try_map(|name| name.parse::<AdmissionMode>())
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

fn parse_target(s: &str) -> Result<u64, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        Ok(Settings::UNLIMITED)
    } else {
        s.parse()
            .map_err(|_| "expected a number or \"unlimited\"".to_owned())
    }
}

fn de_target<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Target {
        N(u64),
        S(String),
    }
    match Target::deserialize(d)? {
        Target::N(n) => Ok(Some(n)),
        Target::S(s) => parse_target(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Why the configuration was refused. Every variant names the setting or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML for these settings.
    #[error("invalid config file {path}: {source}")]
    ParseFile {
        /// Path.
        path: String,
        /// Cause (names the key).
        source: Box<toml::de::Error>,
    },
    /// A setting's value is refused.
    #[error(transparent)]
    Setting(#[from] SettingsError),
}

/// Visitor-facing look of the waiting page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branding {
    /// Title and heading (None: the page language's own).
    pub title: Option<String>,
    /// Explanation (None: the page language's own).
    pub text: Option<String>,
    /// One language for every visitor (None: each visitor's `Accept-Language`).
    pub language: Option<Lang>,
    /// Background colour.
    pub background: String,
    /// Text colour.
    pub foreground: String,
    /// Accent colour.
    pub accent: String,
    /// Whole-page template, if any (already read).
    pub template: Option<String>,
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

/// The resolved configuration of one node.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Public listen address.
    pub listen: SocketAddr,
    /// Internal listen address; `None`: one port for everything (loopback only).
    pub internal_listen: Option<SocketAddr>,
    /// Mutual TLS on the internal listener and to peers, if configured.
    pub internal_tls: Option<TlsFiles>,
    /// Advertised URL, if given (else derived from the bound address).
    pub advertise: Option<String>,
    /// Node id, if given (else derived from the advertised URL).
    pub node_id: Option<NodeId>,
    /// Seeds to join through.
    pub peers: Vec<String>,
    /// Peers found in DNS, if asked for.
    pub discovery: Option<Discovery>,
    /// Cluster key file.
    pub key_file: PathBuf,
    /// Earlier cluster keys still accepted (key rotation).
    pub extra_verify_keys: Vec<PathBuf>,
    /// Where admitted visitors go.
    pub origin_url: String,
    /// The room's public URL and its origin (for the `Origin` check of joins), if given.
    pub public_url: Option<(String, String)>,
    /// Waiting room settings.
    pub settings: Settings,
    /// Protocol configuration template (id, incarnation, address and seed are filled in at
    /// start).
    pub protocol: NodeConfig,
    /// Limits.
    pub limits: Limits,
    /// The cookies' names and attributes.
    pub cookies: CookieOptions,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
    /// Page look.
    pub branding: Branding,
    /// The admin API's bearer token (`None`: the admin API is off).
    pub admin_token: Option<Secret>,
    /// Where round records are appended, if anywhere.
    pub rounds_log: Option<PathBuf>,
    /// Round records kept in memory.
    pub rounds_kept: usize,
    /// Where the agreed voters are kept, if anywhere.
    pub voters_file: Option<PathBuf>,
}

/// A secret read from a file: never shown by `Debug` (a configuration printed in a log or a
/// panic message must not carry it).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Where to find peers in DNS (`--peers-dns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// How peers are reached: `https` with mutual TLS, else `http`.
    pub scheme: &'static str,
    /// The name whose A/AAAA records are the peers.
    pub name: String,
    /// The peers' (internal) port.
    pub port: u16,
    /// The DNS server to ask; `None`: the system's.
    pub server: Option<SocketAddr>,
    /// How often to look again, ms.
    pub interval_ms: u64,
}

/// Reads a TOML config file into [`Options`].
pub fn read_file(path: &Path) -> Result<Options, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: shown.clone(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::ParseFile {
        path: shown,
        source: Box::new(source),
    })
}

/// Calls macro `$m` with the names of the protocol knobs (after any names given it already):
/// the settings that are [`NodeConfig`] fields of the same name and type. Listed once, for
/// [`merge`] and for [`Options::resolve`].
macro_rules! protocol_knobs {
    ($m:ident!($($before:tt)*)) => {
        $m!(
            $($before)*
            admission,
            mode,
            probe_interval_ms,
            probe_timeout_ms,
            indirect_probes,
            suspect_rounds,
            retransmit_ms,
            join_retry_ms,
            join_timeout_ms,
            max_tree_degree,
            select_limit,
            watchdog_rounds
        )
    };
}

/// `flags_env` (from clap, already flags-over-environment) over `file`.
pub fn merge(flags_env: Options, file: Options) -> Options {
    // Every field, or the struct literal does not compile.
    macro_rules! merge {
        ($($f:ident),* $(,)?) => { Options { $($f: flags_env.$f.or(file.$f),)* } };
    }
    protocol_knobs!(merge!(
        listen,
        internal_listen,
        internal_tls_cert,
        internal_tls_key,
        internal_tls_ca,
        advertise,
        node_id,
        peers,
        peers_dns,
        dns_server,
        dns_interval_ms,
        key_file,
        extra_verify_key,
        origin_url,
        public_url,
        target_on_site,
        refresh_interval_ms,
        ticket_expiry_ms,
        pass_expiry_ms,
        pass_max_lifetime_ms,
        eviction_interval_ms,
        cleanup_interval_ms,
        admit_straight_through,
        new_users_per_minute,
        admin_token_file,
        rounds_log,
        rounds_kept,
        voters_file,
        visitor_body_limit,
        peer_body_limit,
        peer_clock_window_ms,
        max_clock_offset_ms,
        peer_replay_capacity,
        max_peer_requests,
        peer_queue_limit,
        peer_batch_limit,
        peer_timeout_ms,
        forward_timeout_ms,
        header_read_timeout_ms,
        request_timeout_ms,
        shutdown_grace_ms,
        join_rate_limit,
        join_burst,
        client_ip_header,
        trusted_proxies,
        max_pending_requests,
        cookie_secure,
        cookie_domain,
        cookie_name_suffix,
        cookie_samesite,
        log_format,
        log_level,
        page_title,
        page_text,
        page_background,
        page_foreground,
        page_accent,
        page_language,
        page_template,
    ))
}

impl Options {
    /// Fills in defaults and checks everything, naming the setting at fault. The checks run in
    /// this order (of several bad settings, the first is named): the waiting room and protocol
    /// settings, the node's addresses and identity, limits, the page, logs.
    pub fn resolve(self) -> Result<ServerConfig, ConfigError> {
        let settings = self.settings();
        let protocol = self.protocol(&settings)?;
        let listen = self
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
        let internal_listen = self.internal_listen(listen)?;
        let internal_tls = self.internal_tls(internal_listen)?;
        let tls = internal_tls.is_some();
        // Fields are evaluated in the order written: that is the order of the checks.
        Ok(ServerConfig {
            advertise: self.advertise(internal_listen.unwrap_or(listen), tls)?,
            node_id: self.node_id()?,
            peers: self.seeds(tls)?,
            discovery: self.discovery(internal_listen.unwrap_or(listen), tls)?,
            key_file: self.key_file()?,
            extra_verify_keys: self.extra_verify_key.clone().unwrap_or_default(),
            origin_url: self.origin_url()?,
            public_url: self.public_url()?,
            limits: self.limits()?,
            admin_token: self.admin_token()?,
            rounds_log: self.rounds_log()?,
            rounds_kept: self.rounds_kept()?,
            voters_file: self.voters_file.clone(),
            branding: self.branding()?,
            log_level: self.log_level()?,
            log_format: self.log_format.unwrap_or_default(),
            cookies: CookieOptions {
                ticket_max_age_s: settings.ticket_expiry_ms.div_ceil(1000),
                ..self.cookies()?
            },
            listen,
            internal_listen,
            internal_tls,
            settings,
            protocol,
        })
    }

    /// How many round records to keep in memory: at least 1.
    fn rounds_kept(&self) -> Result<usize, SettingsError> {
        match self.rounds_kept {
            Some(0) => Err(SettingsError::new("rounds_kept", "must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(crate::rounds::ROUNDS_KEPT),
        }
    }

    /// The rounds log, checked by opening it for appending (it is created if missing).
    fn rounds_log(&self) -> Result<Option<PathBuf>, SettingsError> {
        let Some(path) = &self.rounds_log else {
            return Ok(None);
        };
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                SettingsError::new("rounds_log", format!("cannot open {}: {e}", path.display()))
            })?;
        Ok(Some(path.clone()))
    }

    /// The cookies' names and attributes. Secure whenever visitors reach the room over https.
    fn cookies(&self) -> Result<CookieOptions, SettingsError> {
        let https = self
            .public_url
            .as_deref()
            .is_some_and(|u| u.trim().to_ascii_lowercase().starts_with("https://"));
        let secure = self.cookie_secure.unwrap_or(false) || https;
        let same_site = self.cookie_samesite.unwrap_or_default();
        if same_site == SameSite::None && !secure {
            return Err(SettingsError::new(
                "cookie_samesite",
                "none needs cookie_secure (browsers drop SameSite=None cookies that are not \
                 Secure)",
            ));
        }
        let domain = self.cookie_domain.as_deref().map(str::trim);
        let host = |d: &str| {
            !d.is_empty()
                && d.len() <= 253
                && d.trim_start_matches('.')
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        };
        if domain.is_some_and(|d| !host(d)) {
            return Err(SettingsError::new(
                "cookie_domain",
                "must be a host name, e.g. example.com",
            ));
        }
        let suffix = self.cookie_name_suffix.as_deref().unwrap_or("").trim();
        let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if suffix.len() > 32 || !suffix.chars().all(fine) {
            return Err(SettingsError::new(
                "cookie_name_suffix",
                "must be up to 32 letters, digits, `-` or `_`",
            ));
        }
        Ok(CookieOptions::new(
            secure,
            domain.map(str::to_owned),
            same_site,
            suffix,
        ))
    }

    /// The waiting room settings, defaults filled in (checked with the protocol's).
    fn settings(&self) -> Settings {
        let d = Settings::default();
        Settings {
            target_on_site: self.target_on_site.unwrap_or(d.target_on_site),
            refresh_interval_ms: self.refresh_interval_ms.unwrap_or(d.refresh_interval_ms),
            ticket_expiry_ms: self.ticket_expiry_ms.unwrap_or(d.ticket_expiry_ms),
            pass_expiry_ms: self.pass_expiry_ms.unwrap_or(d.pass_expiry_ms),
            pass_max_lifetime_ms: self.pass_max_lifetime_ms.unwrap_or(d.pass_max_lifetime_ms),
            eviction_interval_ms: self.eviction_interval_ms.unwrap_or(d.eviction_interval_ms),
            cleanup_interval_ms: self.cleanup_interval_ms.unwrap_or(d.cleanup_interval_ms),
            admit_straight_through: self
                .admit_straight_through
                .unwrap_or(d.admit_straight_through),
        }
    }

    /// The protocol configuration template, checked by the protocol itself (which names any
    /// bad knob or setting). The id, incarnation and address are placeholders until the socket
    /// is bound.
    fn protocol(&self, settings: &Settings) -> Result<NodeConfig, SettingsError> {
        let mut protocol = NodeConfig::new(NodeId(1), 1, "", settings.clone());
        macro_rules! knob {
            ($($f:ident),*) => { $(if let Some(v) = self.$f { protocol.$f = v; })* };
        }
        protocol_knobs!(knob!());
        protocol.new_users_per_minute = self.new_users_per_minute;
        protocol.validate()?;
        let rate_cap = protocol.new_users_per_minute.is_some();
        leased_if_limited(protocol.admission, settings.target_on_site, rate_cap)?;
        Ok(protocol)
    }

    /// The internal listener. Secure by default: without one, the internal routes (peer
    /// traffic, metrics, the cluster's members) would be on the public port, which is allowed
    /// only when that port is on loopback (a demo, tests, a script on one machine).
    fn internal_listen(&self, listen: SocketAddr) -> Result<Option<SocketAddr>, SettingsError> {
        match self.internal_listen {
            Some(internal) if internal == listen && internal.port() != 0 => Err(
                SettingsError::new("internal_listen", "must differ from listen"),
            ),
            Some(internal) => Ok(Some(internal)),
            None if listen.ip().is_loopback() => Ok(None),
            None => Err(SettingsError::new(
                "internal_listen",
                format!(
                    "is required when listen ({listen}) is not a loopback address: peer \
                     routes, /metrics and /api/cluster must not be served on the public port; \
                     give --internal-listen ADDR on a network only the nodes reach"
                ),
            )),
        }
    }

    /// Mutual TLS on the internal listener: all three files, or none; only with an internal
    /// listener (the public one serves visitors' browsers, which have no such certificate).
    fn internal_tls(
        &self,
        internal: Option<SocketAddr>,
    ) -> Result<Option<TlsFiles>, SettingsError> {
        let (cert, key, ca) = (
            &self.internal_tls_cert,
            &self.internal_tls_key,
            &self.internal_tls_ca,
        );
        if cert.is_none() && key.is_none() && ca.is_none() {
            return Ok(None);
        }
        let missing = |field: &'static str| {
            SettingsError::new(
                field,
                "is required with the other internal_tls settings (cert, key and ca together)",
            )
        };
        let files = TlsFiles {
            cert: cert.clone().ok_or_else(|| missing("internal_tls_cert"))?,
            key: key.clone().ok_or_else(|| missing("internal_tls_key"))?,
            ca: ca.clone().ok_or_else(|| missing("internal_tls_ca"))?,
        };
        if internal.is_none() {
            return Err(SettingsError::new(
                "internal_tls_cert",
                "needs --internal-listen: TLS applies to the internal listener only",
            ));
        }
        // Read now: a bad file stops the node at start, naming it.
        InternalTls::load(&files)?;
        Ok(Some(files))
    }

    /// The advertised URL, if given: peers must be able to reach it, so it is required when
    /// the listener peers use (`peer_listen`: the internal one, else the public one) is an
    /// unspecified address.
    fn advertise(
        &self,
        peer_listen: SocketAddr,
        tls: bool,
    ) -> Result<Option<String>, SettingsError> {
        match &self.advertise {
            Some(adv) => {
                check_peer_url("advertise", adv, tls)?;
                Ok(Some(adv.trim_end_matches('/').to_owned()))
            }
            None if peer_listen.ip().is_unspecified() => Err(SettingsError::new(
                "advertise",
                "must be set when the listener peers use is on an unspecified address (0.0.0.0 \
                 or ::): peers need an address they can reach",
            )),
            None => Ok(None),
        }
    }

    /// The node id, if given (0 is no id).
    fn node_id(&self) -> Result<Option<NodeId>, SettingsError> {
        match self.node_id {
            Some(0) => Err(SettingsError::new("node_id", "must not be 0")),
            id => Ok(id.map(NodeId)),
        }
    }

    /// The cluster key file (required: a node without the cluster's key can do nothing).
    fn key_file(&self) -> Result<PathBuf, SettingsError> {
        self.key_file.clone().ok_or_else(|| {
            SettingsError::new(
                "key_file",
                "is required: create one with `waitingroom-node keygen --out FILE`",
            )
        })
    }

    /// The members to join through, as base URLs without a trailing slash.
    fn seeds(&self, tls: bool) -> Result<Vec<String>, SettingsError> {
        let peers: Vec<String> = self
            .peers
            .iter()
            .flatten()
            .map(|p| p.trim().trim_end_matches('/').to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        for p in &peers {
            check_peer_url("peers", p, tls)?;
        }
        Ok(peers)
    }

    /// DNS discovery: the name (no scheme, no path), the peers' port (default: this node's
    /// peer port), how often to look it up again.
    fn discovery(
        &self,
        peer_listen: SocketAddr,
        tls: bool,
    ) -> Result<Option<Discovery>, SettingsError> {
        let Some(spec) = self.peers_dns.as_deref().map(str::trim) else {
            return Ok(None);
        };
        let bad = |why: &str| SettingsError::new("peers_dns", format!("`{spec}`: {why}"));
        let (name, port) = match spec.rsplit_once(':') {
            Some((name, port)) => (
                name,
                port.parse()
                    .map_err(|_| bad("the port after `:` must be a number 1-65535"))?,
            ),
            None => (spec, peer_listen.port()),
        };
        let host_like = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
        if name.is_empty() || !name.chars().all(host_like) || port == 0 {
            return Err(bad(
                "expected a DNS name and an optional port, e.g. peers.ns.svc:9090",
            ));
        }
        let interval_ms = self.dns_interval_ms.unwrap_or(5_000);
        if interval_ms < 100 {
            return Err(SettingsError::new(
                "dns_interval_ms",
                "must be at least 100",
            ));
        }
        Ok(Some(Discovery {
            scheme: crate::tls::scheme(tls),
            name: name.to_owned(),
            port,
            server: self.dns_server,
            interval_ms,
        }))
    }

    /// Where admitted visitors go: it ends up in a `Location` header. When given, an absolute
    /// http(s) URL with a host: no `//host` (which a browser reads as "any scheme"), no
    /// `javascript:` or other scheme, no path alone. The default, `/`, is this host's root:
    /// for a room in front of its site, where a gate sends pass holders on.
    fn origin_url(&self) -> Result<String, SettingsError> {
        let Some(origin_url) = self.origin_url.clone() else {
            return Ok("/".to_owned());
        };
        if check_url("origin_url", &origin_url).is_err() || web_origin(&origin_url).is_none() {
            return Err(SettingsError::new(
                "origin_url",
                format!("`{origin_url}` is not an absolute http:// or https:// URL with a host"),
            ));
        }
        if origin_url.contains(['"', '<', '>', '\n', '\r']) {
            return Err(SettingsError::new(
                "origin_url",
                "must not contain quotes or <>",
            ));
        }
        Ok(origin_url)
    }

    /// Transport and abuse limits, defaults filled in.
    fn limits(&self) -> Result<Limits, SettingsError> {
        let limits = Limits {
            visitor_body: self.visitor_body_limit.unwrap_or(16 * 1024),
            peer_body: self.peer_body_limit.unwrap_or(1024 * 1024),
            peer_clock_window_ms: self.peer_clock_window_ms.unwrap_or(5_000),
            max_clock_offset_ms: self.max_clock_offset_ms.unwrap_or(2_000),
            peer_replay_capacity: self.peer_replay_capacity.unwrap_or(262_144),
            max_peer_requests: self.max_peer_requests.unwrap_or(64),
            peer_queue: self.peer_queue_limit.unwrap_or(20_000),
            peer_batch: self.peer_batch_limit.unwrap_or(1024),
            peer_timeout_ms: self.peer_timeout_ms.unwrap_or(2_000),
            forward_timeout_ms: self.forward_timeout_ms.unwrap_or(1_000),
            header_read_timeout_ms: self.header_read_timeout_ms.unwrap_or(10_000),
            request_timeout_ms: self.request_timeout_ms.unwrap_or(10_000),
            shutdown_grace_ms: self.shutdown_grace_ms.unwrap_or(2_000),
            join_rate_limit: self.join_rate_limit.unwrap_or(20),
            join_burst: self
                .join_burst
                .unwrap_or_else(|| self.join_rate_limit.unwrap_or(20).saturating_mul(2)),
            client_ip_header: self.client_ip_header()?,
            trusted_proxies: self.trusted_proxies()?,
            max_pending_requests: self.max_pending_requests.unwrap_or(4096),
        };
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
        Ok(limits)
    }

    /// The header trusted proxies report clients in (`None`: "" was given).
    fn client_ip_header(&self) -> Result<Option<String>, SettingsError> {
        let name = self
            .client_ip_header
            .as_deref()
            .unwrap_or("x-forwarded-for")
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
        let Some(list) = &self.trusted_proxies else {
            return Ok(["127.0.0.0/8", "::1"]
                .iter()
                .filter_map(|c| Cidr::parse(c))
                .collect());
        };
        list.iter()
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

    /// The room's public URL, if given, and its origin (`scheme://host[:port]` as browsers
    /// write it in an `Origin` header).
    fn public_url(&self) -> Result<Option<(String, String)>, SettingsError> {
        let Some(url) = &self.public_url else {
            return Ok(None);
        };
        let url = url.trim().trim_end_matches('/').to_owned();
        check_url("public_url", &url)?;
        let origin = web_origin(&url)
            .ok_or_else(|| SettingsError::new("public_url", format!("`{url}` has no host")))?;
        Ok(Some((url, origin)))
    }

    /// The admin API's bearer token, read from its file now (a missing or short token is an
    /// error at start, not a locked-out operator later).
    fn admin_token(&self) -> Result<Option<Secret>, SettingsError> {
        let Some(path) = &self.admin_token_file else {
            return Ok(None);
        };
        let bad = |why: String| SettingsError::new("admin_token_file", why);
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        let token = text.trim();
        if token.len() < 16 || !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(bad(format!(
                "{} must hold one token of at least 16 visible ASCII characters (e.g. from                  `openssl rand -hex 32`)",
                path.display()
            )));
        }
        Ok(Some(Secret(token.to_owned())))
    }

    /// The log filter, checked now so a typo is not silently ignored at start.
    fn log_level(&self) -> Result<String, SettingsError> {
        let log_level = self.log_level.clone().unwrap_or_else(|| "info".to_owned());
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            return Err(SettingsError::new("log_level", "is not a valid log filter"));
        }
        Ok(log_level)
    }

    /// The waiting page's look: texts, colours (checked: they go into a `<style>` block) and
    /// the template file, read now.
    fn branding(&self) -> Result<Branding, SettingsError> {
        let template = match &self.page_template {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                SettingsError::new(
                    "page_template",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?),
            None => None,
        };
        let language =
            match self.page_language.as_deref().map(str::trim) {
                None | Some("auto") => None,
                Some(tag) => Some(Lang::from_tag(tag).filter(|l| l.tag() == tag).ok_or_else(
                    || SettingsError::new("page_language", "must be en, de, fr, es or auto"),
                )?),
            };
        Ok(Branding {
            title: self.page_title.clone(),
            text: self.page_text.clone(),
            language,
            background: colour(
                "page_background",
                self.page_background.as_deref(),
                "#f7f7f2",
            )?,
            foreground: colour(
                "page_foreground",
                self.page_foreground.as_deref(),
                "#1d1d1b",
            )?,
            accent: colour("page_accent", self.page_accent.as_deref(), "#0b5cad")?,
            template,
        })
    }
}

/// The origin of an absolute http(s) URL as a browser serialises it: scheme and host in lower
/// case, the port only when it is not the scheme's default. `None` without a host.
pub fn web_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next()?.to_ascii_lowercase();
    // Credentials (`user@`) never appear in an Origin.
    let host = authority.rsplit('@').next()?;
    let default = match scheme.as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => return None,
    };
    let host = host.strip_suffix(default).unwrap_or(host);
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

/// A URL peers are reached at: `https://` with mutual TLS (`tls`), `http://` without. A peer
/// of the other kind could never be reached: refused now rather than failing at run time.
fn check_peer_url(field: &'static str, url: &str, tls: bool) -> Result<(), SettingsError> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if https && !tls {
        return Err(SettingsError::new(
            field,
            format!(
                "`{url}`: an https:// peer needs mutual TLS on the internal listener \
                 (--internal-tls-cert, --internal-tls-key, --internal-tls-ca); without it peers \
                 talk http:// on a private network"
            ),
        ));
    }
    if tls && !https {
        return Err(SettingsError::new(
            field,
            format!("`{url}`: with mutual TLS on the internal listener, peers are https://"),
        ));
    }
    check_url(field, url)
}

fn check_url(field: &'static str, url: &str) -> Result<(), SettingsError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(()),
        _ => Err(SettingsError::new(
            field,
            format!("`{url}` is not an http:// or https:// URL"),
        )),
    }
}

/// A CSS colour goes into a `<style>` block: allow only characters colours are written with.
fn colour(
    field: &'static str,
    value: Option<&str>,
    default: &str,
) -> Result<String, SettingsError> {
    let v = value.unwrap_or(default).to_owned();
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "#(),.% -".contains(c));
    if ok {
        Ok(v)
    } else {
        Err(SettingsError::new(
            field,
            "must be a CSS colour such as #0b5cad, rgb(11, 92, 173) or navy",
        ))
    }
}

/// The default node id: a hash of the advertised URL, so a node keeps its id across restarts
/// without configuration. Kept below 2^53 so JavaScript reads it exactly, and never 0.
pub fn derive_node_id(advertise: &str) -> NodeId {
    // FNV-1a: stable across Rust versions and platforms (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in advertise.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let id = h & ((1 << 53) - 1);
    NodeId(id.max(1))
}

impl ServerConfig {
    /// The protocol configuration for this process.
    pub fn node_config(&self, id: NodeId, incarnation: u64, addr: &str, seed: u64) -> NodeConfig {
        let mut cfg = self.protocol.clone();
        cfg.id = id;
        cfg.incarnation = incarnation;
        cfg.addr = addr.to_owned();
        cfg.seed = seed;
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Options {
        Options {
            key_file: Some("k.pem".into()),
            ..Options::default()
        }
    }

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let shown = format!("{:?}", Some(Secret("hunter2-0123456789".into())));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn defaults_resolve() {
        let c = base().resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(c.settings, Settings::default());
        assert!(c.peers.is_empty());
    }

    #[test]
    fn extra_verify_keys_come_from_the_file_or_flags() {
        let file: Options =
            toml::from_str("extra_verify_key = [\"old.pem\", \"older.pem\"]").unwrap();
        let c = merge(base(), file).resolve().unwrap();
        assert_eq!(
            c.extra_verify_keys,
            [PathBuf::from("old.pem"), "older.pem".into()]
        );
        assert!(base().resolve().unwrap().extra_verify_keys.is_empty());
    }

    #[test]
    fn flags_win_over_file() {
        let flags = Options {
            target_on_site: Some(5),
            ..Options::default()
        };
        let file: Options =
            toml::from_str("target_on_site = 7\nrefresh_interval_ms = 900\nkey_file = \"x\"")
                .unwrap();
        let m = merge(flags, file).resolve().unwrap();
        assert_eq!(m.settings.target_on_site, 5);
        assert_eq!(m.settings.refresh_interval_ms, 900);
    }

    #[test]
    fn file_accepts_unlimited_and_refuses_unknown_keys() {
        let o: Options = toml::from_str("target_on_site = \"unlimited\"").unwrap();
        assert_eq!(o.target_on_site, Some(Settings::UNLIMITED));
        let err = toml::from_str::<Options>("target_onsite = 3").unwrap_err();
        assert!(err.to_string().contains("target_onsite"), "{err}");
    }

    /// The thesis' deleteMin modes are not leased: the server runs them only while nothing
    /// limits admission.
    #[test]
    fn the_unleased_admission_modes_need_no_limit() {
        for admission in [AdmissionMode::Batched, AdmissionMode::Sequential] {
            let limited = Options {
                admission: Some(admission),
                target_on_site: Some(100),
                ..base()
            };
            let err = limited.resolve().unwrap_err().to_string();
            assert!(err.contains("admission"), "{err}");
            let free = Options {
                admission: Some(admission),
                target_on_site: Some(Settings::UNLIMITED),
                ..base()
            };
            assert!(free.resolve().is_ok());
            let capped = Options {
                admission: Some(admission),
                target_on_site: Some(Settings::UNLIMITED),
                new_users_per_minute: Some(60),
                ..base()
            };
            assert!(capped.resolve().is_err(), "a rate cap is a limit too");
        }
    }

    #[test]
    fn errors_name_the_setting() {
        let cases: Vec<(Options, &str)> = vec![
            (Options::default(), "key_file"),
            (
                Options {
                    ticket_expiry_ms: Some(10),
                    ..base()
                },
                "ticket_expiry_ms",
            ),
            (
                Options {
                    probe_timeout_ms: Some(900),
                    ..base()
                },
                "probe_timeout_ms",
            ),
            (
                Options {
                    peers: Some(vec!["ftp://x".into()]),
                    ..base()
                },
                "peers",
            ),
            (
                Options {
                    listen: Some("0.0.0.0:80".parse().unwrap()),
                    ..base()
                },
                "internal_listen",
            ),
            (
                Options {
                    listen: Some("10.0.0.5:80".parse().unwrap()),
                    ..base()
                },
                "internal_listen",
            ),
            (
                Options {
                    listen: Some("0.0.0.0:80".parse().unwrap()),
                    internal_listen: Some("0.0.0.0:81".parse().unwrap()),
                    ..base()
                },
                "advertise",
            ),
            (
                Options {
                    internal_listen: Some("127.0.0.1:8080".parse().unwrap()),
                    ..base()
                },
                "internal_listen",
            ),
            (
                Options {
                    page_accent: Some("red;}</style>".into()),
                    ..base()
                },
                "page_accent",
            ),
            (
                Options {
                    node_id: Some(0),
                    ..base()
                },
                "node_id",
            ),
            (
                Options {
                    peers: Some(vec!["https://10.0.0.2:9081".into()]),
                    ..base()
                },
                "peers",
            ),
            (
                Options {
                    advertise: Some("https://10.0.0.1:9081".into()),
                    ..base()
                },
                "advertise",
            ),
            (
                Options {
                    internal_tls_cert: Some("node.pem".into()),
                    internal_tls_ca: Some("ca.pem".into()),
                    ..base()
                },
                "internal_tls_key",
            ),
            (
                Options {
                    internal_listen: None,
                    listen: Some("127.0.0.1:8080".parse().unwrap()),
                    internal_tls_cert: Some("node.pem".into()),
                    internal_tls_key: Some("node-key.pem".into()),
                    internal_tls_ca: Some("ca.pem".into()),
                    ..base()
                },
                "internal_tls_cert",
            ),
            (
                Options {
                    internal_listen: Some("127.0.0.1:9090".parse().unwrap()),
                    internal_tls_cert: Some("/nonexistent/node.pem".into()),
                    internal_tls_key: Some("/nonexistent/node-key.pem".into()),
                    internal_tls_ca: Some("/nonexistent/ca.pem".into()),
                    ..base()
                },
                "internal_tls_cert",
            ),
            (
                Options {
                    trusted_proxies: Some(vec!["10.0.0.0/8".into(), "balancer".into()]),
                    ..base()
                },
                "trusted_proxies",
            ),
            (
                Options {
                    public_url: Some("queue.example".into()),
                    ..base()
                },
                "public_url",
            ),
            (
                Options {
                    request_timeout_ms: Some(1_500),
                    ..base()
                },
                "request_timeout_ms",
            ),
        ];
        for (o, field) in cases {
            let err = o.resolve().unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    /// `--peers-dns NAME[:PORT]`: the port defaults to this node's peer port (the internal
    /// listener's); a scheme, a path or a bad port is refused naming the setting.
    #[test]
    fn peers_dns_takes_a_name_and_an_optional_port() {
        let with = |spec: &str| {
            Options {
                peers_dns: Some(spec.into()),
                internal_listen: Some("127.0.0.1:9090".parse().unwrap()),
                ..base()
            }
            .resolve()
        };
        let d = with("peers.ns.svc").unwrap().discovery.unwrap();
        assert_eq!(
            (d.name.as_str(), d.port, d.interval_ms),
            ("peers.ns.svc", 9090, 5_000)
        );
        assert_eq!(with("peers:7000").unwrap().discovery.unwrap().port, 7000);
        for bad in ["http://peers", "peers:0", "peers:x", "peers/x", ""] {
            match with(bad) {
                Err(ConfigError::Setting(e)) => assert_eq!(e.field, "peers_dns", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(base().resolve().unwrap().discovery.is_none());
    }

    /// One port for everything only on loopback; a public address needs an internal listener,
    /// and the advertised URL is needed only where peers could not guess it.
    #[test]
    fn internal_routes_leave_the_public_port_unless_it_is_loopback() {
        let with = |listen: &str, internal: Option<&str>| Options {
            listen: Some(listen.parse().unwrap()),
            internal_listen: internal.map(|a| a.parse().unwrap()),
            ..base()
        };
        let c = with("127.0.0.1:8080", None).resolve().unwrap();
        assert_eq!(c.internal_listen, None);
        let c = with("[::1]:8080", None).resolve().unwrap();
        assert_eq!(c.internal_listen, None);
        let c = with("0.0.0.0:80", Some("10.0.0.5:9080")).resolve().unwrap();
        assert_eq!(c.internal_listen, Some("10.0.0.5:9080".parse().unwrap()));
        assert_eq!(
            c.advertise, None,
            "derived from the internal address at start"
        );
        assert!(with("0.0.0.0:80", None).resolve().is_err());
    }

    /// Where admitted visitors are sent must be an absolute http(s) URL with a host: a
    /// protocol-relative `//host`, another scheme or a bare path are refused at start.
    #[test]
    fn origin_url_must_be_an_absolute_http_url() {
        let with = |url: &str| {
            Options {
                origin_url: Some(url.into()),
                ..base()
            }
            .resolve()
        };
        for bad in [
            "//evil.example/",
            "javascript:alert(1)",
            "ftp://shop.example/",
            "/shop",
            "https://",
            "http:///x",
            "https://shop.example/\"<",
        ] {
            let err = with(bad).unwrap_err().to_string();
            assert!(err.contains("origin_url"), "{bad}: {err}");
        }
        for good in ["https://shop.example/", "http://127.0.0.1:9/origin"] {
            assert_eq!(with(good).unwrap().origin_url, good);
        }
        assert_eq!(base().resolve().unwrap().origin_url, "/", "the default");
    }

    #[test]
    fn public_url_gives_the_origin_and_secure_cookies() {
        let c = Options {
            public_url: Some("https://Queue.Example:443/waiting/".into()),
            ..base()
        }
        .resolve()
        .unwrap();
        let (url, origin) = c.public_url.unwrap();
        assert_eq!(url, "https://Queue.Example:443/waiting");
        assert_eq!(origin, "https://queue.example");
        assert!(c.cookies.secure);
        assert!(!base().resolve().unwrap().cookies.secure);
        assert_eq!(
            web_origin("http://a.example:8080/x?y").as_deref(),
            Some("http://a.example:8080")
        );
    }

    #[test]
    fn cookie_options_are_checked_and_name_the_cookies() {
        let c = Options {
            cookie_domain: Some("example.com".into()),
            cookie_name_suffix: Some("_shop".into()),
            cookie_samesite: Some(SameSite::Strict),
            ..base()
        }
        .resolve()
        .unwrap()
        .cookies;
        assert_eq!(c.domain.as_deref(), Some("example.com"));
        assert_eq!(
            (c.pass.as_str(), c.same_site),
            ("wr_pass_shop", SameSite::Strict)
        );
        let field = |o: Options| o.resolve().unwrap_err().to_string();
        let none = Options {
            cookie_samesite: Some(SameSite::None),
            ..base()
        };
        assert!(field(none).contains("cookie_samesite"));
        let secure_none = Options {
            cookie_samesite: Some(SameSite::None),
            cookie_secure: Some(true),
            ..base()
        };
        assert!(secure_none.resolve().is_ok());
        let domain = Options {
            cookie_domain: Some("exa mple.com; x=1".into()),
            ..base()
        };
        assert!(field(domain).contains("cookie_domain"));
        let suffix = Options {
            cookie_name_suffix: Some("a=b".into()),
            ..base()
        };
        assert!(field(suffix).contains("cookie_name_suffix"));
    }

    #[test]
    fn derived_ids_are_stable_nonzero_and_js_safe() {
        let a = derive_node_id("http://127.0.0.1:8081");
        assert_eq!(a, derive_node_id("http://127.0.0.1:8081"));
        assert_ne!(a, derive_node_id("http://127.0.0.1:8082"));
        assert!(a.0 > 0 && a.0 < (1 << 53));
    }
}
