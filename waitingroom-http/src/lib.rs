//! The waitingroom node server: translates HTTP and timers into the protocol state machine of
//! `waitingroom-distributed`. No protocol decision lives here.
//!
//! The modules, each using only modules listed after it (so none import each other):
//!
//! - [`server`]: start, serve, and leave the cluster on SIGTERM; [`serve`]: the connection
//!   loop of one listener (header read timeout, peer address);
//! - [`api`]: the HTTP routes and every handler: visitor API, waiting page, peer endpoints
//!   (one handler for forwarded check-ins and leaves), operations;
//! - [`gate`]: a tower layer for origins that checks passes offline and sends visitors without
//!   one to the room;
//! - [`visitor`]: the visitor operations handlers call: verify the token, ask the node, forward
//!   to the node holding the ticket, sign the answer;
//! - [`app`]: one node's parts assembled, the state every handler gets;
//! - [`driver`]: owns the [`waitingroom_distributed::Node`] and its timer;
//! - [`peer`]: batched, bounded, signed node-to-node transport;
//! - [`page`]: renders the waiting page (no handler, no state);
//! - [`leaves`]: passes kept a minute so a leave whose answer was lost can be repeated;
//! - [`metrics`], [`fairness`]: Prometheus metrics and the live inversion count;
//! - [`errors`]: the one error type of handlers; [`cookies`]: the ticket and pass cookies;
//! - [`peer_auth`]: what a peer request's MAC covers, checked from its headers before its body
//!   is read; [`replay`]: the nonces of recent peer requests;
//! - [`config`]: settings from file, environment and flags; [`crypto`]: keys, tokens and peer
//!   signatures; [`wire`]: the JSON bodies; [`clock`]: the one clock; [`rate_limit`]: the
//!   per-client join limit; [`client_addr`]: who a request comes from.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod app;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod gate;
pub mod html;
pub mod i18n;
pub mod metrics;
pub mod peer;
pub mod round_log;
pub mod server;
pub mod wire;

#[cfg(test)]
mod abuse_tests;
#[cfg(test)]
mod deploy_tests;
