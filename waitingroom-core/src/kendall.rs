//! The fairness metric: normalised Kendall-Tau distance between the fair order and the admission
//! order, in O(n log n).
//!
//! A perfectly fair waiting room admits visitors in queue-key order (join time, then ticket id),
//! so listing the fair keys in admission order gives a sorted sequence. Every pair admitted the
//! "wrong way round" is one inversion; dividing by the number of pairs, n(n-1)/2, gives a
//! distance in `[0, 1]`: 0 is perfectly fair, 1 is the exact reverse (last in, first out).
//!
//! All counts come from a bottom-up merge sort that counts inversions while merging (Knight's
//! algorithm for the tie-aware variant), in O(n log n): fast enough for ten million admissions
//! (`benches/kendall.rs` times it). The sort works on clones of the caller's keys in two buffers
//! of `n` elements, allocated once. Clones rather than references because following references
//! scattered over tens of megabytes makes the sort several times slower on large inputs; keys
//! whose clone is costly can be passed as references (`&T` is `Ord` and `Copy`) to trade that
//! speed back for cheap copies.
//!
//! Counts are `u64`: exact while n(n-1)/2 fits, that is for fewer than about 6·10^9 elements,
//! more than the two sorting buffers could hold in memory for any key type.

/// How [`kendall_tau`] treats a pair of observations that are equal in x, in y, or in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ties {
    /// Only strict disagreements count: a pair is discordant when `x_i < x_j` and `y_i > y_j`
    /// (or the reverse). A pair tied in x, in y, or in both is never a disagreement.
    ///
    /// This is the preferred fairness metric. With x = join time and y = admission time, visitors
    /// admitted in the same millisecond (one batch) are tied in y; they were not treated unfairly
    /// relative to each other, so they should not count against the waiting room.
    Ignore,
    /// Strict disagreements count, and so does every pair tied in exactly one of x and y. A pair
    /// tied in both x and y is not a disagreement.
    ///
    /// This reproduces the metric of the thesis this project comes from (Distributed Virtual
    /// Waiting Room), which computed it over (join ms, admission ms). It makes batching look
    /// unfair: admitting two visitors who joined at different times in the same millisecond counts
    /// as a disagreement even though neither overtook the other. Use it only to compare with the
    /// thesis' numbers.
    CountAsDiscordant,
}

/// Counts the pairs `i < j` with `seq[i] > seq[j]`; equal elements are not inversions.
///
/// O(n log n) time; clones every element into a buffer once, plus O(n log n) clones while
/// sorting it, and allocates two buffers of `n` elements.
///
/// ```
/// use waitingroom_core::count_inversions;
/// assert_eq!(count_inversions(&[1, 2, 3]), 0);
/// assert_eq!(count_inversions(&[2, 1, 3]), 1);
/// assert_eq!(count_inversions(&[3, 2, 1]), 3);
/// assert_eq!(count_inversions(&[1, 1, 1]), 0);
/// ```
pub fn count_inversions<T: Ord + Clone>(seq: &[T]) -> u64 {
    if seq.len() < 2 {
        return 0;
    }
    let mut buf = seq.to_vec();
    let mut scratch = seq.to_vec();
    sort_counting_inversions(&mut buf, &mut scratch)
}

/// The normalised Kendall-Tau distance of a sequence from its sorted order:
/// [`count_inversions`] divided by n(n-1)/2, in `[0, 1]`; 0.0 when `seq` has fewer than two
/// elements.
///
/// For the fairness of a waiting room, `seq[i]` is the fair key (queue key) of the i-th admitted
/// visitor: 0.0 means everyone was admitted in fair order, 1.0 means the exact reverse. Equal
/// keys never count, whatever their order.
///
/// ```
/// use waitingroom_core::kendall_tau_permutation;
/// assert_eq!(kendall_tau_permutation(&[10, 20, 30, 40]), 0.0);
/// assert_eq!(kendall_tau_permutation(&[40, 30, 20, 10]), 1.0);
/// // One adjacent swap: 1 of the 6 pairs is out of order.
/// assert_eq!(kendall_tau_permutation(&[10, 30, 20, 40]), 1.0 / 6.0);
/// ```
pub fn kendall_tau_permutation<T: Ord + Clone>(seq: &[T]) -> f64 {
    if seq.len() < 2 {
        return 0.0;
    }
    normalise(u128::from(count_inversions(seq)), seq.len())
}

