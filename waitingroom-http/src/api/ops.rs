//! What operators and origins read: liveness, readiness, metrics, the node's view of the
//! cluster, and the public keys passes are checked with.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::errors::ApiError;

pub(super) async fn livez() -> &'static str {
    "ok\n"
}

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

pub(super) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (status, settings) = app
        .driver
        .read(|n| (n.status(), n.room().settings().clone()));
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

pub(super) async fn cluster(
    State(app): State<Arc<App>>,
) -> Json<waitingroom_distributed::NodeStatus> {
    Json(app.driver.status())
}

pub(super) async fn jwks(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        Json(app.crypto.jwks()),
    )
        .into_response()
}
