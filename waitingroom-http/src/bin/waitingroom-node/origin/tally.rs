//! What the demo origin's gate has let through: the passes valid at once, as the site itself
//! sees them, and the admissions that came with two different passes.
//!
//! The room promises that the site never holds more than its target and that one admission
//! gives one pass ("Distributed Virtual Waiting Room", §4.5, the site's capacity). The nodes'
//! own counts cannot show a breach of either: a pass a node forgot, or one a second node made,
//! is by definition not in their counts. The origin is where the passes end up, so it counts
//! them here, by pass id (the ticket's id) with the latest expiry it saw for each, on its own
//! clock (the one the gate checks expiry with). `scripts/swarm.sh` reads the figures at
//! `GET /_origin/passes`.
//!
//! Two passes are the same pass when they were created at the same instant: a refresh keeps
//! `created_at` and moves the expiry; a second leave of the same admission, or a new admission
//! of a ticket that already left, makes a pass with a new `created_at`. Two unrefreshed copies
//! (issued when created) with different expiries are two passes as well.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use waitingroom_core::{Pass, Time};

/// Most pass ids remembered (a few tens of bytes each); past it, ids long expired are
/// forgotten first.
const MAX_IDS: usize = 200_000;

/// How long an expired id is kept to catch a second pass of its admission, ms.
const KEEP_EXPIRED_MS: Time = 600_000;

/// Most double passes listed in the figures (all are counted).
const LISTED: usize = 20;

/// One pass id as seen: its first copy, and how long it is valid.
#[derive(Debug, Clone, Copy)]
struct Seen {
    created_at: Time,
    /// The expiry of its unrefreshed copy, when one was seen.
    first_expiry: Option<Time>,
    /// The latest expiry seen for it (refreshes move it).
    expires_at: Time,
}

/// An admission that came with two different passes.
#[derive(Debug, Clone, Serialize)]
pub struct DoublePass {
    id: String,
    /// (created_at, expires_at) of the pass seen first and of the one that differed.
    first: (Time, Time),
    second: (Time, Time),
}

/// The figures, as `GET /_origin/passes` serves them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// Passes valid now (by the latest expiry seen of each id).
    pub valid_now: u64,
    /// The most valid at one instant since the start, and when (Unix ms, this clock).
    pub most_valid_at_once: u64,
    pub most_valid_at: Time,
    /// Distinct pass ids let through.
    pub ids_seen: u64,
    /// Requests with a valid pass.
    pub requests: u64,
    /// Admissions with two different passes (see the module doc).
    pub double_passes: u64,
    pub doubles: Vec<DoublePass>,
}

/// The tally itself (behind a mutex in the origin).
#[derive(Debug, Default)]
pub struct Tally {
    ids: HashMap<u64, Seen>,
    /// (expires_at, id) of the ids still valid.
    live: BTreeSet<(Time, u64)>,
    figures: Figures,
}

impl Tally {
    /// Counts one request that came with `pass`, valid at `now`.
    pub fn seen(&mut self, pass: &Pass, now: Time) {
        self.figures.requests += 1;
        self.expire(now);
        let id = pass.id.0;
        let unrefreshed = pass.issued_at == pass.created_at;
        let this = Seen {
            created_at: pass.created_at,
            first_expiry: unrefreshed.then_some(pass.expires_at),
            expires_at: pass.expires_at,
        };
        let seen = match self.ids.get_mut(&id) {
            None => {
                self.figures.ids_seen += 1;
                self.ids.insert(id, this);
                this
            }
            Some(old) => {
                let differs = old.created_at != this.created_at
                    || matches!((old.first_expiry, this.first_expiry), (Some(a), Some(b)) if a != b);
                if differs {
                    self.figures.double_passes += 1;
                    if self.figures.doubles.len() < LISTED {
                        self.figures.doubles.push(DoublePass {
                            id: pass.id.to_string(),
                            first: (old.created_at, old.first_expiry.unwrap_or(old.expires_at)),
                            second: (this.created_at, this.expires_at),
                        });
                    }
                }
                self.live.remove(&(old.expires_at, id));
                old.expires_at = old.expires_at.max(this.expires_at);
                old.first_expiry = old.first_expiry.or(this.first_expiry);
                *old
            }
        };
        if seen.expires_at > now {
            self.live.insert((seen.expires_at, id));
        }
        let valid = self.live.len() as u64;
        self.figures.valid_now = valid;
        if valid > self.figures.most_valid_at_once {
            self.figures.most_valid_at_once = valid;
            self.figures.most_valid_at = now;
        }
        if self.ids.len() > MAX_IDS {
            self.forget(now);
        }
    }

    /// The figures at `now`.
    pub fn figures(&mut self, now: Time) -> Figures {
        self.expire(now);
        self.figures.valid_now = self.live.len() as u64;
        self.figures.clone()
    }

    /// Drops the passes expired by `now` from the valid ones.
    fn expire(&mut self, now: Time) {
        while let Some(&first) = self.live.first() {
            if first.0 > now {
                break;
            }
            self.live.remove(&first);
        }
    }

    /// Forgets the ids expired longest ago (all of them past [`KEEP_EXPIRED_MS`]).
    fn forget(&mut self, now: Time) {
        let before = now.saturating_sub(KEEP_EXPIRED_MS);
        self.ids.retain(|_, s| s.expires_at > before);
    }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::{NodeId, TicketId};

    use super::*;

    fn pass(id: u64, created_at: Time, issued_at: Time, expires_at: Time) -> Pass {
        Pass {
            id: TicketId(id),
            node: NodeId(1),
            queue_join_time: 0,
            created_at,
            issued_at,
            expires_at,
            eviction_time: 0,
            round: None,
            draw: None,
        }
    }

    #[test]
    fn counts_passes_valid_at_once_by_their_latest_expiry() {
        let mut t = Tally::default();
        t.seen(&pass(1, 100, 100, 1_000), 100);
        t.seen(&pass(2, 200, 200, 1_200), 200);
        // Pass 1 again, and refreshed: still one pass.
        t.seen(&pass(1, 100, 100, 1_000), 300);
        t.seen(&pass(1, 100, 900, 2_000), 900);
        assert_eq!(t.figures(900).valid_now, 2);
        // Pass 2 expired; pass 1 lives on by its refresh.
        assert_eq!(t.figures(1_500).valid_now, 1);
        t.seen(&pass(3, 1_500, 1_500, 3_000), 1_500);
        let f = t.figures(2_500);
        assert_eq!(
            (f.valid_now, f.most_valid_at_once, f.ids_seen, f.requests),
            (1, 2, 3, 5)
        );
        assert_eq!(f.double_passes, 0);
    }

    #[test]
    fn a_second_pass_of_one_admission_is_a_double_pass() {
        let mut t = Tally::default();
        t.seen(&pass(7, 100, 100, 1_000), 100);
        // Made anew (a second leave, a new admission of a ticket that left).
        t.seen(&pass(7, 500, 500, 1_400), 500);
        // The same creation time but another expiry, both unrefreshed.
        t.seen(&pass(8, 100, 100, 1_000), 600);
        t.seen(&pass(8, 100, 100, 1_100), 600);
        let f = t.figures(600);
        assert_eq!(f.double_passes, 2);
        assert_eq!(f.doubles[0].id, TicketId(7).to_string());
        assert_eq!(
            (f.doubles[0].first, f.doubles[0].second),
            ((100, 1_000), (500, 1_400))
        );
        // Either way one id, counted once as valid.
        assert_eq!(f.valid_now, 2);
    }
}
