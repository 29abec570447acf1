//! What the visitors who play the rules (`roles.rs`) do beyond an honest visit, and what every
//! visitor does with a pass it is handed ([`Passes`]): the room
//! promises one pass per admission, so a visitor handed two different ones counts as a double
//! pass, and with `--origin` every pass is shown to the origin's gate, which counts the passes
//! valid at once as the site sees them.
//!
//! - refresh elsewhere: it refreshes its first pass at every node's own address in turn, with
//!   that first pass each time;
//! - replay leave: once it has its pass, it leaves again with the same ticket, first with the
//!   same `Idempotency-Key` (which must give the same pass), then with a new one.
//!
//! Banked visitors, abandoners and those who come back only take other turns in the visit
//! itself (`visit.rs`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use super::roles::Role;
use super::shared::{Endpoint, Reply, Shared, inc};

/// Rounds of refreshes a refresh-elsewhere visitor makes over every node.
const REFRESH_ROUNDS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
struct PassClaims {
    created_at: u64,
    issued_at: u64,
    expires_at: u64,
}

/// The claims of a pass, read without checking the signature.
fn pass_claims(token: &str) -> Option<PassClaims> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

/// The passes one visitor was handed (one, unless the room broke its promise).
#[derive(Debug)]
pub(super) struct Passes {
    /// The visitor's role, to say which visitors were handed two.
    role: Role,
    seen: Vec<PassClaims>,
    double: bool,
}

impl Passes {
    pub(super) fn new(role: Role) -> Self {
        Passes {
            role,
            seen: Vec::new(),
            double: false,
        }
    }

    /// Takes note of a pass handed to the visitor: counted for the run (its validity, and the
    /// token for `--save-passes`) when it is a new pass rather than a refresh of one it holds,
    /// a double pass when it holds another already; then shown to the origin.
    pub(super) async fn handed(&mut self, s: &Shared, token: &str) {
        let Some(c) = pass_claims(token) else {
            return;
        };
        let same = |p: &PassClaims| {
            p.created_at == c.created_at
                && (p.issued_at != p.created_at
                    || c.issued_at != c.created_at
                    || p.expires_at == c.expires_at)
        };
        if !self.seen.iter().any(same) {
            if let Some(first) = self.seen.first() {
                if !self.double {
                    self.double = true;
                    inc(&s.counters.double_passes);
                }
                // Rare, and what a swarm run is after: which visitor, which passes.
                eprintln!(
                    "load: a {:?} visitor was handed two different passes: created at {} (valid until {}) and at {} (valid until {})",
                    self.role, first.created_at, first.expires_at, c.created_at, c.expires_at
                );
            }
            self.seen.push(c);
            s.handed(c.issued_at, c.expires_at, token);
        }
        show_to_origin(s, token).await;
    }

    /// Takes note of the pass in an answer, if it has one; false when the run is over.
    async fn answered(&mut self, s: &Shared, reply: Option<Reply>) -> bool {
        let Some(reply) = reply else {
            return false;
        };
        if let Reply::Ok(b) = reply
            && let Ok(p) = serde_json::from_slice::<PassOnly>(&b)
        {
            self.handed(s, &p.pass).await;
        }
        true
    }
}

/// Shows `token` to the origin (with `--origin`): let through, or sent to the room.
async fn show_to_origin(s: &Shared, token: &str) {
    if !s.has_origin() {
        return;
    }
    let bearer = format!("Bearer {token}");
    let header = (hyper::header::AUTHORIZATION.as_str(), bearer.as_str());
    match s.request_origin(header).await {
        Some(Reply::Ok(_)) => inc(&s.counters.origin_accepted),
        Some(Reply::Failed) => s.error(Endpoint::Origin, Some(&Reply::Failed)),
        Some(_) => inc(&s.counters.origin_refused),
        None => {}
    }
}

/// A refresh-elsewhere visitor: refreshes `first` (always that one) at every node in turn,
/// [`REFRESH_ROUNDS`] times, taking note of each pass it gets.
pub(super) async fn refresh_elsewhere(s: &Shared, first: &str, passes: &mut Passes) {
    let body = format!("{{\"pass\":\"{first}\"}}");
    for k in 0..REFRESH_ROUNDS * s.nodes() {
        let reply = s
            .request_node(k, Endpoint::Refresh, (Some(&body), None))
            .await;
        // Refusals (rate limits, a pass counted elsewhere) are what the room should do.
        if !passes.answered(s, reply).await {
            return;
        }
    }
}

#[derive(Debug, Deserialize)]
struct PassOnly {
    pass: String,
}

/// A replay-leave visitor, once it has its pass: leaves again with `ticket`, with the same
/// `key`, then with a new key, taking note of any pass it gets.
pub(super) async fn replay_leave(s: &Shared, ticket: &str, key: &str, passes: &mut Passes) {
    let body = format!("{{\"ticket\":\"{ticket}\"}}");
    let other = format!("{:016x}", rand::random::<u64>());
    for k in [key, other.as_str()] {
        let header = Some((waitingroom_http::wire::IDEMPOTENCY_HEADER, k));
        let mut affinity = super::affinity::Affinity::default();
        let reply = s
            .request(Endpoint::Leave, (Some(&body), header), &mut affinity)
            .await;
        if !passes.answered(s, reply).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(created_at: u64, issued_at: u64, expires_at: u64) -> String {
        let claims = format!(
            "{{\"created_at\":{created_at},\"issued_at\":{issued_at},\"expires_at\":{expires_at}}}"
        );
        format!("h.{}.s", URL_SAFE_NO_PAD.encode(claims))
    }

    #[test]
    fn reads_the_claims_of_a_pass() {
        assert_eq!(
            pass_claims(&token(1, 2, 3)),
            Some(PassClaims {
                created_at: 1,
                issued_at: 2,
                expires_at: 3
            })
        );
        assert_eq!(pass_claims("not a token"), None);
    }
}
