//! Many runs at once: the thesis' experiment grid (Distributed Virtual Waiting Room, table 6.1),
//! the chaos preset, and the strategies side by side. Seeds run in parallel on `std::thread`s;
//! results are collected in run order, so the output does not depend on the number of threads.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{PartitionKind, RunConfig, Strategy, Target};
use crate::metrics::RunReport;
use crate::sim;

/// Named sets of configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The thesis' table 6.1: target 20/100/unlimited × 100/500/2,500 visitors × churn 0/1/5.
    Thesis,
    /// 500 visitors through 8 nodes, 5% loss, 5% duplication, 5% reordering and one partition
    /// that heals.
    Chaos,
    /// Chaos plus membership churn: two crashes, two node additions and a crash-and-restart on
    /// top of the lossy, duplicating, reordering network and a healed partition.
    Mixed,
}

/// One row of a sweep: one configuration over many seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepRow {
    /// Strategy.
    pub strategy: String,
    /// Target on the site.
    pub target: String,
    /// Visitors per run.
    pub users: u64,
    /// Crashes and additions per run.
    pub churn: u32,
    /// Runs (seeds) in the row.
    pub seeds: u64,
    /// Mean strict Kendall-Tau distance.
    pub kendall_tau_mean: f64,
    /// Largest strict Kendall-Tau distance of a run.
    pub kendall_tau_max: f64,
    /// Mean Kendall-Tau by the round visitors were actually let out in.
    pub kendall_tau_actual_mean: f64,
    /// Largest such distance of a run.
    pub kendall_tau_actual_max: f64,
    /// Mean Kendall-Tau by the thesis' definition.
    pub kendall_tau_thesis_mean: f64,
    /// Mean simulated time to drain.
    pub sim_time_ms_mean: f64,
    /// Mean of the runs' mean waits.
    pub wait_ms_mean: f64,
    /// Longest wait of any run.
    pub wait_ms_max: u64,
    /// Lost visitors over all runs.
    pub lost_total: u64,
    /// Invariant violations after recovery over all runs.
    pub invariant_violations_total: u64,
    /// Invariant violations while recovering over all runs.
    pub invariant_violations_recovering_total: u64,
    /// Double admissions over all runs.
    pub double_admissions_total: u64,
    /// Runs that hit the time limit.
    pub timed_out_total: u64,
    /// Mean messages per admitted visitor.
    pub messages_per_admitted_mean: f64,
    /// Largest on-site overshoot above target of a run.
    pub max_overshoot: u64,
    /// Checks with more places granted and held than the target, over all runs.
    pub grant_violations_total: u64,
    /// Mean wall time per run.
    pub wall_ms_mean: f64,
    /// The thesis' appendix A.2 Kendall-Tau for this row (its own definition), if any.
    pub thesis_a2_kendall_tau: Option<f64>,
    /// The thesis' appendix A.2 simulated time for this row, if any.
    pub thesis_a2_sim_time_ms: Option<f64>,
    /// Strict Kendall-Tau of the thesis' reference implementation, if any.
    pub reference_kendall_tau: Option<f64>,
    /// The bound `kendall_tau_mean` must stay under: half the reference (1e-7 without churn).
    pub kendall_tau_bound: Option<f64>,
}

impl SweepRow {
    /// Whether the row meets its fairness bound (true when there is none).
    pub fn within_bound(&self) -> bool {
        self.kendall_tau_bound
            .is_none_or(|b| self.kendall_tau_mean <= b)
    }
}

crate::config::named!(Preset);

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 3] = [Preset::Thesis, Preset::Chaos, Preset::Mixed];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Thesis => "thesis",
            Preset::Chaos => "chaos",
            Preset::Mixed => "mixed",
        }
    }
}

/// The configurations of a preset, one per row: `base` (the command line, the thesis' table 6.1
/// by default) with the options the preset is about set.
pub fn preset_rows(preset: Preset, base: &RunConfig) -> Vec<RunConfig> {
    match preset {
        Preset::Thesis => {
            let mut rows = Vec::new();
            for target in [Target::Limited(20), Target::Limited(100), Target::Unlimited] {
                for users in [100, 500, 2_500] {
                    for churn in [0, 1, 5] {
                        let mut row = base.clone();
                        row.protocol.target_on_site = target;
                        row.workload.users = users;
                        row.faults.churn = churn;
                        rows.push(row);
                    }
                }
            }
            rows
        }
        Preset::Chaos => vec![chaos(base)],
        Preset::Mixed => {
            let mut row = chaos(base);
            row.faults.churn = 2;
            row.faults.restarts = 1;
            vec![row]
        }
    }
}

