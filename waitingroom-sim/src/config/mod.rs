//! Everything one simulated run depends on. A [`RunConfig`] plus its seed determines the run
//! completely; [`RunConfig::to_command`] turns it back into the command line that replays it.
//!
//! The options are grouped by what they describe, as TigerBeetle's simulator groups its
//! `Simulator.Options`: the visitors ([`WorkloadOptions`]), the network ([`NetworkOptions`]),
//! what goes wrong ([`FaultOptions`]), the protocol's own settings ([`ProtocolOptions`], named as
//! in `Settings` and `NodeConfig`) and the simulator's checking ([`CheckOptions`]). Each group is
//! a `clap::Args` flattened into the `run`, `sweep` and `compare` commands, so a setting is
//! written in one place: its field, whose name is the flag, whose doc comment is the help and
//! whose `default_value` is the default — [`Default`] is what the command line gives without
//! flags.

pub(crate) mod values;

pub(crate) use values::named;

use std::sync::LazyLock;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, FromArgMatches};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use waitingroom_core::{Settings, Time};
use waitingroom_distributed::{AdmissionMode, NodeConfig, QueueingMethod};

pub use values::{
    Arrival, Disturbance, Latency, Operated, OperatorAction, PartitionKind, Scripted, Strategy,
    Target,
};

/// One simulated run: what is simulated, plus the option groups.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
pub struct RunConfig {
    /// The seed every random choice derives from (sweep and compare: the first of --seeds
    /// consecutive seeds).
    #[arg(long, default_value_t = 1, alias = "seed-start")]
    pub seed: u64,
    /// Which waiting room the visitors go through.
    #[arg(long, value_enum, default_value_t = Strategy::Qpid)]
    pub strategy: Strategy,
    /// Nodes at the start.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub nodes: u32,
    /// Random-sample strategy: nodes sampled per admission (the thesis' d).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub sample_d: u32,
    /// The visitors.
    #[command(flatten)]
    #[serde(flatten)]
    pub workload: WorkloadOptions,
    /// The network between the nodes.
    #[command(flatten)]
    #[serde(flatten)]
    pub network: NetworkOptions,
    /// What goes wrong with the nodes.
    #[command(flatten)]
    #[serde(flatten)]
    pub faults: FaultOptions,
    /// What some visitors do beyond waiting their turn.
    #[command(flatten)]
    #[serde(flatten)]
    pub behaviours: BehaviourOptions,
    /// The protocol's settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub protocol: ProtocolOptions,
    /// What the operator changes while the cluster runs.
    #[command(flatten)]
    #[serde(flatten)]
    pub operator: OperatorOptions,
    /// How the simulator watches and bounds the run.
    #[command(flatten)]
    #[serde(flatten)]
    pub checks: CheckOptions,
}

/// The visitors: how many, when they come, how they behave.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Workload")]
pub struct WorkloadOptions {
    /// Visitors in total.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=4_000_000_000))]
    pub users: u64,
    /// Arrival process.
    #[arg(long, value_enum, default_value_t = Arrival::Uniform)]
    pub arrival: Arrival,
    /// Length of the arrival window.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub window_ms: Time,
    /// Flash crowd: share of visitors arriving in the burst.
    #[arg(long, default_value_t = 0.8, value_parser = probability)]
    pub flash_share: f64,
    /// Flash crowd: length of the burst at the start of the window.
    #[arg(long, default_value_t = 5_000)]
    pub flash_ms: Time,
    /// Time for the starting nodes to form a cluster before visitors come.
    #[arg(long, default_value_t = 1_000)]
    pub warmup_ms: Time,
    /// Each check-in comes up to this much later than asked (uniform), as real clients do.
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: Time,
    /// Probability that a visitor gives up waiting.
    #[arg(long, alias = "abandon", default_value_t = 0.0, value_parser = probability)]
    pub abandon_probability: f64,
    /// Mean patience of visitors who give up (exponential).
    #[arg(long, default_value_t = 30_000)]
    pub patience_ms: Time,
    /// How long admitted visitors stay, refreshing their pass (0: they never refresh it and
    /// stay for the pass expiry only).
    #[arg(long, default_value_t = 0)]
    pub session_ms: Time,
}

