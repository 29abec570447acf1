//! Everything one simulated run depends on. A [`RunConfig`] plus its seed determines the run
//! completely; [`RunConfig::to_command`] turns it back into the command line that replays it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use waitingroom_core::{Settings, Time};
use waitingroom_distributed::AdmissionMode;

/// Which waiting room the simulated visitors go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The real protocol: QPID over a spanning tree, TAG eviction, SWIM, membership changes.
    Qpid,
    /// One perfect global queue, admitting in exactly the fair order: the limit of fairness.
    CentralFifo,
    /// Cloudflare-style: one bucket per minute of arrival, oldest bucket first, random order
    /// within a bucket.
    Buckets,
    /// The relaxed distributed queue of the thesis §7.2.2: every admission takes the better
    /// head of `d` randomly chosen nodes' local queues.
    RandomSample,
}

impl Strategy {
    /// All strategies, in the order tables show them.
    pub const ALL: [Strategy; 4] = [
        Strategy::Qpid,
        Strategy::CentralFifo,
        Strategy::Buckets,
        Strategy::RandomSample,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Qpid => "qpid",
            Strategy::CentralFifo => "central-fifo",
            Strategy::Buckets => "buckets",
            Strategy::RandomSample => "random-sample",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When visitors arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Independently and uniformly over the arrival window (the thesis' experiments).
    Uniform,
    /// A flash crowd: `flash_share` of the visitors arrive uniformly within the first
    /// `flash_ms`, the rest uniformly over the whole window.
    Flash,
    /// A Poisson process with rate `users / window`: exponential gaps, may run past the window.
    Poisson,
}

impl Arrival {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Uniform => "uniform",
            Arrival::Flash => "flash",
            Arrival::Poisson => "poisson",
        }
    }
}

/// How long a message between two nodes takes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Latency {
    /// Always this many milliseconds.
    Fixed(Time),
    /// Uniform over `min..=max` milliseconds.
    Uniform {
        /// Shortest delay.
        min: Time,
        /// Longest delay.
        max: Time,
    },
    /// Heavy tail: Pareto with scale `min` and shape `alpha`, capped at `max`.
    Pareto {
        /// Shortest (and most likely) delay.
        min: Time,
        /// Tail index; smaller means heavier (1.1–3 are usual).
        alpha: f64,
        /// Cap, so one message cannot stall a run for ever.
        max: Time,
    },
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Latency::Fixed(ms) => write!(f, "{ms}"),
            Latency::Uniform { min, max } => write!(f, "{min}-{max}"),
            Latency::Pareto { min, alpha, max } => write!(f, "pareto:{min}:{alpha}:{max}"),
        }
    }
}

impl FromStr for Latency {
    type Err = String;

    /// `15` (fixed), `10-20` (uniform), or `pareto:MIN:ALPHA[:MAX]` (heavy tail).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ms = |part: &str| -> Result<Time, String> {
            part.trim()
                .parse::<Time>()
                .map_err(|_| format!("`{part}` is not a whole number of milliseconds"))
        };
        if let Some(rest) = s.strip_prefix("pareto:") {
            let parts: Vec<&str> = rest.split(':').collect();
            if !(2..=3).contains(&parts.len()) {
                return Err("expected pareto:MIN:ALPHA or pareto:MIN:ALPHA:MAX".into());
            }
            let min = ms(parts[0])?;
            let alpha: f64 = parts[1]
                .parse()
                .map_err(|_| format!("`{}` is not a number", parts[1]))?;
            if !(alpha.is_finite() && alpha > 0.0) {
                return Err("the Pareto shape must be a positive number".into());
            }
            let max = match parts.get(2) {
                Some(p) => ms(p)?,
                None => min.saturating_mul(100).max(1_000),
            };
            if min == 0 || max < min {
                return Err("pareto needs 0 < MIN <= MAX".into());
            }
            return Ok(Latency::Pareto { min, alpha, max });
        }
        if let Some((a, b)) = s.split_once('-') {
            let (min, max) = (ms(a)?, ms(b)?);
            if max < min {
                return Err(format!("latency range {min}-{max} is backwards"));
            }
            return Ok(Latency::Uniform { min, max });
        }
        Ok(Latency::Fixed(ms(s)?))
    }
}

