//! What a room must not forget when its process restarts (waitingroom-distributed/README.md#durable-state):
//! the visitors it let out who still hold a place (in their admission's claim window, or with
//! a pass it counts) and the tickets already exchanged for a pass, which get no second one.
//! Queued visitors are not kept: their tickets keep their places, and checking in again queues
//! them under their join time.
//!
//! A driver takes [`WaitingRoom::kept_visitors`] when [`WaitingRoom::kept_changes`] moved and
//! gives it back with [`WaitingRoom::restore_visitors`] before the restarted room serves anyone.

use serde::{Deserialize, Serialize};

use super::{Record, Visitor, WaitingRoom};
use crate::types::{TicketId, Time};

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
        self.kept_changes
    }

    /// Every visitor let out here whom a restart must not forget, by ticket. Linear in the
    /// visitors this room knows: taken when [`WaitingRoom::kept_changes`] moved, not per request.
    pub fn kept_visitors(&self) -> Vec<KeptVisitor> {
        let mut kept: Vec<KeptVisitor> = (self.visitors.iter())
            .filter_map(|(ticket, record)| match record.state {
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
            })
            .collect();
        kept.sort_unstable_by_key(KeptVisitor::ticket);
        kept
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
        self.kept_changes += 1;
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
}
