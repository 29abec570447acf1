//! The crate's in-process tests, by topic, around one harness (`harness.rs`): the real router of
//! a single-node cluster, no child process. The multi-node tests, with real processes, are
//! `tests/cluster/`.
//!
//! - `tokens.rs`: forged, replayed and confused tokens; passes given again, refreshed, renewed;
//! - `limits.rs`: body and header limits, the per-client join limit;
//! - `peer.rs`: attacks on the peer routes;
//! - `doors.rs`: which routes each listener serves, slow request heads, shedding, cookies;
//! - `admin.rs`: the admin API;
//! - `deploy.rs`: what the files in `deploy/` rely on a node to answer;
//! - `readiness.rs`: `/readyz` when peers refuse the node, the voters file.

mod admin;
mod deploy;
mod doors;
mod harness;
mod limits;
mod peer;
mod readiness;
mod tokens;
