//! `waitingroom-node`: run a node, make a cluster key, start a local demo, or benchmark.
//!
//! This file only parses the command line and hands each subcommand to its own file (`run.rs`,
//! `keys.rs`, `demo.rs`, `origin.rs`, `bench.rs`, `load/`, `admin.rs`, `audit.rs`), on the
//! runtime it needs.
#![forbid(unsafe_code)]

/// A node allocates per request (bodies, JSON, forwarded batches) on many threads; mimalloc
/// takes less CPU for that than the system allocator (`scripts/checkin-cost.sh` measures it).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin;
mod audit;
mod bench;
mod demo;
mod keys;
mod latency;
mod load;
mod origin;
mod run;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// A fair, distributed virtual waiting room node.
///
/// N identical nodes behind any load balancer form one first-in-first-out queue. Settings come
/// from flags, then WAITINGROOM_* environment variables, then the --config TOML file (keys are
/// the flag names with underscores), then defaults.
#[derive(Debug, Parser)]
#[command(name = "waitingroom-node", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one node (join a cluster through --peers, or start a new one).
    Run(Box<run::RunArgs>),
    /// Write a new cluster signing key (PKCS#8 PEM) and print its public JWK.
    Keygen(keys::KeygenArgs),
    /// Print the return-path secret of a cluster key, for the origin's gate.
    ///
    /// The gate signs the way back to the page a visitor asked for with it (nginx and Caddy:
    /// the X-Waitingroom-Gate-Secret header; the Rust gate: GateConfig::return_key), printed
    /// as base64url. It is not the cluster key, and cannot sign passes.
    GateSecret(keys::GateSecretArgs),
    /// Start a local cluster of nodes plus a demo origin site; Ctrl-C stops them all.
    Demo(demo::DemoArgs),
    /// Run the demo origin site (checks the pass cookie offline with the cluster's JWKS).
    Origin(origin::OriginArgs),
    /// Measure how many check-ins per second one node serves, with p50/p99 latency.
    BenchCheckin(bench::BenchArgs),
    /// Drive real visitors against a cluster (join, check in, leave, verify the pass) and
    /// report admissions per second, lost visitors, errors, latency and fairness.
    Load(load::LoadArgs),
    /// The admin API of a running cluster: live settings, scheduled events, bypass passes.
    Admin(admin::AdminArgs),
    /// Check a cluster's published admission records (signatures, chain, cutoffs) and lotteries.
    Audit(audit::AuditArgs),
    /// Print the OpenAPI 3.1 description of every route (the same as `GET /openapi.json`), to
    /// generate clients or check the API without a running node.
    Openapi,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Keygen(args) => report(keys::keygen(args)),
        Command::Demo(args) => report(runtime().and_then(|rt| rt.block_on(demo::run(args)))),
        Command::GateSecret(args) => report(keys::gate_secret(args)),
        Command::Origin(args) => report(runtime().and_then(|rt| rt.block_on(origin::run(args)))),
        Command::BenchCheckin(args) => {
            report(runtime().and_then(|rt| rt.block_on(bench::run(args))))
        }
        Command::Load(args) => {
            report(load_runtime(args.threads).and_then(|rt| rt.block_on(load::run(args))))
        }
        Command::Admin(args) => report(runtime().and_then(|rt| rt.block_on(admin::run(args)))),
        Command::Audit(args) => report(runtime().and_then(|rt| rt.block_on(audit::run(args)))),
        Command::Openapi => {
            println!("{}", waitingroom_http::api::openapi::json());
            ExitCode::SUCCESS
        }
    }
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    start(tokio::runtime::Builder::new_multi_thread())
}

fn start(mut builder: tokio::runtime::Builder) -> anyhow::Result<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The load generator's runtime: `threads` workers, or the calling thread alone for one (no
/// hand-offs between threads, which cost the generator more CPU than a second worker gains).
fn load_runtime(threads: u16) -> anyhow::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return start(tokio::runtime::Builder::new_current_thread());
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(usize::from(threads));
    start(builder)
}

pub(crate) fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waitingroom-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}
