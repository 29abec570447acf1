//! This node's own visitors: the waiting room engine, and how many of them it let out.
//!
//! QPID (deleteMin at the root) and TAG (a decided range) both let visitors out of it, and the
//! node's visitor operations queue and check them in; every admission is counted here and told
//! to the driver as an [`Event::Admitted`].

use waitingroom_core::{QueueKey, Time, WaitingRoom};

use crate::messages::Weight;
use crate::outputs::{Event, Outbox};

/// The local waiting room and its admission count.
#[derive(Debug, Clone)]
pub(crate) struct Local {
    room: WaitingRoom,
    admitted_total: u64,
}

impl Local {
    pub(crate) fn new(room: WaitingRoom) -> Local {
        Local {
            room,
            admitted_total: 0,
        }
    }

    pub(crate) fn room(&self) -> &WaitingRoom {
        &self.room
    }

    pub(crate) fn room_mut(&mut self) -> &mut WaitingRoom {
        &mut self.room
    }

    /// Visitors let out here, ever.
    pub(crate) fn admitted_total(&self) -> u64 {
        self.admitted_total
    }

    /// This node's QPID weight: its queue's head.
    pub(crate) fn weight(&self) -> Weight {
        Weight::of(self.room.head())
    }

    /// Lets the head of the queue out, as decided at `decided_at`. Returns whether there was
    /// anyone to let out.
    pub(crate) fn admit_head(&mut self, now: Time, decided_at: Time, out: &mut Outbox) -> bool {
        let Some(key) = self.room.admit_head(now, decided_at) else {
            return false;
        };
        self.admitted(key, now, decided_at, out);
        true
    }

    /// Counts a visitor the room has let out (at the head, or straight through on joining).
    pub(crate) fn admitted(
        &mut self,
        key: QueueKey,
        now: Time,
        decided_at: Time,
        out: &mut Outbox,
    ) {
        self.admitted_total += 1;
        out.emit(Event::Admitted {
            key,
            at: now,
            decided_at,
        });
    }
}
