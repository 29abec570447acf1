//! What the node logs and how: the format its log lines take and the filter that picks them.

use clap::{Args, ValueEnum};
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::{defaulted, named};

layered! {
    /// Logs.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Logs")]
    pub struct LogOptions {
        /// Log format: text or json.
        #[arg(
            long,
            env = "WAITINGROOM_LOG_FORMAT",
            value_name = "FORMAT",
            default_value = named(LogFormat::default())
        )]
        pub log_format: Option<LogFormat>,
        /// Log filter, tracing-subscriber syntax (e.g. info, waitingroom=debug).
        #[arg(
            long,
            env = "WAITINGROOM_LOG_LEVEL",
            value_name = "FILTER",
            default_value = "info"
        )]
        pub log_level: Option<String>,
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogOptions {
    /// The log filter, checked now so a typo is not silently ignored at start.
    pub(super) fn log_level(&self) -> Result<String, SettingsError> {
        let log_level = defaulted(&self.log_level);
        if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
            return Err(SettingsError::new("log_level", "is not a valid log filter"));
        }
        Ok(log_level)
    }
}
