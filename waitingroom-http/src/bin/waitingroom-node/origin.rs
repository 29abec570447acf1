//! `waitingroom-node origin`: a small demo origin site, the "shop" behind the waiting room.
//!
//! Its pages sit behind the [`waitingroom_http::gate`] layer, which checks the pass offline with
//! the cluster's public keys and sends visitors without a valid one to the waiting room; a page
//! only ever sees visitors who came through, and shows them their pass. It counts the passes it
//! let through (`tally.rs`): how many were valid at once, and admissions that came with two
//! different passes, at `GET /_origin/passes` (open, like `/healthz`).

mod tally;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::Extension;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use axum::{Router, middleware};
use clap::Args;
use waitingroom_core::Pass;
use waitingroom_http::clock::now_ms;
use waitingroom_http::config;
use waitingroom_http::crypto::return_path::ReturnPathKey;
use waitingroom_http::gate::{Gate, GateConfig};
use waitingroom_http::server;

#[derive(Debug, Args)]
pub struct OriginArgs {
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

pub async fn run(args: OriginArgs) -> anyhow::Result<()> {
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
        waitingroom_http::crypto::tls::client_builder().build()?,
        Duration::from_secs(30),
    )
    .await?;
    let app = router(&gate);
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

/// The passes the gate let through, shared by the pages and the figures.
type Shared = Arc<Mutex<tally::Tally>>;

/// The origin's routes: `/healthz` and the pass figures open, every other page behind `gate`.
fn router(gate: &Arc<Gate>) -> Router {
    let shared = Shared::default();
    let shop = Router::new().fallback(get(page)).layer(gate.layer());
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/_origin/passes", get(figures))
        .merge(shop)
        .layer(Extension(shared))
        .layer(middleware::map_response(no_store))
}

/// `GET /_origin/passes`: the tally's figures now.
async fn figures(Extension(tally): Extension<Shared>) -> Json<tally::Figures> {
    let now = now_ms();
    Json(
        tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .figures(now),
    )
}

/// Pages and redirects depend on the visitor's pass: never cached.
async fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn page(Extension(pass): Extension<Pass>, Extension(tally): Extension<Shared>) -> Response {
    let now = now_ms();
    tally
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .seen(&pass, now);
    let left = pass.expires_at.saturating_sub(now) / 1000;
    let waited = pass.eviction_time.saturating_sub(pass.queue_join_time) / 1000;
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Demo shop</title></head><body style=\"font:1.1rem/1.6 system-ui,sans-serif;\
         max-width:38rem;margin:10vh auto;padding:0 1.5rem;color:#1d1d1b;background:#fff\">\
         <h1 id=\"welcome\">Welcome to the demo shop</h1>\
         <p>You came through the waiting room: pass <code id=\"pass-id\">{}</code>, \
         waited {waited} s, valid for another {left} s.</p></body></html>",
        pass.id
    );
    Html(html).into_response()
}