/// What some visitors do beyond waiting their turn and leaving with their pass: the ways a
/// visitor can play the rules (each a share of the visitors, drawn per visitor).
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Visitor behaviours")]
pub struct BehaviourOptions {
    /// Share of visitors who, once admitted, keep checking in with their ticket instead of
    /// leaving the queue, for --bank-ms, and only then ask for their pass (banked admissions).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub bankers: f64,
    /// How long a banker keeps checking in after being admitted.
    #[arg(long, default_value_t = 30_000)]
    pub bank_ms: Time,
    /// Share of visitors on the site who refresh their pass at a random node each time rather
    /// than at their usual one.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub roamers: f64,
    /// Share of visitors who, once they hold a pass, ask a random node for a pass again with
    /// their old ticket (a replayed leave).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub replayers: f64,
    /// Share of visitors on the site who give their pass back early, and a while later try to
    /// refresh it at a random node.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub releasers: f64,
    /// Share of waiting visitors who go away once, for --away-ms, and come back with their
    /// ticket.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub wanderers: f64,
    /// How long a wanderer stays away (keep it within the ticket expiry: they still count as
    /// visitors who keep checking in).
    #[arg(long, default_value_t = 3_000)]
    pub away_ms: Time,
}

impl BehaviourOptions {
    /// Whether any visitor plays the rules.
    pub fn any(&self) -> bool {
        self.bankers > 0.0
            || self.roamers > 0.0
            || self.replayers > 0.0
            || self.releasers > 0.0
            || self.wanderers > 0.0
    }
}

/// What the operator changes while the cluster runs.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Operator")]
pub struct OperatorOptions {
    /// An operator's action at a fixed time after the window opens, made at a random serving
    /// node: `target=N@…`, `rate=N@…`, `rate=none@…`, `mode=normal|queue_all|passthrough|reject@…`,
    /// `lottery=on|off@…`, `event=PREQUEUE_MS:DURATION_MS[:shuffle]@…`, `bypass@…` (repeatable).
    #[arg(long)]
    pub operator: Vec<Operated>,
}

/// The network between the nodes.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Network")]
pub struct NetworkOptions {
    /// Latency between nodes: `15` (fixed), `10-20` (uniform) or `pareto:MIN:ALPHA[:MAX]`.
    /// With --regions, the latency inside a region.
    #[arg(long, default_value_t = Latency::Uniform { min: 10, max: 20 })]
    pub latency: Latency,
    /// Regions the nodes are spread over, node slot by slot in turn (slot `i` is in region
    /// `i mod R`): messages between two regions take --inter-region-latency.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    #[serde(default = "one_region")]
    pub regions: u32,
    /// Latency between nodes in different regions (same forms as --latency).
    #[arg(long, default_value_t = Latency::Pareto { min: 30, alpha: 1.5, max: 300 })]
    #[serde(default = "inter_region_default")]
    pub inter_region_latency: Latency,
    /// Probability that a message is lost.
    #[arg(long, alias = "loss", default_value_t = 0.0, value_parser = probability)]
    pub loss_probability: f64,
    /// Probability that a message is delivered twice.
    #[arg(long, alias = "dup", default_value_t = 0.0, value_parser = probability)]
    pub duplicate_probability: f64,
    /// Probability that a message is held back (reordered) by up to --reorder-ms.
    #[arg(long, alias = "reorder", default_value_t = 0.0, value_parser = probability)]
    pub reorder_probability: f64,
    /// Largest extra delay of a reordered message.
    #[arg(long, default_value_t = 50)]
    pub reorder_ms: Time,
    /// Messages to a crashed node fail like refused connections: when one would have arrived,
    /// the sender's transport reports the peer unreachable (as the HTTP transport does).
    #[arg(long)]
    pub refused_connections: bool,
}

fn one_region() -> u32 {
    1
}

fn inter_region_default() -> Latency {
    NetworkOptions::default().inter_region_latency
}