/// The normalised Kendall-Tau distance between two rankings given as (x, y) pairs: the number of
/// disagreeing pairs divided by n(n-1)/2, in `[0, 1]`; 0.0 when there are fewer than two pairs.
///
/// Pairs `i < j` are classified as:
///
/// - *discordant*: `x_i < x_j` and `y_i > y_j`, or `x_i > x_j` and `y_i < y_j` — always a
///   disagreement;
/// - *concordant*: both strictly ordered the same way — never a disagreement;
/// - *tied in both* x and y — never a disagreement;
/// - *tied in exactly one* of x and y — a disagreement only with [`Ties::CountAsDiscordant`].
///
/// For example, with x = join time and y = admission time:
///
/// ```
/// use waitingroom_core::{Ties, kendall_tau};
/// // a joined at 1, b at 2, c at 3; b and c were admitted together at 20, a at 10.
/// let visitors = [(1, 10), (2, 20), (3, 20)];
/// // Nobody overtook anybody.
/// assert_eq!(kendall_tau(&visitors, Ties::Ignore), 0.0);
/// // The thesis' metric counts the (b, c) batch as 1 of the 3 pairs.
/// assert_eq!(kendall_tau(&visitors, Ties::CountAsDiscordant), 1.0 / 3.0);
/// // A pair tied in both is never a disagreement.
/// assert_eq!(kendall_tau(&[(1, 10), (1, 10)], Ties::CountAsDiscordant), 0.0);
/// ```
///
/// O(n log n) time (Knight's algorithm): sort by (x, y), count the strict inversions of the y
/// sequence with a merge sort, and get the one-sided ties from the sizes of the runs of equal x,
/// equal y and equal (x, y).
pub fn kendall_tau<A: Ord + Clone, B: Ord + Clone>(pairs: &[(A, B)], ties: Ties) -> f64 {
    let n = pairs.len();
    if n < 2 {
        return 0.0;
    }
    let mut by_xy = pairs.to_vec();
    by_xy.sort_unstable();

    let tied_x = tied_pairs_in_runs(&by_xy, |a, b| a.0 == b.0);
    let tied_xy = tied_pairs_in_runs(&by_xy, |a, b| a == b);

    // Within a run of equal x the ys are already ascending, so every strict inversion of y
    // crosses two different xs and is exactly one discordant pair.
    let mut ys: Vec<B> = by_xy.into_iter().map(|(_, y)| y).collect();
    let mut scratch = ys.clone();
    let discordant = u128::from(sort_counting_inversions(&mut ys, &mut scratch));
    let tied_y = tied_pairs_in_runs(&ys, |a, b| a == b);

    let disagreements = match ties {
        Ties::Ignore => discordant,
        Ties::CountAsDiscordant => discordant + (tied_x - tied_xy) + (tied_y - tied_xy),
    };
    normalise(disagreements, n)
}

/// `count / (n(n-1)/2)`, with the denominator exact in integers before the single rounding.
fn normalise(count: u128, n: usize) -> f64 {
    count as f64 / pairs_among(n as u128) as f64
}

fn pairs_among(n: u128) -> u128 {
    n * n.saturating_sub(1) / 2
}

/// Sum of C(len, 2) over the maximal runs of adjacent elements that `same` groups together.
fn tied_pairs_in_runs<T>(sorted: &[T], same: impl Fn(&T, &T) -> bool) -> u128 {
    sorted
        .chunk_by(|a, b| same(a, b))
        .map(|run| pairs_among(run.len() as u128))
        .sum()
}

/// Runs this short are sorted by insertion first: fewer merge passes, and at this size the
/// shifting stays in L1 and beats merging.
const INSERTION_RUN: usize = 32;

