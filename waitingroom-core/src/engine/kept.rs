//! What a room must not forget when its process restarts (waitingroom-distributed/README.md#durable-state):
//! the visitors it let out who still hold a place (in their admission's claim window, or with
//! a pass it counts) and the tickets already exchanged for a pass, which get no second one.
//! Queued visitors are not kept: their tickets keep their places, and checking in again queues
//! them under their join time.
//!
//! A driver takes [`WaitingRoom::kept_visitors`] when [`WaitingRoom::kept_changes`] moved and
//! gives it back with [`WaitingRoom::restore_visitors`] before the restarted room serves anyone.
//! All of them is linear in the visitors the room knows; a driver that keeps them at every
//! change takes only the visitors changed since it last asked ([`WaitingRoom::take_kept_delta`])
//! and appends those, so keeping costs a constant per visitor let out, not the whole room.

use serde::{Deserialize, Serialize};

use super::{Record, Visitor, WaitingRoom};
use crate::types::{TicketId, Time};

/// Most visitors remembered as changed between two takes of the delta: past it the room
/// forgets which (memory stays bounded for an embedder that never asks) and the next taker
/// keeps them all.
const DELTA_CAP: usize = 4_096;

/// The changes a restart must not forget: how many, and which visitors since last taken.
#[derive(Debug, Clone, Default)]
pub(super) struct KeptLog {
    changes: u64,
    changed: Vec<TicketId>,
    /// More than [`DELTA_CAP`] changed since last taken, or all of them (a restore).
    all: bool,
}

impl KeptLog {
    /// Visitor `ticket` changed in a way a restart must not forget.
    pub(super) fn touch(&mut self, ticket: TicketId) {
        self.changes += 1;
        if self.all {
            return;
        }
        if self.changed.len() == DELTA_CAP {
            self.all = true;
            self.changed = Vec::new();
            return;
        }
        self.changed.push(ticket);
    }

    /// Every visitor changed (or may have).
    fn touch_all(&mut self) {
        self.changes += 1;
        self.all = true;
        self.changed = Vec::new();
    }
}

/// One visitor let out, as a restart keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeptVisitor {
    /// Let out at `eviction_time`, holding a place until `claim_by` unless they leave first.
    Admitted {
        /// Their ticket.
        ticket: TicketId,
        /// When the round that let them out decided.
        eviction_time: Time,
        /// The end of the admission's claim window.
        claim_by: Time,
    },
    /// Exchanged their ticket for a pass: counted until `pass_expires` while `counted`, the
    /// ticket refused another pass until `forget_at`.
    Left {
        /// Their ticket (the pass's id).
        ticket: TicketId,
        /// When the pass this room counts expires.
        pass_expires: Time,
        /// When the ticket has expired anyway.
        forget_at: Time,
        /// Whether this room counts the pass (not once it is counted elsewhere).
        counted: bool,
    },
}

impl WaitingRoom {
    /// Bumped whenever a visitor is let out, leaves, has their pass extended here or counted
    /// elsewhere: a driver that keeps [`WaitingRoom::kept_visitors`] on disk writes them when this
    /// moved (expiries do not move it: what expired is dropped on restore).
    pub fn kept_changes(&self) -> u64 {
        self.kept.changes
    }

    /// Every visitor let out here whom a restart must not forget, by ticket. Linear in the
    /// visitors this room knows: taken when [`WaitingRoom::kept_changes`] moved, not per request.
    pub fn kept_visitors(&self) -> Vec<KeptVisitor> {
        let all = self.visitors.iter();
        let mut kept: Vec<KeptVisitor> = all.filter_map(|(t, r)| kept_form(t, r)).collect();
        kept.sort_unstable_by_key(KeptVisitor::ticket);
        kept
    }

    /// The visitors changed since this was last called, as a restart keeps them now (a visitor
    /// no longer kept, queued again or forgotten, is left out: what they were expires on
    /// restore), or None when they cannot be told apart from the rest (too many, or a restore
    /// since): then the taker keeps [`WaitingRoom::kept_visitors`] whole. Each call starts a
    /// new delta.
    pub fn take_kept_delta(&mut self) -> Option<Vec<KeptVisitor>> {
        let log = &mut self.kept;
        let changed = std::mem::take(&mut log.changed);
        if std::mem::take(&mut log.all) {
            return None;
        }
        let mut delta: Vec<KeptVisitor> = (changed.into_iter())
            .filter_map(|t| kept_form(t, self.visitors.get(t)?))
            .collect();
        delta.sort_unstable_by_key(KeptVisitor::ticket);
        delta.dedup_by_key(|k| k.ticket());
        Some(delta)
    }

