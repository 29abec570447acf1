//! Times the fairness metric on ten million admissions, the size the metric must handle well
//! under five seconds in release builds.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rand::{SeedableRng, seq::SliceRandom};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{Ties, kendall_tau, kendall_tau_permutation};

const N: u64 = 10_000_000;

fn shuffled(seed: u64) -> Vec<u64> {
    let mut values: Vec<u64> = (0..N).collect();
    values.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    values
}

fn bench_kendall(c: &mut Criterion) {
    let mut group = c.benchmark_group("kendall_10m");
    // One run takes about a second; criterion's minimum of ten samples is plenty.
    group.sample_size(10);

    let admitted = shuffled(1);
    group.bench_function("kendall_tau_permutation", |b| {
        b.iter(|| kendall_tau_permutation(black_box(&admitted)))
    });

    // Join times in ms with many visitors per ms, admitted in batches of 100 per ms: the
    // tie-heavy shape the strict and thesis metrics differ on.
    let pairs: Vec<(u64, u64)> = shuffled(2)
        .into_iter()
        .enumerate()
        .map(|(admission, key)| (key / 4, admission as u64 / 100))
        .collect();
    group.bench_function("kendall_tau_ties_ignore", |b| {
        b.iter(|| kendall_tau(black_box(&pairs), Ties::Ignore))
    });
    group.finish();
}

criterion_group!(benches, bench_kendall);
criterion_main!(benches);
