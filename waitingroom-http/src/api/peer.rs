//! What other nodes send: batches of protocol messages, and visitor requests forwarded to the
//! node holding the ticket. Every request must carry a valid cluster signature over its logical
//! path and body (see [`crate::peer::authenticate`]); one without gets 401 and changes nothing.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{MethodRouter, post};
use waitingroom_distributed::Envelope;

use super::body::{self, RawBody};
use crate::app::App;
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::peer::{self, FORWARD_PATH, ForwardItem, ForwardOp, ForwardReply, MESSAGES_PATH};
use crate::wire::{ForwardAnswer, ForwardBody};

/// The body of a peer request signed for `path`, or 401 (counted) / 413.
fn authenticated(
    app: &App,
    path: &str,
    headers: &HeaderMap,
    body: RawBody,
) -> Result<Bytes, ApiError> {
    let body = body.map_err(body::rejection)?;
    peer::authenticate(&app.crypto, path, headers, &body).map_err(|e| {
        app.metrics.peer_auth_failures.inc();
        ApiError::peer_auth(&e)
    })?;
    Ok(body)
}

/// A batch of protocol messages, handed to the node in order.
pub(super) async fn messages(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<StatusCode, ApiError> {
    let body = authenticated(&app, MESSAGES_PATH, &headers, body)?;
    let envelopes: Vec<Envelope> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_json(format!("invalid peer batch: {e}")))?;
    for env in &envelopes {
        Metrics::count_type(&app.metrics.peer_received, &env.body);
    }
    app.driver.with(|node, now| {
        for env in envelopes {
            if let Err(reason) = node.handle_message(now, env) {
                Metrics::count_ignored(&app.metrics.peer_ignored, reason);
            }
        }
    });
    Ok(StatusCode::NO_CONTENT)
}

/// The route of one forwarded check-in or leave, at [`ForwardOp::path`]: its answer is the
/// body the visitor would have got from this node.
pub(super) fn forwarded_route(op: ForwardOp) -> MethodRouter<Arc<App>> {
    post(
        move |State(app): State<Arc<App>>, headers: HeaderMap, body: RawBody| async move {
            let body = authenticated(&app, op.path(), &headers, body)?;
            let b: ForwardBody =
                serde_json::from_slice(&body).map_err(|e| ApiError::bad_json(e.to_string()))?;
            app.serve_forwarded(op, b).map(Json)
        },
    )
}

/// A batch of forwarded check-ins and leaves: one answer each, in order.
pub(super) async fn forwarded_batch(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Json<Vec<ForwardReply>>, ApiError> {
    let body = authenticated(&app, FORWARD_PATH, &headers, body)?;
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
            reply(app.serve_forwarded(item.op, b))
        })
        .collect();
    Ok(Json(replies))
}

/// One answer in a batch: the status and body the owner would have sent the visitor.
fn reply(r: Result<ForwardAnswer, ApiError>) -> ForwardReply {
    match r {
        Ok(v) => ForwardReply {
            status: StatusCode::OK.as_u16(),
            body: serde_json::to_value(v).unwrap_or_default(),
        },
        Err(e) => ForwardReply {
            status: e.status.as_u16(),
            body: serde_json::json!({ "error": e.message, "code": e.code }),
        },
    }
}
