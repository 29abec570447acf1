//! Starting and stopping one node.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use waitingroom_core::SettingsError;
use waitingroom_distributed::Node;

use crate::app::App;
use crate::clock::now_ms;
use crate::config::{LogFormat, ServerConfig, derive_node_id};
use crate::crypto::{Crypto, LoadKeyError};
use crate::peer::Transport;

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
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(std::io::Error),
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
    let (listener, local) = bind(cfg.listen).await?;
    let app = start_node(cfg, crypto, local)?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let service =
        crate::api::router(app.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move {
        axum::serve(listener, service)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });
    // Scripts and tests wait for this line (it carries the port when port 0 was asked for).
    println!("listening on http://{local}");
    let _ = std::io::stdout().flush();

    wait_for_signal().await;
    let drained = leave(&app).await;
    let _ = stop_tx.send(());
    // Peers keep idle keep-alive connections open; do not wait long for them to close.
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_millis(300), server).await {
        return Err(ServerError::Serve(e));
    }
    tracing::info!(drained, "stopped");
    Ok(())
}

/// Binds the listening socket; returns it with the address it got (the port, when 0 was
/// asked for).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServerError> {
    let listen_error = |source| ServerError::Listen { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    Ok((listener, local))
}

/// Makes this process's node (its id, a new incarnation), starts a cluster or joins one
/// through the seeds, and runs its timer.
fn start_node(
    cfg: ServerConfig,
    crypto: Arc<Crypto>,
    local: SocketAddr,
) -> Result<Arc<App>, ServerError> {
    let advertise = cfg
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{local}"));
    let id = cfg.node_id.unwrap_or_else(|| derive_node_id(&advertise));
    // A new incarnation per process start, so peers tell this life from an earlier one.
    let incarnation = now_ms().max(1);
    let node = Node::new(cfg.node_config(id, incarnation, &advertise, rand::random()))?;
    let seeds: Vec<String> = cfg
        .peers
        .iter()
        .filter(|p| **p != advertise)
        .cloned()
        .collect();
    let app = App::assemble(
        Arc::new(cfg),
        crypto,
        node,
        Transport::build_client(std::time::Duration::from_secs(5)),
    );
    tracing::info!(
        id = id.0,
        incarnation,
        %advertise,
        listen = %local,
        seeds = ?seeds,
        "node starting"
    );
    app.driver.with(|node, now| {
        if seeds.is_empty() {
            node.start_cluster(now);
        } else {
            node.join_cluster(now, seeds);
        }
    });
    tokio::spawn(app.driver.clone().run_timer());
    Ok(app)
}

/// Shutdown's first part: refuse visitors, tell the cluster this node leaves, and keep
/// delivering (peer routes stay open: the acknowledgements of the farewell come in there)
/// until the farewell is through or `shutdown_grace_ms` is over. Returns whether it is through.
async fn leave(app: &App) -> bool {
    tracing::info!("stopping: refusing visitors, leaving the cluster");
    app.begin_stopping();
    let driver = &app.driver;
    driver.with(|node, now| node.shutdown(now));
    let deadline = Instant::now() + Duration::from_millis(app.cfg.limits.shutdown_grace_ms);
    while !driver.read(Node::is_drained) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    driver.read(Node::is_drained)
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
