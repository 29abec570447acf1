//! Prometheus metrics (`waitingroom_` prefix, `_total` counters, base units), served at
//! `/metrics` in the OpenMetrics text format. The dashboard and alert rules in `deploy/` read
//! them; a test (`tests/deploy.rs`) checks that every name they use is here. [`fairness`]
//! counts the inversions behind the live fairness gauge.

pub mod fairness;

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use waitingroom_core::{Settings, Time};
use waitingroom_distributed::{Body, ChannelMsg, Ignored, Mode, NodeStatus, Pause};

use crate::round_log::Fairness;
use fairness::Inversions;

/// Label of per-route HTTP metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route template, e.g. `/api/checkin`.
    pub route: String,
    /// HTTP method.
    pub method: String,
}

/// Label of per-message-type metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    /// Message type, e.g. `update`, `ping`.
    pub r#type: &'static str,
}

/// Label of the room's mode gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

/// Label of counters by reason: ignored peer messages, refused peer requests, shed requests.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why: an ignored message's [`Ignored::as_str`] (e.g. `stale_version`), a refused peer
    /// request's (e.g. `bad_signature`, `replayed`), a shed request's (e.g. `overloaded`).
    pub reason: &'static str,
}

/// Label of per-peer gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// The peer's node id.
    pub peer: u64,
}

/// Label of outcome counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// Outcome, e.g. `queued`, `admitted`, `error`.
    pub result: &'static str,
}

/// Label of the state directory's counters: which file.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FileLabels {
    /// The kind of state the file keeps, e.g. `releases`.
    pub file: &'static str,
}

/// Every metric of the node.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Visitors let out of the queue by this node.
    pub admitted: Counter,
    /// Joins answered.
    pub joins: Family<ResultLabels, Counter>,
    /// Check-ins answered.
    pub checkins: Family<ResultLabels, Counter>,
    /// Passes handed out.
    pub leaves: Family<ResultLabels, Counter>,
    /// Pass refreshes answered at the node counting the pass (`ok`, `too_soon`, `error`).
    pub refreshes: Family<ResultLabels, Counter>,
    /// Visitor requests forwarded to the node holding the ticket.
    pub forwards: Family<ResultLabels, Counter>,
    /// Visitors re-queued here because their node could not be reached.
    pub requeues: Counter,
    /// Admission inversions (see `fairness`).
    pub inversions: Counter,
    fairness: Mutex<Inversions>,
    /// Seconds from a visitor's join to their admission, for visitors let out here.
    wait: Histogram,
    /// Eviction rounds this node completed as root.
    rounds_completed: Counter,
    /// Spanning tree rebuilds after rounds stopped coming.
    tree_repairs: Counter,
    /// Peer messages delivered, by type.
    pub peer_sent: Family<TypeLabels, Counter>,
    /// Peer messages received, by type.
    pub peer_received: Family<TypeLabels, Counter>,
    /// Peer messages the node ignored, by reason.
    pub peer_ignored: Family<ReasonLabels, Counter>,
    /// Peer messages dropped because a peer's queue was full or its request failed.
    pub peer_dropped: Counter,
    /// Peer requests that failed (error status or no answer).
    pub peer_failures: Counter,
    /// Peer requests (and answers) refused by authentication, by reason.
    pub peer_auth_failures: Family<ReasonLabels, Counter>,
    /// DNS lookups of `--peers-dns`, by result (`ok`, `error`).
    pub dns_lookups: Family<ResultLabels, Counter>,
    /// Peer addresses the last successful DNS lookup found (this node's own included).
    pub dns_peers: Gauge,
    /// Requests refused at once with 503 because the node was at a limit, by reason.
    pub shed: Family<ReasonLabels, Counter>,
    /// Joins refused by the rate limit.
    pub rate_limited: Counter,
    /// Passes given back early at this node (`POST /api/pass/release`).
    pub passes_released: Counter,
    /// Passes given back whose release no majority of the nodes confirmed in time: answered
    /// 503 `release_pending`, the visitor gives it back again.
    pub releases_pending: Counter,
    /// Writes to the state directory that failed, by file (`crate::app::state_dir`).
    pub state_write_failures: Family<FileLabels, Counter>,
    /// Bypass passes minted at this node (`POST /admin/passes`).
    pub bypass_passes: Counter,
    /// Ways back (`return_to`) ignored for a missing or wrong signature.
    pub return_paths_refused: Counter,
    /// Admin API requests refused for a missing or wrong token.
    admin_refused: Counter,
    /// HTTP request latency by route.
    pub http_latency: Family<RouteLabels, Histogram>,
    queued: Gauge,
    on_site: Gauge,
    members: Gauge,
    is_root: Gauge,
    cluster_queued: Gauge,
    cluster_on_site: Gauge,
    membership_version: Gauge,
    last_round: Gauge<f64, AtomicU64>,
    /// The last hour's round records, judged (`round_log::Fairness`).
    records: [Gauge; 3],
    grant_places: Gauge,
    grant_expires: Gauge<f64, AtomicU64>,
    forgotten_past_hold: Gauge<f64, AtomicU64>,
    paused: Family<ReasonLabels, Gauge>,
    ready: Gauge,
    unready: Family<ReasonLabels, Gauge>,
    clock_offset: Family<PeerLabels, Gauge<f64, AtomicU64>>,
    limits: Limits,
}

