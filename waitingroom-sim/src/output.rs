//! How results are printed: the human-readable run report, sweep and comparison tables
//! (plain, Markdown, CSV), and the Kendall-Tau-against-churn chart.

use std::collections::BTreeMap;

use crate::metrics::RunReport;
use crate::svg;
use crate::sweep::SweepRow;

/// The report of one run as an aligned table of fields.
pub fn human_report(r: &RunReport) -> String {
    let mut lines = vec![
        format!(
            "waitingroom-sim: {} ({}), {} nodes, {} visitors ({} arrival), target {}, churn {}, seed {}",
            r.strategy, r.admission, r.nodes, r.users, r.arrival, r.target, r.churn, r.seed
        ),
        String::new(),
    ];
    lines.extend(
        report_fields(r)
            .into_iter()
            .map(|(k, v)| format!("  {k:<34} {v}")),
    );
    for s in &r.violation_samples {
        lines.push(format!("  violation: {s}"));
    }
    lines.push(format!("  reproduce: {}", r.command));
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The fields of the human-readable report, in order, as (name, value).
fn report_fields(r: &RunReport) -> Vec<(&'static str, String)> {
    let mut fields = fairness_fields(r);
    fields.extend(outcome_fields(r));
    fields.extend(run_fields(r));
    if !r.protocol_events.is_empty() {
        fields.push(("protocol events", counts(&r.protocol_events)));
    }
    if !r.visitor_errors.is_empty() {
        fields.push(("refused visitor operations", counts(&r.visitor_errors)));
    }
    fields
}

/// How fair the order of admission was: Kendall-Tau against each notion of the fair order.
fn fairness_fields(r: &RunReport) -> Vec<(&'static str, String)> {
    vec![
        ("kendall_tau", format!("{:.3e}", r.kendall_tau)),
        (
            "kendall_tau_actual",
            format!("{:.3e}", r.kendall_tau_actual),
        ),
        (
            "kendall_tau_thesis",
            format!("{:.3e}", r.kendall_tau_thesis),
        ),
        (
            "kendall_tau_arrival",
            format!("{:.3e} ({})", r.kendall_tau_arrival, r.queueing_method),
        ),
    ]
}

/// Who got in and who did not, how long they waited, how full the site got.
fn outcome_fields(r: &RunReport) -> Vec<(&'static str, String)> {
    let timed_out = if r.timed_out { " (timed out)" } else { "" };
    vec![
        ("admitted", r.admitted.to_string()),
        ("lost", r.lost.to_string()),
        ("abandoned", r.abandoned.to_string()),
        ("double_admissions", r.double_admissions.to_string()),
        ("readmissions (first node died)", r.readmissions.to_string()),
        (
            "moved_admissions (their node unreachable)",
            r.moved_admissions.to_string(),
        ),
        (
            "wait_ms mean / max",
            format!("{:.0} / {}", r.wait_ms_mean, r.wait_ms_max),
        ),
        (
            "rounds, round_ms mean / max",
            format!("{}, {:.0} / {}", r.rounds, r.round_ms_mean, r.round_ms_max),
        ),
        ("sim_time_ms", format!("{}{timed_out}", r.sim_time_ms)),
        ("max_on_site", r.max_on_site.to_string()),
        ("max_overshoot", r.max_overshoot.to_string()),
        (
            "max_admitted_per_minute",
            r.max_admitted_per_minute.to_string(),
        ),
        ("max_granted_plus_held", r.max_granted_plus_held.to_string()),
        ("grant_violations", r.grant_violations.to_string()),
        (
            "wait_ms mean in the 1st partition, paused side / majority side",
            r.partition_waits
                .map_or("-".into(), |(cut, other)| format!("{cut:.0} / {other:.0}")),
        ),
    ]
}

/// The run itself: its messages, invariant checks, events, time and memory, its trace hash and
/// the network's tally.
fn run_fields(r: &RunReport) -> Vec<(&'static str, String)> {
    let n = &r.network;
    vec![
        ("messages", r.messages.to_string()),
        (
            "messages_per_admitted",
            format!("{:.1}", r.messages_per_admitted),
        ),
        (
            "invariant_violations (converged)",
            r.invariant_violations.to_string(),
        ),
        (
            "invariant_violations (recovering)",
            r.invariant_violations_recovering.to_string(),
        ),
        ("invariant_checks", r.invariant_checks.to_string()),
        ("events", r.events.to_string()),
        ("wall_ms", r.wall_ms.to_string()),
        (
            "peak_memory",
            format!("{:.1} MiB", r.peak_memory as f64 / 1_048_576.0),
        ),
        ("trace_hash", r.trace_hash.clone()),
        (
            "network",
            format!(
                "{} sent, {} lost, {} duplicated, {} reordered, {} cut, {} to dead nodes",
                n.sent, n.lost, n.duplicated, n.reordered, n.cut, n.to_dead
            ),
        ),
    ]
}

/// `name count, name count, …`
fn counts(map: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
    parts.join(", ")
}

/// `fmt(v)`, or `-` without a value.
fn opt(v: Option<f64>, fmt: fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), fmt)
}

