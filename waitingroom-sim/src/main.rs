//! `waitingroom-sim`: run one simulation, a parameter sweep, or the strategies side by side.
#![forbid(unsafe_code)]

/// The protocol allocates a lot (envelopes, B-tree nodes, membership copies): with the system
/// allocator, malloc and free take a large share of a run, and mimalloc spends less on them.
/// Results do not depend on the allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    waitingroom_sim::cli::main()
}