/// The chaos preset's one configuration: a lossy, duplicating, reordering network and a
/// partition that heals.
fn chaos(base: &RunConfig) -> RunConfig {
    let mut row = base.clone();
    row.workload.users = 500;
    row.protocol.target_on_site = Target::Limited(100);
    row.network.loss_probability = 0.05;
    row.network.duplicate_probability = 0.05;
    row.network.reorder_probability = 0.05;
    row.faults.partitions = 1;
    row.faults.partition_kind = PartitionKind::Random;
    row
}

/// The thesis' appendix A.2: (Kendall-Tau by its definition, simulated time in ms).
pub fn thesis_a2(target: Target, users: u64, churn: u32) -> Option<(f64, f64)> {
    let by_users_churn = |u: u64, c: u32| -> Option<(f64, f64)> {
        let t20 = target == Target::Limited(20);
        let unl = target == Target::Unlimited;
        Some(match (u, c) {
            (100, 0) => (0.000751, 100_276.0),
            (100, 1) => (0.000765, 100_324.0),
            (100, 5) => (0.000843, 100_436.0),
            (500, 0) => (0.000157, 100_601.0),
            (500, 1) => (0.000159, if t20 { 100_642.0 } else { 100_640.0 }),
            (500, 5) if t20 => (0.000177, 100_744.0),
            (500, 5) => (0.000178, 100_740.0),
            (2_500, 0) if t20 => (3.01e-5, 137_183.0),
            (2_500, 1) if t20 => (3.20e-5, 139_685.0),
            (2_500, 5) if t20 => (3.90e-5, 145_619.0),
            (2_500, 0) => (3.25e-5, 101_191.0),
            (2_500, 1) if unl => (3.74e-5, 101_241.0),
            (2_500, 1) => (3.73e-5, 101_238.0),
            (2_500, 5) if unl => (5.80e-5, 101_596.0),
            (2_500, 5) => (5.64e-5, 101_586.0),
            _ => return None,
        })
    };
    match target {
        Target::Limited(20) | Target::Limited(100) | Target::Unlimited => {
            by_users_churn(users, churn)
        }
        Target::Limited(_) => None,
    }
}

/// Strict Kendall-Tau of the thesis' reference implementation on the same grid (300 seeds per
/// row, pairs tied in admission time not counted).
pub fn reference_kendall_tau(target: Target, users: u64, churn: u32) -> Option<f64> {
    let t20 = target == Target::Limited(20);
    Some(match (users, churn) {
        (100, 0) => 6.7e-7,
        (100, 1) => 8.8e-6,
        (100, 5) => 3.5e-5,
        (500, 0) => 8e-8,
        (500, 1) => 2.3e-6,
        (500, 5) => 1.6e-5,
        (2_500, 0) if t20 => 0.0,
        (2_500, 1) if t20 => 1.1e-6,
        (2_500, 5) if t20 => 5.3e-6,
        (2_500, 0) => 2e-8,
        (2_500, 1) => 1.7e-6,
        (2_500, 5) => 9.5e-6,
        _ => return None,
    })
}

/// Runs every configuration, `jobs` at a time, returning reports in input order. With
/// `progress`, a one-line indicator on stderr.
pub fn run_all(configs: &[RunConfig], jobs: usize, progress: bool) -> Vec<RunReport> {
    run_each(configs.len(), jobs, progress, |i| sim::run(&configs[i]))
}

/// Runs `job(0)` … `job(n - 1)`, `jobs` at a time on `std::thread`s, returning the results in
/// input order. With `progress`, a one-line indicator on stderr.
pub fn run_each<T: Send>(
    n: usize,
    jobs: usize,
    progress: bool,
    job: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let jobs = jobs.clamp(1, n.max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, T)>();
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, job) = (&next, &job);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    if tx.send((i, job(i))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut done = 0usize;
        let mut last_print = Instant::now() - Duration::from_secs(1);
        // On a terminal one line updated in place; in a log, a line per tenth.
        let terminal = std::io::stderr().is_terminal();
        let tenth = n.div_ceil(10).max(1);
        for (i, report) in rx {
            out[i] = Some(report);
            done += 1;
            let due = if terminal {
                last_print.elapsed() >= Duration::from_millis(200) || done == n
            } else {
                done % tenth == 0 || done == n
            };
            if progress && due {
                last_print = Instant::now();
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "{}{done}/{n} runs ({:.0}%), {:.1} s{}",
                    if terminal { "\r" } else { "" },
                    100.0 * done as f64 / n as f64,
                    started.elapsed().as_secs_f64(),
                    if terminal { "" } else { "\n" }
                );
                let _ = err.flush();
            }
        }
    });
    if progress && n > 0 && std::io::stderr().is_terminal() {
        eprintln!();
    }
    out.into_iter().flatten().collect()
}