    /// Gives back what an earlier life of this room kept, before it serves anyone: each
    /// visitor still on the site counts again until their claim window or pass ends, and a
    /// used ticket stays refused another pass. What has expired by `now` is dropped.
    pub fn restore_visitors(&mut self, now: Time, kept: &[KeptVisitor]) {
        for k in kept {
            let state = match *k {
                KeptVisitor::Admitted {
                    eviction_time,
                    claim_by,
                    ..
                } if claim_by > now => Visitor::Admitted {
                    eviction_time,
                    claim_by,
                },
                KeptVisitor::Left {
                    pass_expires,
                    forget_at,
                    counted,
                    ..
                } => {
                    let counted = counted && pass_expires > now;
                    if !counted && forget_at <= now {
                        continue;
                    }
                    Visitor::Left {
                        pass_expires,
                        forget_at,
                        counted,
                    }
                }
                KeptVisitor::Admitted { .. } => continue,
            };
            let ticket = k.ticket();
            if self.visitors.contains(ticket) {
                continue;
            }
            if super::visitor_counted(&state) {
                self.on_site += 1;
            }
            let due = self.deadline(&state);
            self.visitors.insert(ticket, Record { state, armed: due });
            self.deadlines.push(due, ticket);
        }
        self.kept.touch_all();
    }
}

/// What a restart keeps of visitor `ticket`: nothing while queued.
fn kept_form(ticket: TicketId, record: &Record) -> Option<KeptVisitor> {
    match record.state {
        Visitor::Queued { .. } => None,
        Visitor::Admitted {
            eviction_time,
            claim_by,
        } => Some(KeptVisitor::Admitted {
            ticket,
            eviction_time,
            claim_by,
        }),
        Visitor::Left {
            pass_expires,
            forget_at,
            counted,
        } => Some(KeptVisitor::Left {
            ticket,
            pass_expires,
            forget_at,
            counted,
        }),
    }
}

impl KeptVisitor {
    /// The visitor's ticket.
    pub fn ticket(&self) -> TicketId {
        match *self {
            KeptVisitor::Admitted { ticket, .. } | KeptVisitor::Left { ticket, .. } => ticket,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineError, Settings};

    fn settings() -> Settings {
        Settings {
            target_on_site: 2,
            admit_straight_through: true,
            ..Settings::default()
        }
    }

    /// A restarted room given what its earlier life kept counts the visitors that earlier life
    /// let out, lets nobody in over them, and refuses a used ticket another pass.
    #[test]
    fn a_restored_room_counts_its_visitors_and_refuses_a_second_pass() {
        let mut before = WaitingRoom::new(settings(), crate::NodeId(1), 7).unwrap();
        let first = before.join(0);
        let second = before.join(0);
        assert_eq!(before.on_site(), 2);
        let changes = before.kept_changes();
        before.leave(10, &first.ticket).unwrap();
        assert!(
            before.kept_changes() > changes,
            "a leave is a change to keep"
        );
        let kept = before.kept_visitors();
        assert_eq!(kept.len(), 2);

        let mut after = WaitingRoom::new(settings(), crate::NodeId(1), 8).unwrap();
        after.restore_visitors(20, &kept);
        assert_eq!(after.on_site(), 2, "both still hold their places");
        assert!(
            matches!(after.join(20).status, crate::CheckInStatus::Queued { .. }),
            "nobody let in over them"
        );
        assert_eq!(
            after.leave(30, &first.ticket),
            Err(EngineError::AlreadyLeft)
        );
        assert!(
            after.leave(30, &second.ticket).is_ok(),
            "the other's admission holds"
        );
        let far = 10 * 86_400_000;
        after.cleanup(far);
        let mut again = WaitingRoom::new(settings(), crate::NodeId(1), 9).unwrap();
        again.restore_visitors(far, &kept);
        assert_eq!(again.on_site(), 0, "what expired is not restored");
    }

    /// The delta holds exactly the visitors changed since it was last taken, in their state
    /// now; after a restore, or past its cap, the taker is told to keep them all.
    #[test]
    fn the_delta_is_what_changed_since_last_taken() {
        let mut room = WaitingRoom::new(settings(), crate::NodeId(1), 7).unwrap();
        let first = room.join(0);
        let second = room.join(0);
        let delta = room.take_kept_delta().unwrap();
        assert_eq!(delta, room.kept_visitors(), "both let out");
        assert_eq!(room.take_kept_delta(), Some(Vec::new()), "nothing since");
        room.leave(10, &first.ticket).unwrap();
        let delta = room.take_kept_delta().unwrap();
        assert_eq!(delta.len(), 1);
        assert!(matches!(delta[0], KeptVisitor::Left { ticket, .. } if ticket == first.ticket.id));
        let kept = room.kept_visitors();
        let mut after = WaitingRoom::new(settings(), crate::NodeId(1), 8).unwrap();
        after.restore_visitors(20, &kept);
        assert_eq!(after.take_kept_delta(), None, "a restore changes them all");
        assert_eq!(after.take_kept_delta(), Some(Vec::new()));
        let _ = second;

        let unlimited = Settings {
            target_on_site: Settings::UNLIMITED,
            ..settings()
        };
        let mut busy = WaitingRoom::new(unlimited, crate::NodeId(1), 9).unwrap();
        for _ in 0..=DELTA_CAP {
            busy.join(0);
        }
        assert_eq!(busy.take_kept_delta(), None, "past the cap: all");
        busy.join(0);
        assert_eq!(busy.take_kept_delta().map(|d| d.len()), Some(1));
    }
}
