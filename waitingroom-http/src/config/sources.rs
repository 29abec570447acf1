//! Where settings come from and how the sources are laid over each other: the command line
//! (flags over `WAITINGROOM_*` variables, both through clap, which also knows every setting's
//! name and default) and the TOML file, read group by group.

use std::sync::LazyLock;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{
    ClusterOptions, LimitOptions, LogOptions, NetworkOptions, Options, PageOptions,
    ProtocolOptions, RecordOptions, RoomOptions, VisitorOptions,
};

impl Options {
    /// The groups as clap parsed them (values from flags, the environment and defaults alike).
    fn from_groups(m: &mut ArgMatches) -> Result<Options, clap::Error> {
        Ok(Options {
            network: FromArgMatches::from_arg_matches_mut(m)?,
            cluster: FromArgMatches::from_arg_matches_mut(m)?,
            room: FromArgMatches::from_arg_matches_mut(m)?,
            protocol: FromArgMatches::from_arg_matches_mut(m)?,
            visitors: FromArgMatches::from_arg_matches_mut(m)?,
            limits: FromArgMatches::from_arg_matches_mut(m)?,
            records: FromArgMatches::from_arg_matches_mut(m)?,
            page: FromArgMatches::from_arg_matches_mut(m)?,
            logs: FromArgMatches::from_arg_matches_mut(m)?,
        })
    }

    /// The groups read from a TOML document, each from the whole document (a group takes its
    /// own keys): a bad value is refused by its group, naming its key and line.
    fn from_toml(text: &str) -> Result<Options, toml::de::Error> {
        Ok(Options {
            network: toml::from_str(text)?,
            cluster: toml::from_str(text)?,
            room: toml::from_str(text)?,
            protocol: toml::from_str(text)?,
            visitors: toml::from_str(text)?,
            limits: toml::from_str(text)?,
            records: toml::from_str(text)?,
            page: toml::from_str(text)?,
            logs: toml::from_str(text)?,
        })
    }
}

impl Args for Options {
    fn augment_args(cmd: Command) -> Command {
        let cmd = NetworkOptions::augment_args(cmd);
        let cmd = ClusterOptions::augment_args(cmd);
        let cmd = RoomOptions::augment_args(cmd);
        let cmd = ProtocolOptions::augment_args(cmd);
        let cmd = VisitorOptions::augment_args(cmd);
        let cmd = LimitOptions::augment_args(cmd);
        let cmd = RecordOptions::augment_args(cmd);
        let cmd = PageOptions::augment_args(cmd);
        LogOptions::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// Flags and the environment only: a setting clap filled in from its `default_value` counts as
/// not given, so that the file's value can still apply ([`merge`](super::merge)); the defaults
/// are laid under everything last, by [`Options::resolve`].
impl FromArgMatches for Options {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        let defaulted: Vec<String> = m
            .ids()
            .map(|id| id.as_str().to_owned())
            .filter(|id| SETTINGS.iter().any(|s| s == id))
            .filter(|id| m.value_source(id) == Some(ValueSource::DefaultValue))
            .collect();
        for id in &defaulted {
            // Only ids clap just reported are cleared: none can be unknown to it.
            let _ = m.try_clear_id(id);
        }
        Self::from_groups(m)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.update_from_arg_matches_mut(&mut m.clone())
    }

    fn update_from_arg_matches_mut(&mut self, m: &mut ArgMatches) -> Result<(), clap::Error> {
        let given = Self::from_arg_matches_mut(m)?;
        *self = given.or(std::mem::take(self));
        Ok(())
    }
}

/// The settings' names (clap's ids: the fields' names, which are also the file's keys), in the
/// order `--help` lists them.
pub(super) static SETTINGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    settings_command()
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
});

/// What every setting is when nothing is given: the command line's defaults, read without the
/// environment.
pub(super) static DEFAULTS: LazyLock<Options> = LazyLock::new(|| {
    let mut m = settings_command()
        .mut_args(|a| a.env(None))
        .try_get_matches_from(["defaults"])
        .expect("every default_value parses");
    Options::from_groups(&mut m).expect("the defaults fit their fields")
});

/// The settings alone, as a command.
pub(super) fn settings_command() -> Command {
    Options::augment_args(Command::new("settings"))
}

/// The settings a TOML document gives; a key that names no setting is refused, naming it.
pub(super) fn parse_file(text: &str) -> Result<Options, toml::de::Error> {
    toml::from_str::<KnownKeys>(text)?;
    Options::from_toml(text)
}

/// A TOML document whose keys all name settings (each group ignores the others' keys, so the
/// unknown ones are caught here).
struct KnownKeys;

/// A key that names a setting; checked as the key is read, so that toml points at it.
struct SettingName;

/// The settings' names as serde wants them: to list in an error the names a key could be.
static EXPECTED: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| SETTINGS.iter().map(String::as_str).collect());

impl<'de> Deserialize<'de> for KnownKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(KnownKeys)
    }
}

impl<'de> Visitor<'de> for KnownKeys {
    type Value = KnownKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a table of settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KnownKeys, A::Error> {
        while map.next_key::<SettingName>()?.is_some() {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(KnownKeys)
    }
}

impl<'de> Deserialize<'de> for SettingName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(SettingName)
    }
}

impl Visitor<'_> for SettingName {
    type Value = SettingName;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a setting's name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<SettingName, E> {
        if EXPECTED.contains(&key) {
            Ok(SettingName)
        } else {
            Err(E::unknown_field(key, &EXPECTED))
        }
    }
}
