//! HTTP routes: every handler of a node, by who calls it.
//!
//! - `visitor.rs`: the visitor API (`/api/...`): join, check in, leave, passes;
//! - `page.rs`: the waiting page (`GET /`, and any unknown page a browser asks for);
//! - `peer.rs`: what other nodes send (`/peer/...`): protocol messages and forwarded visitor
//!   requests, each authenticated with the cluster key;
//! - `ops.rs`: health, readiness, metrics, cluster status and the public keys;
//! - `admin.rs`: the operator's API (`/admin/...`): the live settings, behind a bearer token;
//! - `body.rs`: reading request bodies, shared by the visitor and peer handlers;
//! - `responses.rs`: the refusals several routes share, as the OpenAPI document describes them;
//! - `openapi.rs`: that document (`GET /openapi.json`), made from every handler's annotation.
//!
//! Handlers read the request, call [`App`] (the visitor operations in `app/operations.rs`, or
//! the node through its driver) and write the response; this module wires them into the
//! routers of the two listeners ([`public_router`], [`internal_router`]; [`router`] for one
//! port) with the request log and the error fallbacks.

mod admin;
mod body;
pub mod openapi;
mod ops;
mod page;
mod peer;
mod responses;
mod visitor;

use std::any::Any;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, delete, get, post};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use crate::app::App;
use crate::metrics::RouteLabels;
use crate::peer::{CHECKIN_PATH, FORWARD_PATH, LEAVE_PATH, MESSAGES_PATH};
use crate::wire::client_addr::ClientAddr;
use crate::wire::errors::{ApiError, LoggedError};

/// The pass check under any method and path suffix, for gates that cannot set the path or
/// method of their check (Envoy `ext_authz`, see `deploy/envoy/`).
pub const VERIFY_ANY_PATH: &str = "/api/pass/verify/{*checked_path}";

/// Sends one request through `router` in process, without a socket (tests, fuzzers, an
/// embedding service), and reads the answer's body up to 1 MiB: every answer of this server is
/// small, and the bound keeps a runaway one from eating a fuzzer's memory.
pub async fn call(router: &Router, req: Request) -> (StatusCode, HeaderMap, axum::body::Bytes) {
    use tower::ServiceExt as _;
    let resp = router
        .clone()
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {});
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .expect("an answer under 1 MiB");
    (parts.status, parts.headers, body)
}

/// Every route of a node on one port: the public and the internal routes together. For a node
/// without `--internal-listen` (allowed on loopback only) and for in-process tests.
pub fn router(app: Arc<App>) -> Router {
    let routes = visitor_routes(&app)
        .merge(public_ops())
        .merge(peer_routes())
        .merge(internal_ops())
        .merge(admin_routes(&app));
    guarded(
        shedding(finish(routes, app.clone(), fallback), app.clone()),
        &app,
    )
}

/// The public listener's routes: the visitor API, the waiting page, passes, the JWKS, health.
/// The internal routes answer 404 here, as JSON (never the waiting page), like any unknown API
/// route.
pub fn public_router(app: Arc<App>) -> Router {
    let routes = visitor_routes(&app).merge(public_ops());
    guarded(
        shedding(finish(routes, app.clone(), fallback), app.clone()),
        &app,
    )
}

/// The internal listener's routes: peer traffic, metrics, the cluster view, the round records,
/// health. Anything else is 404.
pub fn internal_router(app: Arc<App>) -> Router {
    // The round records too: peers fill in those they missed (`crate::app::records_sync`).
    let rounds = table(vec![("/api/rounds", get(ops::rounds))]);
    let routes = peer_routes()
        .merge(internal_ops())
        .merge(admin_routes(&app))
        .merge(health())
        .merge(rounds);
    guarded(finish(routes, app.clone(), internal_fallback), &app)
}

