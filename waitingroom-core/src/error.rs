//! Error types of the core crate.

use thiserror::Error;

pub use crate::keys::KeyError;
pub use crate::token::TokenError;

/// A setting is invalid. `field` names it as it appears in configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid setting `{field}`: {reason}")]
pub struct SettingsError {
    /// The setting's name, as spelled in configuration files.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl SettingsError {
    /// A new error about `field`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        SettingsError {
            field,
            reason: reason.into(),
        }
    }
}

/// Why the waiting room engine refused a visitor operation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    /// The ticket's expiry time has passed.
    #[error("ticket expired")]
    TicketExpired,
    /// The ticket was issued by another node; the caller should send the visitor there.
    #[error("ticket belongs to node {0}")]
    WrongNode(crate::types::NodeId),
    /// The visitor asked to leave the queue before being let out.
    #[error("visitor has not been admitted yet")]
    NotYetAdmitted,
    /// This ticket already produced a pass; a ticket lets one visitor in once.
    #[error("ticket was already used to enter the site")]
    AlreadyLeft,
    /// The pass's expiry time has passed.
    #[error("pass expired")]
    PassExpired,
    /// The pass has lived its longest ([`crate::Settings::pass_max_lifetime_ms`]): it is not
    /// extended again.
    #[error("pass reached its longest lifetime and cannot be refreshed")]
    PassLifetimeOver,
    /// The pass is not known to this waiting room (never issued here, or swept as expired).
    #[error("pass not recognised")]
    UnknownPass,
    /// The pass was extended less than [`crate::WaitingRoom::refresh_min_interval`] ago: it is
    /// extended again from `retry_after_ms` on.
    #[error("pass refreshed too recently; retry in {retry_after_ms} ms")]
    RefreshTooSoon {
        /// How long until a refresh is taken, ms.
        retry_after_ms: u64,
    },
}
