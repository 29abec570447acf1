//! The embeddable core of **waitingroom**: a fair, first-in-first-out virtual waiting room.
//!
//! This crate holds everything a single process needs and nothing that ties it to a runtime:
//!
//! - [`Ticket`], [`Pass`] and the [`QueueKey`] that orders visitors (join time, ticket id, node id);
//! - [`LocalQueue`], a priority queue with O(log n) insert, pop-min, remove-by-id and rank;
//! - [`WaitingRoom`], a single-node engine another Rust service can embed (its [`Settings`]; its
//!   visitor table, private, keeps each visitor's record in a ring laid out in join order);
//! - [`token`], JWS compact tokens (RFC 7515): passes signed with Ed25519 (RFC 8037) for origins
//!   to check offline, tickets authenticated with HMAC-SHA256 for the cluster alone; [`jose`],
//!   the kinds of token and the JWS header each carries; [`CachedPassVerifier`], pass checks
//!   that remember the passes they verified;
//! - [`keys`], the cluster key, the secrets derived from it and the [`KeyRing`] that rotates it;
//! - [`round_records`], the signed, hash-chained record of each admission round, and the audit
//!   that checks a published chain and the passes let out by it; [`lottery`], the provable
//!   lotteries of random queueing, with their own signed records;
//! - [`kendall_tau`], the fairness metric, in O(n log n).
//!
//! Nothing here reads a clock or an unseeded random source: every operation takes `now`
//! (milliseconds) as an argument and randomness comes from a seed, so tests and the simulator
//! can drive it deterministically.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod engine;
pub mod error;
pub mod jose;
pub mod kendall;
pub mod keys;
pub mod lottery;
pub mod queue;
pub mod round_records;
pub mod settings;
pub mod token;
pub mod types;
pub mod verified;
mod visitor_table;

pub use engine::{CheckIn, CheckInStatus, KeptVisitor, WaitingRoom};
pub use error::{EngineError, SettingsError};
pub use jose::TokenKind;
pub use kendall::{Ties, count_inversions, kendall_tau, kendall_tau_permutation};
pub use keys::{ClusterKey, Jwk, KeyError, KeyRing, VerifyingKeySet};
pub use queue::LocalQueue;
pub use settings::Settings;
pub use token::{TokenError, sign_pass, sign_ticket};
pub use types::{NodeId, Pass, QueueKey, Ticket, TicketId, Time};
pub use verified::CachedPassVerifier;
