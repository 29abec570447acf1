//! The visitor API: `POST /api/join`, `/api/checkin`, `/api/leave`, `/api/pass/refresh` and
//! `GET /api/pass/verify`. JSON in, JSON out; tokens from the body or the cookies, and every
//! answer sets the cookies too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq as _;

use super::body::{self, RawBody};
use super::responses::TicketRefusals;
use crate::app::App;
use crate::app::leaves;
use crate::clock::now_ms;
use crate::crypto::return_path::safe_return_path;
use crate::wire::client_addr::ClientAddr;
use crate::wire::cookies;
use crate::wire::errors::ApiError;
use crate::wire::errors::ErrorBody;
use crate::wire::{JoinBody, PassAnswer, PassBody, TicketBody, VisitorAnswer};

fn with_cookies<T: serde::Serialize>(value: T, cookies: Vec<HeaderValue>) -> Response {
    let mut resp = Json(value).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for c in cookies {
        h.append(header::SET_COOKIE, c);
    }
    resp
}

/// A join's or check-in's answer, with the refreshed ticket in its cookie too.
fn ticket_response(app: &App, a: VisitorAnswer) -> Response {
    let cookie = app.cfg.cookies.for_ticket(&a.ticket);
    with_cookies(a, vec![cookie])
}

fn token_from<'a>(body: Option<&'a str>, headers: &'a HeaderMap, cookie: &str) -> Option<&'a str> {
    body.filter(|t| !t.is_empty())
        .or_else(|| cookies::get(headers, cookie))
}

/// The ticket of a check-in or leave: from the body, else the cookie.
fn ticket(app: &App, headers: &HeaderMap, body: RawBody) -> Result<String, ApiError> {
    let b: TicketBody = body::json(headers, body)?;
    token_from(b.ticket.as_deref(), headers, &app.cfg.cookies.ticket)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::missing_token("ticket"))
}

/// `POST /api/join`: refused from another site (see [`same_site`]).
#[utoipa::path(post, path = "/api/join", tag = "visitor",
    summary = "Take a place in the queue",
    description = "Answers a signed ticket (also set as the `wr_ticket` cookie): the visitor's place \
        under their join time. Refused from another site (`Sec-Fetch-Site: cross-site` or a foreign \
        `Origin`). The body may be empty or `{}`.",
    request_body(content = JoinBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Queued, or admitted straight through", body = VisitorAnswer),
        (status = 403, description = "`cross_site`: a join from another site", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many joins from this client", body = ErrorBody),
        (status = 503, description = "`not_ready`, `stopping`, `overloaded` (with Retry-After); `rejected` (the room is closed), `event_over` (closed after its scheduled event)", body = ErrorBody),
    ))]
pub(super) async fn join(
    State(app): State<Arc<App>>,
    client: ClientAddr,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    same_site(&app, &headers)?;
    let JoinBody {} = body::json(&headers, body)?;
    Ok(ticket_response(&app, app.join(&client)?))
}

/// Refuses (403 `cross_site`) a join a page of another site makes a browser send: one the
/// browser marks `Sec-Fetch-Site: cross-site`, or whose `Origin` is not the room's own (its
/// `public_url`, or without one the origin of the request's own `Host`; `Origin: null`, from a
/// sandboxed or privacy-sensitive context, is not). A request without either header is not
/// from a browser page (curl, the load generator, an app) and goes on.
pub(super) fn same_site(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if text("sec-fetch-site").is_some_and(|v| v.eq_ignore_ascii_case("cross-site")) {
        return Err(ApiError::cross_site("Sec-Fetch-Site: cross-site"));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let ours = match &app.cfg.public_url {
        Some((_, own)) => origin == *own,
        None => {
            let host = text(header::HOST.as_str()).map(str::to_ascii_lowercase);
            let authority = origin.split_once("://").map(|(_, a)| a);
            host.is_some() && authority == host.as_deref()
        }
    };
    if ours {
        Ok(())
    } else {
        Err(ApiError::cross_site("Origin is not this room's"))
    }
}

/// `POST /api/checkin`: the visitor's position, a refreshed ticket, or "admitted".
#[utoipa::path(post, path = "/api/checkin", tag = "visitor",
    summary = "Check in while waiting",
    description = "The ticket comes from the body or the `wr_ticket` cookie. Any node serves it: \
        one that does not hold the ticket forwards it to the node that does, or re-queues the \
        visitor under their join time once that node is gone.",
    request_body(content = TicketBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Position and refreshed ticket, or `admitted`", body = VisitorAnswer),
        TicketRefusals,
    ))]
pub(super) async fn checkin(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let token = ticket(&app, &headers, body)?;
    Ok(ticket_response(&app, app.check_in(&token).await?))
}