/// What every listener's routes get around them: a request that takes longer than
/// `request_timeout_ms` (a slow client's body included) is answered 408 `request_timeout`, and
/// a handler that panics is answered 500 `internal_error` (logged) instead of dropping the
/// connection. Both answers are JSON errors like any other.
pub(crate) fn guarded(routes: Router, app: &App) -> Router {
    let timeout = Duration::from_millis(app.cfg.limits.request_timeout_ms);
    routes
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(middleware::map_response(timeout_json))
        .layer(CatchPanicLayer::custom(panic_json))
}

/// The timeout layer's empty 408, as a JSON error.
async fn timeout_json(resp: Response) -> Response {
    if resp.status() == StatusCode::REQUEST_TIMEOUT
        && resp.extensions().get::<LoggedError>().is_none()
    {
        tracing::info!(status = 408, code = "request_timeout", "request timed out");
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request took too long",
        )
        .into_response();
    }
    resp
}

/// A handler's panic, answered as a JSON 500 (and logged: it is a bug).
fn panic_json(panic: Box<dyn Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "a request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "internal error; the request was not served",
    )
    .into_response()
}

/// Whether `path` is one of the routes only the internal listener serves (`/peer/...`,
/// `/metrics`, `/api/cluster`, and `/admin/...`, reserved for the operator's API).
pub fn is_internal_path(path: &str) -> bool {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    under("/peer") || under("/admin") || under("/metrics") || under("/api/cluster")
}

/// One route: its path and what answers each method there. Routes are listed as data so that
/// the OpenAPI test can check every one of them is described (`openapi::tests`).
type Route = (&'static str, MethodRouter<Arc<App>>);

fn table(routes: Vec<Route>) -> Router<Arc<App>> {
    routes
        .into_iter()
        .fold(Router::new(), |r, (path, methods)| r.route(path, methods))
}

fn visitor_table() -> Vec<Route> {
    vec![
        ("/", get(page::waiting_page).post(page::join_form)),
        ("/api/join", post(visitor::join)),
        ("/api/checkin", post(visitor::checkin)),
        ("/api/leave", post(visitor::leave)),
        ("/api/pass/refresh", post(visitor::refresh_pass)),
        ("/api/pass/release", post(visitor::release_pass)),
        ("/api/pass/verify", get(visitor::verify_pass)),
        // Envoy's ext_authz asks with the request's own method and its path appended.
        (VERIFY_ANY_PATH, any(visitor::verify_pass_any)),
    ]
}

fn peer_table() -> Vec<Route> {
    vec![
        (MESSAGES_PATH, post(peer::messages)),
        (FORWARD_PATH, post(peer::forwarded_batch)),
        (CHECKIN_PATH, post(peer::forwarded_checkin)),
        (LEAVE_PATH, post(peer::forwarded_leave)),
    ]
}

/// Served on both listeners.
fn health_table() -> Vec<Route> {
    vec![
        ("/livez", get(ops::livez)),
        ("/readyz", get(ops::readyz)),
        ("/openapi.json", get(openapi::document)),
    ]
}

fn public_ops_table() -> Vec<Route> {
    vec![
        ("/.well-known/jwks.json", get(ops::jwks)),
        ("/api/rounds", get(ops::rounds)),
        ("/api/lotteries", get(ops::lotteries)),
    ]
}

fn internal_ops_table() -> Vec<Route> {
    vec![
        ("/metrics", get(ops::metrics)),
        ("/api/cluster", get(ops::cluster)),
    ]
}

fn admin_table() -> Vec<Route> {
    vec![
        (
            "/admin/settings",
            get(admin::get_settings).patch(admin::patch_settings),
        ),
        (
            "/admin/events",
            get(admin::get_events).post(admin::post_event),
        ),
        ("/admin/events/{name}", delete(admin::delete_event)),
        ("/admin/passes", post(admin::post_pass)),
        ("/admin/voters/reset", post(admin::reset_voters)),
    ]
}

fn admin_routes(app: &Arc<App>) -> Router<Arc<App>> {
    table(admin_table())
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            admin::require_token,
        ))
        .layer(DefaultBodyLimit::max(16 * 1024))
}

