//! A single-node waiting room that another Rust service can embed.
//!
//! The engine owns the queue and the bookkeeping of admitted visitors; it knows nothing of HTTP,
//! signatures or clocks. Every call takes `now` in milliseconds and the only randomness (ticket
//! ids) comes from a seeded generator, so a test can replay any sequence exactly.
//!
//! ```
//! use waitingroom_core::{CheckInStatus, NodeId, Settings, WaitingRoom};
//!
//! let settings = Settings { target_on_site: 1, admit_straight_through: false, ..Settings::default() };
//! let mut room = WaitingRoom::new(settings, NodeId(1), 42).unwrap();
//! let first = room.join(0);
//! let second = room.join(1);
//! assert_eq!(second.status, CheckInStatus::Queued { position: 2 });
//! room.evict(1_000);
//! let first = room.check_in(1_001, &first.ticket).unwrap();
//! assert_eq!(first.status, CheckInStatus::Admitted);
//! let pass = room.leave(1_002, &first.ticket).unwrap();
//! assert_eq!(pass.id, first.ticket.id);
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{EngineError, SettingsError};
use crate::lottery::{self, LotterySeed};
use crate::queue::{KeyTree, SeenRank};
use crate::settings::Settings;
use crate::types::{NodeId, Pass, QueueKey, Ticket, TicketId, Time};
use crate::visitor_table::VisitorTable;

mod kept;
pub use kept::KeptVisitor;

/// Where a visitor stands after joining or checking in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckInStatus {
    /// Still waiting; `position` 1 means next in line.
    Queued {
        /// Position estimate; never larger than the one shown before.
        position: u64,
    },
    /// Let out of the queue: the visitor may now leave it and get a pass.
    Admitted,
}

/// The answer to a join or a check-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckIn {
    /// Queued (with a position) or admitted.
    pub status: CheckInStatus,
    /// The refreshed ticket, to be used from now on instead of the old one.
    pub ticket: Ticket,
    /// Estimated wait in milliseconds, from the measured admission rate; `None` until one has
    /// been measured or once admitted.
    pub eta_ms: Option<u64>,
    /// Set while the visitor is pre-queued for a scheduled event: how long until it starts
    /// and visitors are let out (a cluster node sets it; the engine alone never does).
    pub starts_in_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
enum Visitor {
    /// In the local queue under the key with this join time, the visitor's ticket id and this
    /// node; the entry is dropped `Settings::queue_entry_ttl_ms` after `last_seen` (the
    /// visitor keeps their place: checking in again re-queues them under their join time).
    /// `seen` spares most check-ins the search for their rank.
    Queued {
        last_seen: Time,
        join_time: Time,
        seen: SeenRank,
    },
    /// Let out, not yet left; holds a place on the site until `claim_by`.
    Admitted { eviction_time: Time, claim_by: Time },
    /// Holds a pass. Counts as on the site while `counted` (until `pass_expires`); the ticket
    /// stays refused until `forget_at`, when it has expired anyway.
    Left {
        pass_expires: Time,
        forget_at: Time,
        counted: bool,
    },
}

/// What the engine knows of one visitor.
#[derive(Debug, Clone, Copy)]
struct Record {
    state: Visitor,
    /// When this visitor's pending entry in the deadlines comes due: never after the deadline of
    /// `state`, so a state change that only postpones needs no new entry.
    armed: Time,
}

/// A waiting room running on one node.
#[derive(Debug, Clone)]
pub struct WaitingRoom {
    settings: Settings,
    node: NodeId,
    rng: ChaCha8Rng,
    /// The queue's ticket index is `visitors` itself (queued records hold the join time), which
    /// saves a second hash table and its cache misses on every join and admission.
    queue: KeyTree,
    visitors: VisitorTable<Record>,
    /// Lazy deadlines: one live entry per visitor, at its `armed` time; an entry whose visitor
    /// has moved on is re-armed or dropped when it comes due.
    deadlines: Deadlines,
    on_site: u64,
    rate: AdmissionRate,
    /// The changes a restart must not forget (`kept.rs`).
    kept: kept::KeptLog,
}

