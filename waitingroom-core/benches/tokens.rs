//! Cost of making and checking ticket and pass tokens, side by side: a ticket is an HMAC-SHA256
//! (HS256) token only the cluster reads, a pass an Ed25519 (EdDSA) token origins check offline.
//! A check-in verifies one ticket and makes one; a leave makes a pass; a gate checks the same
//! pass on every request of its visitor (`pass_remembered`: `CachedPassVerifier`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use waitingroom_core::{
    CachedPassVerifier, ClusterKey, KeyRing, NodeId, Pass, Ticket, TicketId, sign_pass, sign_ticket,
};

const NOW: u64 = 1_700_000_100_500;

fn tokens(c: &mut Criterion) {
    let key = ClusterKey::from_seed([42; 32]);
    let ring = KeyRing::new(key.clone());
    let ticket = Ticket {
        id: TicketId(0x0123_4567_89ab_cdef),
        join_time: NOW - 100_500,
        node: NodeId(3),
        issued_at: NOW,
        next_refresh: NOW + 30_000,
        expires_at: NOW + 600_000,
        previous_position: Some(17),
        eviction_time: None,
        draw: None,
        round: None,
    };
    let pass = Pass {
        id: TicketId(0x0123_4567_89ab_cdef),
        node: NodeId(3),
        queue_join_time: NOW - 100_500,
        created_at: NOW,
        issued_at: NOW,
        expires_at: NOW + 600_000,
        eviction_time: NOW - 500,
        round: None,
        draw: None,
    };
    let ticket_token = sign_ticket(&key, &ticket);
    let pass_token = sign_pass(&key, &pass);

    let mut sign = c.benchmark_group("sign");
    sign.bench_function("ticket_hs256", |b| {
        b.iter(|| sign_ticket(&key, black_box(&ticket)))
    });
    sign.bench_function("pass_eddsa", |b| {
        b.iter(|| sign_pass(&key, black_box(&pass)))
    });
    sign.finish();

    let mut verify = c.benchmark_group("verify");
    verify.bench_function("ticket_hs256", |b| {
        b.iter(|| ring.verify_ticket(black_box(&ticket_token), NOW))
    });
    verify.bench_function("pass_eddsa", |b| {
        b.iter(|| ring.verify_pass(black_box(&pass_token), NOW))
    });
    let cached = CachedPassVerifier::new(ring.public().clone());
    verify.bench_function("pass_remembered", |b| {
        b.iter(|| cached.verify_pass(black_box(&pass_token), NOW))
    });
    verify.finish();
}

criterion_group!(benches, tokens);
criterion_main!(benches);