/// The node's live settings, as gauges (set from the protocol node at each scrape, so they show
/// what it applies).
#[derive(Debug, Default)]
struct Limits {
    settings_version: Gauge,
    target_on_site: Gauge<f64, AtomicU64>,
    new_users_per_minute: Gauge<f64, AtomicU64>,
    mode: Family<ModeLabels, Gauge>,
    session_duration: Gauge<f64, AtomicU64>,
    pass_expiry: Gauge<f64, AtomicU64>,
    eviction_interval: Gauge<f64, AtomicU64>,
}

fn wait_histogram() -> Histogram {
    // 1/8 s .. ~2.3 h.
    Histogram::new(exponential_buckets(0.125, 2.0, 17))
}

fn seconds(ms: Time) -> f64 {
    ms as f64 / 1000.0
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All metrics, registered (in this order in the output).
    pub fn new() -> Self {
        let mut m = Metrics {
            admitted: Counter::default(),
            joins: Family::default(),
            checkins: Family::default(),
            leaves: Family::default(),
            refreshes: Family::default(),
            forwards: Family::default(),
            requeues: Counter::default(),
            inversions: Counter::default(),
            fairness: Mutex::new(Inversions::default()),
            wait: wait_histogram(),
            rounds_completed: Counter::default(),
            tree_repairs: Counter::default(),
            peer_sent: Family::default(),
            peer_received: Family::default(),
            peer_ignored: Family::default(),
            peer_dropped: Counter::default(),
            peer_failures: Counter::default(),
            peer_auth_failures: Family::default(),
            dns_lookups: Family::default(),
            dns_peers: Gauge::default(),
            shed: Family::default(),
            rate_limited: Counter::default(),
            passes_released: Counter::default(),
            releases_pending: Counter::default(),
            state_write_failures: Family::default(),
            bypass_passes: Counter::default(),
            return_paths_refused: Counter::default(),
            admin_refused: Counter::default(),
            http_latency: Family::new_with_constructor(latency_histogram),
            queued: Gauge::default(),
            on_site: Gauge::default(),
            members: Gauge::default(),
            is_root: Gauge::default(),
            cluster_queued: Gauge::default(),
            cluster_on_site: Gauge::default(),
            membership_version: Gauge::default(),
            last_round: Gauge::default(),
            records: Default::default(),
            grant_places: Gauge::default(),
            grant_expires: Gauge::default(),
            forgotten_past_hold: Gauge::default(),
            paused: Family::default(),
            ready: Gauge::default(),
            unready: Family::default(),
            clock_offset: Family::default(),
            limits: Limits::default(),
            registry: Registry::with_prefix("waitingroom"),
        };
        m.register_visitors();
        m.register_peers();
        m.register_requests();
        m.register_gauges();
        m.register_health_gauges();
        m.register_rounds();
        m.register_limits();
        m
    }

    /// The visitor counters.
    fn register_visitors(&mut self) {
        let r = &mut self.registry;
        r.register(
            "admitted",
            "Visitors let out of the queue by this node",
            self.admitted.clone(),
        );
        r.register(
            "joins",
            "Visitor joins answered, by result",
            self.joins.clone(),
        );
        r.register(
            "checkins",
            "Visitor check-ins answered, by result",
            self.checkins.clone(),
        );
        r.register(
            "leaves",
            "Tickets exchanged for passes, by result",
            self.leaves.clone(),
        );
        r.register(
            "refreshes",
            "Pass refreshes answered at the node counting the pass, by result (too_soon: \
             refused by the per-pass rate limit)",
            self.refreshes.clone(),
        );
        r.register(
            "forwards",
            "Visitor requests forwarded to the node holding the ticket, by result",
            self.forwards.clone(),
        );
        r.register(
            "requeues",
            "Visitors re-queued here under their original join time because their node did \
             not answer",
            self.requeues.clone(),
        );
        r.register(
            "admission_inversions",
            "Pairs admitted by this node out of join order: for each admission, the visitors \
             admitted earlier here who joined later (ms resolution, ~17 min window)",
            self.inversions.clone(),
        );
    }

    /// The peer transport counters.
    fn register_peers(&mut self) {
        let r = &mut self.registry;
        r.register(
            "peer_messages_sent",
            "Protocol messages delivered to peers, by type",
            self.peer_sent.clone(),
        );
        r.register(
            "peer_messages_received",
            "Protocol messages received from peers, by type",
            self.peer_received.clone(),
        );
        r.register(
            "peer_messages_ignored",
            "Protocol messages received and ignored by the node, by reason",
            self.peer_ignored.clone(),
        );
        r.register(
            "peer_messages_dropped",
            "Protocol messages dropped: peer queue full or delivery failed (the protocol resends)",
            self.peer_dropped.clone(),
        );
        r.register(
            "peer_request_failures",
            "Peer requests that failed",
            self.peer_failures.clone(),
        );
        r.register(
            "peer_auth_failures",
            "Peer requests and answers refused by authentication (no valid cluster MAC, stale, \
             replayed, misdirected, body not the one signed), by reason",
            self.peer_auth_failures.clone(),
        );
        r.register(
            "dns_lookups",
            "Lookups of the --peers-dns name, by result (ok, error)",
            self.dns_lookups.clone(),
        );
        r.register(
            "dns_peers",
            "Peer addresses the last successful --peers-dns lookup found",
            self.dns_peers.clone(),
        );
    }

    /// Waits, eviction rounds and the build.
    fn register_rounds(&mut self) {
        let r = &mut self.registry;
        r.register_with_unit(
            "wait",
            "Time from a visitor's join to their admission, for visitors let out by this node",
            Unit::Seconds,
            self.wait.clone(),
        );
        r.register(
            "rounds_completed",
            "Eviction rounds (cluster-wide counts) this node completed as the root",
            self.rounds_completed.clone(),
        );
        r.register_with_unit(
            "last_round_timestamp",
            "Unix time of the eviction round whose cluster-wide count this node saw last",
            Unit::Seconds,
            self.last_round.clone(),
        );
        let [rounds, back, bound] = &self.records;
        r.register(
            "records_last_hour",
            "Admission rounds recorded in the last hour (signed records, the same on every node)",
            rounds.clone(),
        );
        r.register(
            "records_cutoff_back_last_hour",
            "Recorded rounds of the last hour (not lotteries) whose cutoff was below an earlier \
             round's: they let out visitors queued ahead of some let out before (re-queued \
             visitors, or unfairness: waitingroom-node audit with passes tells which)",
            back.clone(),
        );
        r.register(
            "records_inversions_bound_last_hour",
            "At most this many pairs of visitors were let out against queue order in the last \
             hour, by the round records: for each round that went back, its admissions times \
             those of earlier rounds with a larger cutoff",
            bound.clone(),
        );
        r.register(
            "tree_repairs",
            "Spanning tree rebuilds because no count came by for watchdog_rounds intervals",
            self.tree_repairs.clone(),
        );
        r.register(
            "build",
            "The running build",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
    }

    /// The live settings.
    fn register_limits(&mut self) {
        let (r, l) = (&mut self.registry, &self.limits);
        r.register(
            "settings_version",
            "Version of the live settings in force here (0: the file's; docs/operating.md#live-settings)",
            l.settings_version.clone(),
        );
        r.register(
            "target_on_site",
            "Visitors allowed on the site at once (+Inf: unlimited)",
            l.target_on_site.clone(),
        );
        r.register(
            "new_users_per_minute",
            "Most visitors let out per minute, cluster-wide (+Inf: no cap)",
            l.new_users_per_minute.clone(),
        );
        r.register(
            "mode",
            "1 for the room's mode: normal, queue_all, passthrough or reject",
            l.mode.clone(),
        );
        r.register_with_unit(
            "session_duration",
            "The longest one admission lasts, refreshes included",
            Unit::Seconds,
            l.session_duration.clone(),
        );
        r.register_with_unit(
            "pass_expiry",
            "How long a pass stays valid without a refresh",
            Unit::Seconds,
            l.pass_expiry.clone(),
        );
        r.register_with_unit(
            "eviction_interval",
            "How often visitors are let out of the queue (one eviction round)",
            Unit::Seconds,
            l.eviction_interval.clone(),
        );
    }

    /// Refused joins and request latency.
    fn register_requests(&mut self) {
        let r = &mut self.registry;
        r.register(
            "joins_rate_limited",
            "Joins refused by the per-client rate limit",
            self.rate_limited.clone(),
        );
        r.register(
            "passes_released",
            "Passes given back early at this node (POST /api/pass/release)",
            self.passes_released.clone(),
        );
        r.register(
            "releases_pending",
            "Passes given back that no majority of the nodes confirmed in time (503 release_pending)",
            self.releases_pending.clone(),
        );
        r.register(
            "bypass_passes_minted",
            "Bypass passes minted at this node (POST /admin/passes)",
            self.bypass_passes.clone(),
        );
        r.register(
            "state_write_failures",
            "Writes to the state directory (--state-dir) that failed, by file: a restart of the \
             whole cluster would forget what changed since",
            self.state_write_failures.clone(),
        );
        r.register(
            "return_paths_refused",
            "Ways back (return_to) the waiting page ignored: not signed by the origin's gate",
            self.return_paths_refused.clone(),
        );
        r.register(
            "admin_requests_refused",
            "Admin API requests refused for a missing or wrong bearer token",
            self.admin_refused.clone(),
        );
        r.register(
            "requests_shed",
            "Requests refused at once with 503 because the node was at a limit, by reason",
            self.shed.clone(),
        );
        r.register_with_unit(
            "http_request_duration",
            "HTTP request latency by route",
            Unit::Seconds,
            self.http_latency.clone(),
        );
    }

    /// The gauges, set from the node's status at each scrape.
    fn register_gauges(&mut self) {
        let r = &mut self.registry;
        r.register(
            "queued",
            "Visitors waiting on this node",
            self.queued.clone(),
        );
        r.register(
            "on_site",
            "Visitors on the site through this node",
            self.on_site.clone(),
        );
        r.register(
            "members",
            "Cluster members this node knows",
            self.members.clone(),
        );
        r.register(
            "is_root",
            "1 when this node is the QPID root",
            self.is_root.clone(),
        );
        r.register(
            "cluster_queued",
            "Visitors waiting cluster-wide at the last count this node saw",
            self.cluster_queued.clone(),
        );
        r.register(
            "cluster_on_site",
            "Visitors on the site cluster-wide at the last count this node saw",
            self.cluster_on_site.clone(),
        );
        r.register(
            "membership_version",
            "Membership version applied",
            self.membership_version.clone(),
        );
        r.register(
            "grant_places",
            "Places this node may still give out under its grant from the root",
            self.grant_places.clone(),
        );
        r.register(
            "grant_expires_seconds",
            "Seconds until this node's grant expires on its clock (0: expired or never granted)",
            self.grant_expires.clone(),
        );
        r.register(
            "peer_clock_offset_seconds",
            "How far each member's clock is ahead of this node's, measured on the SWIM probes \
             (the sample with the shortest round trip of the latest few)",
            self.clock_offset.clone(),
        );
    }

    /// The gauges that say whether, and why, this node lets nobody out or takes no visitors.
    fn register_health_gauges(&mut self) {
        let r = &mut self.registry;
        r.register(
            "forgotten_past_hold_seconds",
            "Seconds the whole target stays held because a node restarted without its state \
             founded the cluster (0: no hold; docs/operating.md#state-directory)",
            self.forgotten_past_hold.clone(),
        );
        r.register(
            "admission_paused",
            "1 when this node lets nobody out, by reason (no_grant, no_majority, lost_round)",
            self.paused.clone(),
        );
        r.register(
            "ready",
            "1 when /readyz answers ready (docs/operating.md#readiness)",
            self.ready.clone(),
        );
        r.register(
            "unready_reason",
            "1 for the reason /readyz fails, if it does (not_ready, stopping, refused_by_peers, \
             voters_file, state_dir, alone, no_majority, clock_skew)",
            self.unready.clone(),
        );
    }

    /// Records an admission, at `at`, of a visitor who joined at `join_time`.
    pub fn on_admitted(&self, join_time: Time, at: Time) {
        self.admitted.inc();
        self.wait.observe(seconds(at.saturating_sub(join_time)));
        let n = self
            .fairness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(join_time);
        self.inversions.inc_by(n);
    }

    /// Records a round this node completed as root.
    pub fn on_round_completed(&self) {
        self.rounds_completed.inc();
    }

    /// Records a tree rebuild.
    pub fn on_tree_repaired(&self) {
        self.tree_repairs.inc();
    }

    /// Counts one `result` on a family.
    pub fn count(family: &Family<ResultLabels, Counter>, result: &'static str) {
        family.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts a refused peer request or answer.
    pub fn count_auth_failure(&self, reason: &'static str) {
        self.peer_auth_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Makes the series of `reasons` exist in `family` (at 0), so dashboards and alerts find
    /// them before the first count.
    pub fn declare(family: &Family<ReasonLabels, Counter>, reasons: &[&'static str]) {
        for &reason in reasons {
            let _ = family.get_or_create(&ReasonLabels { reason });
        }
    }

    /// Sets the readiness gauges: ready, or not for `reason` (one of `reasons`, all of which
    /// are shown, at 0 but that one).
    pub fn set_readiness(&self, reasons: &[&'static str], reason: Option<&'static str>) {
        self.ready.set(i64::from(reason.is_none()));
        for &r in reasons {
            let on = Some(r) == reason;
            self.unready
                .get_or_create(&ReasonLabels { reason: r })
                .set(i64::from(on));
        }
    }

    /// Counts an admin API request refused for its token.
    pub fn count_admin_refused(&self) {
        self.admin_refused.inc();
    }

    /// Counts a request shed for `reason`.
    pub fn count_shed(&self, reason: &'static str) {
        self.shed.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts a peer message the node ignored.
    pub fn count_ignored(family: &Family<ReasonLabels, Counter>, reason: Ignored) {
        family
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Counts a peer message.
    pub fn count_type(family: &Family<TypeLabels, Counter>, body: &Body) {
        family
            .get_or_create(&TypeLabels {
                r#type: message_type(body),
            })
            .inc();
    }

    /// Renders the registry after setting the gauges from `status`, the node's `settings` and
    /// what the round records say (`fairness`).
    pub fn render(&self, status: &NodeStatus, settings: &Settings, fairness: &Fairness) -> String {
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let [rounds, back, bound] = &self.records;
        rounds.set(g(fairness.rounds));
        back.set(g(fairness.rounds_back));
        bound.set(g(fairness.inversions_bound));
        self.queued.set(g(status.queued));
        self.on_site.set(g(status.on_site));
        self.members.set(g(status.members.len() as u64));
        self.is_root.set(i64::from(status.is_root));
        self.membership_version.set(g(status.version));
        self.grant_places.set(g(status.grant.places));
        self.grant_expires.set(seconds(status.grant.expires_in_ms));
        (self.forgotten_past_hold).set(seconds(status.forgotten_past_hold_ms));
        self.clock_offset.clear();
        for c in &status.clock_offsets {
            let labels = PeerLabels { peer: c.peer.0 };
            let seconds = c.offset_ms as f64 / 1000.0;
            self.clock_offset.get_or_create(&labels).set(seconds);
        }
        for why in [Pause::NoGrant, Pause::NoMajority, Pause::LostRound] {
            let labels = ReasonLabels {
                reason: why.as_str(),
            };
            let on = status.paused == Some(why);
            self.paused.get_or_create(&labels).set(i64::from(on));
        }
        if let Some(s) = &status.summary {
            self.cluster_queued.set(g(s.queued));
            self.cluster_on_site.set(g(s.on_site));
            self.last_round.set(seconds(s.stamp.time));
        }
        let l = &self.limits;
        let live = &status.settings;
        l.settings_version.set(g(live.version));
        l.new_users_per_minute.set(
            live.new_users_per_minute
                .map_or(f64::INFINITY, |n| n as f64),
        );
        for mode in Mode::ALL {
            let labels = ModeLabels { mode: mode.name() };
            l.mode
                .get_or_create(&labels)
                .set(i64::from(live.mode == mode));
        }
        l.session_duration
            .set(seconds(settings.pass_max_lifetime_ms));
        l.target_on_site
            .set(if settings.target_on_site == Settings::UNLIMITED {
                f64::INFINITY
            } else {
                settings.target_on_site as f64
            });
        l.pass_expiry.set(seconds(settings.pass_expiry_ms));
        l.eviction_interval
            .set(seconds(settings.eviction_interval_ms));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A short name for a message's type, for metric labels.
pub fn message_type(body: &Body) -> &'static str {
    match body {
        Body::Channel { msg, .. } => match msg {
            ChannelMsg::Update { .. } => "update",
            ChannelMsg::WeightQuery { .. } => "weight_query",
            ChannelMsg::FindRoot { .. } => "find_root",
            ChannelMsg::DeleteMin { .. } => "delete_min",
            ChannelMsg::CountRequest(_) => "count_request",
            ChannelMsg::CountReply { .. } => "count_reply",
            ChannelMsg::CountResult(_) => "count_result",
            ChannelMsg::Forget { .. } => "forget",
            ChannelMsg::ReleasesAsk { .. } => "releases_ask",
            ChannelMsg::Releases(_) => "releases",
            ChannelMsg::ReleasesHeld { .. } => "releases_held",
        },
        Body::ChannelAck { .. } => "ack",
        Body::Tree(..) => "tree",
        Body::Ping { .. } => "ping",
        Body::PingAck { .. } => "ping_ack",
        Body::PingReq { .. } => "ping_req",
        Body::JoinRequest { .. } => "join_request",
        Body::NotMember { .. } => "not_member",
    }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::NodeId;
    use waitingroom_distributed::Phase;

    use super::*;

    fn status() -> NodeStatus {
        NodeStatus {
            id: NodeId(1),
            incarnation: 1,
            addr: "http://127.0.0.1:1".into(),
            phase: Phase::Member,
            version: 1,
            members: Vec::new(),
            edges: Vec::new(),
            parent: None,
            is_root: true,
            queued: 0,
            on_site: 0,
            admitted_total: 0,
            grant: waitingroom_distributed::GrantStatus {
                places: 3,
                expires_in_ms: 2_500,
            },
            paused: Some(Pause::NoMajority),
            forgotten_past_hold_ms: 0,
            voters: vec![NodeId(1)],
            clock_offsets: vec![waitingroom_distributed::ClockOffset {
                peer: NodeId(2),
                offset_ms: -1_500,
                rtt_ms: 4,
            }],
            settings: waitingroom_distributed::LiveSettings::default(),
            summary: None,
        }
    }

    #[test]
    fn waits_are_observed_from_join_to_admission() {
        let m = Metrics::new();
        m.on_admitted(1_000, 4_000);
        m.on_admitted(2_000, 2_100);
        m.on_round_completed();
        let fairness = Fairness {
            rounds: 5,
            rounds_back: 1,
            inversions_bound: 6,
        };
        let text = m.render(&status(), &Settings::default(), &fairness);
        for line in [
            "waitingroom_wait_seconds_sum 3.1",
            "waitingroom_wait_seconds_count 2",
            "waitingroom_peer_clock_offset_seconds{peer=\"2\"} -1.5",
            "waitingroom_grant_places 3",
            "waitingroom_admission_paused{reason=\"no_majority\"} 1",
            "waitingroom_wait_seconds_bucket{le=\"0.125\"} 1",
            "waitingroom_wait_seconds_bucket{le=\"2.0\"} 1",
            "waitingroom_wait_seconds_bucket{le=\"4.0\"} 2",
            "waitingroom_admitted_total 2",
            "waitingroom_rounds_completed_total 1",
            "waitingroom_records_last_hour 5",
            "waitingroom_records_cutoff_back_last_hour 1",
            "waitingroom_records_inversions_bound_last_hour 6",
            // No count seen yet.
            "waitingroom_last_round_timestamp_seconds 0.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