impl WaitingRoom {
    /// A new, empty waiting room on node `node`, with ticket ids drawn from `seed`.
    pub fn new(settings: Settings, node: NodeId, seed: u64) -> Result<Self, SettingsError> {
        settings.validate()?;
        Ok(WaitingRoom {
            settings,
            node,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: KeyTree::new(),
            visitors: VisitorTable::default(),
            deadlines: Deadlines::default(),
            on_site: 0,
            rate: AdmissionRate::default(),
            kept: kept::KeptLog::default(),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Puts new settings in force while the room runs (an operator's change): every visitor
    /// keeps their place; a new limit applies from the next admission, new expiries to the
    /// tickets and passes issued or refreshed from now on.
    pub fn set_settings(&mut self, settings: Settings) -> Result<(), SettingsError> {
        settings.validate()?;
        self.settings = settings;
        Ok(())
    }

    /// Number of visitors waiting.
    pub fn queued(&self) -> u64 {
        self.queue.len() as u64
    }

    /// Number of visitors on the site: admitted and not yet expired (claimed or not).
    pub fn on_site(&self) -> u64 {
        self.on_site
    }

    /// A new visitor arrives. They are admitted at once when straight-through admission is on,
    /// nobody is waiting and the site is below target; queued otherwise.
    pub fn join(&mut self, now: Time) -> CheckIn {
        let admit = self.settings.admit_straight_through
            && self.queue.is_empty()
            && self.on_site < self.settings.target_on_site;
        self.join_as(now, admit)
    }

    /// A new visitor arrives and is admitted at once (`admit_now`) or queued: for a caller that
    /// decides straight-through admission itself (a cluster node knows the cluster's free places).
    pub fn join_as(&mut self, now: Time, admit_now: bool) -> CheckIn {
        self.join_stamped(now, (now, None), admit_now)
    }

    /// Like [`WaitingRoom::join_as`], with the visitor's place in the queue stamped `join_time`
    /// instead of `now`: a cluster node stamps join times on the cluster's reference clock so
    /// that nodes whose clocks differ do not reorder visitors. In a lottery (`seed`), the
    /// ticket id is drawn from the lottery's seed ([`lottery::drawn_id`]) and the ticket keeps
    /// the draw, so that the order can be checked afterwards.
    pub fn join_stamped(
        &mut self,
        now: Time,
        (join_time, seed): (Time, Option<&LotterySeed>),
        admit_now: bool,
    ) -> CheckIn {
        let (id, draw) = loop {
            let word = self.rng.next_u64();
            let (id, draw) = match seed {
                // Draws stay below 2^53: JSON readers that hold numbers as doubles keep them.
                Some(seed) => (lottery::drawn_id(seed, word >> 11), Some(word >> 11)),
                None => (self.visitors.issue(word), None),
            };
            if !self.visitors.contains(id) {
                break (id, draw);
            }
        };
        let mut ticket = Ticket {
            id,
            join_time,
            node: self.node,
            issued_at: now,
            next_refresh: now,
            expires_at: now,
            previous_position: None,
            eviction_time: None,
            draw,
            round: None,
        };
        if admit_now {
            self.admit(id, now, now.saturating_add(self.settings.ticket_expiry_ms));
            ticket.eviction_time = Some(now);
        } else {
            self.enqueue(ticket.key_on(self.node), now);
        }
        self.answer(now, ticket)
    }

    /// A visitor checks in with their ticket: refreshed ticket plus position, or "admitted".
    ///
    /// A valid ticket this node no longer queues (its entry expired, or it comes from another
    /// node) is queued again under its original join time, so the visitor keeps their place.
    /// An admitted ticket is not refreshed: it expires when its claim window closes
    /// (waitingroom-distributed/README.md#one-admission-one-pass).
    ///
    /// A queued ticket another node issued, for a visitor this node let out and whose admission
    /// lapsed here unclaimed, is queued again too: the visitor never learned of the admission
    /// (this node could not be reached, and another queued them meanwhile), so they keep their
    /// place under their join time, to be let out again by a round.
    pub fn check_in(&mut self, now: Time, ticket: &Ticket) -> Result<CheckIn, EngineError> {
        if now >= ticket.expires_at {
            return Err(EngineError::TicketExpired);
        }
        if ticket.eviction_time.is_none() && ticket.node != self.node {
            self.sweep_lapsed(now, ticket.id);
        }
        let mut ticket = ticket.clone();
        match self
            .visitors
            .get_mut(ticket.id)
            .map(|record| &mut record.state)
        {
            Some(Visitor::Queued { last_seen, .. }) => *last_seen = now,
            // The admission lapsed (its record is swept at the next cleanup).
            Some(Visitor::Admitted { claim_by, .. }) if *claim_by <= now => {
                return Err(EngineError::TicketExpired);
            }
            Some(Visitor::Admitted { eviction_time, .. }) => {
                ticket.eviction_time = Some(*eviction_time)
            }
            Some(Visitor::Left { .. }) => return Err(EngineError::AlreadyLeft),
            None => match ticket.eviction_time {
                // A signature of the cluster says they were let out (their node is gone): the
                // admission's claim window is the ticket's own expiry, not a new one.
                Some(eviction_time) => self.admit(ticket.id, eviction_time, ticket.expires_at),
                None => self.enqueue(ticket.key_on(self.node), now),
            },
        }
        Ok(self.answer(now, ticket))
    }

    /// An admitted visitor exchanges their ticket for a pass, within the admission's claim
    /// window. The pass follows from the admission alone ([`WaitingRoom::pass_of`]), so any node
    /// that serves this leave hands out the same pass.
    pub fn leave(&mut self, now: Time, ticket: &Ticket) -> Result<Pass, EngineError> {
        if now >= ticket.expires_at {
            return Err(EngineError::TicketExpired);
        }
        let (eviction_time, claim_by) = match self.visitors.get(ticket.id).map(|r| r.state) {
            Some(Visitor::Admitted { claim_by, .. }) if claim_by <= now => {
                return Err(EngineError::TicketExpired);
            }
            // A ticket another node issued since, naming another admission: the visitor moved
            // there while this node could not be reached (and was to forget them). That
            // node's admission is theirs; this one gives no second pass.
            Some(Visitor::Admitted { eviction_time, .. })
                if ticket.node != self.node && ticket.eviction_time != Some(eviction_time) =>
            {
                return Err(EngineError::WrongNode(ticket.node));
            }
            Some(Visitor::Admitted {
                eviction_time,
                claim_by,
            }) => (eviction_time, claim_by),
            Some(Visitor::Left { .. }) => return Err(EngineError::AlreadyLeft),
            Some(Visitor::Queued { .. }) => return Err(EngineError::NotYetAdmitted),
            None => match ticket.eviction_time {
                Some(eviction_time) => {
                    self.admit(ticket.id, eviction_time, ticket.expires_at);
                    (eviction_time, ticket.expires_at)
                }
                None => return Err(EngineError::NotYetAdmitted),
            },
        };
        let pass = self.pass_of(now, ticket, eviction_time, claim_by);
        self.set_left(ticket.id, now, pass.expires_at);
        Ok(pass)
    }

    /// The pass of an admission let out at `eviction_time` and claimable until `claim_by`: it
    /// dates from the admission (the session's longest life counts from there) and lasts a pass
    /// expiry from it, at least to the end of the claim window (so it is valid whenever the
    /// leave is served). Nothing in it depends on when or where the leave is served, but
    /// `issued_at`. With no pass expiry, passes expire at once.
    fn pass_of(&self, now: Time, ticket: &Ticket, eviction_time: Time, claim_by: Time) -> Pass {
        let expires_at = match self.settings.pass_expiry_ms {
            0 => now,
            expiry => eviction_time.saturating_add(expiry).max(claim_by),
        };
        Pass {
            id: ticket.id,
            node: self.node,
            queue_join_time: ticket.join_time,
            created_at: eviction_time,
            issued_at: now,
            expires_at,
            eviction_time,
            round: None,
            draw: ticket.draw,
        }
    }

    /// Whether `pass` lets its holder on the site at `now`.
    pub fn validate_pass(&self, now: Time, pass: &Pass) -> Result<(), EngineError> {
        if now >= pass.expires_at {
            Err(EngineError::PassExpired)
        } else {
            Ok(())
        }
    }

    /// Extends a valid pass by the pass expiry from `now`. The holder now counts as on the site
    /// of this node. A pass this node counts is extended at most once per
    /// [`WaitingRoom::refresh_min_interval`], and never shortened: a replayed older copy extends
    /// nothing and cannot cut the count short.
    pub fn refresh_pass(&mut self, now: Time, pass: &Pass) -> Result<Pass, EngineError> {
        self.validate_pass(now, pass)?;
        let end = pass
            .created_at
            .saturating_add(self.settings.pass_max_lifetime_ms);
        if pass.expires_at >= end {
            return Err(EngineError::PassLifetimeOver);
        }
        let expiry = self.settings.pass_expiry_ms;
        let counted_until = match self.visitors.get(pass.id).map(|record| record.state) {
            Some(Visitor::Left {
                pass_expires,
                counted: true,
                ..
            }) => pass_expires,
            Some(Visitor::Left { .. }) | None => 0,
            Some(_) => return Err(EngineError::UnknownPass),
        };
        // The count was last extended at `counted_until - expiry` at the latest.
        let allowed_at = counted_until
            .saturating_sub(expiry)
            .saturating_add(self.refresh_min_interval());
        if counted_until > 0 && now < allowed_at {
            return Err(EngineError::RefreshTooSoon {
                retry_after_ms: allowed_at - now,
            });
        }
        let pass_expires = now
            .saturating_add(expiry)
            .min(end)
            .max(pass.expires_at)
            .max(counted_until);
        self.set_left(pass.id, now, pass_expires);
        Ok(Pass {
            node: self.node,
            issued_at: now,
            expires_at: pass_expires,
            ..pass.clone()
        })
    }

    /// The shortest time between two extensions of a pass this node counts: a quarter of the
    /// pass expiry. Clients that refresh as documented (a gate renews a pass past half its
    /// life) never ask sooner; a client that asks in a loop is refused.
    pub fn refresh_min_interval(&self) -> Time {
        self.settings.pass_expiry_ms / 4
    }

    /// Lets visitors out of the queue until the site reaches its target. Returns who was let
    /// out, in queue order.
    pub fn evict(&mut self, now: Time) -> Vec<TicketId> {
        let room = self.settings.target_on_site.saturating_sub(self.on_site);
        let count = room.min(self.queue.len() as u64);
        let mut admitted = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let Some(key) = self.admit_head(now, now) else {
                break;
            };
            admitted.push(key.ticket);
        }
        self.rate.record(now, admitted.len() as u64);
        admitted
    }

    /// The smallest queued key: this node's QPID weight.
    pub fn head(&self) -> Option<QueueKey> {
        self.queue.first()
    }

    /// Lets the visitor at the head of the queue out; returns their key.
    pub fn admit_head(&mut self, now: Time, eviction_time: Time) -> Option<QueueKey> {
        let key = self.queue.pop_first()?;
        let claim_by = now.saturating_add(self.settings.ticket_expiry_ms);
        self.admit(key.ticket, eviction_time, claim_by);
        Some(key)
    }

    /// How many queued keys are smaller than `key`.
    pub fn rank(&self, key: &QueueKey) -> u64 {
        self.queue.rank(key) as u64
    }

    /// How many queued visitors joined before `time`: at once for the time last marked.
    pub fn queued_before(&self, time: Time) -> u64 {
        let key = QueueKey::first_at(time);
        self.queue
            .marked(&key)
            .unwrap_or_else(|| self.queue.rank(&key)) as u64
    }

    /// Keeps [`WaitingRoom::queued_before`] of `time` counted from now on, instead of searched
    /// for each time (for one time at once: a later mark replaces it).
    pub fn mark_before(&mut self, time: Time) {
        self.queue.mark(QueueKey::first_at(time));
    }

    /// The (at most) `limit` smallest queued keys that joined before `cutoff`, ascending.
    pub fn smallest_before(&self, cutoff: Time, limit: usize) -> Vec<QueueKey> {
        self.queue
            .iter()
            .take_while(|k| k.join_time < cutoff)
            .take(limit)
            .collect()
    }

    /// Drops `ticket` from the queue (the visitor is queued elsewhere now). Returns whether it
    /// was queued here.
    pub fn forget_queued(&mut self, ticket: TicketId) -> bool {
        let Some(Visitor::Queued { join_time, .. }) = self.visitors.get(ticket).map(|r| r.state)
        else {
            return false;
        };
        self.queue.remove(QueueKey {
            join_time,
            ticket,
            node: self.node,
        });
        self.visitors.remove(ticket);
        true
    }

    /// Drops the record of `ticket` if it is an admission whose claim window has closed: its
    /// place is free, as [`WaitingRoom::cleanup`] would free it.
    fn sweep_lapsed(&mut self, now: Time, ticket: TicketId) {
        if let Some(Visitor::Admitted { claim_by, .. }) = self.visitors.get(ticket).map(|r| r.state)
            && claim_by <= now
        {
            self.on_site -= 1;
            self.visitors.remove(ticket);
        }
    }

    /// Stops counting the pass `ticket` got here: it was refreshed on another node, which
    /// counts it now (a visitor's place on the site is counted by one node). The record stays,
    /// so the ticket is still refused a second pass. Returns whether it was counted.
    pub fn uncount_pass(&mut self, ticket: TicketId) -> bool {
        let Some(record) = self.visitors.get_mut(ticket) else {
            return false;
        };
        match &mut record.state {
            Visitor::Left { counted, .. } if *counted => {
                *counted = false;
                self.on_site -= 1;
                self.kept.touch(ticket);
                true
            }
            _ => false,
        }
    }

    /// Whether `ticket` was let out and has not left yet.
    pub fn is_admitted(&self, ticket: TicketId) -> bool {
        matches!(
            self.visitors.get(ticket).map(|r| r.state),
            Some(Visitor::Admitted { .. })
        )
    }

    /// Whether this room has any record of `ticket` (queued, admitted, or left).
    pub fn knows(&self, ticket: TicketId) -> bool {
        self.visitors.contains(ticket)
    }

    /// Fetches `ticket`'s record into the cache without waiting for it (a hint: changes nothing).
    pub fn prefetch(&self, ticket: TicketId) {
        self.visitors.prefetch(ticket);
    }

    /// Drops queue entries whose visitor stopped checking in, admissions never claimed, and
    /// passes that expired. Cost is proportional to what expired, times log n.
    pub fn cleanup(&mut self, now: Time) {
        while let Some((_, id)) = self.deadlines.pop_due(now) {
            let Some(&Record { state, armed }) = self.visitors.get(id) else {
                continue;
            };
            if armed > now {
                // A live entry comes later; nothing of this visitor is due yet.
                continue;
            }
            let next = match state {
                Visitor::Queued {
                    last_seen,
                    join_time,
                    ..
                } => {
                    if last_seen.saturating_add(self.settings.queue_entry_ttl_ms()) <= now {
                        self.queue.remove(QueueKey {
                            join_time,
                            ticket: id,
                            node: self.node,
                        });
                        None
                    } else {
                        Some(state)
                    }
                }
                Visitor::Admitted { claim_by, .. } => {
                    if claim_by <= now {
                        self.on_site -= 1;
                        None
                    } else {
                        Some(state)
                    }
                }
                Visitor::Left {
                    pass_expires,
                    forget_at,
                    counted,
                } => {
                    let still_counted = counted && pass_expires > now;
                    if counted && !still_counted {
                        self.on_site -= 1;
                    }
                    (forget_at > now || still_counted).then_some(Visitor::Left {
                        pass_expires,
                        forget_at,
                        counted: still_counted,
                    })
                }
            };
            match next {
                Some(state) => {
                    let due = self.deadline(&state);
                    self.visitors.insert(id, Record { state, armed: due });
                    self.deadlines.push(due, id);
                }
                None => {
                    self.visitors.remove(id);
                }
            }
        }
    }

    /// When `state` next needs the attention of [`WaitingRoom::cleanup`].
    fn deadline(&self, state: &Visitor) -> Time {
        match *state {
            Visitor::Queued { last_seen, .. } => {
                last_seen.saturating_add(self.settings.queue_entry_ttl_ms())
            }
            Visitor::Admitted { claim_by, .. } => claim_by,
            Visitor::Left {
                pass_expires,
                forget_at,
                counted,
            } => {
                if counted {
                    pass_expires
                } else {
                    forget_at
                }
            }
        }
    }

    /// Records `state` for `id`, adding a deadline entry only when the current one would come
    /// due too late.
    fn set_state(&mut self, id: TicketId, state: Visitor) {
        let due = self.deadline(&state);
        match self.visitors.get_mut(id) {
            Some(record) => {
                record.state = state;
                if due < record.armed {
                    record.armed = due;
                    self.deadlines.push(due, id);
                }
            }
            None => {
                self.visitors.insert(id, Record { state, armed: due });
                self.deadlines.push(due, id);
            }
        }
    }

    /// Queues `key`, of a visitor this node has no record of.
    fn enqueue(&mut self, key: QueueKey, now: Time) {
        debug_assert!(key.node == self.node && !self.visitors.contains(key.ticket));
        self.queue.insert(key);
        self.set_state(
            key.ticket,
            Visitor::Queued {
                last_seen: now,
                join_time: key.join_time,
                seen: SeenRank::NONE,
            },
        );
    }

    /// Marks `id` let out at `eviction_time` (the decision; now, or earlier); the place is
    /// held until `claim_by`, the end of the admission's claim window.
    fn admit(&mut self, id: TicketId, eviction_time: Time, claim_by: Time) {
        self.set_state(
            id,
            Visitor::Admitted {
                eviction_time,
                claim_by,
            },
        );
        self.on_site += 1;
        self.kept.touch(id);
    }

    fn set_left(&mut self, id: TicketId, now: Time, pass_expires: Time) {
        let was_counted = self
            .visitors
            .get(id)
            .is_some_and(|record| visitor_counted(&record.state));
        let counted = pass_expires > now;
        match (was_counted, counted) {
            (false, true) => self.on_site += 1,
            (true, false) => self.on_site -= 1,
            _ => {}
        }
        let forget_at = now.saturating_add(self.settings.ticket_expiry_ms);
        self.kept.touch(id);
        self.set_state(
            id,
            Visitor::Left {
                pass_expires,
                forget_at,
                counted,
            },
        );
    }

    fn answer(&mut self, now: Time, mut ticket: Ticket) -> CheckIn {
        ticket.node = self.node;
        ticket.issued_at = now;
        ticket.next_refresh =
            now.saturating_add(refresh_after(self.settings.refresh_interval_ms, ticket.id));
        ticket.expires_at = now.saturating_add(self.settings.ticket_expiry_ms);
        let state = self
            .visitors
            .get_mut(ticket.id)
            .map(|record| &mut record.state);
        let (status, eta_ms) = match state {
            Some(Visitor::Admitted {
                eviction_time,
                claim_by,
            }) => {
                // The claim window does not move: an admission left unused lapses, whoever
                // keeps checking in with it.
                ticket.eviction_time = Some(*eviction_time);
                ticket.expires_at = *claim_by;
                (CheckInStatus::Admitted, None)
            }
            state => {
                let key = ticket.key_on(self.node);
                let rank = rank_of(&self.queue, state, &key) as u64 + 1;
                let position = ticket.previous_position.map_or(rank, |p| p.min(rank));
                ticket.previous_position = Some(position);
                (
                    CheckInStatus::Queued { position },
                    self.rate.eta_ms(position),
                )
            }
        };
        CheckIn {
            status,
            ticket,
            eta_ms,
            starts_in_ms: None,
        }
    }
}

/// How many queued keys are below `key`, from the note its visitor's record keeps when that
/// still holds (`SeenRank`), else by a search noted for next time.
fn rank_of(queue: &KeyTree, state: Option<&mut Visitor>, key: &QueueKey) -> usize {
    let Some(Visitor::Queued {
        join_time, seen, ..
    }) = state
    else {
        return queue.rank(key);
    };
    if *join_time != key.join_time {
        return queue.rank(key);
    }
    let (rank, noted) = match queue.rank_again(key, *seen) {
        Some((rank, noted)) => {
            debug_assert_eq!(rank, queue.rank(key), "a noted rank went stale");
            (rank, noted)
        }
        None => queue.rank_noted(key),
    };
    *seen = noted;
    rank
}

/// The refresh interval give or take up to a tenth, by ticket id: visitors who joined together
/// drift apart instead of checking in in waves.
fn refresh_after(interval: Time, id: TicketId) -> Time {
    let spread = interval / 10;
    if spread == 0 {
        return interval;
    }
    let mixed = id.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    interval - spread + mixed % (2 * spread + 1)
}

/// Whether a visitor holds one of the site's places.
fn visitor_counted(visitor: &Visitor) -> bool {
    match visitor {
        Visitor::Queued { .. } => false,
        Visitor::Admitted { .. } => true,
        Visitor::Left { counted, .. } => *counted,
    }
}

/// Admissions per millisecond, smoothed over eviction rounds.
#[derive(Debug, Clone, Default)]
struct AdmissionRate {
    last: Option<Time>,
    per_ms: f64,
}

impl AdmissionRate {
    fn record(&mut self, now: Time, admitted: u64) {
        if let Some(last) = self.last
            && now > last
        {
            let sample = admitted as f64 / (now - last) as f64;
            self.per_ms = if self.per_ms == 0.0 {
                sample
            } else {
                0.7 * self.per_ms + 0.3 * sample
            };
        }
        self.last = Some(now);
    }

    fn eta_ms(&self, position: u64) -> Option<u64> {
        (self.per_ms > 0.0).then(|| (position as f64 / self.per_ms) as u64)
    }
}

/// Sorted runs this deep cover every kind of deadline the engine sets (ticket expiry, claim,
/// pass expiry, forgetting) plus re-armed ones.
const LANES: usize = 4;

/// Pending deadlines, taken out earliest first.
///
/// A binary heap alone sifts through some twenty levels of a multi-megabyte array per pop, one
/// cache miss each. But deadlines are set as "now plus a fixed delay", so they arrive in a few
/// interleaved ascending runs: each run goes to the back of a FIFO lane and leaves from its
/// front, touching memory in order. Whatever fits no lane goes to the heap.
#[derive(Debug, Clone, Default)]
struct Deadlines {
    lanes: [VecDeque<(Time, TicketId)>; LANES],
    heap: BinaryHeap<Reverse<(Time, TicketId)>>,
}

impl Deadlines {
    fn push(&mut self, due: Time, id: TicketId) {
        // The lane whose last deadline is the latest one not after `due` keeps the other lanes
        // free for runs further behind.
        let mut best: Option<(usize, Time)> = None;
        let mut empty = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.back() {
                Some(&(last, _)) if last <= due => {
                    if best.is_none_or(|(_, best_last)| last > best_last) {
                        best = Some((i, last));
                    }
                }
                Some(_) => {}
                None => {
                    empty.get_or_insert(i);
                }
            }
        }
        match best.map(|(i, _)| i).or(empty) {
            Some(i) => self.lanes[i].push_back((due, id)),
            None => self.heap.push(Reverse((due, id))),
        }
    }

    /// Takes out the earliest deadline if it is due at `now`.
    fn pop_due(&mut self, now: Time) -> Option<(Time, TicketId)> {
        let mut earliest = self.heap.peek().map(|&Reverse((due, _))| (due, None));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(&(due, _)) = lane.front()
                && earliest.is_none_or(|(best, _)| due < best)
            {
                earliest = Some((due, Some(i)));
            }
        }
        match earliest? {
            (due, _) if due > now => None,
            (_, Some(i)) => self.lanes[i].pop_front(),
            (_, None) => self.heap.pop().map(|Reverse(deadline)| deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn room(settings: Settings) -> WaitingRoom {
        WaitingRoom::new(settings, NodeId(1), 5).unwrap()
    }

    fn queued_only() -> Settings {
        Settings {
            target_on_site: 1,
            admit_straight_through: false,
            refresh_interval_ms: 2_000,
            ticket_expiry_ms: 30_000,
            pass_expiry_ms: 5_000,
            ..Settings::default()
        }
    }

    #[test]
    fn silent_queued_visitor_is_dropped_and_keeps_their_place_on_return() {
        // Refresh every 2 s: an entry not checked in for 6 s is dropped.
        let mut room = room(queued_only());
        let silent = room.join(0);
        let active = room.join(10);
        assert_eq!(active.status, CheckInStatus::Queued { position: 2 });
        let active = room.check_in(4_000, &active.ticket).unwrap();
        room.cleanup(5_999);
        assert_eq!(room.queued(), 2);
        room.cleanup(6_000);
        assert_eq!(room.queued(), 1, "the silent visitor's entry is gone");
        let active = room.check_in(6_001, &active.ticket).unwrap();
        assert_eq!(active.status, CheckInStatus::Queued { position: 1 });
        // The silent visitor comes back with a valid ticket: first in line again.
        let back = room.check_in(7_000, &silent.ticket).unwrap();
        assert_eq!(back.status, CheckInStatus::Queued { position: 1 });
        room.cleanup(12_001);
        assert_eq!(room.queued(), 1, "dropped 6 s after their last check-in");
        room.cleanup(13_000);
        assert_eq!(room.queued(), 0);
        // After the ticket expiry the ticket itself is refused.
        assert_eq!(
            room.check_in(37_001, &back.ticket),
            Err(EngineError::TicketExpired)
        );
    }

    #[test]
    fn unclaimed_admission_frees_its_place() {
        let mut room = room(queued_only());
        let first = room.join(0);
        let second = room.join(1);
        assert_eq!(room.evict(1_000), vec![first.ticket.id]);
        assert_eq!(room.on_site(), 1);
        assert!(room.evict(2_000).is_empty());
        let mut ticket = second.ticket.clone();
        for t in (3_000..=31_000).step_by(2_000) {
            ticket = room.check_in(t, &ticket).unwrap().ticket;
        }
        room.cleanup(30_999);
        assert_eq!(room.on_site(), 1);
        room.cleanup(31_000);
        assert_eq!(room.on_site(), 0);
        assert_eq!(room.evict(31_000), vec![second.ticket.id]);
    }

    #[test]
    fn pass_shorter_than_ticket_lasts_to_the_claim_window_and_expires_on_time() {
        // A pass expiry (5 s) shorter than the claim window (30 s): the pass lasts to the end
        // of the window, whenever the leave is served, and its place is freed then.
        let mut room = room(queued_only());
        let visitor = room.join(0);
        room.evict(1_000);
        let visitor = room.check_in(1_500, &visitor.ticket).unwrap();
        assert_eq!(visitor.status, CheckInStatus::Admitted);
        assert_eq!(visitor.ticket.expires_at, 31_000);
        let pass = room.leave(2_000, &visitor.ticket).unwrap();
        assert_eq!((pass.created_at, pass.expires_at), (1_000, 31_000));
        assert_eq!(room.on_site(), 1);
        room.cleanup(30_999);
        assert_eq!(room.on_site(), 1);
        room.cleanup(31_000);
        assert_eq!(room.on_site(), 0);
        assert_eq!(
            room.leave(30_999, &visitor.ticket),
            Err(EngineError::AlreadyLeft)
        );
        room.cleanup(62_000);
        assert_eq!(
            room.refresh_pass(31_001, &pass),
            Err(EngineError::PassExpired)
        );
    }

    /// An admission is used once, within its claim window: checking in does not extend it, and
    /// once it has lapsed the ticket is refused here and by a room without its record (a node
    /// that takes over from a dead owner), while the next visitor gets the place.
    #[test]
    fn an_admission_lapses_at_its_claim_window_whoever_checks_in() {
        let mut owner = queued_room(1);
        let a = owner.join(0);
        let b = owner.join(1);
        owner.evict(1_000);
        let mut ticket = a.ticket;
        for t in [2_000, 5_000, 9_000, 10_999] {
            let c = owner.check_in(t, &ticket).unwrap();
            assert_eq!(c.status, CheckInStatus::Admitted);
            assert_eq!(
                c.ticket.expires_at, 11_000,
                "the claim window does not move"
            );
            ticket = c.ticket;
        }
        let mut b_ticket = owner.check_in(10_000, &b.ticket).unwrap().ticket;
        assert_eq!(
            owner.check_in(11_000, &ticket),
            Err(EngineError::TicketExpired)
        );
        assert_eq!(
            owner.leave(11_000, &ticket),
            Err(EngineError::TicketExpired)
        );
        owner.cleanup(11_000);
        assert_eq!(owner.evict(11_000), vec![b.ticket.id]);
        b_ticket = owner.check_in(11_001, &b_ticket).unwrap().ticket;
        owner.leave(11_002, &b_ticket).unwrap();
        // Elsewhere, no record: the same lapsed ticket gets nothing either.
        let mut heir = WaitingRoom::new(queued_room(1).settings().clone(), NodeId(8), 2).unwrap();
        assert_eq!(
            heir.check_in(11_000, &ticket),
            Err(EngineError::TicketExpired)
        );
        assert_eq!(heir.leave(12_000, &ticket), Err(EngineError::TicketExpired));
        assert_eq!(heir.on_site(), 0);
    }

    /// A visitor let out here who never heard of it (this node could not be reached), and was
    /// queued at another node meanwhile, comes back with that node's ticket: told of the
    /// admission while it holds, and once it has lapsed queued again under their join time,
    /// the lapsed place freed.
    #[test]
    fn a_lapsed_admission_never_heard_of_is_queued_again_with_another_nodes_ticket() {
        let mut owner = queued_room(1);
        let a = owner.join(0);
        owner.evict(1_000);
        assert_eq!(owner.on_site(), 1);
        let mut elsewhere = WaitingRoom::new(owner.settings().clone(), NodeId(8), 2).unwrap();
        let moved = elsewhere.check_in(2_000, &a.ticket).unwrap();
        assert_eq!(moved.status, CheckInStatus::Queued { position: 1 });
        let moved = elsewhere.check_in(9_000, &moved.ticket).unwrap().ticket;
        let told = owner.check_in(10_500, &moved).unwrap();
        assert_eq!(told.status, CheckInStatus::Admitted, "while it holds");
        let back = owner.check_in(11_000, &moved).unwrap();
        assert_eq!(back.status, CheckInStatus::Queued { position: 1 });
        assert_eq!(back.ticket.join_time, a.ticket.join_time);
        assert_eq!(owner.on_site(), 0, "the lapsed admission's place is free");
        assert_eq!(owner.evict(11_500), vec![a.ticket.id], "let out by a round");
    }

    /// Any room serving the leave of one admission hands out the same pass: same id, same
    /// creation (the admission) and expiry, whether it holds the record or only the ticket.
    #[test]
    fn the_pass_of_an_admission_is_the_same_wherever_the_leave_is_served() {
        let mut owner = queued_room(1);
        let a = owner.join(0);
        owner.evict(1_000);
        let admitted = owner.check_in(3_000, &a.ticket).unwrap().ticket;
        let mut heir = WaitingRoom::new(owner.settings().clone(), NodeId(8), 2).unwrap();
        let c = heir.check_in(4_000, &admitted).unwrap();
        assert_eq!(c.status, CheckInStatus::Admitted);
        assert_eq!(c.ticket.expires_at, 11_000, "the owner's claim window");
        let there = heir.leave(9_000, &admitted).unwrap();
        let here = owner.leave(5_000, &admitted).unwrap();
        let key = |p: &Pass| (p.id, p.created_at, p.expires_at, p.eviction_time);
        assert_eq!(key(&there), key(&here));
        assert_eq!(key(&here), (a.ticket.id, 1_000, 61_000, 1_000));
        assert_eq!(heir.leave(9_001, &admitted), Err(EngineError::AlreadyLeft));
    }

    /// A visitor let out here who moved to another node meanwhile (this one could not be
    /// reached) and was let out there by another round holds that node's ticket: shown here, it
    /// gets no second pass, while that node's copy of this admission's ticket gets this one.
    #[test]
    fn a_ticket_another_node_issued_for_another_admission_gets_no_pass_here() {
        let mut owner = queued_room(1);
        let a = owner.join(0);
        owner.evict(1_000);
        let moved = Ticket {
            node: NodeId(8),
            eviction_time: Some(5_000),
            ..a.ticket.clone()
        };
        assert_eq!(
            owner.leave(6_000, &moved),
            Err(EngineError::WrongNode(NodeId(8)))
        );
        let carried = Ticket {
            eviction_time: Some(1_000),
            ..moved
        };
        let pass = owner.leave(6_001, &carried).unwrap();
        assert_eq!((pass.created_at, pass.eviction_time), (1_000, 1_000));
    }

    proptest! {
        /// Deadlines come out exactly as from one binary heap: earliest first, and only once due.
        #[test]
        fn deadlines_match_a_heap(
            ops in prop::collection::vec((any::<bool>(), 0..60u64, 0..6u64, 0..50u64), 1..400)
        ) {
            let mut deadlines = Deadlines::default();
            let mut model: BTreeMap<(Time, TicketId), usize> = BTreeMap::new();
            let mut now = 0;
            for (step, (push, jitter, run, advance)) in ops.into_iter().enumerate() {
                if push {
                    // A few interleaved, mostly ascending runs, as the engine makes.
                    let due = now + run * 100 + jitter;
                    let id = TicketId(step as u64);
                    deadlines.push(due, id);
                    *model.entry((due, id)).or_default() += 1;
                } else {
                    now += advance;
                    let earliest = model.keys().next().copied().filter(|&(due, _)| due <= now);
                    let popped = deadlines.pop_due(now);
                    prop_assert_eq!(popped.map(|(due, _)| due), earliest.map(|(due, _)| due));
                    if let Some(popped) = popped {
                        let count = model.get_mut(&popped).expect("popped what was pushed");
                        *count -= 1;
                        if *count == 0 {
                            model.remove(&popped);
                        }
                    }
                }
            }
            let mut rest = Vec::new();
            while let Some(deadline) = deadlines.pop_due(Time::MAX) {
                rest.push(deadline);
            }
            prop_assert!(rest.windows(2).all(|pair| pair[0].0 <= pair[1].0));
            rest.sort_unstable();
            let expected: Vec<(Time, TicketId)> = model
                .into_iter()
                .flat_map(|(deadline, count)| std::iter::repeat_n(deadline, count))
                .collect();
            prop_assert_eq!(rest, expected);
        }
    }

    fn queued_room(target: u64) -> WaitingRoom {
        let settings = Settings {
            target_on_site: target,
            admit_straight_through: false,
            refresh_interval_ms: 1_000,
            ticket_expiry_ms: 10_000,
            pass_expiry_ms: 60_000,
            ..Settings::default()
        };
        WaitingRoom::new(settings, NodeId(7), 1).unwrap()
    }

    fn position(c: &CheckIn) -> u64 {
        match c.status {
            CheckInStatus::Queued { position } => position,
            CheckInStatus::Admitted => 0,
        }
    }

    #[test]
    fn visitors_are_admitted_in_join_order() {
        let mut room = queued_room(3);
        let visitors: Vec<_> = (0..10).map(|t| room.join(t)).collect();
        for (i, v) in visitors.iter().enumerate() {
            assert_eq!(position(v), i as u64 + 1);
        }
        let admitted = room.evict(100);
        let expected: Vec<_> = visitors[..3].iter().map(|v| v.ticket.id).collect();
        assert_eq!(admitted, expected);
        assert_eq!(room.on_site(), 3);
        assert_eq!(room.queued(), 7);
        // The site is full: nobody else gets in until someone's place frees up.
        assert!(room.evict(1_100).is_empty());
        let c = room.check_in(200, &visitors[3].ticket).unwrap();
        assert_eq!(position(&c), 1);
    }

    #[test]
    fn refresh_times_spread_within_a_tenth() {
        let mut seen = std::collections::BTreeSet::new();
        for id in 0..1_000u64 {
            let r = refresh_after(2_000, TicketId(id.wrapping_mul(0x1234_5678_9abc_def1)));
            assert!((1_800..=2_200).contains(&r));
            seen.insert(r / 100);
        }
        assert!(seen.len() >= 4, "spread over the whole window: {seen:?}");
        assert_eq!(refresh_after(5, TicketId(7)), 5);
    }

    #[test]
    fn check_in_refreshes_the_ticket_and_position_never_rises() {
        let mut room = queued_room(1);
        let a = room.join(0);
        let b = room.join(1);
        let b = room.check_in(500, &b.ticket).unwrap();
        assert_eq!(position(&b), 2);
        assert_eq!(b.ticket.issued_at, 500);
        // The refresh interval (1 s), give or take a tenth.
        assert!((1_400..=1_600).contains(&b.ticket.next_refresh));
        assert_eq!(b.ticket.expires_at, 10_500);
        // `a` stops checking in and expires; `b`, checking in, moves up.
        let mut b = b;
        for t in (1_500..=9_500).step_by(1_000) {
            b = room.check_in(t, &b.ticket).unwrap();
            room.cleanup(t);
        }
        room.cleanup(10_001);
        assert_eq!(room.queued(), 1);
        let b = room.check_in(10_002, &b.ticket).unwrap();
        assert_eq!(position(&b), 1);
        // Came back late: their expired ticket is refused.
        assert_eq!(
            room.check_in(10_003, &a.ticket),
            Err(EngineError::TicketExpired)
        );
        // A later joiner whose ticket says they were shown 1 is never shown more.
        let c = room.join(10_004);
        let mut late = c.ticket.clone();
        late.previous_position = Some(1);
        assert_eq!(position(&room.check_in(10_005, &late).unwrap()), 1);
    }

    #[test]
    fn leave_gives_a_pass_once() {
        let mut room = queued_room(5);
        let v = room.join(0);
        assert_eq!(room.leave(1, &v.ticket), Err(EngineError::NotYetAdmitted));
        room.evict(1_000);
        let v = room.check_in(1_001, &v.ticket).unwrap();
        assert_eq!(v.status, CheckInStatus::Admitted);
        assert_eq!(v.ticket.eviction_time, Some(1_000));
        let pass = room.leave(1_002, &v.ticket).unwrap();
        assert_eq!(pass.eviction_time, 1_000);
        assert_eq!((pass.created_at, pass.expires_at), (1_000, 61_000));
        assert_eq!(room.leave(1_003, &v.ticket), Err(EngineError::AlreadyLeft));
        assert_eq!(
            room.check_in(1_003, &v.ticket).unwrap_err(),
            EngineError::AlreadyLeft
        );
    }

    #[test]
    fn passes_expire_and_free_their_place() {
        let mut room = queued_room(1);
        let a = room.join(0);
        let b = room.join(1);
        room.evict(1_000);
        let a = room.check_in(1_001, &a.ticket).unwrap();
        let pass = room.leave(1_002, &a.ticket).unwrap();
        room.validate_pass(2_000, &pass).unwrap();
        let pass = room.refresh_pass(30_000, &pass).unwrap();
        assert_eq!(pass.expires_at, 90_000);
        assert!(room.evict(60_000).is_empty());
        // b kept checking in all along.
        let mut ticket = b.ticket.clone();
        for t in (2_000..=95_000).step_by(1_000) {
            ticket = room.check_in(t, &ticket).unwrap().ticket;
            room.cleanup(t);
        }
        assert_eq!(
            room.validate_pass(90_000, &pass),
            Err(EngineError::PassExpired)
        );
        assert_eq!(room.on_site(), 0);
        assert_eq!(room.evict(95_000), vec![b.ticket.id]);
    }

    /// Refreshes extend a pass up to its longest lifetime from creation, and no further: the
    /// last refresh is cut to it, the next is refused. (Before: a pass could be refreshed
    /// forever.)
    #[test]
    fn a_pass_is_refreshed_no_longer_than_its_longest_lifetime() {
        let mut room = WaitingRoom::new(
            Settings {
                refresh_interval_ms: 100,
                ticket_expiry_ms: 500,
                pass_expiry_ms: 1_000,
                pass_max_lifetime_ms: 2_500,
                ..queued_only()
            },
            NodeId(1),
            7,
        )
        .unwrap();
        let v = room.join(900);
        room.evict(1_000);
        let v = room.check_in(1_001, &v.ticket).unwrap();
        let pass = room.leave(1_002, &v.ticket).unwrap();
        assert_eq!(pass.expires_at, 2_000);
        assert_eq!(
            room.refresh_pass(1_200, &pass),
            Err(EngineError::RefreshTooSoon { retry_after_ms: 50 }),
            "a quarter of the pass expiry after the admission"
        );
        let pass = room.refresh_pass(1_900, &pass).unwrap();
        assert_eq!(pass.expires_at, 2_900);
        let pass = room.refresh_pass(2_800, &pass).unwrap();
        assert_eq!(
            pass.expires_at, 3_500,
            "cut to created_at (the admission) + 2,500"
        );
        assert_eq!(
            room.refresh_pass(3_400, &pass),
            Err(EngineError::PassLifetimeOver)
        );
    }

    /// A pass refreshed on another node is counted there: here it stops counting, once, and
    /// the ticket still gets no second pass.
    #[test]
    fn a_pass_counted_elsewhere_is_uncounted_here_once() {
        let mut room = queued_room(1);
        let v = room.join(0);
        room.evict(1_000);
        let v = room.check_in(1_001, &v.ticket).unwrap();
        room.leave(1_002, &v.ticket).unwrap();
        assert_eq!(room.on_site(), 1);
        assert!(room.uncount_pass(v.ticket.id));
        assert!(!room.uncount_pass(v.ticket.id));
        assert_eq!(room.on_site(), 0);
        assert_eq!(room.leave(1_003, &v.ticket), Err(EngineError::AlreadyLeft));
        room.cleanup(100_000);
        assert_eq!(room.on_site(), 0);
    }

    #[test]
    fn unclaimed_admissions_free_their_place() {
        let mut room = queued_room(1);
        room.join(0);
        let b = room.join(1);
        room.evict(1_000);
        assert_eq!(room.on_site(), 1);
        let b = room.check_in(9_000, &b.ticket).unwrap();
        room.cleanup(11_000);
        assert_eq!(room.on_site(), 0);
        room.check_in(11_001, &b.ticket).unwrap();
        assert_eq!(room.evict(12_000), vec![b.ticket.id]);
    }

    #[test]
    fn straight_through_admits_only_while_below_target_and_nobody_waits() {
        let settings = Settings {
            target_on_site: 2,
            admit_straight_through: true,
            ..Settings::default()
        };
        let mut room = WaitingRoom::new(settings, NodeId(1), 3).unwrap();
        assert_eq!(room.join(0).status, CheckInStatus::Admitted);
        assert_eq!(room.join(1).status, CheckInStatus::Admitted);
        assert_eq!(room.join(2).status, CheckInStatus::Queued { position: 1 });
        assert_eq!(room.on_site(), 2);
    }

    #[test]
    fn a_ticket_from_elsewhere_is_requeued_under_its_join_time() {
        let mut room = queued_room(1);
        let early = Ticket {
            id: TicketId(99),
            join_time: 5,
            node: NodeId(3),
            issued_at: 5,
            next_refresh: 1_005,
            expires_at: 10_005,
            previous_position: Some(4),
            eviction_time: None,
            draw: None,
            round: None,
        };
        room.join(10);
        let c = room.check_in(20, &early).unwrap();
        assert_eq!(position(&c), 1);
        assert_eq!(c.ticket.node, NodeId(7));
        assert_eq!(room.evict(1_000), vec![TicketId(99)]);
    }

    #[test]
    fn same_seed_same_tickets() {
        let mut a = queued_room(1);
        let mut b = queued_room(1);
        for t in 0..100 {
            assert_eq!(a.join(t).ticket, b.join(t).ticket);
        }
    }
}
