//! The waiting room's own settings: how many visitors the site takes, how often visitors check
//! in and are let out, how long tickets and passes last, and the room's mode and rate cap (the
//! live settings an operator may change while the cluster runs start from these). Their
//! defaults are the core's ([`Settings::default`]) and the protocol's.

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use serde::Deserialize;
use waitingroom_core::{Settings, Time};
use waitingroom_distributed::Mode;

use super::{defaulted, protocol_defaults, shown};

layered! {
    /// The waiting room: how many visitors, how often, in which mode.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Waiting room")]
    pub struct RoomOptions {
        /// How many visitors may be on the site at once; "unlimited" for no limit.
        #[arg(
            long,
            env = "WAITINGROOM_TARGET_ON_SITE",
            value_name = "N|unlimited",
            value_parser = parse_target,
            default_value = shown(Settings::default().target_on_site)
        )]
        #[serde(default, deserialize_with = "de_target")]
        pub target_on_site: Option<u64>,
        /// How often a waiting visitor's client checks in, ms.
        #[arg(
            long,
            env = "WAITINGROOM_REFRESH_INTERVAL_MS",
            value_name = "MS",
            default_value = shown(Settings::default().refresh_interval_ms)
        )]
        pub refresh_interval_ms: Option<Time>,
        /// A ticket not refreshed for this long is refused and its place dropped, ms; must
        /// exceed refresh_interval_ms.
        #[arg(
            long,
            env = "WAITINGROOM_TICKET_EXPIRY_MS",
            value_name = "MS",
            default_value = shown(Settings::default().ticket_expiry_ms)
        )]
        pub ticket_expiry_ms: Option<Time>,
        /// How long a pass stays valid without a refresh, ms; 0: passes expire at once (nobody
        /// counts as on the site).
        #[arg(
            long,
            env = "WAITINGROOM_PASS_EXPIRY_MS",
            value_name = "MS",
            default_value = shown(Settings::default().pass_expiry_ms)
        )]
        pub pass_expiry_ms: Option<Time>,
        /// The longest a pass lives from its creation, refreshes included; at least
        /// pass_expiry_ms. Past it a refresh is refused (403 pass_lifetime_over): one admission
        /// is one visit, not a season ticket.
        #[arg(
            long,
            env = "WAITINGROOM_PASS_MAX_LIFETIME_MS",
            value_name = "MS",
            default_value = shown(Settings::default().pass_max_lifetime_ms)
        )]
        pub pass_max_lifetime_ms: Option<Time>,
        /// How often visitors are let out of the queue, ms; the same on every node.
        #[arg(
            long,
            env = "WAITINGROOM_EVICTION_INTERVAL_MS",
            value_name = "MS",
            default_value = shown(Settings::default().eviction_interval_ms)
        )]
        pub eviction_interval_ms: Option<Time>,
        /// How often expired tickets and passes are swept, ms.
        #[arg(
            long,
            env = "WAITINGROOM_CLEANUP_INTERVAL_MS",
            value_name = "MS",
            default_value = shown(Settings::default().cleanup_interval_ms)
        )]
        pub cleanup_interval_ms: Option<Time>,
        /// Admit a joining visitor at once while the site has room and nobody waits (false:
        /// queue everyone, as in the thesis).
        #[arg(
            long,
            env = "WAITINGROOM_ADMIT_STRAIGHT_THROUGH",
            value_name = "BOOL",
            default_value = shown(Settings::default().admit_straight_through)
        )]
        pub admit_straight_through: Option<bool>,
        /// What the room does with visitors: normal (queue while the site is full), queue_all
        /// (everyone queues, nobody is let out), passthrough (everyone in at once, with a pass)
        /// or reject (new visitors turned away). A live setting: change it while the cluster
        /// runs with `waitingroom-node admin set mode=...`.
        #[arg(
            long,
            env = "WAITINGROOM_MODE",
            value_name = "MODE",
            value_parser = room_mode(),
            default_value = protocol_defaults().mode.name()
        )]
        pub mode: Option<Mode>,
        /// Most visitors let out per minute, cluster-wide, spread evenly over the eviction
        /// rounds; alongside target_on_site, the smaller wins. A live setting. Without it: no
        /// cap.
        #[arg(long, env = "WAITINGROOM_NEW_USERS_PER_MINUTE", value_name = "N")]
        pub new_users_per_minute: Option<u64>,
    }
}

impl RoomOptions {
    /// The waiting room settings (checked with the protocol's).
    pub(super) fn settings(&self) -> Settings {
        Settings {
            target_on_site: defaulted(&self.target_on_site),
            refresh_interval_ms: defaulted(&self.refresh_interval_ms),
            ticket_expiry_ms: defaulted(&self.ticket_expiry_ms),
            pass_expiry_ms: defaulted(&self.pass_expiry_ms),
            pass_max_lifetime_ms: defaulted(&self.pass_max_lifetime_ms),
            eviction_interval_ms: defaulted(&self.eviction_interval_ms),
            cleanup_interval_ms: defaulted(&self.cleanup_interval_ms),
            admit_straight_through: defaulted(&self.admit_straight_through),
        }
    }
}

/// `--mode` takes the protocol's own names for the room's modes ([`Mode::name`]).
fn room_mode() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::ALL.map(Mode::name)).try_map(|name| name.parse::<Mode>())
}

fn parse_target(s: &str) -> Result<u64, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        Ok(Settings::UNLIMITED)
    } else {
        s.parse()
            .map_err(|_| "expected a number or \"unlimited\"".to_owned())
    }
}

fn de_target<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Target {
        N(u64),
        S(String),
    }
    match Target::deserialize(d)? {
        Target::N(n) => Ok(Some(n)),
        Target::S(s) => parse_target(&s).map(Some).map_err(serde::de::Error::custom),
    }
}