/// Stable-sorts `buf` ascending, returning the number of strict inversions it had. `scratch`
/// must be as long as `buf`; its contents on return are unspecified.
fn sort_counting_inversions<T: Ord + Clone>(buf: &mut [T], scratch: &mut [T]) -> u64 {
    debug_assert_eq!(buf.len(), scratch.len());
    let n = buf.len();
    let mut inversions = 0u64;

    for run in buf.chunks_mut(INSERTION_RUN) {
        inversions += insertion_sort_counting(run);
    }

    // Ping-pong between the two buffers instead of copying back after every pass.
    let mut in_buf = true;
    let mut width = INSERTION_RUN;
    while width < n {
        let (src, dst): (&[T], &mut [T]) = if in_buf {
            (buf, scratch)
        } else {
            (scratch, buf)
        };
        for (src_block, dst_block) in src.chunks(2 * width).zip(dst.chunks_mut(2 * width)) {
            let mid = width.min(src_block.len());
            let (left, right) = src_block.split_at(mid);
            inversions += merge_counting(left, right, dst_block);
        }
        in_buf = !in_buf;
        width *= 2;
    }
    if !in_buf {
        buf.clone_from_slice(scratch);
    }
    inversions
}

/// Stable insertion sort; every shift past a strictly greater element is one inversion.
fn insertion_sort_counting<T: Ord>(run: &mut [T]) -> u64 {
    let mut inversions = 0u64;
    for i in 1..run.len() {
        // Swapping instead of shifting a held-out element needs no clone.
        let mut j = i;
        while j > 0 && run[j - 1] > run[j] {
            run.swap(j - 1, j);
            j -= 1;
        }
        inversions += (i - j) as u64;
    }
    inversions
}

