//! The event queue: simulated time jumps straight to the next due event.
//!
//! Events are ordered by `(time, seq)`: `seq` is the order they were scheduled in, so two
//! events due at the same millisecond always run in the same order and a seed replays a run
//! exactly. Only the ordering fields take part in comparisons; the payload never does.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use waitingroom_core::Time;
use waitingroom_distributed::Transmit;

/// Something that happens at one instant.
#[derive(Debug)]
pub enum Ev {
    /// The next visitor arrives (arrivals are chained: only one is ever scheduled).
    Arrive(u32),
    /// A visitor's next action: a check-in, a pass refresh, or the end of their time on the
    /// site. Each visitor has at most one pending.
    Visitor(u32),
    /// A message reaches its receiver.
    Deliver(Box<Transmit>),
    /// A protocol node's timer is due (the slot's node decides whether anything fires).
    NodeTimer(u32),
    /// A planned disturbance, a restarted node coming back, or a partition healing (index into
    /// the strategy's plan).
    Disturb(u32),
    /// A baseline strategy's eviction interval boundary.
    Tick,
}

struct Entry {
    time: Time,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so that the max-heap pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// A min-queue of events by `(time, seq)`.
#[derive(Default)]
pub struct Scheduler {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl Scheduler {
    /// Schedules `ev` at `time`.
    pub fn at(&mut self, time: Time, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
    }

    /// The earliest event, removed from the queue.
    pub fn pop(&mut self) -> Option<(Time, Ev)> {
        self.heap.pop().map(|e| (e.time, e.ev))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_schedule_order() {
        let mut s = Scheduler::default();
        s.at(5, Ev::Visitor(1));
        s.at(3, Ev::Visitor(2));
        s.at(5, Ev::Visitor(3));
        s.at(4, Ev::Tick);
        let order: Vec<(Time, String)> = std::iter::from_fn(|| s.pop())
            .map(|(t, e)| (t, format!("{e:?}")))
            .collect();
        assert_eq!(
            order,
            vec![
                (3, "Visitor(2)".to_string()),
                (4, "Tick".to_string()),
                (5, "Visitor(1)".to_string()),
                (5, "Visitor(3)".to_string()),
            ]
        );
    }
}
