//! A long run's progress on stderr — simulated time, visitors admitted, events per second — so
//! a ten-million-visitor run does not look hung. It reads only what the run already counts and
//! writes only to stderr: the run, its trace and its report are the same with it on or off.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use waitingroom_core::Time;

/// How often the event loop asks whether to print (a power of two: a mask test per event).
pub const EVERY_EVENTS: u64 = 1 << 16;
/// Least wall time between two lines.
const INTERVAL: Duration = Duration::from_secs(2);

/// Where and whether progress is shown.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    /// On a terminal one line is rewritten in place; elsewhere (`--progress` into a log) each
    /// report is a line of its own.
    in_place: bool,
    started: Instant,
    last: Instant,
    last_events: u64,
    shown: bool,
}

impl Progress {
    /// Nothing shown (sweeps, tests, library callers).
    pub fn off() -> Progress {
        Progress::new(false)
    }

    /// Shown when stderr is a terminal, or always with `force`.
    pub fn on_terminal(force: bool) -> Progress {
        Progress::new(force || std::io::stderr().is_terminal())
    }

    fn new(enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled,
            in_place: std::io::stderr().is_terminal(),
            started: now,
            last: now,
            last_events: 0,
            shown: false,
        }
    }

    /// Called every [`EVERY_EVENTS`] events: prints a line when `INTERVAL` has passed.
    pub fn tick(&mut self, events: u64, sim_ms: Time, admitted: u64, users: u64) {
        if !self.enabled || self.last.elapsed() < INTERVAL {
            return;
        }
        let rate = (events - self.last_events) as f64 / self.last.elapsed().as_secs_f64();
        let line = format!(
            "sim {:.1} s · admitted {admitted} of {users} · {:.0}k events/s · {:.0} s wall",
            sim_ms as f64 / 1000.0,
            rate / 1000.0,
            self.started.elapsed().as_secs_f64()
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.in_place {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.last = Instant::now();
        self.last_events = events;
        self.shown = true;
    }

    /// Ends the progress line, if one was printed in place.
    pub fn done(&mut self) {
        if self.shown && self.in_place {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
