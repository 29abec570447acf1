//! The event queue: simulated time jumps straight to the next due event.
//!
//! Events are ordered by `(time, seq)`: `seq` is the order they were scheduled in, so two
//! events due at the same millisecond always run in the same order and a seed replays a run
//! exactly. Only the ordering fields take part in comparisons; the payload never does.
//!
//! Most events are due within a few seconds (messages, timers, check-ins), so they go into a
//! timing wheel of one slot per millisecond: scheduling and popping cost O(1) instead of a
//! heap's O(log n). Events further ahead wait in a heap and move into the wheel, in order, as
//! soon as their millisecond comes within its reach. Within one slot events keep their
//! scheduling order, which is exactly the `(time, seq)` order.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

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

/// Milliseconds the wheel covers (a power of two).
const WHEEL: usize = 4096;

/// A min-queue of events by `(time, seq)`.
pub struct Scheduler {
    /// `wheel[t % WHEEL]` holds the events due at `t`, for `now <= t < now + WHEEL`.
    wheel: Vec<VecDeque<Ev>>,
    /// One bit per slot: set while the slot holds events, to skip empty ones fast.
    occupied: Vec<u64>,
    /// Events in the wheel.
    in_wheel: usize,
    /// Events due at or after `now + WHEEL`.
    later: BinaryHeap<Entry>,
    /// The slot being drained: every event before it has been popped.
    now: Time,
    seq: u64,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            wheel: (0..WHEEL).map(|_| VecDeque::new()).collect(),
            occupied: vec![0; WHEEL / 64],
            in_wheel: 0,
            later: BinaryHeap::new(),
            now: 0,
            seq: 0,
        }
    }
}

impl Scheduler {
    /// Schedules `ev` at `time` (an event in the past is due at once).
    pub fn at(&mut self, time: Time, ev: Ev) {
        self.seq += 1;
        let time = time.max(self.now);
        if time - self.now < WHEEL as Time {
            self.put(time, ev);
        } else {
            self.later.push(Entry {
                time,
                seq: self.seq,
                ev,
            });
        }
    }

    fn put(&mut self, time: Time, ev: Ev) {
        let slot = time as usize % WHEEL;
        self.wheel[slot].push_back(ev);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.in_wheel += 1;
    }

    /// The earliest event, removed from the queue.
    pub fn pop(&mut self) -> Option<(Time, Ev)> {
        if self.in_wheel == 0 {
            // Nothing near: jump to the next far event.
            self.now = self.later.peek()?.time;
            self.pull_in();
        }
        let slot = self.now as usize % WHEEL;
        if self.wheel[slot].is_empty() {
            // Jump to the next occupied slot. Every event in the wheel is due within
            // `WHEEL` ms, so the first occupied slot after `now` (wrapping) is the earliest.
            let next = self.next_occupied(slot);
            self.now += ((next + WHEEL - slot) % WHEEL) as Time;
            self.pull_in();
        }
        let slot = self.now as usize % WHEEL;
        let ev = self.wheel[slot].pop_front()?;
        if self.wheel[slot].is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.in_wheel -= 1;
        Some((self.now, ev))
    }

    /// The visitors of the next two events, where those are visitors' steps (a hint only: an
    /// event scheduled meanwhile may come before them).
    pub fn next_visitors(&self) -> [Option<u32>; 2] {
        if self.in_wheel == 0 {
            return [None, None];
        }
        let now = self.now as usize % WHEEL;
        let slot = if self.wheel[now].is_empty() {
            self.next_occupied(now)
        } else {
            now
        };
        let visitor = |ev: Option<&Ev>| match ev {
            Some(Ev::Visitor(v)) => Some(*v),
            _ => None,
        };
        let events = &self.wheel[slot];
        let second = match events.get(1) {
            Some(ev) => Some(ev),
            // Only the near wheel is looked at: the second event may be in the next slot.
            None if self.in_wheel > 1 => self.wheel[self.next_occupied((slot + 1) % WHEEL)].front(),
            None => None,
        };
        [visitor(events.front()), visitor(second)]
    }

    /// The first occupied slot at or after `from`, wrapping around (the wheel is not empty).
    fn next_occupied(&self, from: usize) -> usize {
        let words = WHEEL / 64;
        let (w0, b0) = (from / 64, from % 64);
        let first = self.occupied[w0] & (!0u64 << b0);
        if first != 0 {
            return w0 * 64 + first.trailing_zeros() as usize;
        }
        for k in 1..=words {
            let w = (w0 + k) % words;
            let bits = self.occupied[w];
            if bits != 0 {
                return w * 64 + bits.trailing_zeros() as usize;
            }
        }
        from
    }

