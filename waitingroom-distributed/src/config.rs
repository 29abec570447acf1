//! Configuration of one protocol node.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use waitingroom_core::{NodeId, Settings, SettingsError, Time};

use crate::live::LiveSettings;
use crate::patch::{Mode, QueueingMethod};

/// How the root lets visitors out once a count has decided how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionMode {
    /// The count selects exactly the smallest keys (every one of them was known to it), and
    /// every node lets out its share in parallel. One message per tree edge per round, whatever
    /// the number admitted. The default.
    #[default]
    Range,
    /// QPID deleteMin with batching: the root pops while its local head is below every branch,
    /// and hands the remaining admissions to the branch holding the minimum with findRoot.
    Batched,
    /// QPID deleteMin one visitor at a time, as in the thesis.
    Sequential,
}

impl AdmissionMode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [AdmissionMode; 3] = [
        AdmissionMode::Range,
        AdmissionMode::Batched,
        AdmissionMode::Sequential,
    ];

    /// The mode's name: what the server's and the simulator's `--admission` take and print, and
    /// its serde form.
    pub fn name(self) -> &'static str {
        match self {
            AdmissionMode::Range => "range",
            AdmissionMode::Batched => "batched",
            AdmissionMode::Sequential => "sequential",
        }
    }
}

impl fmt::Display for AdmissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The deleteMin modes (batched, sequential), kept to compare with the thesis, let visitors out
/// through QPID without admission leases (waitingroom-distributed/README.md#admission-leases): the
/// server runs them only while nothing limits admission. Refuses `admission` when it is one of them
/// and `target` (`Settings::UNLIMITED`: none) or a rate cap limits admission.
pub fn leased_if_limited(
    admission: AdmissionMode,
    target: u64,
    rate_cap: bool,
) -> Result<(), SettingsError> {
    if admission == AdmissionMode::Range || target == Settings::UNLIMITED && !rate_cap {
        return Ok(());
    }
    Err(SettingsError::new(
        "admission",
        format!(
            "{} lets visitors out without admission leases, so it runs only with \
             target_on_site unlimited and no new_users_per_minute; use range",
            admission.name()
        ),
    ))
}

/// A name that is not one of [`AdmissionMode::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown admission mode `{0}` (range, batched or sequential)")]
pub struct UnknownAdmissionMode(pub String);

impl FromStr for AdmissionMode {
    type Err = UnknownAdmissionMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AdmissionMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownAdmissionMode(s.to_string()))
    }
}

/// Everything a [`crate::Node`] needs to know about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// This node's id; must not be 0 and must be unique in the cluster.
    pub id: NodeId,
    /// Distinguishes this life of the process from earlier ones with the same id (the server
    /// uses its start time); must not be 0.
    pub incarnation: u64,
    /// The address peers use to reach this node.
    pub addr: String,
    /// Waiting room settings; must be the same on every node. Those an operator may change
    /// while the cluster runs start from here (version 0 of [`crate::LiveSettings`]).
    pub settings: Settings,
    /// What the room does with visitors at start (a live setting).
    pub mode: Mode,
    /// Most visitors let out per minute, cluster-wide, at start (a live setting; None: no cap).
    pub new_users_per_minute: Option<u64>,
    /// In which order visitors are let out, at start (a live setting).
    pub queueing_method: QueueingMethod,
    /// How visitors are let out.
    pub admission: AdmissionMode,
    /// SWIM: how often one member is probed.
    pub probe_interval_ms: Time,
    /// SWIM: how long to wait for a direct answer before asking others to probe.
    pub probe_timeout_ms: Time,
    /// SWIM: how many other members are asked for an indirect probe.
    pub indirect_probes: usize,
    /// SWIM: how many extra failed probe rounds a member gets before it is declared dead.
    pub suspect_rounds: u32,
    /// Reliable channel: resend an unacknowledged message after this long.
    pub retransmit_ms: Time,
    /// A joining node asks again after this long without an answer.
    pub join_retry_ms: Time,
    /// A joining node that no seed answers for this long starts a cluster of its own (it merges
    /// with the others once they can talk).
    pub join_timeout_ms: Time,
    /// Tree edits try to give no node more than this many neighbours.
    pub max_tree_degree: usize,
    /// Range admission: at most this many keys per count reply; a round admits at most this
    /// many when places are limited.
    pub select_limit: u32,
    /// A member that sees no count for this many eviction intervals while visitors wait
    /// rebuilds the tree (a safety net; it should never be needed).
    pub watchdog_rounds: u32,
    /// Seed of every random choice the node makes.
    pub seed: u64,
}

