//! Starting and stopping one node: bind the listeners, join or start the cluster, serve until
//! SIGTERM, then leave the cluster cleanly. [`serve`](mod@serve) is the connection loop of one
//! listener (with the limits `axum::serve` cannot set); `discovery` finds peers through DNS.

pub(crate) mod discovery;
pub mod serve;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use waitingroom_core::SettingsError;
use waitingroom_distributed::Node;

use crate::app::App;
use crate::app::state_dir::StateDir;
use crate::app::voters_file;
use crate::clock::now_ms;
use crate::config::{LogFormat, ServerConfig, derive_node_id};
use crate::crypto::tls::InternalTls;
use crate::crypto::{Crypto, LoadKeyError};
use crate::peer::Transport;
use discovery::Finder;
use serve::{serve, serve_tls};

/// Why a node could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The cluster key.
    #[error(transparent)]
    Key(#[from] LoadKeyError),
    /// Binding or serving.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The protocol refused its configuration.
    #[error(transparent)]
    Setting(#[from] SettingsError),
    /// The state directory holds a file that cannot be read back.
    #[error("--state-dir: {0}")]
    State(String),
    /// The voters file cannot be read back, or is another node's.
    #[error("--voters-file: {0}")]
    Voters(String),
    /// The resolver for `--peers-dns` could not be set up.
    #[error("--peers-dns: cannot set up the DNS resolver: {0}")]
    Dns(#[from] hickory_resolver::ResolveError),
}

/// Sets up `tracing` output (text or JSON lines on stderr).
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init`: a second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Runs one node until SIGTERM or Ctrl-C, then leaves the cluster cleanly.
pub async fn run(cfg: ServerConfig) -> Result<(), ServerError> {
    let crypto = Arc::new(Crypto::load_with_previous(
        &cfg.key_file,
        &cfg.extra_verify_keys,
    )?);
    for path in std::iter::once(&cfg.key_file).chain(&cfg.extra_verify_keys) {
        if let Some(warning) = key_file_warning(path) {
            tracing::warn!(path = %path.display(), "{warning}");
        }
    }
    let public = bind(cfg.listen).await?;
    let internal = match cfg.internal_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let tls = cfg
        .internal_tls
        .as_ref()
        .map(InternalTls::load)
        .transpose()?;
    let peer_addr = internal.as_ref().map_or(public.1, |(_, addr)| *addr);
    let scheme = crate::crypto::tls::scheme(tls.is_some());
    let advertise = cfg
        .advertise
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{peer_addr}"));
    let finder = cfg
        .discovery
        .as_ref()
        .map(|d| Finder::new(d, &advertise))
        .transpose()?;
    let mut seeds = cfg.peers.clone();
    if let (Some(finder), Some(d)) = (&finder, &cfg.discovery) {
        seeds.extend(
            finder
                .first_seeds(Duration::from_millis(d.interval_ms))
                .await,
        );
    }
    let client = tls.as_ref().map(|t| t.client.clone());
    let app = start_node(cfg, crypto, &advertise, seeds, client)?;
    if let Some(finder) = finder {
        tokio::spawn(finder.run(app.clone()));
    }
    if internal.is_none() {
        tracing::warn!(
            listen = %public.1,
            "no --internal-listen: peer routes, /metrics and /api/cluster are served on the \
             public port (allowed on loopback only)"
        );
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let acceptor = tls.map(|t| TlsAcceptor::from(t.server));
    let servers = serve_all(&app, public, (internal, acceptor), &stop_rx);
    wait_for_signal().await;
    let drained = leave(&app).await;
    let _ = stop_tx.send(true);
    for server in servers {
        // Each server drains its connections for a bounded time (serve::serve).
        let _ = server.await;
    }
    tracing::info!(drained, "stopped");
    Ok(())
}

/// Serves the public listener (every route, without an internal one) and the internal one
/// until `stop` turns true. Prints `listening on http://ADDR` (and `internal listening on
/// http://ADDR`): scripts and tests wait for these lines, which carry the port when port 0 was
/// asked for; `https://` with mutual TLS on the internal one).
fn serve_all(
    app: &Arc<App>,
    public: (TcpListener, SocketAddr),
    (internal, tls): (Option<(TcpListener, SocketAddr)>, Option<TlsAcceptor>),
    stop: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let timeout = Duration::from_millis(app.cfg.limits.header_read_timeout_ms);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let mut servers = Vec::new();
    let public_routes = if internal.is_some() {
        crate::api::public_router(app.clone())
    } else {
        crate::api::router(app.clone())
    };
    servers.push(tokio::spawn(serve(
        public.0,
        public_routes,
        timeout,
        stopped(stop.clone()),
    )));
    println!("listening on http://{}", public.1);
    if let Some((listener, addr)) = internal {
        let routes = crate::api::internal_router(app.clone());
        let scheme = crate::crypto::tls::scheme(tls.is_some());
        servers.push(tokio::spawn(serve_tls(
            listener,
            routes,
            timeout,
            tls,
            stopped(stop.clone()),
        )));
        println!("internal listening on {scheme}://{addr}");
    }
    let _ = std::io::stdout().flush();
    servers
}

/// Binds a listening socket; returns it with the address it got (the port, when 0 was asked
/// for).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServerError> {
    serve::bind(addr)
        .await
        .map_err(|source| ServerError::Listen { addr, source })
}

/// Makes this process's node (its id, a new incarnation), starts a cluster or joins one
/// through the seeds (`--peers` and what DNS found), and runs its timer.
fn start_node(
    cfg: ServerConfig,
    crypto: Arc<Crypto>,
    advertise: &str,
    mut seeds: Vec<String>,
    tls: Option<rustls::ClientConfig>,
) -> Result<Arc<App>, ServerError> {
    let id = cfg.node_id.unwrap_or_else(|| derive_node_id(advertise));
    // A new incarnation per process start, so peers tell this life from an earlier one.
    let incarnation = now_ms().max(1);
    let mut node = Node::new(cfg.node_config(id, incarnation, advertise, rand::random()))?;
    let restored = match &cfg.state_dir {
        Some(dir) => restore_state(&StateDir::new(dir.clone()), &mut node)?,
        None => None,
    };
    if let Some(path) = &cfg.voters_file {
        let foreign = match cfg.voters_file_is_the_state_dirs() {
            true => voters_file::Foreign::Ignore,
            false => voters_file::Foreign::Refuse,
        };
        voters_file::restore(path, &mut node, foreign).map_err(ServerError::Voters)?;
    }
    if restored.is_none() && node.agreed_voters().is_some() {
        // It was in a cluster before (its voters file says so) but kept nothing of what it let
        // out: if nobody it can reach remembers the site either, it holds the whole target
        // until every pass its earlier life could have given expired. A first start (no
        // voters file) holds nothing.
        tracing::warn!(
            "voters file but no node state: if this node founds the cluster, it holds the \
             whole target until the passes of its earlier life expired"
        );
        node.assume_forgotten_past();
    }
    seeds.retain(|p| *p != advertise);
    seeds.dedup();
    // Peers close idle connections after their header read timeout: close ours well before.
    let idle = Duration::from_millis(cfg.limits.header_read_timeout_ms / 2);
    let app = App::assemble(
        Arc::new(cfg),
        crypto,
        node,
        Transport::build_client_with(idle, tls),
    );
    let known = restored.unwrap_or_default();
    tracing::info!(
        id = id.0,
        incarnation,
        %advertise,
        seeds = ?seeds,
        known = ?known,
        "node starting"
    );
    app.driver.with(|node, now| {
        if seeds.is_empty() {
            node.start_cluster(now);
        } else {
            node.join_cluster(now, seeds);
        }
        // The peers its earlier life knew: asked too while it joins, and probed now and then
        // while they are not members, so it finds its cluster though its seeds are gone.
        node.discovered(&known);
    });
    tokio::spawn(app.driver.clone().run_timer());
    tokio::spawn(app.clone().watch_readiness());
    tokio::spawn(crate::app::records_sync::run(app.clone()));
    Ok(app)
}

/// Gives `node` back what its state directory keeps, before it starts or joins: the passes
/// given back and its durable state. Returns the peers its earlier life knew if there was a
/// durable state (None at a first start); a file that cannot be read stops the start, naming
/// it.
fn restore_state(state: &StateDir, node: &mut Node) -> Result<Option<Vec<String>>, ServerError> {
    let releases = state.read_releases().map_err(ServerError::State)?;
    tracing::info!(
        count = releases.len(),
        "state dir: passes given back, refused again"
    );
    node.restore_releases(now_ms(), &releases);
    let Some(durable) = state.read_durable().map_err(ServerError::State)? else {
        return Ok(None);
    };
    tracing::info!(
        visitors = durable.visitors.len(),
        departed = durable.departed.len(),
        last_round = ?durable.last_record.as_ref().map(|r| r.0),
        live_settings = durable.live.as_ref().map_or(0, |l| l.version),
        peers = durable.peers.len(),
        "state dir: the node's state from its earlier life, counted again"
    );
    node.restore(now_ms(), &durable);
    Ok(Some(durable.peers))
}

/// Why the key file at `path` is a risk, if it is: readable by other users than its owner
/// (anyone who reads it can forge passes and talk to the cluster as a node).
fn key_file_warning(path: &std::path::Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o077 != 0).then(|| {
            format!(
                "the cluster key file is readable by others than its owner (mode {:o}): \
                 anyone who reads it can forge passes; chmod 600 it",
                mode & 0o777
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Shutdown's first part: refuse visitors, tell the cluster this node leaves, and keep
/// delivering (peer routes stay open: the acknowledgements of the farewell come in there)
/// until the farewell is through or `shutdown_grace_ms` is over. Returns whether it is through.
async fn leave(app: &App) -> bool {
    tracing::info!("stopping: refusing visitors, leaving the cluster");
    app.begin_stopping();
    let driver = &app.driver;
    driver.leave_cluster();
    let deadline = Instant::now() + Duration::from_millis(app.cfg.limits.shutdown_grace_ms);
    while !driver.is_drained() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    driver.is_drained()
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
