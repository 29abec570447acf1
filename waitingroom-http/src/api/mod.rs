//! HTTP routes: every handler of a node, by who calls it.
//!
//! - `visitor.rs`: the visitor API (`/api/...`): join, check in, leave, passes;
//! - `page.rs`: the waiting page (`GET /`, and any unknown page a browser asks for);
//! - `peer.rs`: what other nodes send (`/peer/...`): protocol messages and forwarded visitor
//!   requests, each authenticated with the cluster key;
//! - `ops.rs`: health, readiness, metrics, cluster status and the public keys;
//! - `body.rs`: reading request bodies, shared by the visitor and peer handlers.
//!
//! Handlers read the request, call [`App`] (the visitor operations in [`crate::visitor`], or
//! the node through its driver) and write the response; this module wires them into one
//! router with the request log and the error fallbacks.

mod body;
mod ops;
mod page;
mod peer;
mod visitor;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};

use crate::app::App;
use crate::client_addr::ClientAddr;
use crate::errors::{ApiError, LoggedError};
use crate::metrics::RouteLabels;
use crate::peer::{FORWARD_PATH, ForwardOp, MESSAGES_PATH};

/// The pass check under any method and path suffix, for gates that cannot set the path or
/// method of their check (Envoy `ext_authz`, see `deploy/envoy/`).
pub const VERIFY_ANY_PATH: &str = "/api/pass/verify/{*checked_path}";

/// Every route of a node.
pub fn router(app: Arc<App>) -> Router {
    let limits = &app.cfg.limits;
    let visitor = Router::new()
        .route("/", get(page::waiting_page))
        .route("/api/join", post(visitor::join))
        .route("/api/checkin", post(visitor::checkin))
        .route("/api/leave", post(visitor::leave))
        .route("/api/pass/refresh", post(visitor::refresh_pass))
        .route("/api/pass/verify", get(visitor::verify_pass))
        // Envoy's ext_authz asks with the request's own method and its path appended.
        .route(VERIFY_ANY_PATH, any(visitor::verify_pass))
        .layer(DefaultBodyLimit::max(limits.visitor_body));
    let mut peers = Router::new()
        .route(MESSAGES_PATH, post(peer::messages))
        .route(FORWARD_PATH, post(peer::forwarded_batch));
    for op in [ForwardOp::Checkin, ForwardOp::Leave] {
        peers = peers.route(op.path(), peer::forwarded_route(op));
    }
    let peers = peers.layer(DefaultBodyLimit::max(limits.peer_body));
    let ops = Router::new()
        .route("/livez", get(ops::livez))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/api/cluster", get(ops::cluster))
        .route("/.well-known/jwks.json", get(ops::jwks));
    visitor
        .merge(peers)
        .merge(ops)
        .route_layer(middleware::from_fn_with_state(app.clone(), track))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(fallback)
        .with_state(app)
}

/// Records latency per route and logs refused requests with their reason.
async fn track(
    State(app): State<Arc<App>>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let route = matched.map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = req.method().to_string();
    let start = Instant::now();
    let resp = next.run(req).await;
    let elapsed = start.elapsed().as_secs_f64();
    let status = resp.status().as_u16();
    app.metrics
        .http_latency
        .get_or_create(&RouteLabels {
            route: route.clone(),
            method,
        })
        .observe(elapsed);
    if status >= 400
        && let Some(e) = resp.extensions().get::<LoggedError>()
    {
        if status >= 500 {
            tracing::warn!(%route, status, code = %e.code, error = %e.message, "request failed");
        } else if route == "/api/pass/verify" || route == VERIFY_ANY_PATH {
            // A gate's routine answer (every visitor without a valid pass gets it): not worth a
            // log line each at info.
            tracing::debug!(%route, status, code = %e.code, error = %e.message, "request refused");
        } else {
            tracing::info!(%route, status, code = %e.code, error = %e.message, "request refused");
        }
    }
    resp
}

async fn fallback(
    State(app): State<Arc<App>>,
    method: Method,
    client: ClientAddr,
    headers: HeaderMap,
) -> Response {
    // A browser that lands on any page of the room gets the waiting page.
    if (method == Method::GET || method == Method::HEAD) && page::wants_html(&headers) {
        return page::waiting_page(State(app), method, client, headers).await;
    }
    ApiError::not_found().into_response()
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}

/// The client of a request, keyed as this node is configured (`client_ip_header`).
impl FromRequestParts<Arc<App>> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        Ok(ClientAddr::from_parts(
            &parts.headers,
            peer,
            app.cfg.limits.client_ip_header.as_deref(),
        ))
    }
}