/// `POST /api/leave`: an admitted ticket for a pass.
#[utoipa::path(post, path = "/api/leave", tag = "visitor",
    summary = "Exchange an admitted ticket for a pass",
    description = "Once per admission. Repeated with the same `Idempotency-Key` header (its answer \
        was lost), it answers the same pass again. The pass is also set as the `wr_pass` cookie.",
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 64 visible ASCII characters")),
    request_body(content = TicketBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The signed pass", body = PassAnswer),
        (status = 403, description = "`not_admitted`: still queued", body = ErrorBody),
        TicketRefusals,
    ))]
pub(super) async fn leave(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let token = ticket(&app, &headers, body)?;
    let key = idempotency_key(&headers)?;
    let p = app.leave(&token, key).await?;
    let set = app.cfg.cookies.after_leave(&p);
    Ok(with_cookies(p, set))
}

/// The leave's `Idempotency-Key` header, if any (see [`crate::app::leaves`]).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(v) = headers.get(crate::wire::IDEMPOTENCY_HEADER) else {
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

/// `POST /api/pass/refresh`: a valid pass with a later expiry.
#[utoipa::path(post, path = "/api/pass/refresh", tag = "pass",
    summary = "Extend a pass",
    request_body(content = PassBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The refreshed pass", body = PassAnswer),
        (status = 400, description = "`bad_json`, `missing_token`", body = ErrorBody),
        (status = 401, description = "`invalid_token`, `expired`", body = ErrorBody),
        (status = 429, description = "`refresh_too_soon`: extended too recently \
            (docs/operating.md#sessions); `Retry-After` and `retry_after_ms` say when to ask",
            body = ErrorBody),
        (status = 503, description = "`owner_unavailable`: the node counting the pass did not \
            answer; the pass stays valid until it expires", body = ErrorBody),
    ))]
pub(super) async fn refresh_pass(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let b: PassBody = body::json(&headers, body)?;
    let token = token_from(b.pass.as_deref(), &headers, &app.cfg.cookies.pass)
        .ok_or_else(|| ApiError::missing_token("pass"))?;
    let p = app.refresh_pass(token).await?;
    let cookie = app.cfg.cookies.for_pass(&p);
    Ok(with_cookies(p, vec![cookie]))
}

/// `POST /api/pass/release`: the visitor is done and gives their place back.
#[utoipa::path(post, path = "/api/pass/release", tag = "pass",
    summary = "Give a place back early",
    description = "The pass from the body, `Authorization: Bearer` or the `wr_pass` cookie. Its \
        place is free at once (at the node counting it once the next round reaches it) and \
        the pass is refused from then on (every node, once the next round has carried it; an \
        origin gate that checks passes offline accepts it until it expires). Giving it back \
        twice is no error. Refused from another site, as a join is; an origin's server may \
        call it with the pass as a bearer token. The answer deletes the pass cookie.",
    request_body(content = PassBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Given back: `{\"released\": true}`", body = Object),
        (status = 400, description = "`bad_json`, `missing_token`", body = ErrorBody),
        (status = 401, description = "`invalid_token`, `expired_token`", body = ErrorBody),
        (status = 403, description = "`cross_site`", body = ErrorBody),
        (status = 503, description = "`release_pending` (with Retry-After): the release is not \
            held by a majority of the nodes yet (this node is cut off from them) and the pass \
            may still be taken elsewhere; give it back again, here or at another node",
            body = ErrorBody),
    ))]
pub(super) async fn release_pass(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    same_site(&app, &headers)?;
    let b: PassBody = body::json(&headers, body)?;
    let token = token_from(b.pass.as_deref(), &headers, &app.cfg.cookies.pass)
        .or_else(|| cookies::bearer(&headers))
        .ok_or_else(|| ApiError::missing_token("pass"))?;
    release_confirmed(&app, token).await?;
    let c = &app.cfg.cookies;
    let gone = c.clear(&c.pass);
    Ok(with_cookies(
        serde_json::json!({"released": true}),
        vec![gone],
    ))
}

/// Gives the pass back, asking again while the release is not yet held by a majority of the
/// nodes (waitingroom-distributed/README.md#passes-given-back): their answers take a round trip.
/// Still not confirmed after [`RELEASE_WAIT_MS`] (at most half the request timeout), as on a node
/// cut off from the others, the visitor hears 503 `release_pending` with `Retry-After` and gives
/// the pass back again, here or at another node.
async fn release_confirmed(app: &App, token: &str) -> Result<(), ApiError> {
    let wait = RELEASE_WAIT_MS.min(app.cfg.limits.request_timeout_ms / 2);
    let deadline = Instant::now() + Duration::from_millis(wait);
    loop {
        match app.release_pass(token) {
            Err(e) if e.code == "release_pending" => {
                if Instant::now() >= deadline {
                    app.metrics.releases_pending.inc();
                    tracing::info!("release not confirmed by a majority of the nodes in time");
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(RELEASE_POLL_MS)).await;
            }
            r => return r,
        }
    }
}

