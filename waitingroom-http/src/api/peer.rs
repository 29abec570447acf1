//! What other nodes send: batches of protocol messages, and visitor requests forwarded to the
//! node holding the ticket. Every request is authenticated from its headers before its body is
//! read (see [`crate::peer::auth`]): one that is not a member's, not meant for this node, stale
//! or replayed is refused (401/421/413) and changes nothing; at most `max_peer_requests` are in
//! progress at once (503 `peer_busy` beyond). Answers to forwarded requests carry the owner's
//! MAC, bound to the request's nonce.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::OwnedSemaphorePermit;
use waitingroom_distributed::{Body, Envelope};

use super::responses::PeerRefusals;
use crate::app::App;
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::peer::auth::{self, Expect, PeerAuthError, ReplyHead, RequestHead};
use crate::peer::{
    CHECKIN_PATH, FORWARD_PATH, ForwardItem, ForwardOp, ForwardReply, LEAVE_PATH, MESSAGES_PATH,
};
use crate::wire::errors::ApiError;
use crate::wire::{ForwardAnswer, ForwardBody, PassAnswer, VisitorAnswer};

impl ApiError {
    /// A refused peer request: 401 `unauthorized_peer` when it is not a cluster member's, or
    /// not for the first time; 421 `misdirected_peer` when it is signed for another node; 413
    /// when its declared body is too large; 503 `peer_busy` when it cannot be checked now.
    pub fn peer_auth(e: &PeerAuthError) -> Self {
        let (status, code) = match e {
            PeerAuthError::Misdirected { .. } => {
                (StatusCode::MISDIRECTED_REQUEST, "misdirected_peer")
            }
            PeerAuthError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            PeerAuthError::ReplayCacheFull => (StatusCode::SERVICE_UNAVAILABLE, "peer_busy"),
            _ => (StatusCode::UNAUTHORIZED, "unauthorized_peer"),
        };
        Self::new(status, code, e.to_string())
    }
}

/// A peer request that passed authentication, its body read and checked. It holds one of the
/// node's peer request slots until it is answered.
struct Authenticated {
    head: RequestHead,
    body: Bytes,
    _slot: OwnedSemaphorePermit,
}

/// Takes a peer request slot, checks the request's headers (see [`auth::check_head`]),
/// then reads exactly the body they declare and checks it is the one they cover.
/// `by_address`: whether destination 0 (a node known by its URL only) is acceptable here.
async fn authenticate(
    app: &App,
    path: &'static str,
    req: Request,
    by_address: bool,
) -> Result<Authenticated, ApiError> {
    let Ok(slot) = app.peer_slots.clone().try_acquire_owned() else {
        app.metrics.count_shed("peer_busy");
        return Err(ApiError::peer_busy());
    };
    let (parts, body) = req.into_parts();
    let (me, incarnation, addr) = app
        .driver
        .read(|n| (n.id(), n.contact().incarnation, n.contact().addr.clone()));
    let address = auth::peer_address(&addr);
    let limits = &app.cfg.limits;
    let expect = Expect {
        me,
        address: &address,
        incarnation,
        by_address,
        max_body: limits.peer_body as u64,
        window_ms: limits.peer_clock_window_ms,
    };
    let refused = |e: PeerAuthError| {
        app.metrics.count_auth_failure(e.reason());
        if matches!(e, PeerAuthError::WrongAddress { .. }) {
            tracing::warn!(error = %e, "peer request refused: a copy of one meant for another node");
        }
        if e == PeerAuthError::ReplayCacheFull {
            app.metrics.count_shed("replay_cache_full");
        }
        ApiError::peer_auth(&e)
    };
    let method = parts.method.as_str();
    let head = auth::check_head(
        &app.crypto,
        &expect,
        method,
        path,
        &parts.headers,
        now_ms(),
        &app.replay,
    )
    .map_err(refused)?;
    // The length is signed and within the limit; a body that does not end there is not the one
    // signed.
    let limit = usize::try_from(head.content_length).unwrap_or(usize::MAX);
    let body = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| refused(PeerAuthError::BodyMismatch))?;
    auth::check_body(&head, &body).map_err(refused)?;
    app.transport.standing().heard(now_ms());
    Ok(Authenticated {
        head,
        body,
        _slot: slot,
    })
}

/// A batch of protocol messages, handed to the node in order. Every envelope must be from the
/// authenticated sender and addressed as the request is; to destination 0 only a join request
/// or a ping (to a node known by its URL alone) may go.
#[utoipa::path(post, path = MESSAGES_PATH, tag = "internal",
    summary = "A batch of protocol messages from another node (authenticated)",
    description = "Authenticated from the headers (cluster MAC over destination, incarnation, \
        nonce, time and the body's SHA-256) before any body byte is read.",
    responses((status = 204, description = "Handed to the node"), PeerRefusals))]
