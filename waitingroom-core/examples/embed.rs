//! Embeds the single-node waiting room in a toy "ticket sale": a flash crowd arrives, the site
//! holds 50 visitors at a time, each stays on the site for a few seconds. Time is simulated, so
//! the run takes milliseconds and is the same every time.
//!
//! Run with `cargo run --release -p waitingroom-core --example embed`.

use waitingroom_core::{CheckInStatus, NodeId, Settings, Ticket, WaitingRoom};

struct Visitor {
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
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: true,
    };
    let mut room = WaitingRoom::new(settings, NodeId(1), 2026).expect("valid settings");

    // 2,000 visitors arrive within the first 4 seconds.
    let mut visitors: Vec<Visitor> = Vec::new();
    let mut admissions = Vec::new();
    let mut now = 0;
    while now <= 120_000 {
        if now < 4_000 && now % 2 == 0 {
            let answer = room.join(now);
            let admitted = answer.status == CheckInStatus::Admitted;
            visitors.push(Visitor {
                ticket: answer.ticket,
                admitted_at: admitted.then_some(now),
                leaves_site_at: None,
            });
        }
        if now % 1_000 == 0 {
            room.evict(now);
            room.cleanup(now);
        }
        for v in visitors.iter_mut() {
            if v.leaves_site_at.is_none() && v.ticket.next_refresh <= now {
                let answer = room.check_in(now, &v.ticket).expect("ticket still valid");
                v.ticket = answer.ticket;
                if answer.status == CheckInStatus::Admitted {
                    let pass = room.leave(now, &v.ticket).expect("admitted");
                    v.admitted_at.get_or_insert(now);
                    v.leaves_site_at = Some(pass.expires_at);
                    admissions.push(v.ticket.join_time);
                }
            }
        }
        now += 1;
    }

    let admitted = visitors.iter().filter(|v| v.admitted_at.is_some()).count();
    let waits: Vec<u64> = visitors
        .iter()
        .filter_map(|v| Some(v.admitted_at? - v.ticket.join_time))
        .collect();
    let worst = waits.iter().max().copied().unwrap_or(0);
    let out_of_order = admissions.windows(2).filter(|w| w[0] > w[1]).count();
    println!("visitors: {}", visitors.len());
    println!("admitted: {admitted}");
    println!("longest wait: {:.1} s", worst as f64 / 1000.0);
    println!("admissions out of join order: {out_of_order}");
    println!("on site at the end: {}", room.on_site());
}
