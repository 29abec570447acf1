//! Visitor operations as the HTTP API and the waiting page both use them: verify the token,
//! call the node, forward to the node holding the ticket when needed, sign the answer.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use waitingroom_core::{CheckIn, CheckInStatus, EngineError, Pass, Ticket};
use waitingroom_distributed::VisitorError;

use crate::app::App;
use crate::clock::now_ms;
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::peer::{ForwardItem, ForwardOp, ForwardReply};

/// The answer to a join or a check-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisitorAnswer {
    /// `queued` or `admitted`.
    pub status: String,
    /// The refreshed ticket, to be used from now on.
    pub ticket: String,
    /// Place in line (1: next); 0 once admitted.
    pub position: u64,
    /// Estimated wait in seconds; null until an admission rate has been measured.
    pub eta_seconds: Option<u64>,
    /// When to check in next, in milliseconds from now.
    pub refresh_after_ms: u64,
}

impl VisitorAnswer {
    /// Whether the visitor may now leave the queue.
    pub fn is_admitted(&self) -> bool {
        self.status == "admitted"
    }
}

/// The answer to a leave or a pass refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassAnswer {
    /// The signed pass.
    pub pass: String,
    /// When it expires, Unix ms.
    pub expires_at_ms: u64,
}

/// Body of check-in and leave: the ticket (optional: the cookie is used when absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketBody {
    /// The ticket token.
    #[serde(default)]
    pub ticket: Option<String>,
}

/// Body of a check-in or leave forwarded to the node holding the ticket: the ticket's claims,
/// already verified by the forwarding node (the peer request itself is authenticated, so the
/// owner need not check the token's signature again), or the token itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardBody {
    /// The ticket token (checked by the receiver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// The ticket as the forwarding node verified it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Ticket>,
    /// A leave's `Idempotency-Key`, if the visitor sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Body of a pass refresh (optional: the cookie is used when absent).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassBody {
    /// The pass token.
    #[serde(default)]
    pub pass: Option<String>,
}

/// Body of a join: nothing is expected, but an object is accepted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinBody {}

