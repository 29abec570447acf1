//! The values options take beyond plain numbers: which strategy, arrival process, latency
//! distribution, partition, disturbance and target. Each is written on the command line, in the
//! `reproduce:` line and in serialised configurations by one text form: an enum's `name()`, or
//! the `Display` form its `FromStr` reads back.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use waitingroom_core::{Settings, Time};

/// Implements, from an enum's `ALL` and `name()`, how it is printed (`Display`), parsed
/// (`FromStr`) and offered on the command line (`clap::ValueEnum`), so each name is written once.
macro_rules! named {
    ($($t:ty),+) => {$(
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::config::values::by_name(&Self::ALL, Self::name, s)
            }
        }

        impl ::clap::ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                &Self::ALL
            }

            fn to_possible_value(&self) -> Option<::clap::builder::PossibleValue> {
                Some(::clap::builder::PossibleValue::new(self.name()))
            }
        }
    )+};
}
pub(crate) use named;

/// Serialises a value as its text form (`Display`) and reads it back with `FromStr`, so a
/// serialised configuration says what the command line says.
macro_rules! as_text {
    ($($t:ty),+) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
            }
        }
    )+};
}

/// The value of `all` called `s`.
pub(crate) fn by_name<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    s: &str,
) -> Result<T, String> {
    all.iter().copied().find(|&v| name(v) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
        format!("`{s}` is not one of {}", names.join(", "))
    })
}

named!(Strategy, Arrival, PartitionKind, Disturbance);
as_text!(
    Strategy,
    Arrival,
    PartitionKind,
    Latency,
    Scripted,
    Target,
    Operated
);

/// Which waiting room the simulated visitors go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Strategy {
    /// The real protocol: QPID over a spanning tree, TAG eviction, SWIM, membership changes.
    Qpid,
    /// One perfect global queue, admitting in exactly the fair order: the limit of fairness.
    CentralFifo,
    /// Cloudflare-style: one bucket per minute of arrival, oldest bucket first, random order
    /// within a bucket.
    Buckets,
    /// The relaxed distributed queue of the thesis (Distributed Virtual Waiting Room, §7.2.2):
    /// every admission takes the better head of `d` randomly chosen nodes' local queues.
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

/// When visitors arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Every arrival process.
    pub const ALL: [Arrival; 3] = [Arrival::Uniform, Arrival::Flash, Arrival::Poisson];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Uniform => "uniform",
            Arrival::Flash => "flash",
            Arrival::Poisson => "poisson",
        }
    }
}

/// How long a message between two nodes takes.
#[derive(Debug, Clone, Copy, PartialEq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    /// One random node is cut off from all others.
    Isolate,
    /// The nodes are split in two random halves.
    Split,
    /// Either, chosen at random each time.
    Random,
}

impl PartitionKind {
    /// Every kind of partition.
    pub const ALL: [PartitionKind; 3] = [
        PartitionKind::Isolate,
        PartitionKind::Split,
        PartitionKind::Random,
    ];

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbance {
    /// A random live node stops abruptly (never the last one).
    Crash,
    /// The root (the node that counts the rounds) stops abruptly (never the last node).
    CrashRoot,
    /// A random live node stops abruptly and comes back `restart_delay_ms` later with the same
    /// id and a higher incarnation.
    Restart,
    /// A new node joins the cluster.
    Add,
    /// The network splits; it heals `partition_ms` later.
    Partition(PartitionKind),
    /// A random live node stops running (SIGSTOP) for `freeze_ms`: it handles no message and
    /// no timer meanwhile, what was sent to it waits, and the load balancer sends its visitors
    /// elsewhere.
    Freeze,
    /// Every node stops abruptly and comes back `restart_delay_ms` later with the same id and a
    /// higher incarnation: the first starts a new cluster and the others join it.
    RestartAll,
    /// A random live node's machine clock steps by up to `clock_step_ms`, forwards or back (an
    /// NTP step): its next process starts from it, the running one does not follow it.
    ClockStep,
    /// A random live node leaves the cluster cleanly (never the last one).
    Remove,
}

impl Disturbance {
    /// Every disturbance a script can name.
    pub const ALL: [Disturbance; 11] = [
        Disturbance::Crash,
        Disturbance::CrashRoot,
        Disturbance::Restart,
        Disturbance::Add,
        Disturbance::Partition(PartitionKind::Isolate),
        Disturbance::Partition(PartitionKind::Split),
        Disturbance::Partition(PartitionKind::Random),
        Disturbance::Freeze,
        Disturbance::RestartAll,
        Disturbance::ClockStep,
        Disturbance::Remove,
    ];

