//! The command line: `run` one simulation, `sweep` a preset grid over many seeds, `compare` the
//! strategies on one scenario. Human-readable tables by default, `--json` / `--csv` for
//! machines. Any run that fails a check (lost visitors, a double admission, an invariant broken
//! after recovery) is reported with its seed and the exact command that replays it.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use crate::config::{RunConfig, Strategy};
use crate::metrics::RunReport;
use crate::output::{churn_chart, compare_table, csv, human_report, sweep_table};
use crate::progress::Progress;
use crate::sim;
use crate::swarm;
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
    /// Swarm testing: each seed switches a random mix of faults, operator actions and visitor
    /// behaviours on, and the room's promises are checked after every event; a failing seed
    /// prints the command that replays it and is shrunk to what it needs to fail.
    Swarm(SwarmCmd),
}

#[derive(Debug, Args)]
struct SwarmCmd {
    /// Seeds to run.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// Runs in parallel (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    jobs: Option<u32>,
    /// How many failing seeds of each check to shrink (each takes tens of runs).
    #[arg(long, default_value_t = 1)]
    shrink: usize,
    /// Print `{"seeds", "failures", "failing_seeds", …}` as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RunCmd {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the event trace, one line per event, to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print progress (simulated time, admitted, events/s) to stderr every 2 s even when it is
    /// not a terminal (on a terminal it always is).
    #[arg(long)]
    progress: bool,
    #[command(flatten)]
    config: RunConfig,
}

#[derive(Debug, Args)]
struct SweepCmd {
    /// Which grid. The preset sets its own options (thesis: --target-on-site, --users,
    /// --churn; chaos: those of a lossy, duplicating, reordering network with a partition;
    /// mixed: chaos plus --churn and --restarts); every other option applies to every row.
    #[arg(long, value_enum, default_value_t = Preset::Thesis)]
    preset: Preset,
    /// Seeds per configuration (from --seed on).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    seeds: u64,
    /// Runs in parallel (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    jobs: Option<u32>,
    /// Print the rows as JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the rows as CSV.
    #[arg(long)]
    csv: bool,
    /// Also write an SVG chart of Kendall-Tau against churn to this file (thesis preset).
    #[arg(long)]
    svg: Option<PathBuf>,
    #[command(flatten)]
    config: RunConfig,
}

#[derive(Debug, Args)]
struct CompareCmd {
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
    #[command(flatten)]
    config: RunConfig,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(cmd) => run_cmd(cmd),
        Command::Sweep(cmd) => sweep_cmd(cmd),
        Command::Compare(cmd) => compare_cmd(cmd),
        Command::Swarm(cmd) => swarm_cmd(cmd),
    }
}

fn jobs(requested: Option<u32>) -> usize {
    requested.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    )
}

fn run_cmd(cmd: RunCmd) -> ExitCode {
    let cfg = cmd.config;
    if let Err(e) = cfg.validate() {
        return refuse(e);
    }
    let trace = match &cmd.trace {
        Some(path) => match File::create(path) {
            Ok(f) => Trace::writing_to(Box::new(BufWriter::new(f))),
            Err(e) => return refuse(format!("cannot write {}: {e}", path.display())),
        },
        None => Trace::default(),
    };
    let report = sim::run_observed(&cfg, trace, &mut Progress::on_terminal(cmd.progress));
    if cmd.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", human_report(&report));
    }
    report_failures(std::slice::from_ref(&report))
}

/// Refuses what clap cannot check alone (combinations of values, files), with clap's exit code.
fn refuse(problem: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {problem}");
    ExitCode::from(2)
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
    let base = cmd.config;
    if let Err(e) = base.validate() {
        return refuse(e);
    }
    let preset = cmd.preset;
    let rows = sweep::preset_rows(preset, &base);
    let overridden = base.overridden_by(&rows);
    if !overridden.is_empty() {
        let given = overridden.join(", ");
        return refuse(format!("the {preset} preset sets {given} itself"));
    }
    let jobs = jobs(cmd.jobs);
    eprintln!(
        "sweep {}: {} configurations × {} seeds on {jobs} threads",
        preset.name(),
        rows.len(),
        cmd.seeds
    );
    let (summary, reports, wall) = sweep_rows(&rows, base.seed, cmd.seeds, jobs);
    if cmd.json {
        println!(
            "{}",
            to_json(&serde_json::json!({
                "preset": preset.name(),
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
    for r in summary.iter().filter(|r| !r.within_bound()) {
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
    let base = cmd.config;
    if let Err(e) = base.validate() {
        return refuse(e);
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

fn swarm_cmd(cmd: SwarmCmd) -> ExitCode {
    let jobs = jobs(cmd.jobs);
    eprintln!(
        "swarm: seeds {}..{} on {jobs} threads",
        cmd.start,
        cmd.start.saturating_add(cmd.seeds)
    );
    let (summary, failing) = swarm::run(cmd.start, cmd.seeds, jobs, cmd.shrink);
    if cmd.json {
        println!("{}", to_json(&summary));
    } else {
        println!(
            "{} seeds in {:.1} s ({:.1} seeds/s on {jobs} threads, {:.0} events per seed): {} failed",
            summary.seeds,
            summary.wall_s,
            summary.seeds_per_s,
            summary.events_per_seed,
            summary.failures
        );
        for (check, n) in &summary.by_check {
            println!("  {check}: {n} seeds");
        }
    }
    const SHOWN: usize = 10;
    for r in failing.iter().take(SHOWN) {
        eprintln!(
            "FAILED seed {}: {}\n  replay: waitingroom-sim swarm --seeds 1 --start {}\n  \
             or: {}",
            r.seed,
            r.detail.join("; "),
            r.seed,
            r.command
        );
    }
    if failing.len() > SHOWN {
        eprintln!("… and {} more failing seeds", failing.len() - SHOWN);
    }
    for (seed, check, command) in &summary.shrunk {
        eprintln!("SHRUNK seed {seed} ({check}) to: {command}");
    }
    if summary.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
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
        assert_eq!(cmd.config, RunConfig::default());
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
        let cfg = cmd.config;
        let line = cfg.to_command();
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let again = parse(&words).unwrap();
        let Command::Run(again) = again.command else {
            panic!("not run");
        };
        assert_eq!(again.config, cfg);
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
        assert!(cmd.config.validate().is_err());
        // Ticket times beyond 32 bits of milliseconds are refused before the run.
        let cli = parse(&["run", "--max-time-ms", "5000000000"]).unwrap();
        let Command::Run(cmd) = cli.command else {
            panic!("not run");
        };
        let err = cmd.config.validate().unwrap_err();
        assert!(err.contains("49 days"), "{err}");
        let cli = parse(&["run", "--max-time-ms", "4000000000"]).unwrap();
        let Command::Run(cmd) = cli.command else {
            panic!("not run");
        };
        cmd.config.validate().unwrap();
    }
}