fn sci(v: f64) -> String {
    format!("{v:.2e}")
}

/// Sweep rows as a table, with the thesis' and the reference figures beside ours.
pub fn sweep_table(rows: &[SweepRow]) -> String {
    let mut s = format!(
        "{:<9} {:>5} {:>5} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} | {:>4} {:>4} {:>5} {:>4} {:>7} {:>7}\n",
        "target",
        "users",
        "churn",
        "seeds",
        "kt_mean",
        "bound",
        "ref_kt",
        "kt_actual",
        "kt_thesis",
        "A.2_kt",
        "time_ms",
        "A.2_time",
        "lost",
        "inv",
        "inv_r",
        "dbl",
        "msg/adm",
        "wall_ms"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<9} {:>5} {:>5} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9.0} {:>9} | {:>4} {:>4} {:>5} {:>4} {:>7.1} {:>7.1}{}\n",
            r.target,
            r.users,
            r.churn,
            r.seeds,
            sci(r.kendall_tau_mean),
            opt(r.kendall_tau_bound, sci),
            opt(r.reference_kendall_tau, sci),
            sci(r.kendall_tau_actual_mean),
            sci(r.kendall_tau_thesis_mean),
            opt(r.thesis_a2_kendall_tau, sci),
            r.sim_time_ms_mean,
            opt(r.thesis_a2_sim_time_ms, |v| format!("{v:.0}")),
            r.lost_total,
            r.invariant_violations_total,
            r.invariant_violations_recovering_total,
            r.double_admissions_total,
            r.messages_per_admitted_mean,
            r.wall_ms_mean,
            if r.within_bound() { "" } else { "  ABOVE BOUND" }
        ));
    }
    s
}

/// Strategies side by side, as a plain or a Markdown table.
pub fn compare_table(rows: &[SweepRow], markdown: bool) -> String {
    let head = [
        "strategy",
        "kendall_tau",
        "kendall_tau_actual",
        "kendall_tau_thesis",
        "sim_time_ms",
        "wait_ms_mean",
        "wait_ms_max",
        "lost",
        "max_overshoot",
        "msgs/admitted",
    ];
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            [
                r.strategy.clone(),
                sci(r.kendall_tau_mean),
                sci(r.kendall_tau_actual_mean),
                sci(r.kendall_tau_thesis_mean),
                format!("{:.0}", r.sim_time_ms_mean),
                format!("{:.0}", r.wait_ms_mean),
                r.wait_ms_max.to_string(),
                r.lost_total.to_string(),
                r.max_overshoot.to_string(),
                format!("{:.1}", r.messages_per_admitted_mean),
            ]
        })
        .collect();
    let mut s = String::new();
    if markdown {
        s.push_str(&format!("| {} |\n", head.join(" | ")));
        s.push_str(&format!("|{}\n", "---|".repeat(head.len())));
        for c in &cells {
            s.push_str(&format!("| {} |\n", c.join(" | ")));
        }
    } else {
        let widths = [14, 12, 18, 18, 12, 12, 11, 6, 13, 13];
        for row in std::iter::once(head.map(String::from)).chain(cells) {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            s.push_str(&line.join(" "));
            s.push('\n');
        }
    }
    s
}

