//! An exhaustive explorer of message interleavings over the sans-IO [`Node`].
//!
//! From a formed cluster it explores, depth first, every order of the possible steps: deliver
//! any message in flight (the in-flight set is a multiset; any copy may go next, whatever link it
//! is on, so links reorder), fire a node's timers, let the next visitor join, and per scenario
//! crash a node, let an orphaned visitor check in elsewhere, let one more node join, or lose or
//! duplicate a message within a budget. States are deduplicated by a 128-bit fingerprint of
//! (nodes, in-flight multiset, visitors, admissions, clock). Every new state is checked: the
//! protocol's own invariants, no double admission, and first-in-first-out admission once the
//! network is quiet.
//!
//! Shared by `tests/exhaustive.rs` (small configurations, in CI) and
//! `examples/explore.rs` (the larger ones, in release mode).
//!
//! What keeps it finite, and what each choice leaves out:
//! - Time moves only by timer steps, up to a horizon a few eviction rounds after the last
//!   event; with [`TimerPolicy::Quiet`] (the default) only when nothing is in flight.
//! - Timers a scenario does not need are off: probes without a crash, resends without loss.
//! - Without loss, bare acknowledgements are delivered at once ([`Config::eager_acks`], a
//!   sound partial-order reduction); with loss every order is explored.
//! - Visitors join in index order at fixed nodes (only *when* varies); in the `crash` scenario
//!   only while nothing is in flight. Visitors check in only when orphaned by the crash, and
//!   then within one refresh interval, as a browser would. The cluster's formation is not
//!   explored (a FIFO run forms it).
//! - A run ends once everyone is in, the cluster is settled and quiet and no event is left
//!   ([`Config::to_horizon`] explores the idle rounds after that too).
//! - The fingerprint hashes each node's `Debug` form and random-generator position, so two
//!   equal states with different internal layouts (hash map order) count twice: sound, just
//!   less deduplication.
//!
//! [`Node`]: waitingroom_distributed::Node
#![allow(dead_code, reason = "the test and the example each use a part")]

pub mod checks;
pub mod model;

use std::collections::HashSet;
use std::fmt;
use std::time::{Duration, Instant};

use waitingroom_core::Settings;
use waitingroom_distributed::AdmissionMode;

use model::{State, Step, Timing};

/// When the shared clock may move on to the next timer deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerPolicy {
    /// Only when no message is in flight: every message is delivered within the timer interval
    /// it was sent in (the network is faster than the shortest timer). Timers due at the same
    /// instant still fire in every order interleaved with that instant's deliveries. Misses:
    /// messages overtaken by a later timer (a count request still travelling at the next
    /// eviction tick, a probe answered after its timeout).
    Quiet,
    /// Whenever no timer is due: any message may be delayed past any number of timers. Covers
    /// what `Quiet` misses, at a far larger state space. Runs that end with visitors waiting
    /// are expected here (a findRoot held past every eviction tick up to the horizon leaves no
    /// root to start a count): only safety is meaningful under unbounded delays.
    Anytime,
}

/// One exploration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Nodes of the formed cluster.
    pub nodes: u64,
    /// Visitors who join, in index order, at fixed nodes (round-robin over the members).
    pub visitors: usize,
    /// Visitors join only while no message is in flight (still at any instant): their joins
    /// then do not interleave with the protocol's messages, which the `base` and `join`
    /// scenarios cover; this keeps the `crash` scenario's state space in reach.
    pub quiet_joins: bool,
    pub mode: AdmissionMode,
    /// One node (any) crashes at any point up to one interval after the last join.
    pub crash: bool,
    /// Only this node may crash (all of them when None).
    pub crash_victim: Option<u64>,
    /// One more node asks to join at any point before the events deadline.
    pub join: bool,
    /// Messages that may be lost.
    pub drops: u32,
    /// Messages that may be duplicated.
    pub dups: u32,
    pub timers: TimerPolicy,
    /// Visitors join (and a node crashes or joins) only during the first this many eviction
    /// intervals.
    pub event_rounds: u64,
    /// Eviction intervals explored beyond what the scenario needs.
    pub extra_rounds: u64,
    /// Places on the site ([`Settings::UNLIMITED`] by default).
    pub target: u64,
    /// One node (any, or `crash_victim`) is cut off from the others at any point up to one
    /// interval after the last join, and healed at any later point: messages across the cut
    /// wait (the reliable channel would resend them), its timers go on.
    pub partition: bool,
    /// Like `partition`, and the node is also frozen (SIGSTOP): its timers do not fire until
    /// it resumes, with the clock wherever it has got to.
    pub pause: bool,
    /// Ticket lifetime: how long a departed member's admitted visitors are counted for
    /// (far by default: visitors check in only when orphaned).
    pub ticket_expiry_ms: u64,
    /// Longest path explored; a path cut here is reported (the exploration is then incomplete).
    pub max_depth: usize,
    /// Stop after this many states (reported as incomplete).
    pub max_states: u64,
    /// Keep exploring after everything is over (every visitor in, cluster settled and quiet, no
    /// event left to come) up to the horizon, instead of ending the run there.
    pub to_horizon: bool,
    /// Explore the delivery order of bare acknowledgements too (see [`Config::eager_acks`]).
    pub all_acks: bool,
    /// Print the search's progress to stderr every few seconds (a long run is otherwise silent
    /// until it ends).
    pub progress: bool,
}