    /// The name a script uses (`crash@30000`).
    pub fn name(self) -> &'static str {
        match self {
            Disturbance::Crash => "crash",
            Disturbance::CrashRoot => "crash-root",
            Disturbance::Restart => "restart",
            Disturbance::Add => "add",
            Disturbance::Partition(PartitionKind::Isolate) => "isolate",
            Disturbance::Partition(PartitionKind::Split) => "split",
            Disturbance::Partition(PartitionKind::Random) => "partition",
            Disturbance::Freeze => "freeze",
            Disturbance::RestartAll => "restart-all",
            Disturbance::ClockStep => "clock-step",
            Disturbance::Remove => "remove",
        }
    }
}

/// A disturbance at a fixed time (milliseconds after the arrival window opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scripted {
    /// When, relative to the start of the arrival window.
    pub at: Time,
    /// What.
    pub what: Disturbance,
}

impl fmt::Display for Scripted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.what, self.at)
    }
}

impl FromStr for Scripted {
    type Err = String;

    /// `crash@30000`, `crash-root@…`, `restart@…`, `add@…`, `isolate@…`, `split@…`, `partition@…`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (what, at) = s
            .split_once('@')
            .ok_or_else(|| format!("`{s}`: expected WHAT@MS, e.g. crash@30000"))?;
        let at = at
            .trim()
            .parse::<Time>()
            .map_err(|_| format!("`{at}` is not a whole number of milliseconds"))?;
        let what = what
            .trim()
            .parse::<Disturbance>()
            .map_err(|e| format!("unknown disturbance: {e}"))?;
        Ok(Scripted { at, what })
    }
}

/// An operator's action on the running cluster, made at a random serving node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    /// Sets the target on the site.
    Target(u64),
    /// Sets the rate cap (visitors let out per minute), or lifts it.
    Rate(Option<u64>),
    /// Sets the mode (waitingroom_distributed::Mode by name).
    Mode(waitingroom_distributed::Mode),
    /// Switches the lottery (random queueing) on or off.
    Lottery(bool),
    /// Schedules an event whose pre-queue opens now and lasts `prequeue_ms`, which then lasts
    /// `duration_ms`, its pre-queued visitors let out in random order with `shuffle`.
    Event {
        /// Length of the pre-queue.
        prequeue_ms: Time,
        /// Length of the event after its start.
        duration_ms: Time,
        /// Pre-queued visitors are let out in random order.
        shuffle: bool,
    },
    /// Mints a bypass pass and gives it back at once at a random node: every node must refuse
    /// it from then on.
    Bypass,
}

impl fmt::Display for OperatorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OperatorAction::Target(n) => write!(f, "target={n}"),
            OperatorAction::Rate(Some(n)) => write!(f, "rate={n}"),
            OperatorAction::Rate(None) => f.write_str("rate=none"),
            OperatorAction::Mode(m) => write!(f, "mode={}", m.name()),
            OperatorAction::Lottery(on) => write!(f, "lottery={}", if on { "on" } else { "off" }),
            OperatorAction::Event {
                prequeue_ms,
                duration_ms,
                shuffle,
            } => {
                write!(f, "event={prequeue_ms}:{duration_ms}")?;
                if shuffle {
                    f.write_str(":shuffle")?;
                }
                Ok(())
            }
            OperatorAction::Bypass => f.write_str("bypass"),
        }
    }
}

impl FromStr for OperatorAction {
    type Err = String;

