//! The admission protocol's knobs: how the root lets visitors out, SWIM's failure detection,
//! the reliable channel and the spanning tree. Each is the [`NodeConfig`] field of the same name,
//! and its default is the protocol's own ([`NodeConfig::new`]).

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use serde::Deserialize;
use waitingroom_core::{NodeId, Settings, SettingsError, Time};
use waitingroom_distributed::{AdmissionMode, NodeConfig, leased_if_limited};

use super::room::RoomOptions;
use super::{defaulted, protocol_defaults, shown};

layered! {
    /// The admission protocol's knobs.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Admission protocol")]
    pub struct ProtocolOptions {
        /// How the root lets visitors out: range (one message per tree edge per round), batched
        /// (QPID deleteMin in batches) or sequential (one at a time, as in the thesis). The last
        /// two are not leased: only with --target-on-site unlimited and no rate cap.
        #[arg(
            long,
            env = "WAITINGROOM_ADMISSION",
            value_name = "MODE",
            value_parser = admission_mode(),
            default_value = protocol_defaults().admission.name()
        )]
        pub admission: Option<AdmissionMode>,
        /// SWIM: how often one member is probed, ms.
        #[arg(
            long,
            env = "WAITINGROOM_PROBE_INTERVAL_MS",
            value_name = "MS",
            default_value = shown(protocol_defaults().probe_interval_ms)
        )]
        pub probe_interval_ms: Option<Time>,
        /// SWIM: how long to wait for a probe answer before asking others, ms; below
        /// probe_interval_ms.
        #[arg(
            long,
            env = "WAITINGROOM_PROBE_TIMEOUT_MS",
            value_name = "MS",
            default_value = shown(protocol_defaults().probe_timeout_ms)
        )]
        pub probe_timeout_ms: Option<Time>,
        /// SWIM: members asked to probe indirectly.
        #[arg(
            long,
            env = "WAITINGROOM_INDIRECT_PROBES",
            value_name = "N",
            default_value = shown(protocol_defaults().indirect_probes)
        )]
        pub indirect_probes: Option<usize>,
        /// SWIM: extra failed probe rounds before a member is declared dead.
        #[arg(
            long,
            env = "WAITINGROOM_SUSPECT_ROUNDS",
            value_name = "N",
            default_value = shown(protocol_defaults().suspect_rounds)
        )]
        pub suspect_rounds: Option<u32>,
        /// Resend an unacknowledged protocol message after this long, ms.
        #[arg(
            long,
            env = "WAITINGROOM_RETRANSMIT_MS",
            value_name = "MS",
            default_value = shown(protocol_defaults().retransmit_ms)
        )]
        pub retransmit_ms: Option<Time>,
        /// A joining node asks again after this long without an answer, ms.
        #[arg(
            long,
            env = "WAITINGROOM_JOIN_RETRY_MS",
            value_name = "MS",
            default_value = shown(protocol_defaults().join_retry_ms)
        )]
        pub join_retry_ms: Option<Time>,
        /// A joining node that no seed answers for this long starts a cluster of its own (and
        /// merges with the others once they can talk), ms.
        #[arg(
            long,
            env = "WAITINGROOM_JOIN_TIMEOUT_MS",
            value_name = "MS",
            default_value = shown(protocol_defaults().join_timeout_ms)
        )]
        pub join_timeout_ms: Option<Time>,
        /// Most neighbours a node gets in the spanning tree (at least 2).
        #[arg(
            long,
            env = "WAITINGROOM_MAX_TREE_DEGREE",
            value_name = "N",
            default_value = shown(protocol_defaults().max_tree_degree)
        )]
        pub max_tree_degree: Option<usize>,
        /// Range admission: most keys per count reply and per round when places are limited.
        #[arg(
            long,
            env = "WAITINGROOM_SELECT_LIMIT",
            value_name = "N",
            default_value = shown(protocol_defaults().select_limit)
        )]
        pub select_limit: Option<u32>,
        /// Rebuild the tree after this many eviction intervals without a count while visitors
        /// wait (a safety net; at least 2).
        #[arg(
            long,
            env = "WAITINGROOM_WATCHDOG_ROUNDS",
            value_name = "N",
            default_value = shown(protocol_defaults().watchdog_rounds)
        )]
        pub watchdog_rounds: Option<u32>,
    }
}

impl ProtocolOptions {
    /// The protocol configuration template, checked by the protocol itself (which names any
    /// bad knob or setting). The id, incarnation and address are placeholders until the socket
    /// is bound.
    pub(super) fn node_config(
        &self,
        room: &RoomOptions,
        settings: &Settings,
    ) -> Result<NodeConfig, SettingsError> {
        let protocol = NodeConfig {
            admission: defaulted(&self.admission),
            mode: defaulted(&room.mode),
            probe_interval_ms: defaulted(&self.probe_interval_ms),
            probe_timeout_ms: defaulted(&self.probe_timeout_ms),
            indirect_probes: defaulted(&self.indirect_probes),
            suspect_rounds: defaulted(&self.suspect_rounds),
            retransmit_ms: defaulted(&self.retransmit_ms),
            join_retry_ms: defaulted(&self.join_retry_ms),
            join_timeout_ms: defaulted(&self.join_timeout_ms),
            max_tree_degree: defaulted(&self.max_tree_degree),
            select_limit: defaulted(&self.select_limit),
            watchdog_rounds: defaulted(&self.watchdog_rounds),
            new_users_per_minute: room.new_users_per_minute,
            ..NodeConfig::new(NodeId(1), 1, "", settings.clone())
        };
        protocol.validate()?;
        let rate_cap = protocol.new_users_per_minute.is_some();
        leased_if_limited(protocol.admission, settings.target_on_site, rate_cap)?;
        Ok(protocol)
    }
}

/// `--admission` takes the protocol's own names for its modes ([`AdmissionMode::name`]).
fn admission_mode() -> impl TypedValueParser<Value = AdmissionMode> {
    PossibleValuesParser::new(AdmissionMode::ALL.map(AdmissionMode::name))
        .try_map(|name| name.parse::<AdmissionMode>())
}
