//! A small demo origin site: the "shop" behind the waiting room.
//!
//! Its pages sit behind the [`crate::gate`] layer, which checks the pass offline with the
//! cluster's public keys and sends visitors without a valid one to the waiting room; a page
//! only ever sees visitors who came through, and shows them their pass.

use std::sync::Arc;

use axum::extract::Extension;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Router, middleware};
use waitingroom_core::Pass;

use crate::clock::now_ms;
use crate::gate::Gate;

/// The origin's routes: `/healthz` open, every other page behind `gate`.
pub fn router(gate: &Arc<Gate>) -> Router {
    let shop = Router::new().fallback(get(page)).layer(gate.layer());
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(shop)
        .layer(middleware::map_response(no_store))
}

/// Pages and redirects depend on the visitor's pass: never cached.
async fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn page(Extension(pass): Extension<Pass>) -> Response {
    let now = now_ms();
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
