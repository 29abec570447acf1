//! How much a node's protocol state grows per member: clusters of two sizes on the test rig,
//! settled and counting rounds with no visitors, their heap measured by a counting allocator.
//!
//! ```text
//! cargo run --release -p waitingroom-distributed --example member-bytes -- 64 128
//! ```
//! Prints, per size, the heap per node, and between the two sizes the bytes each node's state
//! grows per member: the rig shares a received membership between the nodes that applied it
//! (as the simulator does), so the membership a server holds on its own, measured apart, is
//! added (one deep copy of it per node).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use waitingroom_core::Settings;
use waitingroom_distributed::AdmissionMode;
use waitingroom_distributed::membership::Membership;
use waitingroom_distributed::testing::{Net, queued_settings};

/// The system allocator, counting the bytes held.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How long each cluster runs once formed.
const RUN_MS: u64 = 90_000;

/// Heap bytes per node of a settled cluster of `n` idle nodes, and of one deep copy of its
/// membership.
fn measure(n: u64) -> (f64, usize) {
    let settings = Settings {
        target_on_site: 1_000,
        ..queued_settings()
    };
    let before = HELD.load(Ordering::Relaxed);
    let mut net = Net::new(1, settings, AdmissionMode::Range, 1);
    net.check_every_event = false;
    for id in 2..=n {
        net.add_node(id, 1);
        net.run_for(50);
    }
    // Long enough for every node to probe every other (SWIM's clock samples) and for rounds
    // to complete, the same for every size.
    net.run_for(RUN_MS);
    // What the rig itself keeps of the run is not the nodes' state.
    net.events = Vec::new();
    net.admitted = Vec::new();
    let held = HELD.load(Ordering::Relaxed) - before;
    let first = net.ids()[0];
    let m: &Membership = net.node(first).membership();
    let at = HELD.load(Ordering::Relaxed);
    let copy = m.clone();
    let membership = HELD.load(Ordering::Relaxed) - at;
    drop(copy);
    (held as f64 / n as f64, membership)
}

fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("cluster sizes"))
        .collect();
    let [small, large] = sizes[..] else {
        panic!("give two cluster sizes");
    };
    let (per_small, m_small) = measure(small);
    let (per_large, m_large) = measure(large);
    let grows = (per_large - per_small) / (large - small) as f64;
    let membership = (m_large - m_small) as f64 / (large - small) as f64;
    println!("{small} nodes: {per_small:.0} B per node, membership {m_small} B");
    println!("{large} nodes: {per_large:.0} B per node, membership {m_large} B");
    println!(
        "per member: {grows:.0} B of node state (membership shared) + {membership:.0} B of \
         membership = {:.0} B",
        grows + membership
    );
}
