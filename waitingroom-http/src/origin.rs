//! A small demo origin site: the "shop" behind the waiting room.
//!
//! It checks the `wr_pass` cookie offline with the cluster's public keys (fetched once from a
//! node's `/.well-known/jwks.json`), shows a welcome page to visitors with a valid pass, and sends
//! everyone else to the waiting room.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::clock::now_ms;
use crate::cookies;
use crate::crypto::PassVerifier;

/// State of the origin app.
#[derive(Debug)]
pub struct Origin {
    /// Public keys.
    pub verifier: PassVerifier,
    /// Where visitors without a pass are sent.
    pub waiting_room_url: String,
}

/// The origin's routes.
pub fn router(origin: Arc<Origin>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(get(page))
        .with_state(origin)
}

async fn page(State(o): State<Arc<Origin>>, headers: HeaderMap) -> Response {
    let now = now_ms();
    match cookies::get(&headers, cookies::PASS).map(|p| o.verifier.verify_pass(p, now)) {
        Some(Ok(pass)) => {
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
            (
                [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
                Html(html),
            )
                .into_response()
        }
        _ => {
            let mut resp = StatusCode::FOUND.into_response();
            if let Ok(v) = HeaderValue::from_str(&o.waiting_room_url) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
    }
}
