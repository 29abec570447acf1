//! Kendall-Tau distances in O(n log n) (a stand-in until `waitingroom_core::kendall` lands).

/// Number of pairs `i < j` with `seq[i] > seq[j]`, by merge sort. Sorts `seq`.
pub fn count_inversions(seq: &mut [u64]) -> u64 {
    let mut buf = vec![0u64; seq.len()];
    sort_count(seq, &mut buf)
}

fn sort_count(a: &mut [u64], buf: &mut [u64]) -> u64 {
    let n = a.len();
    if n < 2 {
        return 0;
    }
    if n <= 16 {
        // Insertion sort: each shift is one inversion.
        let mut inv = 0;
        for i in 1..n {
            let x = a[i];
            let mut j = i;
            while j > 0 && a[j - 1] > x {
                a[j] = a[j - 1];
                j -= 1;
                inv += 1;
            }
            a[j] = x;
        }
        return inv;
    }
    let mid = n / 2;
    let mut inv = {
        let (l, r) = a.split_at_mut(mid);
        let (bl, br) = buf.split_at_mut(mid);
        sort_count(l, bl) + sort_count(r, br)
    };
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        // Equal elements are taken from the left: ties are not inversions.
        if a[i] <= a[j] {
            buf[k] = a[i];
            i += 1;
        } else {
            buf[k] = a[j];
            j += 1;
            inv += (mid - i) as u64;
        }
        k += 1;
    }
    buf[k..k + mid - i].copy_from_slice(&a[i..mid]);
    k += mid - i;
    buf[k..k + n - j].copy_from_slice(&a[j..n]);
    a.copy_from_slice(&buf[..n]);
    inv
}

fn pairs(n: u64) -> u64 {
    n.saturating_mul(n.saturating_sub(1)) / 2
}

/// Normalised Kendall-Tau distance of a sequence of fair ranks (position `i` holds the fair
/// rank of the `i`-th visitor admitted): discordant pairs over all pairs, 0 = perfectly fair.
pub fn kendall_tau_ranks(ranks: &[u64]) -> f64 {
    let total = pairs(ranks.len() as u64);
    if total == 0 {
        return 0.0;
    }
    let mut v = ranks.to_vec();
    count_inversions(&mut v) as f64 / total as f64
}

/// The thesis' distance over (x, y) pairs, where a pair tied in one coordinate and not the
/// other counts as a disagreement (and tied in both as an agreement).
pub fn kendall_tau_ties_discordant(points: &[(u64, u64)]) -> f64 {
    let n = points.len() as u64;
    let total = pairs(n);
    if total == 0 {
        return 0.0;
    }
    let mut p = points.to_vec();
    p.sort_unstable();
    // Tied pairs in x, and in both x and y (p is sorted by (x, y)).
    let tied = |same: &dyn Fn(&(u64, u64), &(u64, u64)) -> bool| -> u64 {
        let mut sum = 0;
        let mut run = 1u64;
        for w in p.windows(2) {
            if same(&w[0], &w[1]) {
                run += 1;
            } else {
                sum += pairs(run);
                run = 1;
            }
        }
        sum + pairs(run)
    };
    let tied_x = tied(&|a, b| a.0 == b.0);
    let tied_xy = tied(&|a, b| a == b);
    // Strictly discordant pairs: x_i < x_j and y_i > y_j. Within equal x, y is ascending, so
    // counting strict inversions of y over the (x, y) order finds exactly these.
    let mut ys: Vec<u64> = p.iter().map(|q| q.1).collect();
    let discordant = count_inversions(&mut ys);
    // ys is now sorted: count pairs tied in y.
    let mut tied_y = 0;
    let mut run = 1u64;
    for w in ys.windows(2) {
        if w[0] == w[1] {
            run += 1;
        } else {
            tied_y += pairs(run);
            run = 1;
        }
    }
    tied_y += pairs(run);
    let one_sided_ties = tied_x + tied_y - 2 * tied_xy;
    (discordant + one_sided_ties) as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_inversions(v: &[u64]) -> u64 {
        let mut c = 0;
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                c += u64::from(v[i] > v[j]);
            }
        }
        c
    }

    fn brute_thesis(p: &[(u64, u64)]) -> f64 {
        let mut d = 0u64;
        for i in 0..p.len() {
            for j in i + 1..p.len() {
                let sx = p[i].0.cmp(&p[j].0);
                let sy = p[i].1.cmp(&p[j].1);
                d += u64::from(sx != sy);
            }
        }
        d as f64 / pairs(p.len() as u64).max(1) as f64
    }

    #[test]
    fn inversions_match_brute_force() {
        let mut x = 12345u64;
        for n in [0usize, 1, 2, 5, 17, 40, 300] {
            let v: Vec<u64> = (0..n)
                .map(|_| {
                    x = crate::seeds::mix(x);
                    x % 50
                })
                .collect();
            let expect = brute_inversions(&v);
            let mut w = v.clone();
            assert_eq!(count_inversions(&mut w), expect, "n={n}");
            assert!(w.windows(2).all(|p| p[0] <= p[1]));
        }
    }

    #[test]
    fn rank_distance_is_normalised() {
        assert_eq!(kendall_tau_ranks(&[0, 1, 2, 3]), 0.0);
        assert_eq!(kendall_tau_ranks(&[3, 2, 1, 0]), 1.0);
        assert!((kendall_tau_ranks(&[1, 0, 2, 3]) - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn thesis_distance_matches_brute_force() {
        let mut x = 99u64;
        for n in [0usize, 1, 2, 7, 33, 200] {
            let p: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    x = crate::seeds::mix(x);
                    (x % 20, (x >> 20) % 7)
                })
                .collect();
            let a = kendall_tau_ties_discordant(&p);
            let b = brute_thesis(&p);
            assert!((a - b).abs() < 1e-12, "n={n}: {a} vs {b}");
        }
        // Admitted in the same millisecond, joined apart: every pair disagrees.
        assert_eq!(kendall_tau_ties_discordant(&[(1, 5), (2, 5), (3, 5)]), 1.0);
    }
}
