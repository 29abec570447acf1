//! What operators and origins read: liveness, readiness, metrics, the node's view of the
//! cluster, and the public keys passes are checked with.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::clock::now_ms;
use crate::errors::{ApiError, ErrorBody};

#[utoipa::path(get, path = "/livez", tag = "operations",
    summary = "Liveness: the process serves requests",
    responses((status = 200, description = "`ok`", content_type = "text/plain")))]
pub(super) async fn livez() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    summary = "Readiness: a member of a cluster, not stopping",
    responses(
        (status = 200, description = "`ready`", content_type = "text/plain"),
        (status = 503, description = "`not_ready` (joining), `stopping`", body = ErrorBody),
    ))]
pub(super) async fn readyz(State(app): State<Arc<App>>) -> Result<&'static str, ApiError> {
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

#[utoipa::path(get, path = "/metrics", tag = "internal",
    summary = "Prometheus metrics (internal listener)",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text")))]
pub(super) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (status, settings) = app
        .driver
        .read(|n| (n.status(now_ms()), n.room().settings().clone()));
    let text = app.metrics.render(&status, &settings);
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
