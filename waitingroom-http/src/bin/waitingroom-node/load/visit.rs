//! One visitor of a load run, as a small state machine: it joins, checks in whenever the
//! answer says, leaves once a check-in says "admitted", and has its pass verified, each step
//! one [`Status`] to the next until [`Status::Done`] says how the visit ended. A visitor who
//! plays the rules ([`Role`], `roles.rs`) takes a few other turns on the way.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hyper::StatusCode;
use serde::Deserialize;
use waitingroom_http::clock::now_ms;
use waitingroom_http::wire::IDEMPOTENCY_HEADER;

use super::adversary::{Passes, refresh_elsewhere, replay_leave};
use super::affinity::Affinity;
use super::roles::{Mix, Role};
use super::shared::{
    Endpoint, JoinKey, RETRY_MS, Reply, Shared, inc, later_wait_ms, retry_wait_ms,
};

/// How far a node's clock may run ahead of this client's and a pass it calls expired still
/// count as expired rather than as an error (the node's clock is wall time at its start plus
/// monotonic time since: the two differ by a millisecond or so).
const CLOCK_TOLERANCE_MS: u64 = 100;

/// Where a visitor is in its visit.
#[derive(Debug)]
enum Status {
    /// Asking to join.
    Joining,
    /// In line with `ticket` (the latest): checks in again after `after_ms`.
    Waiting { ticket: String, after_ms: u64 },
    /// Admitted: exchanging `ticket` for a pass.
    Leaving { ticket: String },
    /// Holding a pass: checking it as an origin's gate would.
    Verifying(PassAnswer),
    /// The visit is over.
    Done(Outcome),
}

/// How a visit ended; each but [`Outcome::RunEnded`] has a counter of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// No join answer after every attempt, or the run ended first.
    NotJoined,
    /// The run ended while the visitor was in line. Nothing more to count: a visitor who never
    /// saw "admitted" is in `lost` (joined minus admitted minus abandoned).
    RunEnded,
    /// It gave up before it was let in (`--abandon`).
    Abandoned,
    /// Admitted, but no pass after every attempt, or the run ended first.
    LeaveFailed,
    /// Admitted, and the leave answered 409 `already_left`: an earlier leave went through,
    /// its answer was lost, and the node holding the ticket no longer has that pass to give
    /// again (it died too, or the minute it keeps passes for is over).
    PassLost,
    /// The pass was accepted.
    Verified,
    /// The pass had expired before it was checked and was refused, as it must be (with
    /// `pass_expiry_ms` 0 a pass is born expired).
    VerifyExpired,
    /// The pass was not accepted after every attempt, or the run ended first.
    VerifyFailed,
}

/// The room's word on a visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RoomStatus {
    Admitted,
    /// `queued`, or anything else: not admitted yet.
    #[serde(other)]
    Queued,
}

#[derive(Debug, Deserialize)]
struct VisitorAnswer {
    status: RoomStatus,
    ticket: String,
    #[serde(default)]
    refresh_after_ms: u64,
}

#[derive(Debug, Deserialize)]
struct PassAnswer {
    pass: String,
    expires_at_ms: u64,
}

#[derive(Debug, Deserialize)]
struct TicketClaims {
    id: String,
    join_time: u64,
    #[serde(default)]
    eviction_time: Option<u64>,
    #[serde(default)]
    expires_at: u64,
}

/// The claims of a token, read without checking the signature (the client only needs to know
/// its place; the nodes check signatures).
fn claims<T: for<'de> Deserialize<'de>>(token: &str) -> Option<T> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

fn join_key(c: &TicketClaims) -> Option<JoinKey> {
    Some((c.join_time, u64::from_str_radix(&c.id, 16).ok()?))
}

/// `wait`, at most half of what is left of `ticket`'s life: a visitor backing off must still
/// check in before the ticket expires, or it loses its place (as the waiting page does). Never
/// below [`RETRY_MS`] (unless `wait` is): a ticket about to expire, or expired, is no reason to
/// ask again at once.
fn within_ticket_life(ticket: &str, wait: u64) -> u64 {
    claims::<TicketClaims>(ticket)
        .filter(|c| c.expires_at > 0)
        .map_or(wait, |c| {
            wait.min((c.expires_at.saturating_sub(now_ms()) / 2).max(RETRY_MS))
        })
}

fn body(ticket: &str) -> String {
    // Tokens are base64url and dots: no JSON escaping needed.
    format!("{{\"ticket\":\"{ticket}\"}}")
}