/// What goes wrong with the nodes: crashes, restarts, additions and partitions, at random times
/// in the arrival window (as in the thesis) or at scripted times.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Faults")]
pub struct FaultOptions {
    /// Crashes, and as many node additions, at random times in the arrival window.
    #[arg(long, default_value_t = 0)]
    pub churn: u32,
    /// Crash-and-restart cycles at random times in the arrival window.
    #[arg(long, default_value_t = 0)]
    pub restarts: u32,
    /// How long a restarted node stays down.
    #[arg(long, default_value_t = 2_000)]
    pub restart_delay_ms: Time,
    /// Restarted nodes come back without the state their earlier life kept (nodes without
    /// `--state-dir`); by default each comes back from its own last kept state.
    #[arg(long)]
    #[serde(default)]
    pub cold_restarts: bool,
    /// Partitions at random times in the arrival window, each healing after --partition-ms.
    #[arg(long, default_value_t = 0)]
    pub partitions: u32,
    /// What a partition cuts off: one node, or half of them.
    #[arg(long, value_enum, default_value_t = PartitionKind::Random)]
    pub partition_kind: PartitionKind,
    /// How long a partition lasts.
    #[arg(long, default_value_t = 5_000)]
    pub partition_ms: Time,
    /// Each node's clock is off from true time by a fixed amount drawn evenly from
    /// ±this many milliseconds (per node process); the fair order is by true arrival time.
    #[arg(long, default_value_t = 0)]
    pub clock_skew_ms: Time,
    /// A disturbance at a fixed time after the window opens, e.g. `crash@30000`,
    /// `crash-root@…`, `restart@…`, `add@…`, `isolate@…`, `split@…`, `partition@…`,
    /// `freeze@…`, `restart-all@…`, `clock-step@…`, `remove@…` (repeatable).
    #[arg(long)]
    pub script: Vec<Scripted>,
    /// How long a frozen node (`freeze@…`) stays stopped.
    #[arg(long, default_value_t = 3_000)]
    pub freeze_ms: Time,
    /// Largest clock step (`clock-step@…`), either way.
    #[arg(long, default_value_t = 5_000)]
    pub clock_step_ms: Time,
}

/// The protocol's own settings, named as in `waitingroom_core::Settings` and
/// `waitingroom_distributed::NodeConfig` (and the server's flags); the defaults are the thesis'
/// experiment (table 6.1).
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Protocol")]
pub struct ProtocolOptions {
    /// How the protocol lets visitors out (qpid).
    #[arg(long, default_value_t = AdmissionMode::default(), value_parser = admission_mode())]
    pub admission: AdmissionMode,
    /// Target number of visitors on the site: a number, or `unlimited`.
    #[arg(long, alias = "target", default_value_t = Target::Limited(100))]
    pub target_on_site: Target,
    /// Visitors are asked to check in this often.
    #[arg(long, alias = "refresh-ms", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub refresh_interval_ms: Time,
    /// Ticket expiry.
    #[arg(long, default_value_t = 10_000)]
    pub ticket_expiry_ms: Time,
    /// Pass expiry (0: passes expire at once, as in the thesis).
    #[arg(long, default_value_t = 0)]
    pub pass_expiry_ms: Time,
    /// Eviction interval (the cleanup interval too).
    #[arg(long, alias = "eviction-ms", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub eviction_interval_ms: Time,
    /// Admit arriving visitors at once while the site has room and nobody waits.
    #[arg(long, alias = "straight-through")]
    pub admit_straight_through: bool,
    /// Most visitors let out per minute, cluster-wide (the live rate cap; none by default).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub new_users_per_minute: Option<u64>,
    /// In which order the protocol (strategy qpid) lets visitors out: `fifo`, or `random` (a
    /// lottery: fairness is then measured against the lottery's order, and
    /// `kendall_tau_arrival` against arrival).
    #[arg(long, default_value = "fifo", value_parser = queueing_method())]
    pub queueing_method: QueueingMethod,
    /// SWIM probe interval.
    #[arg(long, alias = "probe-ms", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub probe_interval_ms: Time,
    /// SWIM probe timeout.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub probe_timeout_ms: Time,
}

/// How the simulator watches and bounds a run.
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Checks")]
pub struct CheckOptions {
    /// Check the invariants after every N-th protocol event (0: never).
    #[arg(long, default_value_t = 1)]
    pub check_every: u32,
    /// Simulated-time limit after the window opens (0: three windows plus a minute).
    #[arg(long, default_value_t = 0)]
    pub max_time_ms: Time,
    /// Also fail the run on the swarm's checks: an admission that puts more visitors on the
    /// site than the target, two passes for one admission, a pass from an admission whose
    /// claim window had closed, a pass that names no recorded round covering it, a given-back
    /// pass accepted again.
    #[arg(long)]
    pub strict: bool,
}

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