impl App {
    fn serving(&self) -> Result<(), ApiError> {
        if self.is_stopping() {
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "stopping",
                "this node is shutting down; try again (another node will answer)",
            ))
        } else {
            Ok(())
        }
    }

    fn answer(&self, c: CheckIn) -> VisitorAnswer {
        let now = now_ms();
        let (status, position) = match c.status {
            CheckInStatus::Queued { position } => ("queued", position),
            CheckInStatus::Admitted => ("admitted", 0),
        };
        VisitorAnswer {
            status: status.to_owned(),
            position,
            eta_seconds: match c.status {
                CheckInStatus::Admitted => Some(0),
                CheckInStatus::Queued { .. } => c.eta_ms.map(|ms| ms.div_ceil(1000)),
            },
            refresh_after_ms: match c.status {
                CheckInStatus::Admitted => 0,
                CheckInStatus::Queued { .. } => c.ticket.next_refresh.saturating_sub(now),
            },
            ticket: self.crypto.sign_ticket(&c.ticket),
        }
    }

    fn pass_answer(&self, pass: &Pass) -> PassAnswer {
        PassAnswer {
            pass: self.crypto.sign_pass(pass),
            expires_at_ms: pass.expires_at,
        }
    }

    fn ticket(&self, token: &str) -> Result<Ticket, ApiError> {
        self.crypto
            .verify_ticket(token, now_ms())
            .map_err(|e| ApiError::token("ticket", &e))
    }

    /// A new visitor joins through this node.
    pub fn join(&self) -> Result<VisitorAnswer, ApiError> {
        self.serving()?;
        let r = self.driver.with(|node, now| node.join(now));
        let answer = r.map(|c| self.answer(c)).map_err(ApiError::from);
        let result = match &answer {
            Ok(a) if a.is_admitted() => "admitted",
            Ok(_) => "queued",
            Err(_) => "error",
        };
        Metrics::count(&self.metrics.joins, result);
        answer
    }

    /// A visitor checks in, wherever their ticket is held.
    pub async fn check_in(&self, token: &str) -> Result<VisitorAnswer, ApiError> {
        self.serving()?;
        let ticket = self.ticket(token)?;
        let local = self.driver.with(|node, now| node.check_in(now, &ticket));
        let answer = match local {
            Err(VisitorError::Elsewhere(owner)) => {
                let item = ForwardItem {
                    op: ForwardOp::Checkin,
                    claims: ticket.clone(),
                    idempotency_key: None,
                };
                match self.transport.forward_batched(&owner.addr, item).await {
                    Ok((status, body)) => {
                        Metrics::count(&self.metrics.forwards, "ok");
                        relay::<VisitorAnswer>(status, body)
                    }
                    Err(e) => {
                        // The thesis' re-queue: the visitor keeps their place (original join
                        // time) here; SWIM will remove the silent node.
                        Metrics::count(&self.metrics.forwards, "unreachable");
                        self.transport.report_unreachable(&owner.addr);
                        self.metrics.requeues.inc();
                        tracing::info!(owner = owner.id.0, error = %e, ticket = %ticket.id,
                            "owner unreachable: re-queueing the visitor here");
                        self.driver
                            .with(|node, now| node.check_in_here(now, &ticket))
                            .map(|c| self.answer(c))
                            .map_err(ApiError::from)
                    }
                }
            }
            other => other.map(|c| self.answer(c)).map_err(ApiError::from),
        };
        self.count_checkin(&answer);
        answer
    }

    fn count_checkin(&self, answer: &Result<VisitorAnswer, ApiError>) {
        let result = match answer {
            Ok(a) if a.is_admitted() => "admitted",
            Ok(_) => "queued",
            Err(_) => "error",
        };
        Metrics::count(&self.metrics.checkins, result);
    }

    /// An admitted visitor exchanges their ticket for a pass, wherever the ticket is held. The
    /// same leave repeated with the same `key` gets the same pass (see [`crate::leaves`]).
    pub async fn leave(&self, token: &str, key: Option<&str>) -> Result<PassAnswer, ApiError> {
        self.serving()?;
        let ticket = self.ticket(token)?;
        let local = self.driver.with(|node, now| node.leave(now, &ticket));
        let answer = match local {
            Err(VisitorError::Elsewhere(owner)) => {
                let item = ForwardItem {
                    op: ForwardOp::Leave,
                    claims: ticket.clone(),
                    idempotency_key: key.map(str::to_owned),
                };
                match self.transport.forward_batched(&owner.addr, item).await {
                    Ok((status, body)) => {
                        Metrics::count(&self.metrics.forwards, "ok");
                        relay::<PassAnswer>(status, body)
                    }
                    Err(e) => {
                        // Same as a check-in: the signed ticket says whether they were let out.
                        Metrics::count(&self.metrics.forwards, "unreachable");
                        self.transport.report_unreachable(&owner.addr);
                        tracing::info!(owner = owner.id.0, error = %e, ticket = %ticket.id,
                            "owner unreachable: serving the leave here");
                        let here = self.driver.with(|node, now| node.leave_here(now, &ticket));
                        self.passed(&ticket, key, here)
                    }
                }
            }
            other => self.passed(&ticket, key, other),
        };
        let result = if answer.is_ok() { "ok" } else { "error" };
        Metrics::count(&self.metrics.leaves, result);
        answer
    }

    /// The ticket of a forwarded request: the claims the forwarding node verified, or the
    /// token, verified here.
    fn forwarded_ticket(&self, body: ForwardBody) -> Result<Ticket, ApiError> {
        match (body.claims, body.ticket) {
            (Some(t), _) => Ok(t),
            (None, Some(token)) => self.ticket(&token),
            (None, None) => Err(ApiError::missing_token("ticket")),
        }
    }

    /// A forwarded check-in from another node: served here, whatever the membership says.
    pub fn check_in_here(&self, body: ForwardBody) -> Result<VisitorAnswer, ApiError> {
        self.serving()?;
        let ticket = self.forwarded_ticket(body)?;
        let answer = self
            .driver
            .with(|node, now| node.check_in_here(now, &ticket))
            .map(|c| self.answer(c))
            .map_err(ApiError::from);
        self.count_checkin(&answer);
        answer
    }

    /// A forwarded leave from another node.
    pub fn leave_here(&self, body: ForwardBody) -> Result<PassAnswer, ApiError> {
        self.serving()?;
        let key = body.idempotency_key.clone();
        let ticket = self.forwarded_ticket(body)?;
        let result = self.driver.with(|node, now| node.leave_here(now, &ticket));
        let answer = self.passed(&ticket, key.as_deref(), result);
        let result = if answer.is_ok() { "ok" } else { "error" };
        Metrics::count(&self.metrics.leaves, result);
        answer
    }

    /// Signs the pass a leave got here and remembers it under the leave's key; or, for a ticket
    /// that already left, the pass an earlier leave with the same key got.
    fn passed(
        &self,
        ticket: &Ticket,
        key: Option<&str>,
        result: Result<Pass, VisitorError>,
    ) -> Result<PassAnswer, ApiError> {
        // A forwarded key was checked by the node the visitor reached; this bounds what an
        // entry can cost whoever sent it.
        let key = key.filter(|k| crate::leaves::valid_key(k));
        match (result, key) {
            (Ok(pass), key) => {
                let answer = self.pass_answer(&pass);
                if let Some(key) = key {
                    self.recent_leaves
                        .remember(ticket.id, key, &answer, now_ms());
                }
                Ok(answer)
            }
            (Err(VisitorError::Engine(EngineError::AlreadyLeft)), Some(key))
                if let Some(answer) = self.recent_leaves.replay(ticket.id, key, now_ms()) =>
            {
                Metrics::count(&self.metrics.leaves, "repeated");
                Ok(answer)
            }
            (Err(e), _) => Err(e.into()),
        }
    }

    /// Extends a valid pass.
    pub fn refresh_pass(&self, token: &str) -> Result<PassAnswer, ApiError> {
        self.serving()?;
        let pass = self.verify_pass(token)?;
        self.driver
            .with(|node, now| node.refresh_pass(now, &pass))
            .map(|p| self.pass_answer(&p))
            .map_err(ApiError::from)
    }

    /// Checks a pass: signature and expiry only, so it never waits for the node.
    pub fn verify_pass(&self, token: &str) -> Result<Pass, ApiError> {
        self.crypto
            .verify_pass(token, now_ms())
            .map_err(|e| ApiError::token("pass", &e))
    }
}

/// Reads another node's answer: its success body, or its error as ours.
fn relay<T: for<'de> Deserialize<'de>>(
    status: StatusCode,
    body: serde_json::Value,
) -> Result<T, ApiError> {
    if status.is_success() {
        serde_json::from_value(body).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "peer_error",
                format!("unreadable answer from the node holding the ticket: {e}"),
            )
        })
    } else {
        Err(ApiError::relayed(
            status,
            &serde_json::to_vec(&body).unwrap_or_default(),
        ))
    }
}

/// A visitor operation's outcome as one answer in a batch of forwarded requests.
pub fn forward_reply<T: Serialize>(r: Result<T, ApiError>) -> ForwardReply {
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
