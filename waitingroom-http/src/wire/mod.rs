//! What travels over HTTP, as plain data so the waiting page, the kept leaves, the gate and the
//! handlers share it without depending on each other: the JSON bodies of the visitor API and of
//! forwarded visitor requests (here), the error body every handler answers with ([`errors`]),
//! the room's cookies ([`cookies`]) and who a request comes from ([`client_addr`]).

pub mod client_addr;
pub mod cookies;
pub mod errors;

use serde::{Deserialize, Serialize};
use waitingroom_core::{Pass, Ticket};

/// The request header that names a leave, chosen by the client (RFC draft
/// `draft-ietf-httpapi-idempotency-key-header`).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The answer to a join or a check-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VisitorAnswer {
    /// `queued`, `prequeue` (queued for a scheduled event that has not started: see
    /// `starts_in_ms`) or `admitted`.
    pub status: String,
    /// The refreshed ticket, to be used from now on.
    pub ticket: String,
    /// Place in line (1: next); 0 once admitted.
    pub position: u64,
    /// Estimated wait in seconds; null until an admission rate has been measured.
    pub eta_seconds: Option<u64>,
    /// When to check in next, in milliseconds from now.
    pub refresh_after_ms: u64,
    /// In a pre-queue: milliseconds until the event starts and visitors are let out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_in_ms: Option<u64>,
}

impl VisitorAnswer {
    /// Whether the visitor may now leave the queue.
    pub fn is_admitted(&self) -> bool {
        self.status == "admitted"
    }
}

/// The answer to a leave or a pass refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PassAnswer {
    /// The signed pass.
    pub pass: String,
    /// When it expires, Unix ms.
    pub expires_at_ms: u64,
}

/// Body of check-in and leave: the ticket (optional: the cookie is used when absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TicketBody {
    /// The ticket token.
    #[serde(default)]
    pub ticket: Option<String>,
}

/// Body of a check-in, leave or pass refresh forwarded to the node holding the ticket (or
/// counting the pass): the ticket's or pass's claims, already verified by the forwarding node
/// (the peer request itself is authenticated, so the owner need not check the token's signature
/// again), or the ticket token itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardBody {
    /// The ticket token (checked by the receiver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// The ticket as the forwarding node verified it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Ticket>,
    /// The pass to refresh, as the forwarding node verified it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Pass>,
    /// A leave's `Idempotency-Key`, if the visitor sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Body of a pass refresh (optional: the cookie is used when absent).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PassBody {
    /// The pass token.
    #[serde(default)]
    pub pass: Option<String>,
}

/// Body of a join: nothing is expected, but an object is accepted.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinBody {}

/// What the node holding a ticket answers to a forwarded check-in or leave: the same body the
/// visitor would have got from it directly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ForwardAnswer {
    /// A check-in's answer.
    Checkin(VisitorAnswer),
    /// A leave's answer.
    Leave(PassAnswer),
    /// A pass refresh's answer.
    Refresh(PassAnswer),
}