/// `--admission` takes the protocol's own names for its modes ([`AdmissionMode::name`]).
fn admission_mode() -> impl TypedValueParser<Value = AdmissionMode> {
    PossibleValuesParser::new(AdmissionMode::ALL.map(AdmissionMode::name))
        .try_map(|name| name.parse::<AdmissionMode>())
}

/// `--queueing-method` takes the live setting's names ([`QueueingMethod::name`]).
fn queueing_method() -> impl TypedValueParser<Value = QueueingMethod> {
    PossibleValuesParser::new(QueueingMethod::ALL.map(QueueingMethod::name))
        .try_map(|name| name.parse::<QueueingMethod>())
}

/// What a group of options holds when no flag is given: its command-line defaults, the one
/// place they are written.
fn command_line_defaults<T: Args + FromArgMatches>() -> T {
    let matches = T::augment_args(clap::Command::new("defaults"))
        .try_get_matches_from(["defaults"])
        .expect("every option's default parses");
    T::from_arg_matches(&matches).expect("every option has a default")
}

/// Implements `Default` as the command line's defaults.
macro_rules! defaults_from_the_command_line {
    ($($t:ty),+) => {$(
        impl Default for $t {
            fn default() -> Self {
                command_line_defaults()
            }
        }
    )+};
}

defaults_from_the_command_line!(
    RunConfig,
    WorkloadOptions,
    NetworkOptions,
    FaultOptions,
    BehaviourOptions,
    OperatorOptions,
    ProtocolOptions,
    CheckOptions
);

impl ProtocolOptions {
    /// The waiting room settings every node runs with.
    pub fn settings(&self) -> Settings {
        Settings {
            target_on_site: self.target_on_site.on_site(),
            refresh_interval_ms: self.refresh_interval_ms,
            ticket_expiry_ms: self.ticket_expiry_ms,
            pass_expiry_ms: self.pass_expiry_ms,
            pass_max_lifetime_ms: u64::MAX,
            eviction_interval_ms: self.eviction_interval_ms,
            cleanup_interval_ms: self.eviction_interval_ms,
            admit_straight_through: self.admit_straight_through,
        }
    }

    /// Sets the node settings these options name; the others keep the protocol's defaults.
    pub fn configure(&self, node: &mut NodeConfig) {
        node.admission = self.admission;
        node.new_users_per_minute = self.new_users_per_minute;
        node.queueing_method = self.queueing_method;
        node.probe_interval_ms = self.probe_interval_ms;
        node.probe_timeout_ms = self.probe_timeout_ms;
    }
}

/// Options the `reproduce:` line names even at their defaults, so it says what was run.
const ALWAYS_NAMED: [&str; 6] = [
    "seed",
    "strategy",
    "nodes",
    "users",
    "churn",
    "target_on_site",
];

/// Every option of a run as (field name, flag), in the order `--help` lists them.
static FLAGS: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    RunConfig::augment_args(clap::Command::new("run"))
        .get_arguments()
        .filter_map(|a| Some((a.get_id().to_string(), a.get_long()?.to_string())))
        .collect()
});

/// The defaults, by field name.
static DEFAULTS: LazyLock<Map<String, Value>> = LazyLock::new(|| RunConfig::default().values());