    /// Moves the far events that came within the wheel's reach into it, in order. They were
    /// scheduled before anything now going directly into their slots, so order is kept.
    fn pull_in(&mut self) {
        let horizon = self.now + WHEEL as Time;
        while self.later.peek().is_some_and(|e| e.time < horizon) {
            let Some(e) = self.later.pop() else {
                break;
            };
            self.put(e.time, e.ev);
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.in_wheel + self.later.len()
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops everything left, as (time, event) in pop order.
    fn pop_all(s: &mut Scheduler) -> Vec<(Time, String)> {
        std::iter::from_fn(|| s.pop())
            .map(|(t, e)| (t, format!("{e:?}")))
            .collect()
    }

    /// The expected pops.
    fn events(list: &[(Time, &str)]) -> Vec<(Time, String)> {
        list.iter().map(|&(t, e)| (t, e.to_string())).collect()
    }

    #[test]
    fn pops_by_time_then_schedule_order() {
        let mut s = Scheduler::default();
        s.at(5, Ev::Visitor(1));
        s.at(3, Ev::Visitor(2));
        s.at(5, Ev::Visitor(3));
        s.at(4, Ev::Tick);
        assert_eq!(
            pop_all(&mut s),
            events(&[
                (3, "Visitor(2)"),
                (4, "Tick"),
                (5, "Visitor(1)"),
                (5, "Visitor(3)")
            ])
        );
    }

    #[test]
    fn far_events_keep_their_order_against_near_ones() {
        let mut s = Scheduler::default();
        let far = 3 * WHEEL as Time + 7;
        s.at(far, Ev::Visitor(1));
        s.at(far, Ev::Visitor(2));
        s.at(10, Ev::Visitor(0));
        assert_eq!(s.len(), 3);
        let (t, _) = s.pop().unwrap();
        assert_eq!(t, 10);
        // Now within reach of the wheel only after time passes: schedule the same instant
        // from nearer and check the earlier-scheduled far events still come first.
        s.at(far - 100, Ev::Visitor(3));
        assert_eq!(s.pop().unwrap().0, far - 100);
        s.at(far, Ev::Visitor(4));
        s.at(far - 1, Ev::Tick);
        assert_eq!(
            pop_all(&mut s),
            events(&[
                (far - 1, "Tick"),
                (far, "Visitor(1)"),
                (far, "Visitor(2)"),
                (far, "Visitor(4)"),
            ])
        );
        assert!(s.is_empty());
    }

    #[test]
    fn matches_a_sorted_reference_on_random_schedules() {
        let mut s = Scheduler::default();
        let mut reference = Vec::new();
        let mut x = 1u64;
        let mut now = 0;
        let mut popped = Vec::new();
        for i in 0..20_000u32 {
            x = crate::seeds::mix(x);
            if x % 3 == 0 {
                if let Some((t, Ev::Visitor(v))) = s.pop() {
                    now = t;
                    popped.push((t, v));
                }
            } else {
                let delay = match x % 7 {
                    0 => (x >> 8) % 20_000,
                    1 => 0,
                    _ => (x >> 8) % 700,
                };
                s.at(now + delay, Ev::Visitor(i));
                reference.push((now + delay, i));
            }
        }
        while let Some((t, Ev::Visitor(v))) = s.pop() {
            popped.push((t, v));
        }
        // Every event comes out once, never before an earlier-due one that was waiting.
        assert_eq!(popped.len(), reference.len());
        assert!(popped.windows(2).all(|w| w[0].0 <= w[1].0));
        let mut a = popped.clone();
        a.sort_unstable();
        reference.sort_unstable();
        assert_eq!(a, reference);
        // Same instant: in scheduling order.
        assert!(
            popped
                .windows(2)
                .all(|w| w[0].0 != w[1].0 || w[0].1 < w[1].1)
        );
    }

    #[test]
    fn next_visitors_name_the_next_two_events_if_they_are_visitors_steps() {
        let mut s = Scheduler::default();
        assert_eq!(s.next_visitors(), [None, None]);
        s.at(5, Ev::Visitor(3));
        s.at(5, Ev::Tick);
        s.at(9, Ev::Visitor(4));
        s.at(9, Ev::Visitor(6));
        s.at(WHEEL as Time + 50, Ev::Visitor(5));
        assert_eq!(s.next_visitors(), [Some(3), None], "the tick is second");
        assert_eq!(s.pop().map(|(t, _)| t), Some(5));
        assert_eq!(s.next_visitors(), [None, Some(4)], "the tick is next");
        s.pop();
        assert_eq!(s.next_visitors(), [Some(4), Some(6)], "in a later slot");
        s.pop();
        assert_eq!(
            s.next_visitors(),
            [Some(6), None],
            "the far heap is not looked at"
        );
        s.pop();
        // Only in the far heap: no hint.
        assert_eq!(s.next_visitors(), [None, None]);
        assert_eq!(s.pop().map(|(t, _)| t), Some(WHEEL as Time + 50));
    }
}
