//! The node's settings. A node is configured once, at start, from flags, `WAITINGROOM_*`
//! environment variables and a TOML file laid over the defaults (flags win, then the environment,
//! then the file); everything is checked before the node runs, naming the setting at fault, and
//! comes out as one [`ServerConfig`], which the rest of the crate reads.
//!
//! Settings are grouped by area, one file each, as clap argument groups flattened into
//! [`Options`]. A setting is one field of its area's group: its name is the flag
//! (`--target-on-site`), the variable (`WAITINGROOM_TARGET_ON_SITE`) and the file key
//! (`target_on_site`), its doc comment is its help and its `default_value` its default. To add
//! one, add the field, read it in the area's resolver, and add its row to the settings table
//! (docs/operating.md#settings), which the `documented` test holds to the code.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::builder::OsStr;
use thiserror::Error;
use waitingroom_core::{NodeId, Settings, SettingsError};
use waitingroom_distributed::NodeConfig;

use crate::crypto::tls::TlsFiles;
use crate::wire::cookies::CookieOptions;

/// Declares a group of settings, every field an `Option` ("not given here"), with its `or`:
/// the group's settings, and `under`'s where it has none. Wrapped around the struct so that the
/// fields are named once, in the struct itself.
macro_rules! layered {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_attr:meta])* $field_vis:vis $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$attr])*
        $vis struct $name {
            $($(#[$field_attr])* $field_vis $field: $ty,)*
        }

        impl $name {
            /// These settings, and `under`'s where these are not given.
            pub fn or(self, under: Self) -> Self {
                Self {
                    $($field: self.$field.or(under.$field),)*
                }
            }
        }
    };
}

mod cluster;
mod limits;
mod logs;
mod network;
mod page;
mod protocol;
mod records;
mod room;
mod sources;
mod visitors;

#[cfg(test)]
mod documented;
#[cfg(test)]
mod tests;

pub use cluster::{ClusterOptions, Discovery};
pub use limits::{LimitOptions, Limits};
pub use logs::{LogFormat, LogOptions};
pub use network::{NetworkOptions, derive_node_id};
pub use page::{Branding, PageOptions};
pub use protocol::ProtocolOptions;
pub use records::{RecordOptions, Secret};
pub use room::RoomOptions;
pub use visitors::{VisitorOptions, web_origin};

layered! {
    /// Every setting of `waitingroom-node run`, by area (`--help` lists each group under its own
    /// heading); a setting that is `None` was not given here, and [`Options::resolve`] lays the
    /// defaults under it.
    #[derive(Debug, Clone, Default)]
    pub struct Options {
        /// Addresses, mutual TLS, the node's id and the cluster's keys.
        pub network: NetworkOptions,
        /// How the node finds its cluster.
        pub cluster: ClusterOptions,
        /// The waiting room: how many visitors, how often, in which mode.
        pub room: RoomOptions,
        /// The admission protocol's knobs.
        pub protocol: ProtocolOptions,
        /// Where visitors go, the room's URL and its cookies.
        pub visitors: VisitorOptions,
        /// Transport and abuse limits.
        pub limits: LimitOptions,
        /// The admin API's token and the records a node keeps.
        pub records: RecordOptions,
        /// The waiting page's look.
        pub page: PageOptions,
        /// Logs.
        pub logs: LogOptions,
    }
}

/// The resolved configuration of one node.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Public listen address.
    pub listen: SocketAddr,
    /// Internal listen address; `None`: one port for everything (loopback only).
    pub internal_listen: Option<SocketAddr>,
    /// Mutual TLS on the internal listener and to peers, if configured.
    pub internal_tls: Option<TlsFiles>,
    /// Advertised URL, if given (else derived from the bound address).
    pub advertise: Option<String>,
    /// Node id, if given (else derived from the advertised URL).
    pub node_id: Option<NodeId>,
    /// Seeds to join through.
    pub peers: Vec<String>,
    /// Peers found in DNS, if asked for.
    pub discovery: Option<Discovery>,
    /// Cluster key file.
    pub key_file: PathBuf,
    /// Earlier cluster keys still accepted (key rotation).
    pub extra_verify_keys: Vec<PathBuf>,
    /// Where admitted visitors go.
    pub origin_url: String,
    /// The room's public URL and its origin (for the `Origin` check of joins), if given.
    pub public_url: Option<(String, String)>,
    /// Waiting room settings.
    pub settings: Settings,
    /// Protocol configuration template (id, incarnation, address and seed are filled in at
    /// start).
    pub protocol: NodeConfig,
    /// Limits.
    pub limits: Limits,
    /// The cookies' names and attributes.
    pub cookies: CookieOptions,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
    /// Page look.
    pub branding: Branding,
    /// The admin API's bearer token (`None`: the admin API is off).
    pub admin_token: Option<Secret>,
    /// Where round records are appended, if anywhere.
    pub rounds_log: Option<PathBuf>,
    /// Round records kept in memory.
    pub rounds_kept: usize,
    /// Where the agreed voters are kept, if anywhere.
    pub voters_file: Option<PathBuf>,
    /// Where what a restart must not forget is kept, if anywhere (`crate::app::state_dir`).
    pub state_dir: Option<PathBuf>,
}

