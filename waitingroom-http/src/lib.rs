//! The waitingroom node server: translates HTTP and timers into the protocol state machine of
//! `waitingroom-distributed`. No protocol decision lives here.
//!
//! - [`config`]: settings from file, environment and flags;
//! - [`driver`]: owns the [`waitingroom_distributed::Node`] and its timer;
//! - [`peer`]: batched, bounded, signed node-to-node transport;
//! - [`api`], [`visitor`], [`page`]: the visitor API and the waiting page;
//! - [`metrics`], [`fairness`]: Prometheus metrics and the live inversion count;
//! - [`origin`]: a small demo origin site that checks passes offline;
//! - [`server`]: start, serve, and leave the cluster on SIGTERM.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod app;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod cookies;
pub mod crypto;
pub mod driver;
pub mod errors;
pub mod fairness;
pub mod leaves;
pub mod metrics;
pub mod origin;
pub mod page;
pub mod peer;
pub mod rate_limit;
pub mod server;
pub mod visitor;

#[cfg(test)]
mod abuse_tests;
