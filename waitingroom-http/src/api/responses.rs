//! The refusals several routes share, described once for the OpenAPI document: the handlers
//! answer with [`ApiError`](crate::wire::errors::ApiError), these types only tell
//! [`super::openapi`] which statuses and codes a route can answer with.

use crate::wire::errors::ErrorBody;

/// What a request carrying a ticket (check-in, leave) can be refused with.
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "a description only: handlers answer with ApiError"
)]
pub(super) enum TicketRefusals {
    /// Malformed.
    #[response(
        status = 400,
        description = "`bad_json`, `missing_token`, `bad_idempotency_key`"
    )]
    BadRequest(ErrorBody),
    /// Not a ticket of this cluster, or too old.
    #[response(
        status = 401,
        description = "`invalid_token`, `expired`: forged, tampered or expired"
    )]
    Unauthorized(ErrorBody),
    /// Already exchanged.
    #[response(
        status = 409,
        description = "`already_left`: the ticket was exchanged for a pass"
    )]
    AlreadyLeft(ErrorBody),
    /// Try again (Retry-After).
    #[response(
        status = 503,
        description = "`owner_unavailable` (the ticket's node is slow), `overloaded`; with Retry-After"
    )]
    Unavailable(ErrorBody),
}

/// What a peer request can be refused with (before anything is read past its headers).
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "a description only: handlers answer with ApiError"
)]
pub(super) enum PeerRefusals {
    /// No valid cluster MAC, stale, replayed, or a body other than the one signed.
    #[response(status = 401, description = "`unauthorized_peer`")]
    Unauthorized(ErrorBody),
    /// Signed for another node or another life of this one.
    #[response(status = 421, description = "`misdirected_peer`")]
    Misdirected(ErrorBody),
    /// Body over `peer_body_limit`.
    #[response(status = 413, description = "body over the peer limit")]
    TooLarge(ErrorBody),
    /// At `max_peer_requests`.
    #[response(status = 503, description = "`peer_busy`")]
    Busy(ErrorBody),
}