/// A CSV column: its header and how a row's cell is written.
type Column = (&'static str, fn(&SweepRow) -> String);

/// The column of a field of [`SweepRow`], headed by the field's name; `?` marks an optional
/// figure, written as an empty cell when missing.
macro_rules! column {
    ($field:ident) => {
        (stringify!($field), |r: &SweepRow| r.$field.to_string())
    };
    ($field:ident?) => {
        (stringify!($field), |r: &SweepRow| {
            r.$field.map_or_else(String::new, |x| x.to_string())
        })
    };
}

/// Every field of [`SweepRow`], in order.
const CSV_COLUMNS: [Column; 26] = [
    column!(strategy),
    column!(target),
    column!(users),
    column!(churn),
    column!(seeds),
    column!(kendall_tau_mean),
    column!(kendall_tau_max),
    column!(kendall_tau_actual_mean),
    column!(kendall_tau_actual_max),
    column!(kendall_tau_thesis_mean),
    column!(sim_time_ms_mean),
    column!(wait_ms_mean),
    column!(wait_ms_max),
    column!(lost_total),
    column!(invariant_violations_total),
    column!(invariant_violations_recovering_total),
    column!(double_admissions_total),
    column!(timed_out_total),
    column!(messages_per_admitted_mean),
    column!(max_overshoot),
    column!(grant_violations_total),
    column!(wall_ms_mean),
    column!(thesis_a2_kendall_tau?),
    column!(thesis_a2_sim_time_ms?),
    column!(reference_kendall_tau?),
    column!(kendall_tau_bound?),
];

/// Sweep rows as CSV, every field of [`SweepRow`].
pub fn csv(rows: &[SweepRow]) -> String {
    let header: Vec<&str> = CSV_COLUMNS.iter().map(|c| c.0).collect();
    let mut s = header.join(",");
    s.push('\n');
    for r in rows {
        let cells: Vec<String> = CSV_COLUMNS.iter().map(|c| (c.1)(r)).collect();
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

/// Kendall-Tau against churn, one panel per visitor count: ours (strict, solid), the thesis
/// reference implementation's strict figures (dashed), and in a second row the thesis'
/// definition, ours against appendix A.2.
pub fn churn_chart(rows: &[SweepRow]) -> String {
    const COLORS: [&str; 3] = ["#1f77b4", "#2ca02c", "#d62728"];
    let mut users: Vec<u64> = rows.iter().map(|r| r.users).collect();
    users.sort_unstable();
    users.dedup();
    let mut targets: Vec<String> = Vec::new();
    for r in rows {
        if !targets.contains(&r.target) {
            targets.push(r.target.clone());
        }
    }
    let series = |u: u64, value: fn(&SweepRow) -> Option<f64>, dashed: bool, tag: &str| {
        targets
            .iter()
            .enumerate()
            .filter_map(|(k, t)| {
                let points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.users == u && &r.target == t)
                    .filter_map(|r| value(r).map(|v| (f64::from(r.churn), v)))
                    .collect();
                (!points.is_empty()).then(|| svg::Series {
                    name: format!("target {t}{tag}"),
                    color: COLORS[k % COLORS.len()].into(),
                    dashed,
                    points,
                })
            })
            .collect::<Vec<_>>()
    };
    // Per definition: (title, y label, ours, the thesis' figure, its legend tag).
    type Value = fn(&SweepRow) -> Option<f64>;
    let definitions: [(&str, &str, Value, Value, &str); 2] = [
        (
            "strict Kendall-Tau",
            "mean Kendall-Tau distance",
            |r| Some(r.kendall_tau_mean),
            |r| r.reference_kendall_tau,
            " (thesis code)",
        ),
        (
            "thesis definition",
            "mean Kendall-Tau (ties discordant)",
            |r| Some(r.kendall_tau_thesis_mean),
            |r| r.thesis_a2_kendall_tau,
            " (thesis A.2)",
        ),
    ];
    let mut panels = Vec::new();
    for (title, y_label, ours, theirs, tag) in definitions {
        for &u in &users {
            let mut s = series(u, ours, false, "");
            s.extend(series(u, theirs, true, tag));
            panels.push(svg::Panel {
                title: format!("{u} visitors: {title}"),
                x_label: "nodes added and removed".into(),
                y_label: y_label.into(),
                series: s,
            });
        }
    }
    svg::render(
        "Kendall-Tau distance against churn (solid: this simulator; dashed: thesis)",
        &panels,
        users.len().max(1),
    )
}