/// How a partition cuts the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionKind {
    /// One random node is cut off from all others.
    Isolate,
    /// The nodes are split in two random halves.
    Split,
    /// Either, chosen at random each time.
    Random,
}

impl PartitionKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PartitionKind::Isolate => "isolate",
            PartitionKind::Split => "split",
            PartitionKind::Random => "random",
        }
    }
}

/// A disturbance of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disturbance {
    /// A random live node stops abruptly (never the last one).
    Crash,
    /// A random live node stops abruptly and comes back `restart_delay_ms` later with the same
    /// id and a higher incarnation.
    Restart,
    /// A new node joins the cluster.
    Add,
    /// The network splits; it heals `partition_ms` later.
    Partition(PartitionKind),
}

/// A disturbance at a fixed time (milliseconds after the arrival window opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scripted {
    /// When, relative to the start of the arrival window.
    pub at: Time,
    /// What.
    pub what: Disturbance,
}

impl fmt::Display for Scripted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.what {
            Disturbance::Crash => "crash",
            Disturbance::Restart => "restart",
            Disturbance::Add => "add",
            Disturbance::Partition(k) => match k {
                PartitionKind::Isolate => "isolate",
                PartitionKind::Split => "split",
                PartitionKind::Random => "partition",
            },
        };
        write!(f, "{what}@{}", self.at)
    }
}

impl FromStr for Scripted {
    type Err = String;

    /// `crash@30000`, `restart@…`, `add@…`, `isolate@…`, `split@…`, `partition@…`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (what, at) = s
            .split_once('@')
            .ok_or_else(|| format!("`{s}`: expected WHAT@MS, e.g. crash@30000"))?;
        let at = at
            .trim()
            .parse::<Time>()
            .map_err(|_| format!("`{at}` is not a whole number of milliseconds"))?;
        let what = match what.trim() {
            "crash" => Disturbance::Crash,
            "restart" => Disturbance::Restart,
            "add" => Disturbance::Add,
            "isolate" => Disturbance::Partition(PartitionKind::Isolate),
            "split" => Disturbance::Partition(PartitionKind::Split),
            "partition" => Disturbance::Partition(PartitionKind::Random),
            other => {
                return Err(format!(
                    "unknown disturbance `{other}` (crash, restart, add, isolate, split, partition)"
                ));
            }
        };
        Ok(Scripted { at, what })
    }
}

/// The target number of visitors on the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// At most this many.
    Limited(u64),
    /// No limit.
    Unlimited,
}

impl Target {
    /// The value of [`Settings::target_on_site`].
    pub fn on_site(self) -> u64 {
        match self {
            Target::Limited(n) => n,
            Target::Unlimited => Settings::UNLIMITED,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Limited(n) => write!(f, "{n}"),
            Target::Unlimited => f.write_str("unlimited"),
        }
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "unlimited" | "inf" | "INF" => Ok(Target::Unlimited),
            _ => match s.parse::<u64>() {
                Ok(0) => Err("the target must be at least 1 (or `unlimited`)".into()),
                Ok(n) => Ok(Target::Limited(n)),
                Err(_) => Err(format!("`{s}` is neither a number nor `unlimited`")),
            },
        }
    }
}

