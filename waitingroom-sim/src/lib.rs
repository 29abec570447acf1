//! A deterministic discrete-event simulator of the waitingroom cluster.
//!
//! It drives the very same `waitingroom_distributed::Node` state machines the server runs, over
//! a simulated network that delays, loses, duplicates and reorders messages and can be split,
//! while nodes crash, restart and join, and simulated visitors arrive, check in, give up and
//! leave. One `u64` seed determines a whole run. It measures fairness (Kendall-Tau against the
//! fair order), lost visitors, double admissions, time to drain, on-site overshoot, messages
//! and invariant violations, and runs the same visitors through three baselines for
//! comparison.
//!
//! ```
//! use waitingroom_sim::{RunConfig, run};
//!
//! let mut cfg = RunConfig::default();
//! cfg.workload.users = 50;
//! cfg.workload.window_ms = 5_000;
//! let report = run(&cfg);
//! assert_eq!(report.lost, 0);
//! assert_eq!(report.admitted, 50);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cli;
pub mod config;
pub mod disturbances;
pub mod metrics;
pub mod network;
pub mod output;
pub mod progress;
pub mod promises;
pub mod room;
pub mod scheduler;
pub mod seeds;
pub mod sim;
pub mod strategies;
pub mod svg;
pub mod swarm;
pub mod sweep;
pub mod trace;
pub mod visitors;

pub use config::{Arrival, Latency, RunConfig, Strategy, Target};
pub use metrics::RunReport;
pub use sim::run;
