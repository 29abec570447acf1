//! Visitor operations as the HTTP API and the waiting page both use them: verify the token,
//! call the node, forward to the node holding the ticket when needed, sign the answer. No HTTP
//! here beyond status codes: the handlers in [`crate::api`] read requests and write responses.

use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use waitingroom_core::{CheckIn, CheckInStatus, EngineError, Pass, Ticket};
use waitingroom_distributed::{Contact, VisitorError};

use super::App;
use super::leaves;
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::peer::{ForwardItem, ForwardOp, Unreachable};
use crate::wire::client_addr::ClientAddr;
use crate::wire::errors::ApiError;
use crate::wire::{ForwardAnswer, ForwardBody, PassAnswer, VisitorAnswer};

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
            CheckInStatus::Queued { position } if c.starts_in_ms.is_some() => {
                ("prequeue", position)
            }
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
            starts_in_ms: c.starts_in_ms,
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
            .map_err(|e| ApiError::ticket(&e))
    }

    /// A new visitor joins through this node, within `client`'s join allowance (see
    /// `rate_limit`).
    pub fn join(&self, client: &ClientAddr) -> Result<VisitorAnswer, ApiError> {
        if !self.join_limit.allow(&client.0, now_ms()) {
            self.metrics.rate_limited.inc();
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many joins from this client; slow down",
            ));
        }
        self.serving()?;
        let r = self.driver.with(|node, now| node.join(now));
        let answer = r.map(|c| self.answer(c)).map_err(ApiError::from);
        Metrics::count(&self.metrics.joins, queue_result(&answer));
        answer
    }

    /// A visitor checks in, wherever their ticket is held.
    pub async fn check_in(&self, token: &str) -> Result<VisitorAnswer, ApiError> {
        self.serving()?;
        let ticket = self.ticket(token)?;
        let local = self.driver.with(|node, now| node.check_in(now, &ticket));
        let answer = match local {
            Err(VisitorError::Elsewhere(owner)) => {
                match self
                    .forward(&owner, ticket_item(ForwardOp::Checkin, &ticket, None))
                    .await
                {
                    Ok(relayed) => relayed,
                    Err(e) => {
                        self.unless_owner_is_member(&owner, &e)?;
                        // The thesis' re-queue, once SWIM has removed the owner: the visitor
                        // keeps their place (original join time) here.
                        self.metrics.requeues.inc();
                        tracing::info!(owner = owner.id.0, error = %e, ticket = %ticket.id,
                            "owner gone: re-queueing the visitor here");
                        self.check_in_here(&ticket)
                    }
                }
            }
            other => other.map(|c| self.answer(c)).map_err(ApiError::from),
        };
        Metrics::count(&self.metrics.checkins, queue_result(&answer));
        answer
    }

    /// An admitted visitor exchanges their ticket for a pass, wherever the ticket is held. The
    /// same leave repeated with the same `key` gets the same pass (see `leaves`).
    pub async fn leave(&self, token: &str, key: Option<&str>) -> Result<PassAnswer, ApiError> {
        self.serving()?;
        let ticket = self.ticket(token)?;
        let local = self.driver.with(|node, now| node.leave(now, &ticket));
        let answer = match local {
            Err(VisitorError::Elsewhere(owner)) => {
                match self
                    .forward(&owner, ticket_item(ForwardOp::Leave, &ticket, key))
                    .await
                {
                    Ok(relayed) => relayed,
                    Err(e) => {
                        self.unless_owner_is_member(&owner, &e)?;
                        // The owner is gone: the signed ticket says whether they were let out,
                        // and until when. The pass follows from the admission alone, so it is
                        // the one the owner gave if it gave one
                        // (waitingroom-distributed/README.md#one-admission-one-pass).
                        tracing::info!(owner = owner.id.0, error = %e, ticket = %ticket.id,
                            "owner gone: serving the leave here");
                        let here = self.driver.with(|node, now| node.leave_here(now, &ticket));
                        self.passed(&ticket, key, here)
                    }
                }
            }
            other => self.passed(&ticket, key, other),
        };
        Metrics::count(&self.metrics.leaves, pass_result(&answer));
        answer
    }

    /// Asks the node holding the ticket (batched with the other requests going there) and
    /// reads its answer as ours. `Err` when it did not answer: counted, and reported so the
    /// node probes it first; the caller serves the visitor here.
    async fn forward<T: DeserializeOwned>(
        &self,
        owner: &Contact,
        item: ForwardItem,
    ) -> Result<Result<T, ApiError>, Unreachable> {
        match self.transport.forward_batched(owner, item).await {
            Ok((status, body)) => {
                Metrics::count(&self.metrics.forwards, "ok");
                Ok(relay(status, body))
            }
            Err(e) => {
                Metrics::count(&self.metrics.forwards, "unreachable");
                self.transport.report_unreachable(&owner.addr);
                Err(e)
            }
        }
    }

    /// After the node holding a ticket did not answer: while it is still a member — alive but
    /// slow, frozen, or cut off — only it may serve the visitor (anything served here could
    /// be served there too: a second place, a second pass for one admission), so the visitor
    /// is told to retry: 503 `owner_unavailable` with `Retry-After`. Only once SWIM has removed
    /// it may this node serve the visitor.
    fn unless_owner_is_member(&self, owner: &Contact, e: &Unreachable) -> Result<(), ApiError> {
        if !self.driver.read(|n| n.membership().contains(owner.id)) {
            return Ok(());
        }
        Metrics::count(&self.metrics.forwards, "owner_unavailable");
        tracing::info!(owner = owner.id.0, error = %e,
            "the node holding the ticket did not answer and is still a member: retry later");
        Err(ApiError::owner_unavailable(owner.id))
    }

    /// A check-in served here, whatever the membership says (forwarded here, or re-queued).
    fn check_in_here(&self, ticket: &Ticket) -> Result<VisitorAnswer, ApiError> {
        self.driver
            .with(|node, now| node.check_in_here(now, ticket))
            .map(|c| self.answer(c))
            .map_err(ApiError::from)
    }

    /// A check-in or leave another node forwarded here. The ticket is the claims the forwarding
    /// node verified, or the token, verified here. Served only when the ticket names this node
    /// (or this node holds it), or when the node it names has been removed from the cluster:
    /// a live member's visitors are that member's to serve.
    pub fn serve_forwarded(
        &self,
        op: ForwardOp,
        body: ForwardBody,
    ) -> Result<ForwardAnswer, ApiError> {
        self.serving()?;
        if op == ForwardOp::Refresh {
            let pass = body.pass.ok_or_else(|| ApiError::missing_token("pass"))?;
            return self.serve_refresh(&pass).map(ForwardAnswer::Refresh);
        }
        self.serve_forwarded_ticket(op == ForwardOp::Leave, body)
    }

    /// A check-in (or a leave, `leave`) forwarded here.
    fn serve_forwarded_ticket(
        &self,
        leave: bool,
        body: ForwardBody,
    ) -> Result<ForwardAnswer, ApiError> {
        let key = body.idempotency_key;
        let ticket = match (body.claims, body.ticket) {
            (Some(t), _) => t,
            (None, Some(token)) => self.ticket(&token)?,
            (None, None) => return Err(ApiError::missing_token("ticket")),
        };
        let ours = self.driver.read(|n| {
            let m = n.membership();
            ticket.node == n.id()
                || n.room().knows(ticket.id)
                || (!m.contains(ticket.node) && m.removed.contains_key(&ticket.node))
        });
        if !ours {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "wrong_node",
                format!(
                    "the ticket is held by node {}, a live member: only it serves this visitor",
                    ticket.node
                ),
            ));
        }
        if leave {
            let result = self.driver.with(|node, now| node.leave_here(now, &ticket));
            let answer = self.passed(&ticket, key.as_deref(), result);
            Metrics::count(&self.metrics.leaves, pass_result(&answer));
            answer.map(ForwardAnswer::Leave)
        } else {
            let answer = self.check_in_here(&ticket);
            Metrics::count(&self.metrics.checkins, queue_result(&answer));
            answer.map(ForwardAnswer::Checkin)
        }
    }

    /// A pass refresh forwarded here: served when this node counts the pass, or when the node
    /// the pass names has been removed (this node is its heir); never forwarded again.
    fn serve_refresh(&self, pass: &Pass) -> Result<PassAnswer, ApiError> {
        if !self.driver.read(|n| n.serves_refresh(pass)) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "wrong_node",
                format!(
                    "the pass is counted by node {}, a live member: only it extends it",
                    pass.node
                ),
            ));
        }
        let result = self
            .driver
            .with(|node, now| node.refresh_pass_here(now, pass));
        self.refreshed(result)
    }

    /// Signs a refreshed pass; counts the answer.
    fn refreshed(&self, result: Result<Pass, VisitorError>) -> Result<PassAnswer, ApiError> {
        let answer = result.map(|p| self.pass_answer(&p)).map_err(ApiError::from);
        let label = match &answer {
            Ok(_) => "ok",
            Err(e) if e.code == "refresh_too_soon" => "too_soon",
            Err(_) => "error",
        };
        Metrics::count(&self.metrics.refreshes, label);
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
        let key = key.filter(|k| leaves::valid_key(k));
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

    /// Extends a valid pass at the one node that counts it
    /// (waitingroom-distributed/README.md#one-admission-one-pass): here, or forwarded there as
    /// check-ins are. While that node is a member but does not answer: 503 `owner_unavailable`
    /// (the pass stays valid until it expires).
    pub async fn refresh_pass(&self, token: &str) -> Result<PassAnswer, ApiError> {
        self.serving()?;
        let pass = self.verify_pass(token)?;
        let local = self.driver.with(|node, now| node.refresh_pass(now, &pass));
        let Err(VisitorError::Elsewhere(counter)) = local else {
            return self.refreshed(local);
        };
        let item = ForwardItem {
            op: ForwardOp::Refresh,
            claims: None,
            pass: Some(pass),
            idempotency_key: None,
        };
        match self.forward(&counter, item).await {
            Ok(relayed) => relayed,
            Err(e) => {
                // Removed meanwhile: the next refresh goes to its heir.
                self.unless_owner_is_member(&counter, &e)?;
                Err(ApiError::owner_unavailable(counter.id))
            }
        }
    }

    /// Checks a pass: signature and expiry, and that it was not given back (a look-up in the
    /// node's released passes: the node is held for that alone).
    pub fn verify_pass(&self, token: &str) -> Result<Pass, ApiError> {
        let pass = self
            .crypto
            .verify_pass(token, now_ms())
            .map_err(|e| ApiError::token("pass", &e))?;
        if self.driver.read(|n| n.is_released(pass.id)) {
            return Err(VisitorError::Released.into());
        }
        Ok(pass)
    }

    /// A visitor gives their place back (docs/operating.md#sessions): at this node, whichever node
    /// counts the pass; every node refuses the pass once the next round has carried it.
    pub fn release_pass(&self, token: &str) -> Result<(), ApiError> {
        self.serving()?;
        let pass = self
            .crypto
            .verify_pass(token, now_ms())
            .map_err(|e| ApiError::token("pass", &e))?;
        self.driver
            .with(|node, now| node.release_pass(now, &pass))
            .map_err(ApiError::from)?;
        self.metrics.passes_released.inc();
        tracing::debug!(ticket = %pass.id, "pass given back");
        Ok(())
    }
}

/// A forwarded check-in or leave of `ticket`.
fn ticket_item(op: ForwardOp, ticket: &Ticket, key: Option<&str>) -> ForwardItem {
    ForwardItem {
        op,
        claims: Some(ticket.clone()),
        pass: None,
        idempotency_key: key.map(str::to_owned),
    }
}

/// The `result` label of a join or check-in.
fn queue_result(answer: &Result<VisitorAnswer, ApiError>) -> &'static str {
    match answer {
        Ok(a) if a.is_admitted() => "admitted",
        Ok(_) => "queued",
        Err(_) => "error",
    }
}

/// The `result` label of a leave.
fn pass_result(answer: &Result<PassAnswer, ApiError>) -> &'static str {
    if answer.is_ok() { "ok" } else { "error" }
}

/// Reads another node's answer: its success body, or its error as ours.
fn relay<T: DeserializeOwned>(status: StatusCode, body: serde_json::Value) -> Result<T, ApiError> {
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