impl NodeConfig {
    /// A configuration with the protocol defaults.
    pub fn new(id: NodeId, incarnation: u64, addr: impl Into<String>, settings: Settings) -> Self {
        NodeConfig {
            id,
            incarnation,
            addr: addr.into(),
            settings,
            mode: Mode::Normal,
            new_users_per_minute: None,
            queueing_method: QueueingMethod::Fifo,
            admission: AdmissionMode::default(),
            probe_interval_ms: 500,
            probe_timeout_ms: 200,
            indirect_probes: 3,
            suspect_rounds: 1,
            retransmit_ms: 100,
            join_retry_ms: 500,
            join_timeout_ms: 10_000,
            max_tree_degree: 4,
            select_limit: 1024,
            watchdog_rounds: 10,
            seed: id.0 ^ incarnation.rotate_left(17),
        }
    }

    /// The live settings this configuration starts with.
    pub fn live(&self) -> LiveSettings {
        LiveSettings {
            queueing_method: self.queueing_method,
            ..LiveSettings::from_file(&self.settings, self.mode, self.new_users_per_minute)
        }
    }

    /// Checks the configuration, naming the offending setting.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.settings.validate()?;
        self.live().validate(&self.settings)?;
        if self.id.0 == 0 {
            return Err(SettingsError::new("node_id", "must not be 0"));
        }
        if self.incarnation == 0 {
            return Err(SettingsError::new("incarnation", "must not be 0"));
        }
        let positive = [
            ("probe_interval_ms", self.probe_interval_ms),
            ("probe_timeout_ms", self.probe_timeout_ms),
            ("retransmit_ms", self.retransmit_ms),
            ("join_retry_ms", self.join_retry_ms),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(SettingsError::new(field, "must be greater than 0"));
            }
        }
        if self.probe_timeout_ms >= self.probe_interval_ms {
            return Err(SettingsError::new(
                "probe_timeout_ms",
                "must be shorter than probe_interval_ms",
            ));
        }
        if self.max_tree_degree < 2 {
            return Err(SettingsError::new("max_tree_degree", "must be at least 2"));
        }
        if self.watchdog_rounds < 2 {
            return Err(SettingsError::new("watchdog_rounds", "must be at least 2"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_modes_parse_print_and_serialise_by_one_name() {
        for mode in AdmissionMode::ALL {
            assert_eq!(mode.to_string().parse::<AdmissionMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.name()));
        }
        assert_eq!(
            "fifo".parse::<AdmissionMode>(),
            Err(UnknownAdmissionMode("fifo".into()))
        );
    }

    /// The thesis' deleteMin modes are not leased: they run only while nothing limits
    /// admission.
    #[test]
    fn the_unleased_admission_modes_need_no_limit() {
        for admission in [AdmissionMode::Batched, AdmissionMode::Sequential] {
            let err = leased_if_limited(admission, 100, false).unwrap_err();
            assert_eq!(err.field, "admission");
            assert!(err.reason.contains(admission.name()), "{err}");
            assert!(leased_if_limited(admission, Settings::UNLIMITED, false).is_ok());
            assert!(
                leased_if_limited(admission, Settings::UNLIMITED, true).is_err(),
                "a rate cap is a limit too"
            );
        }
        assert!(leased_if_limited(AdmissionMode::Range, 100, true).is_ok());
    }
}
