//! Settings of a waiting room, with validation that names the offending setting.

use serde::{Deserialize, Serialize};

use crate::error::SettingsError;
use crate::types::Time;

/// How a waiting room behaves. Every duration is in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// How many visitors may be on the site at once; [`Settings::UNLIMITED`] for no limit.
    pub target_on_site: u64,
    /// How often a waiting visitor's client checks in.
    pub refresh_interval_ms: Time,
    /// A ticket not refreshed for this long is no longer accepted and its queue entry is dropped.
    pub ticket_expiry_ms: Time,
    /// How long a pass stays valid without a refresh. 0 means passes expire at once, so no one
    /// counts as on the site (the thesis' experiments run this way).
    pub pass_expiry_ms: Time,
    /// The longest a pass lives from its creation, refreshes included: past it the visitor's
    /// turn on the site is over (one admission is not a season ticket).
    pub pass_max_lifetime_ms: Time,
    /// How often visitors are let out of the queue.
    pub eviction_interval_ms: Time,
    /// How often expired tickets and passes are swept.
    pub cleanup_interval_ms: Time,
    /// Admit a joining visitor at once while the site is below target and nobody is queued, so
    /// visitors only wait during a spike. Off, everyone is queued (as in the thesis).
    pub admit_straight_through: bool,
}

impl Settings {
    /// Value of [`Settings::target_on_site`] that means "no limit".
    pub const UNLIMITED: u64 = u64::MAX;

    /// Checks that the settings make sense together.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let positive = |field: &'static str, value: Time| {
            if value == 0 {
                Err(SettingsError::new(field, "must be greater than 0"))
            } else {
                Ok(())
            }
        };
        if self.target_on_site == 0 {
            return Err(SettingsError::new(
                "target_on_site",
                "must be at least 1 (nobody could ever be admitted)",
            ));
        }
        positive("refresh_interval_ms", self.refresh_interval_ms)?;
        positive("eviction_interval_ms", self.eviction_interval_ms)?;
        positive("cleanup_interval_ms", self.cleanup_interval_ms)?;
        if self.pass_max_lifetime_ms < self.pass_expiry_ms {
            return Err(SettingsError::new(
                "pass_max_lifetime_ms",
                format!(
                    "must be at least pass_expiry_ms ({} ms): a new pass lives that long",
                    self.pass_expiry_ms
                ),
            ));
        }
        if self.ticket_expiry_ms <= self.refresh_interval_ms {
            return Err(SettingsError::new(
                "ticket_expiry_ms",
                format!(
                    "must be greater than refresh_interval_ms ({} ms), or tickets expire between \
                     two check-ins",
                    self.refresh_interval_ms
                ),
            ));
        }
        Ok(())
    }

    /// How long a queue entry stays without a check-in: three refresh intervals, at most the
    /// ticket expiry. A visitor who went quiet (or moved to another node) no longer takes a
    /// place meant for those present; their ticket still holds their place, so checking in again
    /// puts them back under their original join time.
    pub fn queue_entry_ttl_ms(&self) -> Time {
        self.refresh_interval_ms
            .saturating_mul(3)
            .min(self.ticket_expiry_ms)
    }

    /// Whether the target is unlimited.
    pub fn is_unlimited(&self) -> bool {
        self.target_on_site == Self::UNLIMITED
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            target_on_site: 100,
            refresh_interval_ms: 2_000,
            ticket_expiry_ms: 30_000,
            pass_expiry_ms: 600_000,
            pass_max_lifetime_ms: 4 * 3_600_000,
            eviction_interval_ms: 1_000,
            cleanup_interval_ms: 1_000,
            admit_straight_through: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_setting() {
        let bad = Settings {
            ticket_expiry_ms: 1_000,
            refresh_interval_ms: 2_000,
            ..Settings::default()
        };
        let err = bad.validate().unwrap_err();
        assert_eq!(err.field, "ticket_expiry_ms");
        assert!(err.to_string().contains("ticket_expiry_ms"));

        let bad = Settings {
            target_on_site: 0,
            ..Settings::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "target_on_site");

        let bad = Settings {
            eviction_interval_ms: 0,
            ..Settings::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "eviction_interval_ms");
    }

    #[test]
    fn pass_expiry_zero_is_allowed() {
        let s = Settings {
            pass_expiry_ms: 0,
            ..Settings::default()
        };
        s.validate().unwrap();
    }
}
