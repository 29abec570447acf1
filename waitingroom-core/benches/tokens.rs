//! Cost of signing and verifying ticket and pass tokens: every check-in does one of each.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use waitingroom_core::{ClusterKey, NodeId, Pass, Ticket, TicketId, sign_pass, sign_ticket};

const NOW: u64 = 1_700_000_100_500;

fn tokens(c: &mut Criterion) {
    let key = ClusterKey::from_seed([42; 32]);
    let keys = key.verifying_keys();
    let ticket = Ticket {
        id: TicketId(0x0123_4567_89ab_cdef),
        join_time: NOW - 100_500,
        node: NodeId(3),
        issued_at: NOW,
        next_refresh: NOW + 30_000,
        expires_at: NOW + 600_000,
        previous_position: Some(17),
        eviction_time: None,
    };
    let pass = Pass {
        id: TicketId(0x0123_4567_89ab_cdef),
        node: NodeId(3),
        queue_join_time: NOW - 100_500,
        created_at: NOW,
        issued_at: NOW,
        expires_at: NOW + 600_000,
        eviction_time: NOW - 500,
    };
    let ticket_token = sign_ticket(&key, &ticket);
    let pass_token = sign_pass(&key, &pass);

    c.bench_function("sign_ticket", |b| {
        b.iter(|| sign_ticket(&key, black_box(&ticket)))
    });
    c.bench_function("verify_ticket", |b| {
        b.iter(|| keys.verify_ticket(black_box(&ticket_token), NOW))
    });
    c.bench_function("sign_pass", |b| {
        b.iter(|| sign_pass(&key, black_box(&pass)))
    });
    c.bench_function("verify_pass", |b| {
        b.iter(|| keys.verify_pass(black_box(&pass_token), NOW))
    });
}

criterion_group!(benches, tokens);
criterion_main!(benches);
