//! The waitingroom protocol as a pure state machine (sans-IO).
//!
//! N [`Node`]s act as one fair FIFO queue: QPID over a spanning tree holds the cluster minimum
//! at the root, TAG counts decide how many visitors to let out, SWIM detects failed members,
//! and deterministic tree edits handle members joining and leaving while the queue runs.
//! The HTTP server and the simulator are thin drivers of the same [`Node`]; see
//! [`node`] for the driver contract and [`invariants`] for the checks both run.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod channel;
mod cluster;
pub mod config;
mod decision;
mod departed;
pub mod events;
mod ignored;
pub mod lease;
pub mod live;
pub mod patch;

pub mod invariants;
mod local;
pub mod membership;
pub mod messages;
pub mod node;
mod outputs;
mod qpid;
mod record_chain;
pub mod released;
mod swim;
mod tag;
mod timer;
pub mod voters;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod fuzz_regressions;

pub use cluster::Phase;
pub use config::{AdmissionMode, NodeConfig, leased_if_limited};
pub use events::{EventPhase, EventSettings, ScheduledEvent};
pub use ignored::Ignored;
pub use lease::Pause;
pub use live::LiveSettings;
pub use membership::{Contact, Membership};
pub use messages::{Body, ChannelMsg, Envelope, Summary, Weight};
pub use node::visitor::VisitorError;
pub use node::{ClockOffset, Durable, DurableDelta, GrantStatus, Node, NodeStatus};
pub use outputs::{Event, Transmit};
pub use patch::{
    MAX_COUNT, MAX_DURATION_MS, MAX_TIME_OFFSET_MS, Mode, QueueingMethod, SettingsPatch,
    check_duration,
};
