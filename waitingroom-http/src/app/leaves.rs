//! Leaves that can be retried. A ticket is exchanged for a pass once; a second leave is refused
//! (409 `already_left`), so a stolen or replayed ticket gets nothing. But the answer to the
//! first leave can be lost on the way back (the node relaying it died), and that visitor would
//! be let in without a pass. So the node that hands out a pass keeps it for a minute with the
//! `Idempotency-Key` the leave carried: the same request sent again, with the same key, gets the
//! same pass (same id, same expiry: still one place on the site). Without the key, or with
//! another one, the second leave is refused as before. (Once that node is gone, another node
//! serving the leave from the ticket gives the same pass too: the pass follows from the
//! admission alone, waitingroom-distributed/README.md#one-admission-one-pass.)

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use waitingroom_core::{TicketId, Time};

use crate::wire::PassAnswer;

/// Longest key accepted, bytes.
pub const MAX_KEY_LEN: usize = 128;

/// Passes handed out recently, by ticket, with the key of the leave that got them.
#[derive(Debug, Default)]
pub struct RecentLeaves {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_ticket: HashMap<TicketId, (String, PassAnswer)>,
    /// When each entry was made, oldest first, to forget them in order.
    order: VecDeque<(Time, TicketId)>,
}

impl RecentLeaves {
    /// How long a leave can be repeated, ms.
    pub const KEEP_MS: Time = 60_000;
    /// Most leaves remembered (memory stays bounded whatever the load).
    pub const MAX_ENTRIES: usize = 100_000;

    /// Remembers the pass a leave with `key` got for `ticket`.
    pub fn remember(&self, ticket: TicketId, key: &str, answer: &PassAnswer, now: Time) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.forget_old(now);
        if inner.by_ticket.len() >= Self::MAX_ENTRIES
            && let Some((_, oldest)) = inner.order.pop_front()
        {
            inner.by_ticket.remove(&oldest);
        }
        inner
            .by_ticket
            .insert(ticket, (key.to_owned(), answer.clone()));
        inner.order.push_back((now, ticket));
    }

    /// The pass an earlier leave with the same `key` got for `ticket`, if it is remembered.
    pub fn replay(&self, ticket: TicketId, key: &str, now: Time) -> Option<PassAnswer> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.forget_old(now);
        match inner.by_ticket.get(&ticket) {
            Some((k, answer)) if k == key => Some(answer.clone()),
            _ => None,
        }
    }
}

impl Inner {
    fn forget_old(&mut self, now: Time) {
        while let Some(&(at, ticket)) = self.order.front() {
            if now.saturating_sub(at) < RecentLeaves::KEEP_MS {
                break;
            }
            self.order.pop_front();
            self.by_ticket.remove(&ticket);
        }
    }
}

/// Checks a key a client sent: 1 to [`MAX_KEY_LEN`] visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(pass: &str) -> PassAnswer {
        PassAnswer {
            pass: pass.to_owned(),
            expires_at_ms: 1,
        }
    }

    #[test]
    fn same_key_same_pass_other_key_nothing() {
        let r = RecentLeaves::default();
        r.remember(TicketId(1), "k1", &answer("p1"), 0);
        assert_eq!(r.replay(TicketId(1), "k1", 10), Some(answer("p1")));
        assert_eq!(r.replay(TicketId(1), "k2", 10), None);
        assert_eq!(r.replay(TicketId(2), "k1", 10), None);
    }

    #[test]
    fn forgotten_after_a_minute_and_bounded() {
        let r = RecentLeaves::default();
        r.remember(TicketId(1), "k", &answer("p"), 0);
        assert_eq!(r.replay(TicketId(1), "k", RecentLeaves::KEEP_MS), None);
        for i in 0..RecentLeaves::MAX_ENTRIES as u64 + 10 {
            r.remember(TicketId(i), "k", &answer("p"), 100);
        }
        let inner = r.inner.lock().unwrap();
        assert_eq!(inner.by_ticket.len(), RecentLeaves::MAX_ENTRIES);
        assert_eq!(inner.order.len(), RecentLeaves::MAX_ENTRIES);
    }

    #[test]
    fn keys_are_short_visible_ascii() {
        assert!(valid_key("3f1c-9a"));
        assert!(!valid_key(""));
        assert!(!valid_key("has space"));
        assert!(!valid_key(&"x".repeat(MAX_KEY_LEN + 1)));
    }
}
