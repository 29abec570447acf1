//! HTTP routes: the visitor API, the peer endpoints, and the operations endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use waitingroom_distributed::Envelope;

use crate::app::App;
use crate::client_addr::ClientAddr;
use crate::clock::now_ms;
use crate::cookies;
use crate::errors::{ApiError, LoggedError};
use crate::leaves;
use crate::metrics::{Metrics, RouteLabels};
use crate::page;
use crate::peer::{
    self, CHECKIN_PATH, FORWARD_PATH, ForwardItem, ForwardOp, LEAVE_PATH, MESSAGES_PATH,
};
use crate::visitor::{ForwardBody, JoinBody, PassAnswer, PassBody, TicketBody, VisitorAnswer};

/// Every route of a node.
pub fn router(app: Arc<App>) -> Router {
    let limits = &app.cfg.limits;
    let visitor = Router::new()
        .route("/", get(page::waiting_page))
        .route("/api/join", post(join))
        .route("/api/checkin", post(checkin))
        .route("/api/leave", post(leave))
        .route("/api/pass/refresh", post(refresh_pass))
        .route("/api/pass/verify", get(verify_pass))
        .layer(DefaultBodyLimit::max(limits.visitor_body));
    let peers = Router::new()
        .route(MESSAGES_PATH, post(peer_messages))
        .route(CHECKIN_PATH, post(peer_checkin))
        .route(LEAVE_PATH, post(peer_leave))
        .route(FORWARD_PATH, post(peer_forwards))
        .layer(DefaultBodyLimit::max(limits.peer_body));
    let ops = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/cluster", get(cluster))
        .route("/.well-known/jwks.json", get(jwks));
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
        } else if route == "/api/pass/verify" {
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

/// A join, subject to the per-client rate limit.
pub fn join_limited(app: &App, client: &ClientAddr) -> Result<VisitorAnswer, ApiError> {
    if !app.join_limit.allow(&client.0, now_ms()) {
        app.metrics.rate_limited.inc();
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many joins from this client; slow down",
        ));
    }
    app.join()
}

/// A body that could not be read: 413 `body_too_large` past the route's limit (visitor or peer),
/// else 400 `bad_body`.
fn body_rejection(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "request body is larger than allowed",
        )
    } else {
        ApiError::new(e.status(), "bad_body", e.body_text())
    }
}

/// Reads an optional JSON body: empty is the default value; anything else must be
/// `application/json` and match `T` exactly (unknown fields are refused).
fn json_body<T: DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(body_rejection)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be application/json",
        ));
    }
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))
}

fn with_cookies<T: serde::Serialize>(value: T, cookies: Vec<HeaderValue>) -> Response {
    let mut resp = Json(value).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for c in cookies {
        h.append(header::SET_COOKIE, c);
    }
    resp
}

fn ticket_response(app: &App, a: VisitorAnswer) -> Response {
    let max_age = app.cfg.settings.ticket_expiry_ms.div_ceil(1000);
    let c = cookies::set(
        cookies::TICKET,
        &a.ticket,
        Some(max_age),
        app.cfg.cookie_secure,
    );
    with_cookies(a, vec![c])
}

fn pass_response(app: &App, p: PassAnswer) -> Response {
    let secure = app.cfg.cookie_secure;
    let max_age = app.cfg.settings.pass_expiry_ms.div_ceil(1000);
    let set = vec![
        cookies::set(cookies::PASS, &p.pass, Some(max_age), secure),
        cookies::clear(cookies::TICKET, secure),
    ];
    with_cookies(p, set)
}

fn token_from<'a>(body: Option<&'a str>, headers: &'a HeaderMap, cookie: &str) -> Option<&'a str> {
    body.filter(|t| !t.is_empty())
        .or_else(|| cookies::get(headers, cookie))
}

async fn join(
    State(app): State<Arc<App>>,
    client: ClientAddr,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let JoinBody {} = json_body(&headers, body)?;
    let a = join_limited(&app, &client)?;
    Ok(ticket_response(&app, a))
}

async fn checkin(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: TicketBody = json_body(&headers, body)?;
    let token = token_from(b.ticket.as_deref(), &headers, cookies::TICKET)
        .ok_or_else(|| ApiError::missing_token("ticket"))?;
    let a = app.check_in(token).await?;
    Ok(ticket_response(&app, a))
}

