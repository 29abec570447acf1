//! End-to-end tests: real `waitingroom-node` processes on 127.0.0.1, driven over HTTP. One test
//! binary, topic files around one harness (`harness.rs`: the processes, the cluster, the
//! requests):
//!
//! - `visitors.rs`: a visitor's flow across nodes, bad input;
//! - `failover.rs`: nodes killed, added, stopped and restarted while visitors wait;
//! - `readiness.rs`: `/readyz` of a node with another key, or a clock off the others';
//! - `passes.rs`: one admission, one pass, whatever happens to the node that gave it;
//! - `durable.rs`: the whole cluster killed and restarted with `--state-dir`;
//! - `restarts.rs`: rolling restarts with the README's command lines, the root stopped and
//!   thawed;
//! - `adversary.rs`: visitors who bank an admission, replay a pass at every node, replay a leave;
//! - `security.rs`: forged peer messages and passes, the internal listener, mutual TLS;
//! - `settings.rs`: live settings across the cluster;
//! - `events.rs`: scheduled events and random queueing;
//! - `records.rs`: round records published and audited;
//! - `audit.rs`: the audit against a server that means it harm;
//! - `cli.rs`: the command line without a cluster.

mod harness;

mod adversary;

mod audit;
mod cli;
mod durable;
mod events;
mod failover;
mod passes;
mod readiness;
mod records;
mod restarts;
mod security;
mod settings;
mod visitors;