/// Reads a TOML config file into [`Options`]. A key that names no setting is refused.
pub fn read_file(path: &Path) -> Result<Options, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: shown.clone(),
        source,
    })?;
    sources::parse_file(&text).map_err(|source| ConfigError::ParseFile {
        path: shown,
        source: Box::new(source),
    })
}

/// `flags_env` (from clap, already flags-over-environment) over `file`.
pub fn merge(flags_env: Options, file: Options) -> Options {
    flags_env.or(file)
}

impl Options {
    /// Lays the defaults under these settings, then checks everything, naming the setting at
    /// fault. The checks run in this order (of several bad settings, the first is named): the
    /// waiting room and protocol settings, the node's addresses and identity, limits, the page,
    /// logs.
    pub fn resolve(self) -> Result<ServerConfig, ConfigError> {
        let o = self.or(sources::DEFAULTS.clone());
        let settings = o.room.settings();
        let protocol = o.protocol.node_config(&o.room, &settings)?;
        let net = &o.network;
        let listen = defaulted(&net.listen);
        let internal_listen = net.internal_listen(listen)?;
        let internal_tls = net.internal_tls(internal_listen)?;
        let tls = internal_tls.is_some();
        let peer_listen = internal_listen.unwrap_or(listen);
        // Fields are evaluated in the order written: that is the order of the checks.
        Ok(ServerConfig {
            advertise: net.advertise(peer_listen, tls)?,
            node_id: net.node_id()?,
            peers: o.cluster.seeds(tls)?,
            discovery: o.cluster.discovery(peer_listen, tls)?,
            key_file: net.key_file()?,
            extra_verify_keys: net.extra_verify_key.clone().unwrap_or_default(),
            origin_url: o.visitors.origin_url()?,
            public_url: o.visitors.public_url()?,
            limits: o.limits.limits()?,
            admin_token: o.records.admin_token()?,
            rounds_log: o.records.rounds_log()?,
            rounds_kept: o.records.rounds_kept()?,
            voters_file: o.records.voters_file(),
            state_dir: o.records.state_dir()?,
            branding: o.page.branding()?,
            log_level: o.logs.log_level()?,
            log_format: defaulted(&o.logs.log_format),
            cookies: CookieOptions {
                ticket_max_age_s: settings.ticket_expiry_ms.div_ceil(1000),
                ..o.visitors.cookies()?
            },
            listen,
            internal_listen,
            internal_tls,
            settings,
            protocol,
        })
    }
}

impl ServerConfig {
    /// Whether the voters are kept in the state directory's own file (no `--voters-file`).
    pub fn voters_file_is_the_state_dirs(&self) -> bool {
        let own = (self.state_dir.as_ref()).map(|dir| dir.join(records::VOTERS_IN_STATE_DIR));
        own.is_some() && own == self.voters_file
    }

    /// The protocol configuration for this process.
    pub fn node_config(&self, id: NodeId, incarnation: u64, addr: &str, seed: u64) -> NodeConfig {
        let mut cfg = self.protocol.clone();
        cfg.id = id;
        cfg.incarnation = incarnation;
        cfg.addr = addr.to_owned();
        cfg.seed = seed;
        cfg
    }
}

/// Why the configuration was refused. Every variant names the setting or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML for these settings.
    #[error("invalid config file {path}: {source}")]
    ParseFile {
        /// Path.
        path: String,
        /// Cause (names the key).
        source: Box<toml::de::Error>,
    },
    /// A setting's value is refused.
    #[error(transparent)]
    Setting(#[from] SettingsError),
}

/// A setting's default as clap shows and parses it (`default_value = shown(…)`): for a default
/// that is written elsewhere once, such as the protocol's own.
fn shown(value: impl std::fmt::Display) -> OsStr {
    OsStr::from(value.to_string())
}

/// A choice's name as clap shows and parses it (`default_value = named(…)`): for a default
/// that is the type's own ([`Default`]).
fn named(choice: impl clap::ValueEnum) -> OsStr {
    let value = choice.to_possible_value();
    OsStr::from(value.as_ref().map_or("", |v| v.get_name()).to_owned())
}

/// The protocol's own defaults ([`NodeConfig::new`]), which its knobs' `default_value`s show.
fn protocol_defaults() -> NodeConfig {
    NodeConfig::new(NodeId(1), 1, "", Settings::default())
}

/// A setting that has a `default_value`: set once [`Options::resolve`] has laid the defaults
/// under what was given.
#[track_caller]
fn defaulted<T: Clone>(setting: &Option<T>) -> T {
    setting
        .clone()
        .expect("a setting with a default_value is set once the defaults are laid under")
}