impl RunConfig {
    /// The configuration `waitingroom-sim run` gives with these options, e.g.
    /// `["--users", "50", "--churn", "1"]`; an option given twice takes its last value (a
    /// repeatable one, `--script`, collects them all).
    pub fn from_flags<I, T>(flags: I) -> Result<RunConfig, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let command = clap::Command::new("run")
            .no_binary_name(true)
            .args_override_self(true);
        let command = RunConfig::augment_args(command);
        RunConfig::from_arg_matches(&command.try_get_matches_from(flags)?)
    }

    /// The simulated-time limit in force (past the opening of the window): `max_time_ms`, or
    /// three windows plus a minute when it is 0.
    pub fn time_limit(&self) -> Time {
        if self.checks.max_time_ms > 0 {
            self.checks.max_time_ms
        } else {
            self.workload
                .window_ms
                .saturating_mul(3)
                .saturating_add(60_000)
        }
    }

    /// The waiting room settings every node runs with.
    pub fn settings(&self) -> Settings {
        self.protocol.settings()
    }

    /// Checks what clap cannot: combinations of values.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().validate().map_err(|e| e.to_string())?;
        if self.nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if self.workload.users > u64::from(u32::MAX) {
            return Err(format!("--users must be at most {}", u32::MAX));
        }
        if self.workload.window_ms == 0 {
            return Err("--window-ms must be greater than 0".into());
        }
        let p = &self.protocol;
        if p.probe_timeout_ms == 0 || p.probe_timeout_ms >= p.probe_interval_ms {
            return Err(
                "--probe-timeout-ms must be greater than 0 and below --probe-interval-ms".into(),
            );
        }
        if self.sample_d == 0 {
            return Err("--sample-d must be at least 1".into());
        }
        if self.latest_ticket_time() > Time::from(u32::MAX) {
            // Simulated clients keep ticket times in 32 bits (strategies::qpid::clients).
            return Err(
                "the run would reach past 49 days of simulated time: shorten \
                        --max-time-ms, --window-ms, --warmup-ms, --clock-skew-ms or \
                        --ticket-expiry-ms"
                    .into(),
            );
        }
        let total_nodes =
            u64::from(self.nodes) + u64::from(self.faults.churn) + self.adds_scripted();
        if total_nodes > 60_000 {
            return Err("too many nodes (at most 60000 over a run)".into());
        }
        Ok(())
    }

    /// The latest time a ticket of this run can name (on a node's clock): an expiry, or a
    /// check-in asked for, issued at the time limit.
    fn latest_ticket_time(&self) -> Time {
        let p = &self.protocol;
        self.workload
            .warmup_ms
            .saturating_add(self.time_limit())
            .saturating_add(self.faults.clock_skew_ms)
            .saturating_add(
                p.ticket_expiry_ms
                    .max(p.refresh_interval_ms.saturating_mul(2)),
            )
    }

    fn adds_scripted(&self) -> u64 {
        self.faults
            .script
            .iter()
            .filter(|s| s.what == Disturbance::Add)
            .count() as u64
    }

    /// Every option's value as the command line writes it, by field name.
    fn values(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // Every field serialises to JSON (numbers, booleans, text and lists of text).
            _ => Map::new(),
        }
    }

    /// The flags of the options that `tweaked` (rows built from `self`) change although `self`,
    /// a command line, gave them other values than their defaults: a preset refuses those
    /// instead of silently overriding them.
    pub fn overridden_by(&self, tweaked: &[RunConfig]) -> Vec<String> {
        let given = self.values();
        let mut out = Vec::new();
        for row in tweaked {
            for (id, value) in row.values() {
                let differs = given.get(&id).is_some_and(|g| *g != value);
                if differs && given.get(&id) != DEFAULTS.get(&id) {
                    out.push(id);
                }
            }
        }
        out.sort();
        out.dedup();
        out.iter().map(|id| format!("--{}", flag(id))).collect()
    }

    /// The `waitingroom-sim run …` command that replays this run exactly: the seed, strategy,
    /// nodes, users, churn and target, and every other option that differs from its default,
    /// in the order `--help` lists them.
    pub fn to_command(&self) -> String {
        let values = self.values();
        let mut cmd = String::from("waitingroom-sim run");
        for (id, long) in FLAGS.iter() {
            let Some(value) = values.get(id) else {
                continue;
            };
            if ALWAYS_NAMED.contains(&id.as_str()) || DEFAULTS.get(id) != Some(value) {
                push_flag(&mut cmd, long, value);
            }
        }
        cmd
    }
}

/// The flag of the option stored in field `id`.
fn flag(id: &str) -> &str {
    FLAGS
        .iter()
        .find(|(i, _)| i == id)
        .map_or(id, |(_, long)| long.as_str())
}

