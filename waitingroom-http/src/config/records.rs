//! What an operator reaches the node with and what it keeps for them: the admin API's token,
//! the signed round records, the voters the cluster last agreed on and the state directory
//! (what a restart must not forget, one file per kind: `crate::app::state_dir`). Files are
//! opened or read here, at start, so that a wrong path stops the node naming the setting
//! instead of failing later.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::{defaulted, shown};

layered! {
    /// The admin API's token and the records a node keeps.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Admin and records")]
    pub struct RecordOptions {
        /// File holding the bearer token of the admin API (/admin/... on the internal listener:
        /// `Authorization: Bearer TOKEN`); at least 16 characters, surrounding whitespace
        /// ignored. Without it the admin API is off (404).
        #[arg(long, env = "WAITINGROOM_ADMIN_TOKEN_FILE", value_name = "PATH")]
        pub admin_token_file: Option<PathBuf>,
        /// Append every admission round's signed record to this file (one JWS per line), and
        /// publish and go on from the ones it holds after a restart
        /// (docs/operating.md#fairness-records). Without it, the newest rounds_kept are kept in
        /// memory only.
        #[arg(long, env = "WAITINGROOM_ROUNDS_LOG", value_name = "PATH")]
        pub rounds_log: Option<PathBuf>,
        /// Round records kept in memory and published at /api/rounds (the newest; about 0.5 KB
        /// each).
        #[arg(
            long,
            env = "WAITINGROOM_ROUNDS_KEPT",
            value_name = "N",
            default_value = shown(crate::round_log::ROUNDS_KEPT)
        )]
        pub rounds_kept: Option<usize>,
        /// Keep the voters the cluster last agreed on in this file (JSON, rewritten when they
        /// change) and read them back at start: a restarted node then needs a majority of them
        /// again, instead of counting as a new cluster with whoever it finds. A file written by
        /// another node id stops the start. Default: `voters.json` in the `--state-dir`, if
        /// any; else in memory.
        #[arg(long, env = "WAITINGROOM_VOTERS_FILE", value_name = "PATH")]
        pub voters_file: Option<PathBuf>,
        /// Keep what a restart must not forget in this directory, one file per kind (created
        /// if missing; one per node): the node's state (the visitors it let out, the used
        /// tickets, the record chain's head), the voters (unless `--voters-file` puts them
        /// elsewhere) and the passes given back, so that the passes given before a restart of
        /// the whole cluster still count and stay refused once given back
        /// (docs/operating.md#state-directory). Written when it changes and read back at
        /// start; an unreadable or unwritable one stops the start. Without it, a restarted node
        /// learns the releases from the cluster it rejoins.
        #[arg(long, env = "WAITINGROOM_STATE_DIR", value_name = "DIR")]
        pub state_dir: Option<PathBuf>,
    }
}

/// The voters' file in a state directory when no `--voters-file` names another.
pub(super) const VOTERS_IN_STATE_DIR: &str = "voters.json";

/// A secret read from a file: never shown by `Debug` (a configuration printed in a log or a
/// panic message must not carry it).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl RecordOptions {
    /// How many round records to keep in memory: at least 1.
    pub(super) fn rounds_kept(&self) -> Result<usize, SettingsError> {
        match defaulted(&self.rounds_kept) {
            0 => Err(SettingsError::new("rounds_kept", "must be at least 1")),
            n => Ok(n),
        }
    }

    /// The rounds log, checked by opening it for appending (it is created if missing).
    pub(super) fn rounds_log(&self) -> Result<Option<PathBuf>, SettingsError> {
        let Some(path) = &self.rounds_log else {
            return Ok(None);
        };
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                SettingsError::new("rounds_log", format!("cannot open {}: {e}", path.display()))
            })?;
        Ok(Some(path.clone()))
    }

    /// Where the voters are kept: `--voters-file`, else `voters.json` in the state directory
    /// (what a restart must not forget), else nowhere.
    pub(super) fn voters_file(&self) -> Option<PathBuf> {
        let in_state_dir = || {
            self.state_dir
                .as_ref()
                .map(|dir| dir.join(VOTERS_IN_STATE_DIR))
        };
        self.voters_file.clone().or_else(in_state_dir)
    }

    /// The state directory, created if missing and checked by writing a file in it (an
    /// unwritable one stops the start, not the first write hours later).
    pub(super) fn state_dir(&self) -> Result<Option<PathBuf>, SettingsError> {
        let Some(dir) = &self.state_dir else {
            return Ok(None);
        };
        let bad = |e: std::io::Error| {
            SettingsError::new(
                "state_dir",
                format!("cannot write in {}: {e}", dir.display()),
            )
        };
        std::fs::create_dir_all(dir).map_err(bad)?;
        let probe = dir.join(".probe");
        std::fs::write(&probe, b"").map_err(bad)?;
        std::fs::remove_file(&probe).map_err(bad)?;
        Ok(Some(dir.clone()))
    }

    /// The admin API's bearer token, read from its file now (a missing or short token is an
    /// error at start, not a locked-out operator later).
    pub(super) fn admin_token(&self) -> Result<Option<Secret>, SettingsError> {
        let Some(path) = &self.admin_token_file else {
            return Ok(None);
        };
        let bad = |why: String| SettingsError::new("admin_token_file", why);
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        let token = text.trim();
        if token.len() < 16 || !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(bad(format!(
                "{} must hold one token of at least 16 visible ASCII characters (e.g. from                  `openssl rand -hex 32`)",
                path.display()
            )));
        }
        Ok(Some(Secret(token.to_owned())))
    }
}
