//! The one error type of HTTP handlers: a status, a stable machine-readable code and a message,
//! sent as `{"error": "...", "code": "..."}`.

use std::borrow::Cow;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use waitingroom_core::EngineError;
use waitingroom_distributed::VisitorError;

use crate::crypto::TokenError;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `invalid_token`.
    pub code: Cow<'static, str>,
    /// Human-readable explanation.
    pub message: String,
    /// For a request refused for now: when to ask again, ms (`Retry-After`, rounded up to
    /// seconds; otherwise a 429 or 503 says one second).
    pub retry_after_ms: Option<u64>,
}

/// Attached to error responses so the request log can say why a request failed.
#[derive(Debug, Clone)]
pub struct LoggedError {
    /// Stable code.
    pub code: String,
    /// Explanation.
    pub message: String,
}

/// The JSON body of an error.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Human-readable explanation.
    pub error: String,
    /// Stable code.
    pub code: String,
    /// When to ask again, ms, for a request refused for now (`refresh_too_soon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: Cow::Borrowed(code),
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.message.clone(),
            code: self.code.clone().into_owned(),
            retry_after_ms: self.retry_after_ms,
        }
    }

    /// 400 for a body that is not the JSON expected.
    pub fn bad_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_json", message)
    }

    /// 400 when no token was given in the body or a cookie.
    pub fn missing_token(what: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "missing_token",
            format!("no {what} in the body or cookie"),
        )
    }

    /// 503 while the node is not a cluster member.
    pub fn not_ready() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "this node is not in a cluster yet; try again or another node",
        )
    }

    /// An error that another node answered with, relayed as is.
    pub fn relayed(status: StatusCode, body: &[u8]) -> Self {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) => ApiError {
                status,
                code: Cow::Owned(b.code),
                message: b.error,
                retry_after_ms: b.retry_after_ms,
            },
            Err(_) => Self::new(status, "peer_error", "the node holding this ticket refused"),
        }
    }

    /// 503 `owner_unavailable`: the node holding the visitor's ticket is a member but did not
    /// answer; the visitor retries (`Retry-After`) and keeps their place.
    pub fn owner_unavailable(owner: waitingroom_core::NodeId) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "owner_unavailable",
            format!(
                "the node holding this ticket ({owner}) is not answering; retry shortly, your \
                 place is kept"
            ),
        )
    }

    /// 503 `overloaded`: too many requests in progress; shed at once.
    pub fn overloaded() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "this node is busy; retry shortly (your place is kept)",
        )
    }

    /// 403 `cross_site`: a join from a page of another site.
    pub fn cross_site(why: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            format!("joins from another site are refused ({why})"),
        )
    }

    /// 404.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    }

    /// Maps a ticket verification failure. A ticket issued "in the future" comes from a node
    /// whose clock is ahead of this one's by more than the leeway: 503, so that the visitor
    /// keeps it and asks again (another node, or later) instead of starting over at the back
    /// of the line. (A pass stays 401 whatever the reason: origin gates take any answer but
    /// 2xx/401 for a failure of the room.)
    pub fn ticket(e: &TokenError) -> Self {
        if matches!(e, TokenError::NotYetValid) {
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "token_not_yet_valid",
                "the ticket was issued by a node whose clock is ahead of this one's; retry \
                 shortly",
            );
        }
        Self::token("ticket", e)
    }

    /// Maps a token verification failure of a `what` ("ticket" or "pass").
    pub fn token(what: &str, e: &TokenError) -> Self {
        let (code, message) = match e {
            TokenError::Expired => ("expired_token", format!("the {what} has expired")),
            other => ("invalid_token", format!("invalid {what}: {other}")),
        };
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// 503 `peer_busy`: too many peer requests in progress.
    pub fn peer_busy() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "peer_busy",
            "too many peer requests in progress; retry shortly",
        )
    }
}

impl From<VisitorError> for ApiError {
    fn from(e: VisitorError) -> Self {
        match e {
            VisitorError::NotReady => ApiError::not_ready(),
            // The handlers forward these; reaching here means forwarding was not possible.
            VisitorError::Elsewhere(c) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "owner_unreachable",
                format!("the node holding this ticket ({}) did not answer", c.id),
            ),
            VisitorError::Engine(e) => e.into(),
            // A paused node (no live grant, or no majority) extends no pass: another node can.
            VisitorError::Paused(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "admission_paused",
                format!(
                    "this node is not admitting at the moment ({}); try again or another node",
                    why.as_str()
                ),
            ),
            VisitorError::Rejected => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "rejected",
                "the waiting room is closed to new visitors",
            ),
            VisitorError::EventOver => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "event_over",
                "the event is over; the waiting room is closed to new visitors",
            ),
            VisitorError::Released => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "released",
                "this pass was given back; join the waiting room again",
            ),
            VisitorError::Bypass => ApiError::new(
                StatusCode::FORBIDDEN,
                "bypass_pass",
                "a bypass pass is not extended; the operator mints another",
            ),
            // Taken here, but not yet held by a majority of the nodes: give it back again.
            VisitorError::ReleasePending => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "release_pending",
                "the release is not confirmed by a majority of the nodes yet; give the pass back again",
            ),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let msg = e.to_string();
        match e {
            EngineError::TicketExpired => {
                ApiError::new(StatusCode::UNAUTHORIZED, "expired_token", msg)
            }
            EngineError::WrongNode(_) => ApiError::new(StatusCode::CONFLICT, "wrong_node", msg),
            EngineError::NotYetAdmitted => ApiError::new(StatusCode::CONFLICT, "not_admitted", msg),
            EngineError::AlreadyLeft => ApiError::new(StatusCode::CONFLICT, "already_left", msg),
            EngineError::PassExpired => {
                ApiError::new(StatusCode::UNAUTHORIZED, "expired_token", msg)
            }
            EngineError::PassLifetimeOver => {
                ApiError::new(StatusCode::FORBIDDEN, "pass_lifetime_over", msg)
            }
            EngineError::UnknownPass => {
                ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", msg)
            }
            EngineError::RefreshTooSoon { retry_after_ms } => ApiError {
                retry_after_ms: Some(retry_after_ms),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "refresh_too_soon", msg)
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let logged = LoggedError {
            code: body.code.clone(),
            message: body.error.clone(),
        };
        let mut resp = (self.status, Json(body)).into_response();
        // The request-logging middleware reads this back to log why the request failed.
        resp.extensions_mut().insert(logged);
        if self.status == StatusCode::SERVICE_UNAVAILABLE
            || self.status == StatusCode::TOO_MANY_REQUESTS
        {
            let seconds = self
                .retry_after_ms
                .map_or(1, |ms| ms.div_ceil(1_000).max(1));
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        resp
    }
}