/// One visitor, start to end.
pub(super) async fn visitor(s: Arc<Shared>) {
    inc(&s.counters.active);
    let role = s.mix.draw();
    let mut visit = Visit {
        s: &s,
        key: (0, 0),
        joined_ms: 0,
        admission_seen: false,
        later: 0,
        failed: 0,
        affinity: Affinity::default(),
        role,
        joined: false,
        checkins: 0,
        checkins_before: Mix::checkins_before(),
        away: false,
        banked_until: None,
        passes: Passes::new(role),
    };
    let mut status = Status::Joining;
    let outcome = loop {
        status = match status {
            Status::Joining => visit.join().await,
            Status::Waiting { ticket, after_ms } => visit.check_in(ticket, after_ms).await,
            Status::Leaving { ticket } => visit.leave(ticket).await,
            Status::Verifying(pass) => visit.verify(pass).await,
            Status::Done(outcome) => break outcome,
        };
    };
    visit.record(outcome);
    s.counters
        .active
        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
}

/// What a visitor keeps from step to step.
struct Visit<'a> {
    s: &'a Shared,
    /// The queue's order of this visitor, from its first ticket (set by the join).
    key: JoinKey,
    /// When the join was answered, on the client's clock (ms since the run started).
    joined_ms: u64,
    /// Whether its admission has been recorded: once, even if a refused leave sends it back
    /// to checking in.
    admission_seen: bool,
    /// Check-ins answered "retry later" in a row (for the back-off).
    later: u32,
    /// Check-ins that failed in a row (for the back-off).
    failed: u32,
    /// The balancer's affinity cookie, once set.
    affinity: Affinity,
    /// What it does beyond an honest visit.
    role: Role,
    /// Whether it has joined once (a join after its ticket was refused is not a new visitor).
    joined: bool,
    /// Check-ins answered "queued", and after how many an abandoner gives up or a come-back
    /// visitor goes away.
    checkins: u32,
    checkins_before: u32,
    /// Whether a come-back visitor has been away.
    away: bool,
    /// Until when (ms since the start) a banked visitor keeps checking in once let in.
    banked_until: Option<u64>,
    /// The passes it was handed.
    passes: Passes,
}

