//! Embeds the single-node waiting room in a toy "ticket sale": a flash crowd arrives, the site
//! holds 50 visitors at a time, each stays on the site for a few seconds. Visitors hold tokens,
//! as they would in a browser: tickets the service authenticates with a MAC only it can check,
//! and passes the origin site checks offline with the public key. Time is simulated, so the run
//! takes a moment and is the same every time.
//!
//! Run with `cargo run --release -p waitingroom-core --example embed`.

use waitingroom_core::{
    CheckInStatus, ClusterKey, KeyRing, NodeId, Settings, Ticket, VerifyingKeySet, WaitingRoom,
    sign_pass, sign_ticket,
};

struct Visitor {
    /// What the visitor's browser holds: a JWS compact token (HS256, only the service reads it).
    token: String,
    ticket: Ticket,
    admitted_at: Option<u64>,
    leaves_site_at: Option<u64>,
}

fn main() {
    let settings = Settings {
        target_on_site: 50,
        refresh_interval_ms: 1_000,
        ticket_expiry_ms: 10_000,
        pass_expiry_ms: 5_000,
        pass_max_lifetime_ms: 4 * 3_600_000,
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: true,
    };
    let mut room = WaitingRoom::new(settings, NodeId(1), 2026).expect("valid settings");
    let key = ClusterKey::from_seed([7; 32]);
    // What the service checks tickets with: the key and the secrets derived from it.
    let service = KeyRing::new(key.clone());
    // What an origin site needs to check passes offline: the public JWKS.
    let origin = key.verifying_keys();
    println!(
        "public JWK: {}",
        serde_json::to_string(&key.public_jwk()).expect("json")
    );

    // 2,000 visitors arrive within the first 4 seconds; the clock moves in 2 ms steps.
    let mut visitors: Vec<Visitor> = Vec::new();
    let mut admissions = Vec::new();
    let mut now = 0;
    while now <= 600_000 && (now < 4_000 || visitors.iter().any(|v| v.leaves_site_at.is_none())) {
        if now < 4_000 {
            visitors.push(arrive(&mut room, &key, now));
        }
        if now % 1_000 == 0 {
            room.evict(now);
            room.cleanup(now);
        }
        for v in visitors.iter_mut() {
            if v.leaves_site_at.is_none()
                && v.ticket.next_refresh <= now
                && check_in(&mut room, &service, &origin, v, now)
            {
                admissions.push(v.ticket.join_time);
            }
        }
        now += 2;
    }
    print_summary(&room, &visitors, &admissions, now);
}

/// A visitor joins the queue and gets their ticket as a token.
fn arrive(room: &mut WaitingRoom, key: &ClusterKey, now: u64) -> Visitor {
    let answer = room.join(now);
    let admitted = answer.status == CheckInStatus::Admitted;
    Visitor {
        token: sign_ticket(key, &answer.ticket),
        ticket: answer.ticket,
        admitted_at: admitted.then_some(now),
        leaves_site_at: None,
    }
}

/// A waiting visitor checks in with their token; when admitted, they leave the queue with a pass
/// the origin checks offline. Whether they were admitted.
fn check_in(
    room: &mut WaitingRoom,
    service: &KeyRing,
    origin: &VerifyingKeySet,
    v: &mut Visitor,
    now: u64,
) -> bool {
    let key = service.current();
    // The service trusts only tickets its own key authenticated.
    let ticket = service
        .verify_ticket(&v.token, now)
        .expect("our own ticket");
    let answer = room.check_in(now, &ticket).expect("ticket still valid");
    v.token = sign_ticket(key, &answer.ticket);
    v.ticket = answer.ticket;
    if answer.status != CheckInStatus::Admitted {
        return false;
    }
    let pass = room.leave(now, &v.ticket).expect("admitted");
    let pass_token = sign_pass(key, &pass);
    origin
        .verify_pass(&pass_token, now)
        .expect("origin accepts the pass");
    v.admitted_at.get_or_insert(now);
    v.leaves_site_at = Some(pass.expires_at);
    true
}

/// What the run came to: who got in, how long they waited, whether in join order.
fn print_summary(room: &WaitingRoom, visitors: &[Visitor], admissions: &[u64], now: u64) {
    let admitted = visitors.iter().filter(|v| v.admitted_at.is_some()).count();
    let waits: Vec<u64> = visitors
        .iter()
        .filter_map(|v| Some(v.admitted_at? - v.ticket.join_time))
        .collect();
    let worst = waits.iter().max().copied().unwrap_or(0);
    let out_of_order = admissions.windows(2).filter(|w| w[0] > w[1]).count();
    println!("simulated time: {:.1} s", now as f64 / 1000.0);
    println!("visitors: {}", visitors.len());
    println!("admitted: {admitted}");
    println!("longest wait: {:.1} s", worst as f64 / 1000.0);
    println!("admissions out of join order: {out_of_order}");
    println!("on site at the end: {}", room.on_site());
}