/// Appends `--long VALUE` as the command line reads it: a switch only when on, a list as the
/// flag repeated.
fn push_flag(cmd: &mut String, long: &str, value: &Value) {
    match value {
        Value::Bool(false) | Value::Null => {}
        Value::Bool(true) => cmd.push_str(&format!(" --{long}")),
        Value::Array(items) => items.iter().for_each(|v| push_flag(cmd, long, v)),
        Value::String(s) => cmd.push_str(&format!(" --{long} {s}")),
        other => cmd.push_str(&format!(" --{long} {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_thesis_experiment_and_replay_themselves() {
        let c = RunConfig::default();
        c.validate().unwrap();
        // Table 6.1: 8 nodes, 10–20 ms uniform latency, refresh 600 ms, eviction 1 s, SWIM
        // probe 0.5 s with 0.2 s timeout, 100 s of arrivals, pass expiry 0.
        assert_eq!(c.nodes, 8);
        assert_eq!(c.network.latency, Latency::Uniform { min: 10, max: 20 });
        let s = c.settings();
        assert_eq!(
            (s.refresh_interval_ms, s.eviction_interval_ms),
            (600, 1_000)
        );
        assert_eq!((s.pass_expiry_ms, s.admit_straight_through), (0, false));
        assert_eq!(
            (c.protocol.probe_interval_ms, c.protocol.probe_timeout_ms),
            (500, 200)
        );
        assert_eq!((c.workload.window_ms, c.workload.users), (100_000, 500));
        assert_eq!(
            c.to_command(),
            "waitingroom-sim run --seed 1 --strategy qpid --nodes 8 --users 500 --churn 0 \
             --target-on-site 100"
        );
    }

    #[test]
    fn a_run_that_changes_every_option_replays_from_its_command() {
        let cfg = RunConfig::from_flags(
            "--seed 9 --strategy buckets --nodes 5 --sample-d 3 \
             --users 77 --arrival poisson --window-ms 9000 --flash-share 0.5 --flash-ms 700 \
             --warmup-ms 1500 --jitter-ms 40 --abandon-probability 0.25 --patience-ms 8000 \
             --session-ms 3000 \
             --latency pareto:5:1.5:900 --loss-probability 0.05 --duplicate-probability 0.1 \
             --reorder-probability 0.2 --reorder-ms 30 --refused-connections --regions 2 \
             --inter-region-latency 40-90 \
             --churn 2 --restarts 1 --restart-delay-ms 900 --cold-restarts --partitions 3 \
             --partition-kind split \
             --partition-ms 4000 --clock-skew-ms 250 --script crash@3000 --script isolate@5000 \
             --script freeze@6000 --freeze-ms 700 --clock-step-ms 300 \
             --bankers 0.1 --bank-ms 9000 --roamers 0.2 --replayers 0.3 --releasers 0.05 \
             --wanderers 0.15 --away-ms 1200 --operator target=7@100 --operator bypass@200 \
             --admission batched --target-on-site unlimited --refresh-interval-ms 700 \
             --ticket-expiry-ms 12000 --pass-expiry-ms 5000 --eviction-interval-ms 900 \
             --admit-straight-through --new-users-per-minute 90 --queueing-method random \
             --probe-interval-ms 400 \
             --probe-timeout-ms 150 \
             --check-every 3 --max-time-ms 99000 --strict"
                .split_whitespace(),
        )
        .unwrap();
        for (id, value) in cfg.values() {
            assert_ne!(
                Some(&value),
                DEFAULTS.get(&id),
                "{id} is still at its default"
            );
        }
        let line = cfg.to_command();
        let again = RunConfig::from_flags(line.split_whitespace().skip(2)).unwrap();
        assert_eq!(again, cfg, "{line}");
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(
            serde_json::from_str::<RunConfig>(&json).unwrap(),
            cfg,
            "{json}"
        );
    }

    #[test]
    fn from_flags_lets_a_later_option_override_an_earlier_one() {
        let cfg = RunConfig::from_flags([
            "--users", "5", "--script", "add@1", "--users", "6", "--script", "crash@2",
        ])
        .unwrap();
        assert_eq!(cfg.workload.users, 6);
        assert_eq!(cfg.faults.script.len(), 2);
        assert!(RunConfig::from_flags(["--users", "x"]).is_err());
    }

    #[test]
    fn every_option_has_a_flag_named_after_its_field() {
        let values = RunConfig::default().values();
        assert_eq!(values.len(), FLAGS.len());
        for (id, long) in FLAGS.iter() {
            assert!(values.contains_key(id), "{id}");
            assert_eq!(long.replace('-', "_"), *id);
        }
    }

    #[test]
    fn a_preset_names_the_options_it_would_override() {
        let mut given = RunConfig::default();
        given.workload.users = 9;
        given.nodes = 3;
        let mut tweaked = given.clone();
        tweaked.workload.users = 100;
        tweaked.faults.churn = 5;
        assert_eq!(given.overridden_by(&[tweaked]), vec!["--users"]);
    }
}