impl Config {
    /// Whether bare acknowledgements are delivered the moment they are sent instead of being
    /// one more message to interleave. A partial-order reduction, sound when nothing is lost:
    /// an acknowledgement only trims the sender's resend buffer, which then never resends
    /// (resends are off without loss) and which no checked property reads, and trimming commutes
    /// with every other step. With loss, resends depend on it, so every order is explored.
    pub fn eager_acks(&self) -> bool {
        !self.all_acks && self.drops == 0 && self.dups == 0
    }
}

impl Config {
    /// The `base` scenario: three nodes, three visitors, two rounds of events, no faults.
    fn base() -> Config {
        Config {
            nodes: 3,
            visitors: 3,
            quiet_joins: false,
            mode: AdmissionMode::Range,
            crash: false,
            crash_victim: None,
            join: false,
            drops: 0,
            dups: 0,
            timers: TimerPolicy::Quiet,
            event_rounds: 2,
            extra_rounds: 0,
            target: Settings::UNLIMITED,
            partition: false,
            pause: false,
            ticket_expiry_ms: 1 << 40,
            max_depth: 2_000,
            max_states: 50_000_000,
            all_acks: false,
            to_horizon: false,
            progress: false,
        }
    }

    /// A named scenario: `base`, `crash`, `join`, `lossy`, `anytime`, `partition`, `pause`.
    pub fn scenario(name: &str) -> Option<Config> {
        let base = Config::base();
        Some(match name {
            "base" => base,
            "crash" => Config {
                crash: true,
                visitors: 2,
                quiet_joins: true,
                event_rounds: 1,
                ..base
            },
            "join" => Config {
                join: true,
                visitors: 2,
                ..base
            },
            "lossy" => Config {
                drops: 1,
                dups: 1,
                visitors: 1,
                event_rounds: 1,
                extra_rounds: 1,
                ..base
            },
            "anytime" => Config {
                timers: TimerPolicy::Anytime,
                visitors: 2,
                event_rounds: 1,
                ..base
            },
            // Admission leases (waitingroom-distributed/README.md#admission-leases): one place, two
            // visitors; a node cut off at any point and never healed, with rounds enough after it
            // for its places to stop being counted. `pause`: the node is frozen instead (while
            // nothing but messages to it is in flight) and resumes 3 s later with what reached it;
            // with one visitor and one victim it does not finish within 20M states, so it is not in
            // `all` or in CI.
            "partition" | "pause" => Config {
                partition: true,
                pause: name == "pause",
                visitors: 2,
                quiet_joins: true,
                event_rounds: 1,
                target: 1,
                ticket_expiry_ms: 1_000,
                ..base
            },
            _ => return None,
        })
    }
}

/// What an exploration found.
#[derive(Debug, Default)]
pub struct Report {
    /// Distinct states reached.
    pub states: u64,
    /// Steps taken (including those into an already-seen state).
    pub transitions: u64,
    /// Longest path from the initial state.
    pub max_depth: usize,
    /// States with no step left (everything over, or the horizon reached).
    pub terminal: u64,
    /// Terminal states where a visitor who could get in did not, or the cluster did not
    /// converge, with the first such trace.
    pub incomplete: u64,
    pub incomplete_example: Option<(String, Vec<String>)>,
    /// Paths cut by `max_depth`, and whether `max_states` stopped the search.
    pub depth_cut: u64,
    pub truncated: bool,
    pub elapsed: Duration,
    /// The first safety violation and the exact steps that lead to it.
    pub violation: Option<(Vec<String>, Vec<String>)>,
}

