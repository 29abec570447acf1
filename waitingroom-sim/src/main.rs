//! `waitingroom-sim`: run one simulation, a parameter sweep, or the strategies side by side.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    waitingroom_sim::cli::main()
}