/// One simulated run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The seed every random choice derives from.
    pub seed: u64,
    /// Which waiting room.
    pub strategy: Strategy,
    /// How the protocol lets visitors out (qpid only).
    pub admission: AdmissionMode,
    /// Nodes at the start.
    pub nodes: u32,
    /// Visitors in total.
    pub users: u64,
    /// Target number of visitors on the site.
    pub target: Target,

    /// Arrival process.
    pub arrival: Arrival,
    /// Length of the arrival window.
    pub window_ms: Time,
    /// Flash crowd: share of visitors in the burst.
    pub flash_share: f64,
    /// Flash crowd: length of the burst at the start of the window.
    pub flash_ms: Time,
    /// Time given to the starting nodes to form a cluster before the window opens.
    pub warmup_ms: Time,

    /// Visitors check in this often.
    pub refresh_ms: Time,
    /// Each check-in comes up to this much later than asked (uniform), as real clients do.
    pub jitter_ms: Time,
    /// Probability that a visitor gives up waiting.
    pub abandon: f64,
    /// Mean patience of a visitor who gives up (exponential).
    pub patience_ms: Time,
    /// How long an admitted visitor stays on the site, refreshing their pass; 0 = they never
    /// refresh it (on the site for the pass expiry only).
    pub session_ms: Time,

    /// Eviction interval.
    pub eviction_ms: Time,
    /// Ticket expiry.
    pub ticket_expiry_ms: Time,
    /// Pass expiry (0: passes expire at once, the thesis' setting).
    pub pass_expiry_ms: Time,
    /// Admit joining visitors at once while the site has room and nobody waits.
    pub straight_through: bool,
    /// SWIM probe interval.
    pub probe_ms: Time,
    /// SWIM probe timeout.
    pub probe_timeout_ms: Time,

    /// Per-message latency between nodes.
    pub latency: Latency,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub dup: f64,
    /// Probability that a message is held back by up to `reorder_ms` extra.
    pub reorder: f64,
    /// Largest extra delay of a reordered message.
    pub reorder_ms: Time,
    /// A message to a crashed node fails like a refused connection: when it would have
    /// arrived, the sender's transport reports the peer unreachable.
    pub refused_connections: bool,

    /// Crashes and node additions, each this many, at random times in the arrival window.
    pub churn: u32,
    /// Crash-and-restart cycles at random times in the arrival window.
    pub restarts: u32,
    /// Partitions at random times in the arrival window, each healing after `partition_ms`.
    pub partitions: u32,
    /// What kind of partition.
    pub partition_kind: PartitionKind,
    /// How long a partition lasts.
    pub partition_ms: Time,
    /// How long a restarted node stays down.
    pub restart_delay_ms: Time,
    /// Disturbances at fixed times, on top of the random ones.
    pub script: Vec<Scripted>,

    /// Random-sample strategy: how many nodes each admission looks at.
    pub sample_d: u32,
    /// Run the invariant checks after every `check_every`-th protocol event (1 = every event,
    /// 0 = never).
    pub check_every: u32,
    /// Stop after this much simulated time past the opening of the window.
    pub max_time_ms: Time,
}

impl Default for RunConfig {
    /// The thesis' experiment (table 6.1), target 100, 500 visitors, no churn.
    fn default() -> Self {
        RunConfig {
            seed: 1,
            strategy: Strategy::Qpid,
            admission: AdmissionMode::Range,
            nodes: 8,
            users: 500,
            target: Target::Limited(100),
            arrival: Arrival::Uniform,
            window_ms: 100_000,
            flash_share: 0.8,
            flash_ms: 5_000,
            warmup_ms: 1_000,
            refresh_ms: 600,
            jitter_ms: 0,
            abandon: 0.0,
            patience_ms: 30_000,
            session_ms: 0,
            eviction_ms: 1_000,
            ticket_expiry_ms: 10_000,
            pass_expiry_ms: 0,
            straight_through: false,
            probe_ms: 500,
            probe_timeout_ms: 200,
            latency: Latency::Uniform { min: 10, max: 20 },
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_ms: 50,
            refused_connections: false,
            churn: 0,
            restarts: 0,
            partitions: 0,
            partition_kind: PartitionKind::Random,
            partition_ms: 5_000,
            restart_delay_ms: 2_000,
            script: Vec::new(),
            sample_d: 2,
            check_every: 1,
            max_time_ms: 0,
        }
    }
}