impl Report {
    /// A run ended in `state` (no step left): counted, and if a visitor who could get in did
    /// not, or the cluster did not converge, counted as incomplete, the first with its trace.
    fn ended(&mut self, state: &State, cfg: &Config, trace: impl FnOnce() -> Vec<String>) {
        self.terminal += 1;
        if let Some(why) = checks::incomplete(state, cfg) {
            self.incomplete += 1;
            if self.incomplete_example.is_none() {
                self.incomplete_example = Some((why, trace()));
            }
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "states {} transitions {} max depth {} terminal {} incomplete {} depth-cut {}{} \
             in {:.1?} ({:.0} states/s)",
            self.states,
            self.transitions,
            self.max_depth,
            self.terminal,
            self.incomplete,
            self.depth_cut,
            if self.truncated {
                " TRUNCATED at max-states"
            } else {
                ""
            },
            self.elapsed,
            self.states as f64 / self.elapsed.as_secs_f64().max(1e-9)
        )?;
        if let Some((why, trace)) = &self.incomplete_example {
            writeln!(f, "first incomplete run: {why}")?;
            for line in trace {
                writeln!(f, "  {line}")?;
            }
        }
        if let Some((problems, trace)) = &self.violation {
            writeln!(f, "VIOLATION: {}", problems.join("; "))?;
            for line in trace {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}

/// How often a long search reports how far it has got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// One progress line: states so far, the current and deepest path, the rate.
struct Progress<'a>(&'a Report, &'a [Frame], Instant);

impl fmt::Display for Progress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Progress(report, stack, started) = self;
        let secs = started.elapsed().as_secs_f64();
        write!(
            f,
            "explored {} states ({} transitions), path {} deep (deepest {}), {} terminal, \
             {:.0} s, {:.0} states/s",
            report.states,
            report.transitions,
            stack.len(),
            report.max_depth,
            report.terminal,
            secs,
            report.states as f64 / secs.max(1e-9)
        )
    }
}

struct Frame {
    state: State,
    steps: Vec<Step>,
    next: usize,
}

/// Explores every interleaving of `cfg`, stopping at the first violation.
pub fn explore(cfg: &Config) -> Report {
    let started = Instant::now();
    let timing = Timing::of(cfg);
    let initial = State::initial(cfg);
    let mut report = Report::default();
    let mut seen: HashSet<u128> = HashSet::new();
    seen.insert(initial.fingerprint());
    report.states = 1;
    let problems = checks::check(&initial, cfg);
    if !problems.is_empty() {
        report.violation = Some((problems, Vec::new()));
        report.elapsed = started.elapsed();
        return report;
    }
    let steps = initial.enabled(cfg, &timing);
    let mut stack = vec![Frame {
        state: initial.clone(),
        steps,
        next: 0,
    }];
    let mut shown = Instant::now();
    while let Some(top) = stack.last_mut() {
        let Some(&step) = top.steps.get(top.next) else {
            stack.pop();
            continue;
        };
        top.next += 1;
        let mut state = top.state.clone();
        let mut problems = state.apply(step);
        report.transitions += 1;
        if cfg.progress && report.transitions % 4096 == 0 && shown.elapsed() >= PROGRESS_EVERY {
            shown = Instant::now();
            eprintln!("{}", Progress(&report, &stack, started));
        }
        if !seen.insert(state.fingerprint()) {
            continue;
        }
        report.states += 1;
        let depth = stack.len();
        report.max_depth = report.max_depth.max(depth);
        problems.extend(checks::check(&state, cfg));
        // The top frame's last step is the one just taken: the frames spell the whole path.
        let path = || -> Vec<Step> { stack.iter().map(|f| f.steps[f.next - 1]).collect() };
        if !problems.is_empty() {
            report.violation = Some((problems, trace(&initial, &path())));
            break;
        }
        if report.states >= cfg.max_states {
            report.truncated = true;
            break;
        }
        let steps = state.enabled(cfg, &timing);
        if steps.is_empty() {
            report.ended(&state, cfg, || trace(&initial, &path()));
            continue;
        }
        if depth >= cfg.max_depth {
            report.depth_cut += 1;
            continue;
        }
        stack.push(Frame {
            state,
            steps,
            next: 0,
        });
    }
    report.elapsed = started.elapsed();
    report
}

/// Replays `path` from `initial`, describing each step.
pub fn trace(initial: &State, path: &[Step]) -> Vec<String> {
    let mut state = initial.clone();
    let mut lines = Vec::new();
    for &step in path {
        lines.push(state.describe(step));
        state.apply(step);
    }
    lines
}
