//! The command line: `run` one simulation, `sweep` a preset grid over many seeds, `compare` the
//! strategies on one scenario. Human-readable tables by default, `--json` / `--csv` for
//! machines. Any run that fails a check (lost visitors, a double admission, an invariant broken
//! after recovery) is reported with its seed and the exact command that replays it.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use waitingroom_core::Time;
use waitingroom_distributed::AdmissionMode;

use crate::config::{Arrival, Latency, PartitionKind, RunConfig, Scripted, Strategy, Target};
use crate::metrics::RunReport;
use crate::output::{churn_chart, compare_table, csv, human_report, sweep_table};
use crate::sim;
use crate::sweep::{self, Preset, SweepRow};
use crate::trace::Trace;

/// Deterministic simulator of the waitingroom cluster: fairness, faults and scale.
#[derive(Debug, Parser)]
#[command(name = "waitingroom-sim", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one simulation and print its report.
    Run(RunCmd),
    /// Run a preset grid of configurations over many seeds; one row per configuration.
    Sweep(SweepCmd),
    /// Run the four strategies on the same visitors and compare them.
    Compare(CompareCmd),
}

/// `--admission` takes the protocol's own names for its modes ([`AdmissionMode::name`]).
fn admission_mode() -> impl TypedValueParser<Value = AdmissionMode> {
    PossibleValuesParser::new(AdmissionMode::ALL.map(AdmissionMode::name))
        .try_map(|name| name.parse::<AdmissionMode>())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    Qpid,
    CentralFifo,
    Buckets,
    RandomSample,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Self {
        match s {
            StrategyArg::Qpid => Strategy::Qpid,
            StrategyArg::CentralFifo => Strategy::CentralFifo,
            StrategyArg::Buckets => Strategy::Buckets,
            StrategyArg::RandomSample => Strategy::RandomSample,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ArrivalArg {
    Uniform,
    Flash,
    Poisson,
}

impl From<ArrivalArg> for Arrival {
    fn from(a: ArrivalArg) -> Self {
        match a {
            ArrivalArg::Uniform => Arrival::Uniform,
            ArrivalArg::Flash => Arrival::Flash,
            ArrivalArg::Poisson => Arrival::Poisson,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PartitionArg {
    Isolate,
    Split,
    Random,
}

impl From<PartitionArg> for PartitionKind {
    fn from(p: PartitionArg) -> Self {
        match p {
            PartitionArg::Isolate => PartitionKind::Isolate,
            PartitionArg::Split => PartitionKind::Split,
            PartitionArg::Random => PartitionKind::Random,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PresetArg {
    Thesis,
    Chaos,
    Mixed,
}

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

/// One scenario: the defaults are the thesis' experiment (table 6.1).
#[derive(Debug, Clone, Args)]
struct Scenario {
    /// Which waiting room the visitors go through.
    #[arg(long, value_enum, default_value = "qpid")]
    strategy: StrategyArg,
    /// How the protocol lets visitors out (qpid).
    #[arg(long, default_value_t = AdmissionMode::default(), value_parser = admission_mode())]
    admission: AdmissionMode,
    /// Nodes at the start.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    nodes: u32,
    /// Visitors in total.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=4_000_000_000))]
    users: u64,
    /// Target number on the site: a number, or `unlimited`.
    #[arg(long, default_value = "100")]
    target: Target,
    /// Crashes, and as many node additions, at random times in the arrival window.
    #[arg(long, default_value_t = 0)]
    churn: u32,
    /// Crash-and-restart cycles at random times in the arrival window.
    #[arg(long, default_value_t = 0)]
    restarts: u32,
    /// Partitions at random times in the arrival window, each healing after --partition-ms.
    #[arg(long, default_value_t = 0)]
    partitions: u32,
    /// What a partition cuts off: one node, or half of them.
    #[arg(long, value_enum, default_value = "random")]
    partition_kind: PartitionArg,
    /// How long a partition lasts.
    #[arg(long, default_value_t = 5_000)]
    partition_ms: Time,
    /// How long a restarted node stays down.
    #[arg(long, default_value_t = 2_000)]
    restart_delay_ms: Time,
    /// A disturbance at a fixed time after the window opens, e.g. `crash@30000`,
    /// `restart@…`, `add@…`, `isolate@…`, `split@…`, `partition@…` (repeatable).
    #[arg(long)]
    script: Vec<Scripted>,
    /// Message loss probability.
    #[arg(long, default_value = "0", value_parser = probability)]
    loss: f64,
    /// Message duplication probability.
    #[arg(long, default_value = "0", value_parser = probability)]
    dup: f64,
    /// Probability that a message is held back (reordered) by up to --reorder-ms.
    #[arg(long, default_value = "0", value_parser = probability)]
    reorder: f64,
    /// Largest extra delay of a reordered message.
    #[arg(long, default_value_t = 50)]
    reorder_ms: Time,
    /// Messages to a crashed node fail like refused connections: the sender's transport
    /// reports the peer unreachable (as the HTTP transport does).
    #[arg(long)]
    refused_connections: bool,
    /// Latency between nodes: `15` (fixed), `10-20` (uniform) or `pareto:MIN:ALPHA[:MAX]`.
    #[arg(long, default_value = "10-20")]
    latency: Latency,
    /// The seed every random choice derives from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "uniform")]
    arrival: ArrivalArg,
    /// Length of the arrival window.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    window_ms: Time,
    /// Flash crowd: share of visitors arriving in the burst.
    #[arg(long, default_value = "0.8", value_parser = probability)]
    flash_share: f64,
    /// Flash crowd: length of the burst.
    #[arg(long, default_value_t = 5_000)]
    flash_ms: Time,
    /// Time for the starting nodes to form a cluster before visitors come.
    #[arg(long, default_value_t = 1_000)]
    warmup_ms: Time,
    /// Visitors check in this often.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    refresh_ms: Time,
    /// Each check-in comes up to this much late (uniform).
    #[arg(long, default_value_t = 0)]
    jitter_ms: Time,
    /// Probability that a visitor gives up waiting.
    #[arg(long, default_value = "0", value_parser = probability)]
    abandon: f64,
    /// Mean patience of visitors who give up.
    #[arg(long, default_value_t = 30_000)]
    patience_ms: Time,
    /// How long admitted visitors stay, refreshing their pass (0: they never refresh it).
    #[arg(long, default_value_t = 0)]
    session_ms: Time,
    /// Eviction interval.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    eviction_ms: Time,
    /// Ticket expiry.
    #[arg(long, default_value_t = 10_000)]
    ticket_expiry_ms: Time,
    /// Pass expiry (0: passes expire at once, as in the thesis).
    #[arg(long, default_value_t = 0)]
    pass_expiry_ms: Time,
    /// Admit arriving visitors at once while the site has room and nobody waits.
    #[arg(long)]
    straight_through: bool,
    /// SWIM probe interval.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    probe_ms: Time,
    /// SWIM probe timeout.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    probe_timeout_ms: Time,
    /// Random-sample strategy: nodes sampled per admission.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    sample_d: u32,
    /// Check the invariants after every N-th protocol event (0: never).
    #[arg(long, default_value_t = 1)]
    check_every: u32,
    /// Simulated-time limit after the window opens (0: three windows plus a minute).
    #[arg(long, default_value_t = 0)]
    max_time_ms: Time,
}

impl Scenario {
    fn to_config(&self) -> RunConfig {
        RunConfig {
            seed: self.seed,
            strategy: self.strategy.into(),
            admission: self.admission,
            nodes: self.nodes,
            users: self.users,
            target: self.target,
            arrival: self.arrival.into(),
            window_ms: self.window_ms,
            flash_share: self.flash_share,
            flash_ms: self.flash_ms,
            warmup_ms: self.warmup_ms,
            refresh_ms: self.refresh_ms,
            jitter_ms: self.jitter_ms,
            abandon: self.abandon,
            patience_ms: self.patience_ms,
            session_ms: self.session_ms,
            eviction_ms: self.eviction_ms,
            ticket_expiry_ms: self.ticket_expiry_ms,
            pass_expiry_ms: self.pass_expiry_ms,
            straight_through: self.straight_through,
            probe_ms: self.probe_ms,
            probe_timeout_ms: self.probe_timeout_ms,
            latency: self.latency,
            loss: self.loss,
            dup: self.dup,
            reorder: self.reorder,
            reorder_ms: self.reorder_ms,
            refused_connections: self.refused_connections,
            churn: self.churn,
            restarts: self.restarts,
            partitions: self.partitions,
            partition_kind: self.partition_kind.into(),
            partition_ms: self.partition_ms,
            restart_delay_ms: self.restart_delay_ms,
            script: self.script.clone(),
            sample_d: self.sample_d,
            check_every: self.check_every,
            max_time_ms: self.max_time_ms,
        }
    }
}

#[derive(Debug, Args)]
struct RunCmd {
    #[command(flatten)]
    scenario: Scenario,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the event trace, one line per event, to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SweepCmd {
    /// Which grid.
    #[arg(long, value_enum, default_value = "thesis")]
    preset: PresetArg,
    /// Seeds per configuration.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed_start: u64,
    /// Runs in parallel (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    jobs: Option<u32>,
    /// Strategy for every run.
    #[arg(long, value_enum, default_value = "qpid")]
    strategy: StrategyArg,
    /// Admission mode for every run (qpid).
    #[arg(long, default_value_t = AdmissionMode::default(), value_parser = admission_mode())]
    admission: AdmissionMode,
    /// Check the invariants after every N-th protocol event (0: never).
    #[arg(long, default_value_t = 1)]
    check_every: u32,
    /// Print the rows as JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the rows as CSV.
    #[arg(long)]
    csv: bool,
    /// Also write an SVG chart of Kendall-Tau against churn to this file (thesis preset).
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CompareCmd {
    #[command(flatten)]
    scenario: Scenario,
    /// Seeds per strategy (from --seed on).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    seeds: u64,
    /// Runs in parallel (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    jobs: Option<u32>,
    /// Print the rows as JSON.
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    json: bool,
    /// Print the rows as CSV.
    #[arg(long, conflicts_with = "markdown")]
    csv: bool,
    /// Print the rows as a Markdown table.
    #[arg(long)]
    markdown: bool,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(cmd) => run_cmd(cmd),
        Command::Sweep(cmd) => sweep_cmd(cmd),
        Command::Compare(cmd) => compare_cmd(cmd),
    }
}

fn jobs(requested: Option<u32>) -> usize {
    requested.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    )
}

fn run_cmd(cmd: RunCmd) -> ExitCode {
    let cfg = cmd.scenario.to_config();
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let trace = match &cmd.trace {
        Some(path) => match File::create(path) {
            Ok(f) => Trace::writing_to(Box::new(BufWriter::new(f))),
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => Trace::default(),
    };
    let report = sim::run_traced(&cfg, trace);
    if cmd.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", human_report(&report));
    }
    report_failures(std::slice::from_ref(&report))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Prints every failed check with its replay command; the exit code says whether any failed.
fn report_failures(reports: &[RunReport]) -> ExitCode {
    const SHOWN: usize = 20;
    let failed: Vec<&RunReport> = reports
        .iter()
        .filter(|r| !r.failures().is_empty())
        .collect();
    for r in failed.iter().take(SHOWN) {
        eprintln!(
            "FAILED seed {}: {}\n  reproduce: {}",
            r.seed,
            r.failures().join(", "),
            r.command
        );
        for s in r.violation_samples.iter().take(2) {
            eprintln!("  {s}");
        }
    }
    if failed.len() > SHOWN {
        eprintln!("… and {} more failed runs", failed.len() - SHOWN);
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn sweep_rows(
    rows: &[RunConfig],
    first_seed: u64,
    seeds: u64,
    jobs: usize,
) -> (Vec<SweepRow>, Vec<RunReport>, f64) {
    let runs = sweep::expand(rows, first_seed, seeds);
    let started = Instant::now();
    let reports = sweep::run_all(&runs, jobs, true);
    let wall = started.elapsed().as_secs_f64();
    let summary = rows
        .iter()
        .zip(reports.chunks(seeds as usize))
        .map(|(row, chunk)| sweep::summarise(row, chunk))
        .collect();
    (summary, reports, wall)
}

fn sweep_cmd(cmd: SweepCmd) -> ExitCode {
    let base = RunConfig {
        strategy: cmd.strategy.into(),
        admission: cmd.admission,
        check_every: cmd.check_every,
        ..RunConfig::default()
    };
    let preset = match cmd.preset {
        PresetArg::Thesis => Preset::Thesis,
        PresetArg::Chaos => Preset::Chaos,
        PresetArg::Mixed => Preset::Mixed,
    };
    let rows = sweep::preset_rows(preset, &base);
    let jobs = jobs(cmd.jobs);
    eprintln!(
        "sweep {}: {} configurations × {} seeds on {jobs} threads",
        format!("{preset:?}").to_lowercase(),
        rows.len(),
        cmd.seeds
    );
    let (summary, reports, wall) = sweep_rows(&rows, cmd.seed_start, cmd.seeds, jobs);
    if cmd.json {
        println!(
            "{}",
            to_json(&serde_json::json!({
                "preset": format!("{preset:?}").to_lowercase(),
                "seeds": cmd.seeds,
                "runs": reports.len(),
                "wall_s": wall,
                "rows": summary,
            }))
        );
    } else if cmd.csv {
        print!("{}", csv(&summary));
    } else {
        print!("{}", sweep_table(&summary));
        println!(
            "{} runs in {wall:.1} s wall ({:.2} ms per run on {jobs} threads)",
            reports.len(),
            wall * 1000.0 / reports.len().max(1) as f64
        );
    }
    if let Some(path) = &cmd.svg {
        let chart = churn_chart(&summary);
        if let Err(e) = std::fs::write(path, chart) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        eprintln!("chart written to {}", path.display());
    }
    let out_of_bound: Vec<&SweepRow> = summary.iter().filter(|r| !r.within_bound()).collect();
    for r in &out_of_bound {
        eprintln!(
            "ABOVE BOUND: target {} users {} churn {}: kendall_tau_mean {:.2e} > {:.2e}",
            r.target,
            r.users,
            r.churn,
            r.kendall_tau_mean,
            r.kendall_tau_bound.unwrap_or(0.0)
        );
    }
    report_failures(&reports)
}

fn compare_cmd(cmd: CompareCmd) -> ExitCode {
    let base = cmd.scenario.to_config();
    if let Err(e) = base.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let rows: Vec<RunConfig> = Strategy::ALL
        .iter()
        .map(|&strategy| RunConfig {
            strategy,
            ..base.clone()
        })
        .collect();
    let (summary, reports, wall) = sweep_rows(&rows, base.seed, cmd.seeds, jobs(cmd.jobs));
    if cmd.json {
        println!("{}", to_json(&summary));
    } else if cmd.csv {
        print!("{}", csv(&summary));
    } else {
        print!("{}", compare_table(&summary, cmd.markdown));
        if !cmd.markdown {
            println!("{} runs in {wall:.1} s", reports.len());
        }
    }
    report_failures(&reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("waitingroom-sim").chain(args.iter().copied()))
    }

    #[test]
    fn run_defaults_are_the_config_defaults() {
        let cli = parse(&["run"]).unwrap();
        let Command::Run(cmd) = cli.command else {
            panic!("not run");
        };
        assert_eq!(cmd.scenario.to_config(), RunConfig::default());
    }

    #[test]
    fn the_replay_command_parses_back_to_the_same_config() {
        let cli = parse(&[
            "run",
            "--strategy",
            "buckets",
            "--target",
            "unlimited",
            "--loss",
            "0.05",
            "--latency",
            "pareto:5:1.5:900",
            "--script",
            "isolate@3000",
            "--arrival",
            "flash",
            "--straight-through",
            "--admission",
            "batched",
            "--partition-kind",
            "split",
            "--refused-connections",
        ])
        .unwrap();
        let Command::Run(cmd) = cli.command else {
            panic!("not run");
        };
        let cfg = cmd.scenario.to_config();
        let line = cfg.to_command();
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let again = parse(&words).unwrap();
        let Command::Run(again) = again.command else {
            panic!("not run");
        };
        assert_eq!(again.scenario.to_config(), cfg);
    }

    #[test]
    fn bad_values_are_errors_not_panics() {
        for args in [
            &["run", "--loss", "2"][..],
            &["run", "--loss", "x"],
            &["run", "--target", "0"],
            &["run", "--latency", "20-10"],
            &["run", "--nodes", "0"],
            &["run", "--strategy", "magic"],
            &["run", "--script", "boom@1"],
            &["sweep", "--seeds", "0"],
            &["sweep", "--json", "--csv"],
        ] {
            assert!(parse(args).is_err(), "{args:?} should be refused");
        }
        let cli = parse(&["run", "--probe-timeout-ms", "900"]).unwrap();
        let Command::Run(cmd) = cli.command else {
            panic!("not run");
        };
        assert!(cmd.scenario.to_config().validate().is_err());
    }
}
