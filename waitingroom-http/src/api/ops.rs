//! What operators and origins read: liveness, readiness, metrics, the node's view of the
//! cluster, and the public keys passes are checked with.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::clock::now_ms;
use crate::wire::errors::{ApiError, ErrorBody};

#[utoipa::path(get, path = "/livez", tag = "operations",
    summary = "Liveness: the process serves requests",
    responses((status = 200, description = "`ok`", content_type = "text/plain")))]
pub(super) async fn livez() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    summary = "Readiness: a working member of its cluster (docs/operating.md#readiness)",
    responses(
        (status = 200, description = "`ready`", content_type = "text/plain"),
        (status = 503, description = "`not_ready` (joining), `stopping`, `refused_by_peers` (peers refuse its signatures and it hears no valid peer traffic), `voters_file` (cannot be written), `alone` (the only member, with other voters), `no_majority` (its root hears from no majority of the voters), `clock_skew` (its own clock is off most members' by more than --max-clock-offset-ms)", body = ErrorBody),
    ))]
pub(super) async fn readyz(State(app): State<Arc<App>>) -> Result<&'static str, ApiError> {
    app.readiness().map_err(|why| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why.reason(), why.message())
    })?;
    Ok("ready\n")
}

#[utoipa::path(get, path = "/metrics", tag = "internal",
    summary = "Prometheus metrics (internal listener)",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text")))]
pub(super) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (status, settings) = app
        .driver
        .read(|n| (n.status(now_ms()), n.room().settings().clone()));
    let fairness = app.driver.rounds().fairness(now_ms());
    let text = app.metrics.render(&status, &settings, &fairness);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[utoipa::path(get, path = "/api/cluster", tag = "internal",
    summary = "This node's view of the cluster (internal listener)",
    description = "Members, tree edges, parent, root, counts, the last cluster summary.",
    responses((status = 200, description = "The node's status", body = Object)))]
pub(super) async fn cluster(
    State(app): State<Arc<App>>,
) -> Json<waitingroom_distributed::NodeStatus> {
    Json(app.driver.status())
}

#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "pass",
    summary = "The public keys passes are signed with (JWKS)",
    responses((status = 200, description = "JWK set: Ed25519 keys, current and still accepted", body = Object)))]
pub(super) async fn jwks(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(app.crypto.jwks()),
    )
        .into_response()
}

#[utoipa::path(get, path = "/api/lotteries", tag = "pass",
    summary = "The lotteries' signed records: seeds committed before anyone joins, revealed later",
    description = "`{\"lotteries\": [\"<jws>\", …]}`: one record per lottery the live \
        settings hold (the room's random queueing, named `random`, and each event that draws \
        lots, by its name). Each is a compact JWS (`typ` `wr-lottery+jwt`, `kid` in \
        `/.well-known/jwks.json`) of `name`, `commit` (the SHA-256 of the seed, base64url), \
        `reveal_at_ms` (an event's start; null for the room's lottery, revealed when it is \
        switched off) and, from the reveal on, `seed` (base64url). A lottery visitor's ticket \
        id is the first 8 bytes of SHA-256(\"waitingroom lottery draw v1\" ‖ seed ‖ draw), the \
        draw being the `draw` claim of their pass; `waitingroom-node audit` checks it.",
    responses((status = 200, description = "The records", body = Object)))]
pub(super) async fn lotteries(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let records = app
        .driver
        .read(|n| n.live_settings().lotteries(n.reference_time(now_ms())));
    Json(serde_json::json!({ "lotteries": app.crypto.sign_lotteries(records) }))
}

/// Most records one `GET /api/rounds` answers.
const ROUNDS_PAGE_MAX: usize = 1_000;

#[utoipa::path(get, path = "/api/rounds", tag = "pass",
    summary = "The admission rounds' signed records (fairness anyone can check)",
    description = "`{\"rounds\": [\"<jws>\", …]}`: the records of the rounds that let anyone \
        out, with a number above `after` (default: from the first), at most `limit` (default and most 1000), \
        in the order this node learned them. Each is a compact JWS (`typ` `wr-round+jwt`, \
        `kid` in `/.well-known/jwks.json`) of `round`, `decided_at_ms`, `cutoff` (the largest \
        queue key let out), `admitted`, `root`, `version` and `prev` (the SHA-256, base64url, \
        of the previous record). `waitingroom-node audit` checks them.",
    params(("after" = Option<u64>, Query, description = "Only rounds numbered above this"),
        ("limit" = Option<usize>, Query, description = "At most this many (1000 at most)")),
    responses((status = 200, description = "The records", body = Object),
        (status = 400, description = "`bad_query`", body = ErrorBody)))]
pub(super) async fn rounds(
    State(app): State<Arc<App>>,
    uri: axum::http::Uri,
) -> Result<Json<serde_json::Value>, ApiError> {
    let bad = |what: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("{what} must be a whole number"),
        )
    };
    let (mut after, mut limit) = (None, ROUNDS_PAGE_MAX);
    for (k, v) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "after" => after = Some(v.parse().map_err(|_| bad("after"))?),
            "limit" => limit = v.parse::<usize>().map_err(|_| bad("limit"))?,
            _ => {}
        }
    }
    let records = app.driver.rounds().after(after, limit.min(ROUNDS_PAGE_MAX));
    Ok(Json(serde_json::json!({ "rounds": records })))
}
