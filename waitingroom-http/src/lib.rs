//! The waitingroom node server: translates HTTP and timers into the protocol state machine of
//! `waitingroom-distributed`. No protocol decision lives here.
//!
//! # What an embedder uses
//!
//! - [`gate`]: a tower layer for an origin written in Rust: checks passes offline with the
//!   room's public keys and sends visitors without one to the room;
//! - [`server::run`]: run one node until SIGTERM, from a [`config::ServerConfig`];
//! - [`config`]: settings from file, environment and flags ([`config::Options`], resolved into a
//!   [`config::ServerConfig`]);
//! - [`api::openapi`]: the OpenAPI document of every route.
//!
//! The `waitingroom-node` binary uses the same surface, plus [`crypto`] (make a cluster key,
//! the TLS clients), [`wire`] (the JSON bodies a client sends and reads), [`clock`] and
//! [`round_log`] (reading published records). In-process tests and the fuzz targets build a
//! node with [`app::App`] and serve it with [`api::router`], and speak to it as a peer with
//! [`peer`].
//!
//! # The parts, each using only parts listed after it
//!
//! - [`server`]: start, the connection loop of each listener, DNS discovery, leaving the
//!   cluster on SIGTERM;
//! - [`api`]: the HTTP routes and every handler, by who calls them: visitors, the waiting page,
//!   peers, operators;
//! - [`app`]: one node's state, assembled (its protocol driver, kept leaves, join limit), and the
//!   visitor operations handlers call;
//! - `html`: renders the waiting page from its template (no handler, no state);
//! - [`peer`]: batched, bounded, signed node-to-node transport, with its authentication and
//!   replay cache;
//! - `metrics`: Prometheus metrics and the live fairness gauge;
//! - [`gate`]: the origin gate (above);
//! - [`config`]: the settings;
//! - [`wire`]: what travels over HTTP: JSON bodies, the error body, cookies, who a request
//!   comes from;
//! - [`round_log`]: the round records this node keeps and serves;
//! - [`crypto`]: the cluster's keys and what they sign (tokens, peer requests, the return
//!   path), and TLS;
//! - `i18n`: the waiting page's languages; [`clock`]: the one clock.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod app;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod gate;
mod html;
mod i18n;
mod metrics;
pub mod peer;
pub mod round_log;
pub mod server;
pub mod wire;

#[cfg(test)]
mod tests;