impl Visit<'_> {
    /// Joins, then waits in line (or leaves at once when let in straight through).
    async fn join(&mut self) -> Status {
        let s = self.s;
        let rejoin = self.joined;
        let answer = s
            .attempts(
                Endpoint::Join,
                (None, None),
                &mut self.affinity,
                |reply, _| match reply {
                    Reply::Ok(b) => serde_json::from_slice::<VisitorAnswer>(&b)
                        .map_err(|_| s.error(Endpoint::Join, None))
                        .ok(),
                    r => {
                        s.error(Endpoint::Join, Some(&r));
                        None
                    }
                },
            )
            .await;
        // A visitor joining again who gets no answer is lost, not "not joined".
        let failed = if rejoin {
            Outcome::RunEnded
        } else {
            Outcome::NotJoined
        };
        let Some(answer) = answer else {
            return Status::Done(failed);
        };
        let Some(key) = claims(&answer.ticket).as_ref().and_then(join_key) else {
            s.error(Endpoint::Join, None);
            return Status::Done(failed);
        };
        self.key = key;
        self.joined_ms = s.now_ms();
        if !rejoin {
            self.joined = true;
            inc(&s.counters.joined);
        }
        self.in_line(answer)
    }

    /// After a join or check-in answer: leave once admitted (a banked visitor checks in
    /// until `--bank-ms` is over first), else check in when told.
    fn in_line(&mut self, a: VisitorAnswer) -> Status {
        match a.status {
            RoomStatus::Admitted => {
                self.admitted(&a.ticket);
                let now = self.s.now_ms();
                let until = *self.banked_until.get_or_insert(now + self.s.mix.bank_ms);
                if self.role == Role::Banked && now < until {
                    return Status::Waiting {
                        ticket: a.ticket,
                        after_ms: a.refresh_after_ms.max(RETRY_MS),
                    };
                }
                Status::Leaving { ticket: a.ticket }
            }
            RoomStatus::Queued => {
                self.checkins += 1;
                Status::Waiting {
                    ticket: a.ticket,
                    after_ms: a.refresh_after_ms,
                }
            }
        }
    }

    /// Records the visitor's admission, once.
    fn admitted(&mut self, ticket: &str) {
        if !self.admission_seen {
            self.admission_seen = true;
            let eviction_time = claims::<TicketClaims>(ticket).and_then(|c| c.eviction_time);
            self.s
                .seen_admitted(self.key, self.joined_ms, eviction_time);
        }
    }

    /// Before a check-in: an abandoner gives up, a come-back visitor goes away for a while
    /// (`false` when the run ended meanwhile).
    async fn wander(&mut self) -> Option<Outcome> {
        let due = !self.admission_seen && self.checkins >= self.checkins_before;
        match self.role {
            Role::Abandon if due => Some(Outcome::Abandoned),
            Role::ComeBack if due && !self.away => {
                self.away = true;
                inc(&self.s.counters.came_back);
                let away = rand::random::<u64>() % self.s.mix.away_ms.max(1);
                (!self.s.sleep(away).await).then_some(Outcome::RunEnded)
            }
            _ => None,
        }
    }

    /// Waits, then checks in once. A failed check-in keeps the ticket and tries again soon: a
    /// node may be down or stopping.
    async fn check_in(&mut self, ticket: String, after_ms: u64) -> Status {
        let s = self.s;
        if !s.sleep(after_ms).await {
            return Status::Done(Outcome::RunEnded);
        }
        if let Some(outcome) = self.wander().await {
            return Status::Done(outcome);
        }
        let Some(reply) = s
            .request(
                Endpoint::Checkin,
                (Some(&body(&ticket)), None),
                &mut self.affinity,
            )
            .await
        else {
            return Status::Done(Outcome::RunEnded);
        };
        if let Reply::Later { after_ms } = reply {
            // The node holding the ticket is a member but not answering: the place is kept,
            // ask again later.
            inc(&s.counters.retried_later);
            self.later += 1;
            let after_ms = within_ticket_life(&ticket, later_wait_ms(after_ms, self.later - 1));
            return Status::Waiting { ticket, after_ms };
        }
        self.later = 0;
        let failed = match reply {
            Reply::Ok(b) => match serde_json::from_slice::<VisitorAnswer>(&b) {
                Ok(a) => {
                    self.failed = 0;
                    return self.in_line(a);
                }
                Err(_) => None,
            },
            r => Some(r),
        };
        self.failed += 1;
        let wait = failed.as_ref().map_or(retry_wait_ms(self.failed - 1), |r| {
            r.backoff_ms(self.failed - 1)
        });
        if let Some(Reply::Status(StatusCode::UNAUTHORIZED, ..)) = failed {
            return self.ticket_refused(&ticket, failed.as_ref(), wait).await;
        }
        s.error(Endpoint::Checkin, failed.as_ref());
        let after_ms = within_ticket_life(&ticket, wait);
        Status::Waiting { ticket, after_ms }
    }

    /// The ticket was refused at a check-in (expired, or no longer valid): as the waiting
    /// page does, wait, then join again. Its place is lost; a visitor who was away expected
    /// that, and so did a banked visitor who held on to its admission past the claim window
    /// (the room must refuse it then: waitingroom-distributed/README.md#one-admission-one-pass),
    /// counted as `lapsed`; one who kept checking in counts as `rejoined` (and its check-in as
    /// an error).
    async fn ticket_refused(&mut self, ticket: &str, reply: Option<&Reply>, wait: u64) -> Status {
        let s = self.s;
        if self.role == Role::Banked && self.admission_seen {
            inc(&s.counters.lapsed);
        } else if !self.away {
            s.error(Endpoint::Checkin, reply);
            inc(&s.counters.rejoined);
            // Rare, and what a swarm run is after: whose ticket, refused when.
            let expires_at = claims::<TicketClaims>(ticket).map_or(0, |c| c.expires_at);
            eprintln!(
                "load: a {:?} visitor's ticket was refused while it kept checking in (admitted: {}): expires at {expires_at}, refused at {}",
                self.role,
                self.admission_seen,
                now_ms()
            );
        }
        self.away = false;
        if !s.sleep(wait).await {
            return Status::Done(Outcome::RunEnded);
        }
        Status::Joining
    }

    /// Exchanges the ticket for a pass. Every attempt carries the same key, so a repeat whose
    /// first answer was lost gets that pass again.
    async fn leave(&mut self, ticket: String) -> Status {
        let s = self.s;
        self.admitted(&ticket);
        let leave_key = format!("{:016x}", rand::random::<u64>());
        let header = Some((IDEMPOTENCY_HEADER, leave_key.as_str()));
        let body = body(&ticket);
        let cap = |wait| within_ticket_life(&ticket, wait);
        let next = s
            .attempts_within(
                Endpoint::Leave,
                (Some(body.as_str()), header),
                &mut self.affinity,
                cap,
                |reply, _| {
                    match reply {
                        Reply::Ok(b) => match serde_json::from_slice::<PassAnswer>(&b) {
                            Ok(p) => return Some(Status::Verifying(p)),
                            Err(_) => s.error(Endpoint::Leave, None),
                        },
                        Reply::Status(StatusCode::CONFLICT, code, _) if code == "not_admitted" => {
                            // The node answering holds the visitor as queued (re-queued there while
                            // the node that let them out was unreachable): check in again, as the
                            // waiting page would.
                            inc(&s.counters.readmissions);
                            let ticket = ticket.clone();
                            return Some(Status::Waiting {
                                ticket,
                                after_ms: retry_wait_ms(0),
                            });
                        }
                        r @ Reply::Status(StatusCode::CONFLICT, ..) => {
                            s.error(Endpoint::Leave, Some(&r));
                            return Some(Status::Done(Outcome::PassLost));
                        }
                        r => s.error(Endpoint::Leave, Some(&r)),
                    }
                    None
                },
            )
            .await;
        if let Some(Status::Verifying(p)) = &next {
            self.passes.handed(s, &p.pass).await;
            if self.role == Role::ReplayLeave {
                replay_leave(s, &ticket, &leave_key, &mut self.passes).await;
            }
        }
        next.unwrap_or(Status::Done(Outcome::LeaveFailed))
    }

    /// Records the pass, then has it checked at `GET /api/pass/verify`.
    async fn verify(&mut self, pass: PassAnswer) -> Status {
        let s = self.s;
        if self.role == Role::RefreshElsewhere {
            refresh_elsewhere(s, &pass.pass, &mut self.passes).await;
        }
        let bearer = format!("Bearer {}", pass.pass);
        let header = Some((hyper::header::AUTHORIZATION.as_str(), bearer.as_str()));
        let outcome = s
            .attempts(
                Endpoint::Verify,
                (None, header),
                &mut self.affinity,
                |reply, _| match reply {
                    Reply::Ok(_) => Some(Outcome::Verified),
                    // Expired by the time the gate checked it (a short pass, a slow answer):
                    // refused as it must be, not an error. The node's clock may run a little
                    // ahead of this one (wall time at its start plus monotonic time since).
                    Reply::Status(StatusCode::UNAUTHORIZED, code, _)
                        if code == "expired_token"
                            && pass.expires_at_ms
                                <= now_ms().saturating_add(CLOCK_TOLERANCE_MS) =>
                    {
                        Some(Outcome::VerifyExpired)
                    }
                    r => {
                        s.error(Endpoint::Verify, Some(&r));
                        None
                    }
                },
            )
            .await;
        Status::Done(outcome.unwrap_or(Outcome::VerifyFailed))
    }

    /// Counts how the visit ended.
    fn record(&self, outcome: Outcome) {
        let c = &self.s.counters;
        inc(match outcome {
            Outcome::NotJoined => &c.not_joined,
            Outcome::RunEnded => return,
            Outcome::Abandoned => &c.abandoned,
            Outcome::LeaveFailed => &c.leave_failed,
            Outcome::PassLost => &c.pass_lost,
            Outcome::Verified => &c.verified,
            Outcome::VerifyExpired => &c.verify_expired,
            Outcome::VerifyFailed => &c.verify_failed,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(expires_at: u64) -> String {
        let claims =
            format!("{{\"id\":\"0000000000000001\",\"join_time\":1,\"expires_at\":{expires_at}}}");
        format!("h.{}.s", URL_SAFE_NO_PAD.encode(claims))
    }

    #[test]
    fn backs_off_within_the_ticket_life_but_never_asks_again_at_once() {
        // An expired ticket (a refused check-in): no retry at once, as the page would not.
        assert_eq!(within_ticket_life(&ticket(1), 5_000), RETRY_MS);
        // A short wait stays as it is.
        assert_eq!(within_ticket_life(&ticket(1), 50), 50);
        // A long life left: the wait as asked; a short one: at most half of it.
        assert_eq!(within_ticket_life(&ticket(now_ms() + 60_000), 5_000), 5_000);
        let near = within_ticket_life(&ticket(now_ms() + 2_000), 5_000);
        assert!((RETRY_MS..=1_000).contains(&near), "{near}");
    }
}