fn visitor_routes(app: &App) -> Router<Arc<App>> {
    table(visitor_table()).layer(DefaultBodyLimit::max(app.cfg.limits.visitor_body))
}

fn peer_routes() -> Router<Arc<App>> {
    // Peer handlers read their bodies themselves, after authentication, up to the signed
    // length (itself within `peer_body_limit`).
    table(peer_table()).layer(DefaultBodyLimit::disable())
}

fn health() -> Router<Arc<App>> {
    table(health_table())
}

fn public_ops() -> Router<Arc<App>> {
    health().merge(table(public_ops_table()))
}

fn internal_ops() -> Router<Arc<App>> {
    table(internal_ops_table())
}

/// Every route path of a node, for the OpenAPI test.
#[cfg(test)]
fn all_paths() -> Vec<&'static str> {
    [
        visitor_table(),
        peer_table(),
        health_table(),
        public_ops_table(),
        internal_ops_table(),
        admin_table(),
    ]
    .into_iter()
    .flatten()
    .map(|(path, _)| path)
    .collect()
}

/// The request log and the error answers every listener shares.
fn finish<H, T>(routes: Router<Arc<App>>, app: Arc<App>, fallback: H) -> Router
where
    H: axum::handler::Handler<T, Arc<App>>,
    T: 'static,
{
    routes
        .route_layer(middleware::from_fn_with_state(app.clone(), track))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(fallback)
        .with_state(app)
}

/// `routes` behind the overload shedder (see [`shed`]).
fn shedding(routes: Router, app: Arc<App>) -> Router {
    routes.layer(middleware::from_fn_with_state(app, shed))
}

/// Sheds load rather than queueing it: with `max_pending_requests` requests already in progress
/// on the public routes, a request gets 503 `overloaded` with `Retry-After` at once (a browser
/// asking for a page gets the waiting page saying so), so a spike makes some clients come back
/// a second later instead of making every client wait behind it. `/livez` and `/readyz` are
/// never refused (a balancer must not take a busy node for a dead one), nor peer traffic (it
/// has its own limit, `max_peer_requests`).
async fn shed(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/livez" || path == "/readyz" || is_internal_path(path) {
        return next.run(req).await;
    }
    let Some(_slot) = Pending::take(&app.pending, app.cfg.limits.max_pending_requests) else {
        app.metrics.count_shed("overloaded");
        let e = ApiError::overloaded();
        if req.method() == Method::GET && page::wants_html(req.headers()) {
            return app.page.error(req.headers(), &e);
        }
        return e.into_response();
    };
    next.run(req).await
}

/// One request counted in progress, until dropped (also when the request is cancelled).
struct Pending<'a>(&'a AtomicUsize);

impl<'a> Pending<'a> {
    fn take(count: &'a AtomicUsize, max: usize) -> Option<Self> {
        if count.fetch_add(1, Ordering::AcqRel) >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Pending(count))
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    // A browser that lands on any page of the room gets the waiting page; not on an internal
    // route, which is only "not here".
    let page = (method == Method::GET || method == Method::HEAD)
        && page::wants_html(&headers)
        && !is_internal_path(uri.path());
    if page {
        return page::waiting_page(State(app), method, uri, headers).await;
    }
    ApiError::not_found().into_response()
}

async fn internal_fallback() -> ApiError {
    ApiError::not_found()
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}

/// The client of a request, keyed as this node is configured (`client_ip_header`,
/// `trusted_proxies`).
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
        let limits = &app.cfg.limits;
        Ok(ClientAddr::from_parts(
            &parts.headers,
            peer,
            limits.client_ip_header.as_deref(),
            &limits.trusted_proxies,
        ))
    }
}
