//! `waitingroom-node`: run a node, make a cluster key, start a local demo, or benchmark.
#![forbid(unsafe_code)]

/// A node allocates per request (bodies, JSON, forwarded batches) on many threads; mimalloc
/// takes less CPU for that than the system allocator (measured with `scripts/checkin-cost.sh`,
/// see the README).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin_cli;
mod audit_cli;
mod bench;
mod demo;
mod latency;
mod load;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use waitingroom_http::config::{self, Options};
use waitingroom_http::crypto::Crypto;
use waitingroom_http::gate::{Gate, GateConfig};
use waitingroom_http::origin;
use waitingroom_http::return_path::ReturnPathKey;
use waitingroom_http::server;

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
    Run(Box<RunArgs>),
    /// Write a new cluster signing key (PKCS#8 PEM) and print its public JWK.
    Keygen(KeygenArgs),
    /// Print the return-path secret of a cluster key, for the origin's gate.
    ///
    /// The gate signs the way back to the page a visitor asked for with it (nginx and Caddy:
    /// the X-Waitingroom-Gate-Secret header; the Rust gate: GateConfig::return_key), printed
    /// as base64url. It is not the cluster key, and cannot sign passes.
    GateSecret(GateSecretArgs),
    /// Start a local cluster of nodes plus a demo origin site; Ctrl-C stops them all.
    Demo(demo::DemoArgs),
    /// Run the demo origin site (checks the pass cookie offline with the cluster's JWKS).
    Origin(OriginArgs),
    /// Measure how many check-ins per second one node serves, with p50/p99 latency.
    BenchCheckin(bench::BenchArgs),
    /// Drive real visitors against a cluster (join, check in, leave, verify the pass) and
    /// report admissions per second, lost visitors, errors, latency and fairness.
    Load(load::LoadArgs),
    /// The admin API of a running cluster: live settings, scheduled events, bypass passes.
    Admin(admin_cli::AdminArgs),
    /// Check a cluster's published admission records (signatures, chain, cutoffs) and lotteries.
    Audit(audit_cli::AuditArgs),
    /// Print the OpenAPI 3.1 description of every route (the same as `GET /openapi.json`), to
    /// generate clients or check the API without a running node.
    Openapi,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// TOML file with settings (keys as the flag names, with underscores).
    #[arg(long, short, env = "WAITINGROOM_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    options: Options,
}

#[derive(Debug, Args)]
struct KeygenArgs {
    /// Where to write the private key (mode 0600: readable by its owner only, also when
    /// --force replaces an existing file).
    #[arg(long, short, value_name = "PATH")]
    out: PathBuf,
    /// Overwrite an existing file.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct GateSecretArgs {
    /// The cluster key file (as `run --key-file`).
    #[arg(long, value_name = "PATH")]
    key_file: PathBuf,
}

#[derive(Debug, Args)]
struct OriginArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090", value_name = "ADDR")]
    listen: std::net::SocketAddr,
    /// Where visitors without a valid pass are sent.
    #[arg(long, value_name = "URL")]
    waiting_room_url: String,
    /// A node's JWKS URL, fetched at start (retried for 30 s), and again when a pass names a
    /// key id not in it (at most every 30 s).
    #[arg(long, value_name = "URL")]
    jwks_url: String,
    /// File holding the return-path secret (`waitingroom-node gate-secret`): visitors sent to
    /// the room come back to the page they asked for. Without it they land on the front page.
    #[arg(long, value_name = "PATH")]
    gate_secret_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Keygen(args) => report(keygen(args)),
        Command::Demo(args) => report(runtime().and_then(|rt| rt.block_on(demo::run(args)))),
        Command::GateSecret(args) => report(gate_secret(args)),
        Command::Origin(args) => report(runtime().and_then(|rt| rt.block_on(origin(args)))),
        Command::BenchCheckin(args) => {
            report(runtime().and_then(|rt| rt.block_on(bench::run(args))))
        }
        Command::Load(args) => {
            report(load_runtime(args.threads).and_then(|rt| rt.block_on(load::run(args))))
        }
        Command::Admin(args) => report(runtime().and_then(|rt| rt.block_on(admin_cli::run(args)))),
        Command::Audit(args) => report(runtime().and_then(|rt| rt.block_on(audit_cli::run(args)))),
        Command::Openapi => {
            println!("{}", waitingroom_http::api::openapi::json());
            ExitCode::SUCCESS
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    start(tokio::runtime::Builder::new_multi_thread())
}

fn start(mut builder: tokio::runtime::Builder) -> anyhow::Result<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The load generator's runtime: `threads` workers, or the calling thread alone for one (no
/// hand-offs between threads: for 10,000 visitors on this 2-core machine, 1.3–1.5 s of CPU
/// against 1.6–1.9 s with two workers).
fn load_runtime(threads: u16) -> anyhow::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return start(tokio::runtime::Builder::new_current_thread());
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(usize::from(threads));
    start(builder)
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waitingroom-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Box<RunArgs>) -> ExitCode {
    let args = *args;
    let file = match args.config.as_deref().map(config::read_file).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("waitingroom-node: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = match config::merge(args.options, file).resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("waitingroom-node: {e}");
            return ExitCode::from(2);
        }
    };
    server::init_logging(cfg.log_format, &cfg.log_level);
    let result = runtime().and_then(|rt| rt.block_on(server::run(cfg)).map_err(Into::into));
    report(result)
}

fn gate_secret(args: GateSecretArgs) -> anyhow::Result<()> {
    let crypto = Crypto::load(&args.key_file)?;
    println!("{}", crypto.gate_secret());
    Ok(())
}

fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    let crypto = Crypto::generate();
    write_private(&args.out, &crypto.to_pkcs8_pem(), args.force)?;
    eprintln!(
        "wrote the cluster key to {}; give every node the same file",
        args.out.display()
    );
    println!("{}", serde_json::to_string_pretty(&crypto.public_jwk())?);
    Ok(())
}

/// Writes a secret file readable by its owner only (mode 0600), also over an existing file with
/// `force`: then the text goes to a new file (created 0600) beside it, which replaces the old
/// one, so the old file's mode is never kept and no reader ever sees half a key.
pub(crate) fn write_private(path: &std::path::Path, text: &str, force: bool) -> anyhow::Result<()> {
    if !force {
        return create_private(path, text).with_context(|| {
            format!(
                "cannot create {} (use --force to overwrite)",
                path.display()
            )
        });
    }
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = create_private(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}

/// Creates `path` (it must not exist) with mode 0600 and writes `text` to it.
fn create_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

async fn origin(args: OriginArgs) -> anyhow::Result<()> {
    server::init_logging(config::LogFormat::Text, "info");
    let return_key = match &args.gate_secret_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let key = ReturnPathKey::from_text(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Some(key)
        }
        None => None,
    };
    let cfg = GateConfig {
        return_key,
        ..GateConfig::new(args.jwks_url, args.waiting_room_url)
    };
    let gate = Gate::connect(
        cfg,
        waitingroom_http::tls::client_builder().build()?,
        Duration::from_secs(30),
    )
    .await?;
    let app = origin::router(&gate);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