async fn leave(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: TicketBody = json_body(&headers, body)?;
    let token = token_from(b.ticket.as_deref(), &headers, cookies::TICKET)
        .ok_or_else(|| ApiError::missing_token("ticket"))?;
    let key = idempotency_key(&headers)?;
    let p = app.leave(token, key).await?;
    Ok(pass_response(&app, p))
}

/// The leave's `Idempotency-Key` header, if any (see [`crate::leaves`]).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(v) = headers.get(leaves::IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    match v.to_str() {
        Ok(key) if leaves::valid_key(key) => Ok(Some(key)),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_idempotency_key",
            format!(
                "Idempotency-Key must be 1 to {} visible ASCII characters",
                leaves::MAX_KEY_LEN
            ),
        )),
    }
}

async fn refresh_pass(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: PassBody = json_body(&headers, body)?;
    let token = token_from(b.pass.as_deref(), &headers, cookies::PASS)
        .ok_or_else(|| ApiError::missing_token("pass"))?;
    let p = app.refresh_pass(token)?;
    let secure = app.cfg.cookie_secure;
    let max_age = app.cfg.settings.pass_expiry_ms.div_ceil(1000);
    let c = cookies::set(cookies::PASS, &p.pass, Some(max_age), secure);
    Ok(with_cookies(p, vec![c]))
}

/// 204 for a valid pass (bearer token or cookie), 401 otherwise: an nginx `auth_request`
/// target as is.
async fn verify_pass(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let token = cookies::bearer(&headers)
        .or_else(|| cookies::get(&headers, cookies::PASS))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing_token",
                "no pass in the Authorization header or cookie",
            )
        })?;
    let pass = app.verify_pass(token)?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&pass.id.to_string()) {
        // Lets the gate pass the visitor's id on to the origin (auth_request_set).
        resp.headers_mut().insert("x-waitingroom-ticket-id", v);
    }
    Ok(resp)
}

// ---- peers ---------------------------------------------------------------------------------

fn peer_body(
    app: &App,
    path: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    let body = body.map_err(body_rejection)?;
    peer::authenticate(&app.crypto, path, headers, &body).map_err(|e| {
        app.metrics.peer_auth_failures.inc();
        ApiError::peer_auth(&e)
    })?;
    Ok(body)
}

async fn peer_messages(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let body = peer_body(&app, MESSAGES_PATH, &headers, body)?;
    let envelopes: Vec<Envelope> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_json(format!("invalid peer batch: {e}")))?;
    for env in &envelopes {
        Metrics::count_type(&app.metrics.peer_received, &env.body);
    }
    app.driver.with(|node, now| {
        for env in envelopes {
            node.handle_message(now, env);
        }
    });
    Ok(StatusCode::NO_CONTENT)
}

async fn peer_checkin(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<VisitorAnswer>, ApiError> {
    let body = peer_body(&app, CHECKIN_PATH, &headers, body)?;
    let b: ForwardBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_json(e.to_string()))?;
    Ok(Json(app.check_in_here(b)?))
}

async fn peer_leave(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PassAnswer>, ApiError> {
    let body = peer_body(&app, LEAVE_PATH, &headers, body)?;
    let b: ForwardBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_json(e.to_string()))?;
    Ok(Json(app.leave_here(b)?))
}

/// A batch of forwarded check-ins and leaves: one answer each, in order.
async fn peer_forwards(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<peer::ForwardReply>>, ApiError> {
    let body = peer_body(&app, FORWARD_PATH, &headers, body)?;
    let items: Vec<ForwardItem> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_json(format!("invalid forwarded batch: {e}")))?;
    let replies = items
        .into_iter()
        .map(|item| {
            let b = ForwardBody {
                ticket: None,
                claims: Some(item.claims),
                idempotency_key: item.idempotency_key,
            };
            match item.op {
                ForwardOp::Checkin => crate::visitor::forward_reply(app.check_in_here(b)),
                ForwardOp::Leave => crate::visitor::forward_reply(app.leave_here(b)),
            }
        })
        .collect();
    Ok(Json(replies))
}

// ---- operations ----------------------------------------------------------------------------

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(app): State<Arc<App>>) -> Result<&'static str, ApiError> {
    if app.is_stopping() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "shutting down",
        ));
    }
    if app.driver.read(|n| n.is_member()) {
        Ok("ready\n")
    } else {
        Err(ApiError::not_ready())
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let status = app.driver.status();
    let text = app.metrics.render(&status);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn cluster(State(app): State<Arc<App>>) -> Json<waitingroom_distributed::NodeStatus> {
    Json(app.driver.status())
}

async fn jwks(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(app.crypto.jwks()),
    )
        .into_response()
}