/// Merges two sorted runs into `out`. Taking from the right run while elements remain on the
/// left means it jumps over all of them: that many inversions. Ties take from the left, so equal
/// elements never count and the sort stays stable.
fn merge_counting<T: Ord + Clone>(left: &[T], right: &[T], out: &mut [T]) -> u64 {
    debug_assert_eq!(left.len() + right.len(), out.len());
    let mut inversions = 0u64;
    let (mut i, mut j, mut k) = (0, 0, 0);
    while i < left.len() && j < right.len() {
        // Branch-free on purpose: on shuffled input the comparison is a coin flip, and a
        // mispredicted branch per element costs more than computing both arms. Selecting the
        // reference and masking the count lets the compiler use conditional moves.
        let (l, r) = (&left[i], &right[j]);
        let take_right = r < l;
        out[k] = if take_right { r } else { l }.clone();
        let mask = usize::from(take_right).wrapping_neg();
        inversions += ((left.len() - i) & mask) as u64;
        j += usize::from(take_right);
        i += usize::from(!take_right);
        k += 1;
    }
    let rest = if i < left.len() {
        &left[i..]
    } else {
        &right[j..]
    };
    out[k..].clone_from_slice(rest);
    inversions
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inversions_naive<T: Ord>(seq: &[T]) -> u64 {
        let mut count = 0;
        for i in 0..seq.len() {
            for j in i + 1..seq.len() {
                if seq[i] > seq[j] {
                    count += 1;
                }
            }
        }
        count
    }

    fn kendall_naive<A: Ord, B: Ord>(pairs: &[(A, B)], ties: Ties) -> f64 {
        let n = pairs.len();
        if n < 2 {
            return 0.0;
        }
        let mut disagreements = 0u64;
        for i in 0..n {
            for j in i + 1..n {
                let dx = pairs[i].0.cmp(&pairs[j].0);
                let dy = pairs[i].1.cmp(&pairs[j].1);
                use std::cmp::Ordering::Equal;
                let disagree = match (dx, dy, ties) {
                    (Equal, Equal, _) => false,
                    (Equal, _, Ties::Ignore) | (_, Equal, Ties::Ignore) => false,
                    (Equal, _, Ties::CountAsDiscordant) | (_, Equal, Ties::CountAsDiscordant) => {
                        true
                    }
                    (dx, dy, _) => dx != dy,
                };
                disagreements += u64::from(disagree);
            }
        }
        disagreements as f64 / (n * (n - 1) / 2) as f64
    }

    #[test]
    fn hand_examples() {
        let identity: Vec<u32> = (0..100).collect();
        let reversed: Vec<u32> = (0..100).rev().collect();
        assert_eq!(count_inversions(&identity), 0);
        assert_eq!(kendall_tau_permutation(&identity), 0.0);
        assert_eq!(count_inversions(&reversed), 100 * 99 / 2);
        assert_eq!(kendall_tau_permutation(&reversed), 1.0);

        let mut swapped = identity.clone();
        swapped.swap(41, 42);
        assert_eq!(count_inversions(&swapped), 1);
        assert_eq!(kendall_tau_permutation(&swapped), 1.0 / 4950.0);

        assert_eq!(count_inversions::<u8>(&[]), 0);
        assert_eq!(kendall_tau_permutation::<u8>(&[]), 0.0);
        assert_eq!(kendall_tau_permutation(&[7]), 0.0);
        assert_eq!(kendall_tau::<u8, u8>(&[], Ties::Ignore), 0.0);
        assert_eq!(kendall_tau(&[(1, 2)], Ties::CountAsDiscordant), 0.0);
    }

    #[test]
    fn equal_elements_are_not_inversions() {
        assert_eq!(count_inversions(&[5, 5, 5, 5]), 0);
        // (2,1) (2,1) (2,1) (2,1): four pairs across the two runs.
        assert_eq!(count_inversions(&[2, 2, 1, 1]), 4);
        assert_eq!(kendall_tau_permutation(&[2, 2, 1, 1]), 4.0 / 6.0);
    }

    #[test]
    fn tie_policies_by_hand() {
        let (a, b, c, d, e) = ((1, 5), (1, 7), (2, 7), (3, 4), (3, 4));
        // Of the 10 pairs: ab is tied in x only, bc in y only, de in both; ac is concordant;
        // ad, ae, bd, be, cd, ce are discordant.
        let pairs = [a, b, c, d, e];
        assert_eq!(kendall_tau(&pairs, Ties::Ignore), 6.0 / 10.0);
        assert_eq!(kendall_tau(&pairs, Ties::CountAsDiscordant), 8.0 / 10.0);
        // The input order of the pairs does not matter.
        let shuffled = [d, b, e, a, c];
        assert_eq!(kendall_tau(&shuffled, Ties::Ignore), 6.0 / 10.0);
        assert_eq!(kendall_tau(&shuffled, Ties::CountAsDiscordant), 8.0 / 10.0);
        // A batch admitted in one millisecond: no disagreement unless ties count.
        let batch = [(1, 9), (2, 9), (3, 9)];
        assert_eq!(kendall_tau(&batch, Ties::Ignore), 0.0);
        assert_eq!(kendall_tau(&batch, Ties::CountAsDiscordant), 1.0);
    }

    #[test]
    fn zero_inversions_of_a_sorted_run_longer_than_the_insertion_runs() {
        let sorted: Vec<u64> = (0..1000).map(|i| i / 3).collect();
        assert_eq!(count_inversions(&sorted), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn inversions_match_definition(seq in prop::collection::vec(0u8..8, 0..200)) {
            prop_assert_eq!(count_inversions(&seq), inversions_naive(&seq));
        }

        #[test]
        fn permutation_distance_matches_definition(seq in prop::collection::vec(0u16..50, 0..200)) {
            let n = seq.len();
            let expected = if n < 2 {
                0.0
            } else {
                inversions_naive(&seq) as f64 / (n * (n - 1) / 2) as f64
            };
            prop_assert_eq!(kendall_tau_permutation(&seq), expected);
        }

        #[test]
        fn kendall_tau_matches_definition(
            pairs in prop::collection::vec((0u8..6, 0u8..6), 0..150),
        ) {
            for ties in [Ties::Ignore, Ties::CountAsDiscordant] {
                prop_assert_eq!(kendall_tau(&pairs, ties), kendall_naive(&pairs, ties));
            }
        }

        #[test]
        fn kendall_tau_of_index_and_value_is_the_permutation_distance(
            seq in prop::collection::vec(0u32..1000, 0..300),
        ) {
            let pairs: Vec<(usize, u32)> = seq.iter().copied().enumerate().collect();
            prop_assert_eq!(kendall_tau(&pairs, Ties::Ignore), kendall_tau_permutation(&seq));
        }
    }
}