/// Summarises the reports of one configuration.
pub fn summarise(row: &RunConfig, reports: &[RunReport]) -> SweepRow {
    let n = reports.len().max(1) as f64;
    let mean = |f: &dyn Fn(&RunReport) -> f64| reports.iter().map(f).sum::<f64>() / n;
    let total = |f: &dyn Fn(&RunReport) -> u64| reports.iter().map(f).sum::<u64>();
    let (target, users, churn) = (
        row.protocol.target_on_site,
        row.workload.users,
        row.faults.churn,
    );
    let a2 = thesis_a2(target, users, churn);
    let reference = reference_kendall_tau(target, users, churn);
    let thesis_grid = row.strategy == Strategy::Qpid
        && row.nodes == 8
        && row.network.loss_probability == 0.0
        && row.faults.partitions == 0
        && a2.is_some();
    SweepRow {
        strategy: row.strategy.to_string(),
        target: target.to_string(),
        users,
        churn,
        seeds: reports.len() as u64,
        kendall_tau_mean: mean(&|r| r.kendall_tau),
        kendall_tau_max: reports.iter().map(|r| r.kendall_tau).fold(0.0, f64::max),
        kendall_tau_actual_mean: mean(&|r| r.kendall_tau_actual),
        kendall_tau_actual_max: reports
            .iter()
            .map(|r| r.kendall_tau_actual)
            .fold(0.0, f64::max),
        kendall_tau_thesis_mean: mean(&|r| r.kendall_tau_thesis),
        sim_time_ms_mean: mean(&|r| r.sim_time_ms as f64),
        wait_ms_mean: mean(&|r| r.wait_ms_mean),
        wait_ms_max: reports.iter().map(|r| r.wait_ms_max).max().unwrap_or(0),
        lost_total: total(&|r| r.lost),
        invariant_violations_total: total(&|r| r.invariant_violations),
        invariant_violations_recovering_total: total(&|r| r.invariant_violations_recovering),
        double_admissions_total: total(&|r| r.double_admissions),
        timed_out_total: total(&|r| u64::from(r.timed_out)),
        messages_per_admitted_mean: mean(&|r| r.messages_per_admitted),
        max_overshoot: reports.iter().map(|r| r.max_overshoot).max().unwrap_or(0),
        grant_violations_total: total(&|r| r.grant_violations),
        wall_ms_mean: mean(&|r| r.wall_ms as f64),
        thesis_a2_kendall_tau: a2.filter(|_| thesis_grid).map(|a| a.0),
        thesis_a2_sim_time_ms: a2.filter(|_| thesis_grid).map(|a| a.1),
        reference_kendall_tau: reference.filter(|_| thesis_grid),
        kendall_tau_bound: reference
            .filter(|_| thesis_grid)
            .map(|r| if churn == 0 { 1e-7 } else { r / 2.0 }),
    }
}

/// Expands rows into runs over `seeds` consecutive seeds from `first_seed`.
pub fn expand(rows: &[RunConfig], first_seed: u64, seeds: u64) -> Vec<RunConfig> {
    rows.iter()
        .flat_map(|row| {
            (0..seeds).map(move |k| RunConfig {
                seed: first_seed.wrapping_add(k),
                ..row.clone()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thesis_grid_has_27_rows_with_references() {
        let rows = preset_rows(Preset::Thesis, &RunConfig::default());
        assert_eq!(rows.len(), 27);
        for r in &rows {
            let (target, users, churn) =
                (r.protocol.target_on_site, r.workload.users, r.faults.churn);
            assert!(thesis_a2(target, users, churn).is_some());
            assert!(reference_kendall_tau(target, users, churn).is_some());
            assert_eq!(r.nodes, 8);
            r.validate().unwrap();
        }
        assert_eq!(
            thesis_a2(Target::Limited(20), 2_500, 5),
            Some((3.90e-5, 145_619.0))
        );
    }

    #[test]
    fn results_come_back_in_order_whatever_the_threads() {
        let mut row = RunConfig {
            nodes: 3,
            ..RunConfig::default()
        };
        row.workload.users = 20;
        row.workload.window_ms = 2_000;
        let rows = vec![row];
        let runs = expand(&rows, 5, 4);
        let one = run_all(&runs, 1, false);
        let two = run_all(&runs, 2, false);
        let seeds: Vec<u64> = two.iter().map(|r| r.seed).collect();
        assert_eq!(seeds, vec![5, 6, 7, 8]);
        let h1: Vec<&str> = one.iter().map(|r| r.trace_hash.as_str()).collect();
        let h2: Vec<&str> = two.iter().map(|r| r.trace_hash.as_str()).collect();
        assert_eq!(h1, h2);
    }
}