impl RunConfig {
    /// The simulated-time limit in force (past the opening of the window): `max_time_ms`, or
    /// three windows plus a minute when it is 0.
    pub fn time_limit(&self) -> Time {
        if self.max_time_ms > 0 {
            self.max_time_ms
        } else {
            self.window_ms.saturating_mul(3).saturating_add(60_000)
        }
    }

    /// The waiting room settings every node runs with.
    pub fn settings(&self) -> Settings {
        Settings {
            target_on_site: self.target.on_site(),
            refresh_interval_ms: self.refresh_ms,
            ticket_expiry_ms: self.ticket_expiry_ms,
            pass_expiry_ms: self.pass_expiry_ms,
            eviction_interval_ms: self.eviction_ms,
            cleanup_interval_ms: self.eviction_ms,
            admit_straight_through: self.straight_through,
        }
    }

    /// Checks what clap cannot: combinations of values.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().validate().map_err(|e| e.to_string())?;
        if self.nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if self.users > u64::from(u32::MAX) {
            return Err(format!("--users must be at most {}", u32::MAX));
        }
        if self.window_ms == 0 {
            return Err("--window-ms must be greater than 0".into());
        }
        if self.probe_timeout_ms == 0 || self.probe_timeout_ms >= self.probe_ms {
            return Err("--probe-timeout-ms must be greater than 0 and below --probe-ms".into());
        }
        if self.sample_d == 0 {
            return Err("--sample-d must be at least 1".into());
        }
        let total_nodes = u64::from(self.nodes) + u64::from(self.churn) + self.adds_scripted();
        if total_nodes > 60_000 {
            return Err("too many nodes (at most 60000 over a run)".into());
        }
        Ok(())
    }

    fn adds_scripted(&self) -> u64 {
        self.script
            .iter()
            .filter(|s| s.what == Disturbance::Add)
            .count() as u64
    }

    /// The `waitingroom-sim run …` command that replays this run exactly.
    pub fn to_command(&self) -> String {
        let d = RunConfig::default();
        let mut cmd = format!(
            "waitingroom-sim run --strategy {} --nodes {} --users {} --target {} --churn {} --seed {}",
            self.strategy, self.nodes, self.users, self.target, self.churn, self.seed
        );
        let mut opt = |differs: bool, text: String| {
            if differs {
                cmd.push(' ');
                cmd.push_str(&text);
            }
        };
        opt(
            self.admission != d.admission,
            format!("--admission {}", self.admission),
        );
        opt(
            self.arrival != d.arrival,
            format!("--arrival {}", self.arrival.name()),
        );
        opt(
            self.window_ms != d.window_ms,
            format!("--window-ms {}", self.window_ms),
        );
        opt(
            self.flash_share != d.flash_share,
            format!("--flash-share {}", self.flash_share),
        );
        opt(
            self.flash_ms != d.flash_ms,
            format!("--flash-ms {}", self.flash_ms),
        );
        opt(
            self.warmup_ms != d.warmup_ms,
            format!("--warmup-ms {}", self.warmup_ms),
        );
        opt(
            self.refresh_ms != d.refresh_ms,
            format!("--refresh-ms {}", self.refresh_ms),
        );
        opt(
            self.jitter_ms != d.jitter_ms,
            format!("--jitter-ms {}", self.jitter_ms),
        );
        opt(
            self.abandon != d.abandon,
            format!("--abandon {}", self.abandon),
        );
        opt(
            self.patience_ms != d.patience_ms,
            format!("--patience-ms {}", self.patience_ms),
        );
        opt(
            self.session_ms != d.session_ms,
            format!("--session-ms {}", self.session_ms),
        );
        opt(
            self.eviction_ms != d.eviction_ms,
            format!("--eviction-ms {}", self.eviction_ms),
        );
        opt(
            self.ticket_expiry_ms != d.ticket_expiry_ms,
            format!("--ticket-expiry-ms {}", self.ticket_expiry_ms),
        );
        opt(
            self.pass_expiry_ms != d.pass_expiry_ms,
            format!("--pass-expiry-ms {}", self.pass_expiry_ms),
        );
        opt(self.straight_through, "--straight-through".into());
        opt(
            self.probe_ms != d.probe_ms,
            format!("--probe-ms {}", self.probe_ms),
        );
        opt(
            self.probe_timeout_ms != d.probe_timeout_ms,
            format!("--probe-timeout-ms {}", self.probe_timeout_ms),
        );
        opt(
            self.latency != d.latency,
            format!("--latency {}", self.latency),
        );
        opt(self.loss != d.loss, format!("--loss {}", self.loss));
        opt(self.dup != d.dup, format!("--dup {}", self.dup));
        opt(
            self.reorder != d.reorder,
            format!("--reorder {}", self.reorder),
        );
        opt(
            self.reorder_ms != d.reorder_ms,
            format!("--reorder-ms {}", self.reorder_ms),
        );
        opt(self.refused_connections, "--refused-connections".into());
        opt(
            self.restarts != d.restarts,
            format!("--restarts {}", self.restarts),
        );
        opt(
            self.partitions != d.partitions,
            format!("--partitions {}", self.partitions),
        );
        opt(
            self.partition_kind != d.partition_kind,
            format!("--partition-kind {}", self.partition_kind.name()),
        );
        opt(
            self.partition_ms != d.partition_ms,
            format!("--partition-ms {}", self.partition_ms),
        );
        opt(
            self.restart_delay_ms != d.restart_delay_ms,
            format!("--restart-delay-ms {}", self.restart_delay_ms),
        );
        for s in &self.script {
            opt(true, format!("--script {s}"));
        }
        opt(
            self.sample_d != d.sample_d,
            format!("--sample-d {}", self.sample_d),
        );
        opt(
            self.check_every != d.check_every,
            format!("--check-every {}", self.check_every),
        );
        opt(
            self.max_time_ms != d.max_time_ms,
            format!("--max-time-ms {}", self.max_time_ms),
        );
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_parses_all_forms() {
        assert_eq!("15".parse::<Latency>().unwrap(), Latency::Fixed(15));
        assert_eq!(
            "10-20".parse::<Latency>().unwrap(),
            Latency::Uniform { min: 10, max: 20 }
        );
        assert_eq!(
            "pareto:5:1.5:500".parse::<Latency>().unwrap(),
            Latency::Pareto {
                min: 5,
                alpha: 1.5,
                max: 500
            }
        );
        assert!("20-10".parse::<Latency>().is_err());
        assert!("pareto:0:1".parse::<Latency>().is_err());
        assert!("x".parse::<Latency>().is_err());
        for s in ["15", "10-20", "pareto:5:1.5:500"] {
            assert_eq!(s.parse::<Latency>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn script_and_target_parse() {
        let s: Scripted = "isolate@5000".parse().unwrap();
        assert_eq!(s.what, Disturbance::Partition(PartitionKind::Isolate));
        assert_eq!(s.to_string(), "isolate@5000");
        assert!("boom@1".parse::<Scripted>().is_err());
        assert!("crash".parse::<Scripted>().is_err());
        assert_eq!("unlimited".parse::<Target>().unwrap(), Target::Unlimited);
        assert_eq!("20".parse::<Target>().unwrap(), Target::Limited(20));
        assert!("0".parse::<Target>().is_err());
    }

    #[test]
    fn default_is_valid_and_replays_itself() {
        let c = RunConfig::default();
        c.validate().unwrap();
        assert_eq!(
            c.to_command(),
            "waitingroom-sim run --strategy qpid --nodes 8 --users 500 --target 100 --churn 0 --seed 1"
        );
    }
}
