//! A live fairness figure: inversions between join order and admission order on this node.
//!
//! For every visitor this node lets out, [`Inversions::record`] counts the visitors it let out
//! *earlier* who joined *later* (a strictly larger join time). Summed over a run this is the
//! (un-normalised) Kendall-Tau distance between join order and admission order as this node saw
//! it; 0 means this node never let anyone out ahead of someone who had waited longer.
//!
//! Cost is O(log W) per admission with a Fenwick tree over a sliding window of W = 2^20 join
//! times at millisecond resolution (about 17 minutes; 4 MiB, allocated at the first admission).
//! Approximations, each of which can only under-count: visitors who joined in the same
//! millisecond are not compared (their order is the random ticket id's), and visitors who
//! joined before the window are taken as having joined before everyone inside it.

use waitingroom_core::Time;

const WINDOW: usize = 1 << 20;

/// Counts admission inversions; see the module documentation.
#[derive(Debug, Default)]
pub struct Inversions {
    /// Fenwick tree (1-based) of admitted join times, bucket `i` = join time `base + i - 1`.
    tree: Vec<u32>,
    base: Time,
    in_window: u64,
    total: u64,
}

impl Inversions {
    /// Records one admission of a visitor who joined at `join_time`; returns how many earlier
    /// admissions joined later.
    pub fn record(&mut self, join_time: Time) -> u64 {
        if self.tree.is_empty() {
            self.tree = vec![0; WINDOW + 1];
            // Room on both sides: admissions out of order can come from either direction.
            self.base = join_time.saturating_sub(WINDOW as Time / 4);
        }
        if join_time < self.base {
            // Older than the window: everyone inside it joined later.
            self.total += self.in_window;
            return self.in_window;
        }
        if join_time - self.base >= WINDOW as Time {
            self.rebase(join_time.saturating_sub(WINDOW as Time * 3 / 4));
        }
        let idx = (join_time - self.base) as usize + 1;
        let not_larger = self.prefix(idx);
        let inversions = self.in_window - not_larger;
        self.add(idx);
        self.in_window += 1;
        self.total += inversions;
        inversions
    }

    /// Inversions counted so far.
    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.total
    }

    fn prefix(&self, mut i: usize) -> u64 {
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i]);
            i &= i - 1;
        }
        sum
    }

    fn add(&mut self, mut i: usize) {
        while i <= WINDOW {
            self.tree[i] = self.tree[i].saturating_add(1);
            i += i & i.wrapping_neg();
        }
    }

    /// Moves the window to start at `new_base`; entries that fall off the front are dropped
    /// (they are older than anything that will be recorded inside the window). O(W).
    fn rebase(&mut self, new_base: Time) {
        // Fenwick -> point counts, in place.
        for i in (1..=WINDOW).rev() {
            let j = i + (i & i.wrapping_neg());
            if j <= WINDOW {
                self.tree[j] -= self.tree[i];
            }
        }
        let shift = (new_base - self.base) as usize;
        let mut points = vec![0u32; WINDOW + 1];
        if shift < WINDOW {
            points[1..=WINDOW - shift].copy_from_slice(&self.tree[1 + shift..=WINDOW]);
        }
        self.in_window = points.iter().map(|&c| u64::from(c)).sum();
        // Point counts -> Fenwick, in place.
        for i in 1..=WINDOW {
            let j = i + (i & i.wrapping_neg());
            if j <= WINDOW {
                points[j] += points[i];
            }
        }
        self.tree = points;
        self.base = new_base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(order: &[Time]) -> u64 {
        let mut n = 0;
        for (i, a) in order.iter().enumerate() {
            n += order[..i].iter().filter(|b| *b > a).count() as u64;
        }
        n
    }

    #[test]
    fn matches_brute_force() {
        let mut x: u64 = 12345;
        for _ in 0..20 {
            let mut order = Vec::new();
            for _ in 0..200 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                order.push(1_000_000 + (x >> 33) % 5_000);
            }
            let mut inv = Inversions::default();
            let got: u64 = order.iter().map(|&t| inv.record(t)).sum();
            assert_eq!(got, brute(&order));
            assert_eq!(inv.total(), got);
        }
    }

    #[test]
    fn in_order_is_zero_and_window_slides() {
        let mut inv = Inversions::default();
        for k in 0..10u64 {
            assert_eq!(inv.record(k * (WINDOW as Time / 3)), 0);
        }
        // One late admission of an old visitor: everyone still in the window joined later.
        let n = inv.record(WINDOW as Time);
        assert!(n > 0);
    }
}
