//! Exhaustive interleavings of a small cluster: every order in which in-flight messages can be
//! delivered, checked for safety in every reachable state.
//!
//! ```text
//! cargo run --release -p waitingroom-distributed --example explore -- --scenario crash
//! ```
//! Scenarios: `base`, `crash`, `join`, `lossy`, `anytime`, `partition`, `pause` (or `all`).
//! Options override the scenario: `--visitors N`, `--nodes N`, `--mode
//! range|batched|sequential`, `--timers quiet|anytime`, `--drops N`, `--dups N`, `--event-rounds
//! N`, `--extra-rounds N`, `--crash-victim ID`, `--target N`, `--max-states N`, `--max-depth N`,
//! `--all-acks` (interleave bare acknowledgements too, even without loss), `--quiet-joins`
//! (visitors join only while no message is in flight), `--to-horizon` (keep going after
//! everything is over), `--no-progress` (no progress line on stderr every 10 s). Exits with
//! status 1 on a violation.

#[path = "../tests/explorer/mod.rs"]
mod explorer;

use explorer::{Config, TimerPolicy};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = value(&args, "--scenario").unwrap_or_else(|| "base".into());
    let names: Vec<&str> = if scenario == "all" {
        vec!["base", "join", "crash", "lossy", "anytime", "partition"]
    } else {
        vec![scenario.as_str()]
    };
    let mut failed = false;
    for name in names {
        let mut cfg =
            Config::scenario(name).unwrap_or_else(|| die(&format!("unknown scenario {name}")));
        override_with(&mut cfg, &args);
        println!("== {name}: {cfg:?}");
        let report = explorer::explore(&cfg);
        print!("{report}");
        failed |= report.violation.is_some();
    }
    if failed {
        std::process::exit(1);
    }
}

/// The word after option `name`, if given.
fn value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after option `name`, if given.
fn number(args: &[String], name: &str) -> Option<u64> {
    value(args, name).map(|v| {
        v.parse::<u64>()
            .unwrap_or_else(|_| die(&format!("{name} wants a number, not {v}")))
    })
}

/// Applies the options that override the scenario.
fn override_with(cfg: &mut Config, args: &[String]) {
    let number = |name: &str| number(args, name);
    if let Some(n) = number("--visitors") {
        cfg.visitors = n as usize;
    }
    if let Some(n) = number("--nodes") {
        cfg.nodes = n;
    }
    if let Some(n) = number("--drops") {
        cfg.drops = n as u32;
    }
    if let Some(n) = number("--dups") {
        cfg.dups = n as u32;
    }
    if let Some(n) = number("--event-rounds") {
        cfg.event_rounds = n;
    }
    if let Some(n) = number("--extra-rounds") {
        cfg.extra_rounds = n;
    }
    if let Some(n) = number("--crash-victim") {
        cfg.crash_victim = Some(n);
    }
    if let Some(n) = number("--target") {
        cfg.target = n;
    }
    if let Some(n) = number("--max-states") {
        cfg.max_states = n;
    }
    if let Some(n) = number("--max-depth") {
        cfg.max_depth = n as usize;
    }
    cfg.all_acks |= args.iter().any(|a| a == "--all-acks");
    cfg.quiet_joins |= args.iter().any(|a| a == "--quiet-joins");
    cfg.to_horizon |= args.iter().any(|a| a == "--to-horizon");
    cfg.progress = !args.iter().any(|a| a == "--no-progress");
    if let Some(m) = value(args, "--mode") {
        cfg.mode = m.parse().unwrap_or_else(|e| die(&format!("{e}")));
    }
    if let Some(t) = value(args, "--timers") {
        cfg.timers = match t.as_str() {
            "quiet" => TimerPolicy::Quiet,
            "anytime" => TimerPolicy::Anytime,
            _ => die(&format!("unknown timer policy {t}")),
        };
    }
}

fn die(msg: &str) -> ! {
    eprintln!("explore: {msg}");
    std::process::exit(2);
}