pub(super) async fn messages(
    State(app): State<Arc<App>>,
    req: Request,
) -> Result<StatusCode, ApiError> {
    let a = authenticate(&app, MESSAGES_PATH, req, true).await?;
    let envelopes: Vec<Envelope> = serde_json::from_slice(&a.body)
        .map_err(|e| ApiError::bad_json(format!("invalid peer batch: {e}")))?;
    if let Some(env) = envelopes.iter().find(|e| !addressed_as(&a.head, e)) {
        let e = PeerAuthError::Misdirected {
            to: env.to.0,
            incarnation: env.to_incarnation,
        };
        app.metrics.count_auth_failure(e.reason());
        return Err(ApiError::peer_auth(&e));
    }
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

/// Whether `env` is sent and addressed as the authenticated request it came in.
fn addressed_as(head: &RequestHead, env: &Envelope) -> bool {
    env.from.id == head.from
        && env.to == head.to
        && env.to_incarnation == head.to_incarnation
        && (head.to.0 != 0 || matches!(env.body, Body::JoinRequest { .. } | Body::Ping { .. }))
}

/// One forwarded check-in or leave, at [`ForwardOp::path`]: its answer is the body the visitor
/// would have got from this node.
async fn forwarded(app: Arc<App>, op: ForwardOp, req: Request) -> Result<Response, ApiError> {
    let a = authenticate(&app, op.path(), req, false).await?;
    let b: ForwardBody =
        serde_json::from_slice(&a.body).map_err(|e| ApiError::bad_json(e.to_string()))?;
    let answer: ForwardAnswer = app.serve_forwarded(op, b)?;
    Ok(signed_json(&app, &a.head, &answer))
}

/// A check-in forwarded alone (nodes batch them; this route stays served).
#[utoipa::path(post, path = CHECKIN_PATH, tag = "internal",
    summary = "A check-in forwarded by another node (authenticated)",
    responses(
        (status = 200, description = "What the visitor would have got, signed", body = VisitorAnswer),
        PeerRefusals,
    ))]
pub(super) async fn forwarded_checkin(
    State(app): State<Arc<App>>,
    req: Request,
) -> Result<Response, ApiError> {
    forwarded(app, ForwardOp::Checkin, req).await
}

/// A leave forwarded alone.
#[utoipa::path(post, path = LEAVE_PATH, tag = "internal",
    summary = "A leave forwarded by another node (authenticated)",
    responses(
        (status = 200, description = "What the visitor would have got, signed", body = PassAnswer),
        PeerRefusals,
    ))]
pub(super) async fn forwarded_leave(
    State(app): State<Arc<App>>,
    req: Request,
) -> Result<Response, ApiError> {
    forwarded(app, ForwardOp::Leave, req).await
}

/// A batch of forwarded check-ins and leaves: one answer each, in order.
#[utoipa::path(post, path = FORWARD_PATH, tag = "internal",
    summary = "Visitor requests forwarded by another node, batched (authenticated)",
    description = "A JSON array of `{op, claims, idempotency_key}`; the answer is one \
        `{status, body}` per item, in order, signed.",
    responses(
        (status = 200, description = "One answer per item", body = Object),
        PeerRefusals,
    ))]
pub(super) async fn forwarded_batch(
    State(app): State<Arc<App>>,
    req: Request,
) -> Result<Response, ApiError> {
    let a = authenticate(&app, FORWARD_PATH, req, false).await?;
    let items: Vec<ForwardItem> = serde_json::from_slice(&a.body)
        .map_err(|e| ApiError::bad_json(format!("invalid forwarded batch: {e}")))?;
    let replies: Vec<ForwardReply> = items
        .into_iter()
        .map(|item| {
            let b = ForwardBody {
                ticket: None,
                claims: item.claims,
                pass: item.pass,
                idempotency_key: item.idempotency_key,
            };
            reply(app.serve_forwarded(item.op, b))
        })
        .collect();
    Ok(signed_json(&app, &a.head, &replies))
}

/// A 200 JSON answer to the request `head`, with this node's MAC over it (bound to the request's
/// nonce) in its headers.
fn signed_json<T: Serialize>(app: &App, head: &RequestHead, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    // The request was addressed to this node (checked), so its destination is this node's id.
    let signed = ReplyHead::sign(&app.crypto, head.nonce, 200, head.to, &body);
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in signed {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
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
            body: serde_json::to_value(e.body()).unwrap_or_default(),
        },
    }
}