    /// `target=N`, `rate=N`, `rate=none`, `mode=NAME`, `lottery=on|off`,
    /// `event=PREQUEUE_MS:DURATION_MS[:shuffle]`, `bypass`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let number = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("`{v}` is not a whole number"))
        };
        let (what, value) = s.split_once('=').unwrap_or((s, ""));
        Ok(match what {
            "target" => match number(value)? {
                0 => return Err("the target must be at least 1".into()),
                n => OperatorAction::Target(n),
            },
            "rate" if value == "none" => OperatorAction::Rate(None),
            "rate" => OperatorAction::Rate(Some(number(value)?.max(1))),
            "mode" => OperatorAction::Mode(value.parse().map_err(|e| format!("{e}"))?),
            "lottery" => OperatorAction::Lottery(match value {
                "on" => true,
                "off" => false,
                _ => return Err(format!("lottery=on or lottery=off, not `{value}`")),
            }),
            "event" => {
                let parts: Vec<&str> = value.split(':').collect();
                if !(2..=3).contains(&parts.len()) || parts.get(2).is_some_and(|p| *p != "shuffle")
                {
                    return Err("expected event=PREQUEUE_MS:DURATION_MS[:shuffle]".into());
                }
                OperatorAction::Event {
                    prequeue_ms: number(parts[0])?,
                    duration_ms: number(parts[1])?.max(1),
                    shuffle: parts.len() == 3,
                }
            }
            "bypass" if value.is_empty() => OperatorAction::Bypass,
            _ => {
                return Err(format!(
                    "`{s}`: expected target=N, rate=N|none, mode=NAME, lottery=on|off, \
                     event=PRE:DUR[:shuffle] or bypass"
                ));
            }
        })
    }
}

/// An operator's action at a fixed time (milliseconds after the arrival window opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operated {
    /// When, relative to the start of the arrival window.
    pub at: Time,
    /// What.
    pub what: OperatorAction,
}

impl fmt::Display for Operated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.what, self.at)
    }
}

impl FromStr for Operated {
    type Err = String;

    /// `ACTION@MS`, e.g. `target=40@5000`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (what, at) = s
            .rsplit_once('@')
            .ok_or_else(|| format!("`{s}`: expected ACTION@MS, e.g. target=40@5000"))?;
        let at = at
            .trim()
            .parse::<Time>()
            .map_err(|_| format!("`{at}` is not a whole number of milliseconds"))?;
        Ok(Operated {
            at,
            what: what.trim().parse()?,
        })
    }
}

/// The target number of visitors on the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    fn every_name_reads_back_and_serialises_as_written() {
        fn round_trip<T>(all: &[T])
        where
            T: Copy + PartialEq + fmt::Debug + fmt::Display + FromStr + Serialize,
            T::Err: fmt::Debug,
        {
            for &v in all {
                let text = v.to_string();
                assert_eq!(text.parse::<T>().unwrap(), v);
                assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{text}\""));
            }
        }
        round_trip(&Strategy::ALL);
        round_trip(&Arrival::ALL);
        round_trip(&PartitionKind::ALL);
        round_trip(&Disturbance::ALL.map(|what| Scripted { at: 7, what }));
        round_trip(&[Target::Limited(3), Target::Unlimited]);
        for text in [
            "target=40@5",
            "rate=90@1",
            "rate=none@2",
            "mode=queue_all@3",
            "lottery=on@4",
            "lottery=off@4",
            "event=3000:9000:shuffle@6",
            "event=0:500@7",
            "bypass@8",
        ] {
            let op: Operated = text.parse().unwrap();
            assert_eq!(op.to_string(), text);
            assert_eq!(serde_json::to_string(&op).unwrap(), format!("\"{text}\""));
        }
        for bad in [
            "target=0@1",
            "mode=open@1",
            "bypass=1@2",
            "event=1@2",
            "target=4",
        ] {
            assert!(bad.parse::<Operated>().is_err(), "{bad}");
        }
        assert!("magic".parse::<Strategy>().unwrap_err().contains("qpid"));
    }
}
