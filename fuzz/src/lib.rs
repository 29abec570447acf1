//! Fuzz target bodies for every decoder of untrusted bytes in waitingroom.
//!
//! Each `fuzz_targets/*.rs` binary is one line that hands libFuzzer's input to a function here,
//! so the bodies also build and run with stable Rust: the unit tests below feed them the seed
//! inputs and a few thousand deterministic mutations of them (`scripts/fuzz-check.sh` runs
//! those in CI). A body panics only on a bug: every decoder must refuse bad input with an error,
//! and a [`Node`](waitingroom_distributed::Node) must survive any well-typed peer message.
//!
//! Peer requests are checked from their headers before their body is read; [`peer_auth`]
//! edits a signed request's headers and body and checks that nothing but the very request
//! signed is ever accepted, and only once; [`replay_cache`] checks the replay cache's bounds
//! against a model.
//!
//! Visitor requests go whole (method, path, headers, body) to the server's real router, in
//! process: [`visitor_request`].
#![forbid(unsafe_code)]

mod keys;
mod peer;
mod peer_auth;
pub mod seeds;
mod tokens;
mod visitor;

pub use keys::cluster_key;
pub use peer::{peer_batch, peer_message, peer_values};
pub use peer_auth::{accepted, peer_auth, replay_cache};
pub use tokens::tokens;
pub use visitor::visitor_request;

#[cfg(test)]
mod tests;