/// How long a release is asked again before the visitor hears `release_pending`, ms.
const RELEASE_WAIT_MS: u64 = 2_000;
/// How often a release not confirmed yet is asked again meanwhile, ms (the node sends it again
/// to the members that have not answered only once a second).
const RELEASE_POLL_MS: u64 = 20;

/// 204 for a valid pass (bearer token or cookie), 401 otherwise: an nginx `auth_request`
/// target as is.
#[utoipa::path(get, path = "/api/pass/verify", tag = "pass",
    summary = "Check a pass (for origin gates)",
    description = "The pass from `Authorization: Bearer` or the `wr_pass` cookie. For nginx \
        `auth_request`, Caddy `forward_auth`, Traefik `forwardAuth`. A pass past half its life \
        comes back renewed in `Set-Cookie` (a session renewed by activity). A gate that sends the \
        return-path secret in `X-Waitingroom-Gate-Secret` and the gated request's path in \
        `X-Original-URI` (nginx) or `X-Forwarded-Uri` (Caddy, Traefik) gets, with a 401, the \
        signed way back in `X-Waitingroom-Return` (`return_to=…&return_sig=…&return_exp=…`) to add to the \
        waiting page's URL.",
    responses(
        (status = 204, description = "Valid; `x-waitingroom-ticket-id` names the visitor"),
        (status = 401, description = "`missing_token`, `invalid_token`, `expired`", body = ErrorBody),
    ))]
pub(super) async fn verify_pass(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match check_pass(&app, &headers).await {
        Ok(resp) => resp,
        Err(e) => {
            let mut resp = e.into_response();
            if let Some(back) = way_back(&app, &headers) {
                resp.headers_mut().insert("x-waitingroom-return", back);
            }
            resp
        }
    }
}

/// The signed way back to the gated request's path, for a gate that proved it holds the
/// return-path secret (so that this public endpoint signs nothing for anyone else:
/// `crypto/return_path.rs`).
fn way_back(app: &App, headers: &HeaderMap) -> Option<HeaderValue> {
    let secret = headers.get("x-waitingroom-gate-secret")?.as_bytes();
    if !bool::from(
        app.crypto
            .gate_secret()
            .as_bytes()
            .ct_eq(secret.trim_ascii()),
    ) {
        tracing::debug!("verify: wrong gate secret; no way back signed");
        return None;
    }
    let path = ["x-original-uri", "x-forwarded-uri"]
        .iter()
        .find_map(|h| headers.get(*h)?.to_str().ok())?;
    let path = safe_return_path(path)?;
    HeaderValue::from_str(&app.crypto.return_query(path)).ok()
}

/// The pass check itself: 204 with the visitor's id (and a renewed pass past half its life).
async fn check_pass(app: &App, headers: &HeaderMap) -> Result<Response, ApiError> {
    let token = cookies::bearer(headers)
        .or_else(|| cookies::get(headers, &app.cfg.cookies.pass))
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
    if let Some(renewed) = renew(app, token, &pass).await {
        resp.headers_mut().insert(header::SET_COOKIE, renewed);
    }
    Ok(resp)
}

/// A session renewed by activity: a pass used past half its life gets a new one (as
/// `/api/pass/refresh` would give), as a cookie the gate passes on to the browser (nginx:
/// `auth_request_set $renewed $upstream_http_set_cookie; add_header Set-Cookie $renewed;`). A
/// visitor on the site who keeps using it keeps their place, up to the pass's longest life;
/// one who stops loses it after the pass expiry. When it cannot be renewed (a paused node, the
/// longest life reached), the pass is still valid until it expires.
async fn renew(app: &App, token: &str, pass: &waitingroom_core::Pass) -> Option<HeaderValue> {
    let half = pass.issued_at + pass.expires_at.saturating_sub(pass.issued_at) / 2;
    if now_ms() < half {
        return None;
    }
    let renewed = app.refresh_pass(token).await.ok()?;
    Some(app.cfg.cookies.for_pass(&renewed))
}

/// The same check under `/api/pass/verify/…`, whatever the method: Envoy's `ext_authz` asks
/// with the request's own method and its path appended.
#[utoipa::path(get, path = "/api/pass/verify/{checked_path}", tag = "pass",
    summary = "Check a pass, any method and path appended (Envoy ext_authz)",
    description = "Answers every method the same way (Envoy asks with the gated request's own \
        method); described once, as GET, so that operation ids stay unique.",
    params(("checked_path" = String, Path, description = "The origin path being gated (ignored)")),
    responses(
        (status = 204, description = "Valid"),
        (status = 401, description = "`missing_token`, `invalid_token`, `expired`", body = ErrorBody),
    ))]
pub(super) async fn verify_pass_any(state: State<Arc<App>>, headers: HeaderMap) -> Response {
    verify_pass(state, headers).await
}
