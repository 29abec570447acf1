//! `--state-dir`: what a restart must not forget, one file per kind in one directory
//! (docs/operating.md#state-directory). It keeps the node's durable state (`node.json`: the
//! visitors it let out who still hold a place, the used tickets, the record chain's head and
//! the departed places it holds; waitingroom-distributed/README.md#durable-state), so that a
//! whole-cluster restart still counts the passes given before it; and the passes given back
//! (`releases.json`): the cluster learns them from any live member, but after every node
//! stopped at once only a file remembers them, and a revoked bypass pass lives up to 30 days.
//!
//! Each file is written whole to a new file beside it, fsynced, and renamed over the old one (a
//! crash never leaves half a file), and only when what it keeps changed. A file that cannot be
//! read back stops the start: a node that silently forgot its revocations would take them again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use waitingroom_distributed::Durable;
use waitingroom_distributed::released::Release;

/// The releases file in a state directory.
const RELEASES: &str = "releases.json";

/// The node's durable state in a state directory.
const NODE: &str = "node.json";

/// A node's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

/// What the releases file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Releases {
    releases: Vec<Release>,
}

impl StateDir {
    /// The state directory `dir` (checked when the settings were read).
    pub fn new(dir: PathBuf) -> Self {
        StateDir { dir }
    }

    /// The releases kept: none when there is no file yet; an error naming the file when it
    /// cannot be read or is not such a file.
    pub fn read_releases(&self) -> Result<Vec<Release>, String> {
        let path = self.dir.join(RELEASES);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let kept: Releases = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not a releases file: {e}", path.display()))?;
        Ok(kept.releases)
    }

    /// Writes `releases` over the releases file.
    pub fn write_releases(&self, releases: Vec<Release>) -> std::io::Result<()> {
        let text = serde_json::to_vec(&Releases { releases }).map_err(std::io::Error::other)?;
        write_atomically(&self.dir.join(RELEASES), &text)
    }

    /// The node's durable state kept: None when there is no file yet (a first start); an
    /// error naming the file when it cannot be read or is not such a file.
    pub fn read_durable(&self) -> Result<Option<Durable>, String> {
        let path = self.node_path();
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a node state file: {e}", path.display()))
    }

    /// Writes `durable` over the node's state file.
    pub fn write_durable(&self, durable: &Durable) -> std::io::Result<()> {
        let text = serde_json::to_vec(durable).map_err(std::io::Error::other)?;
        write_atomically(&self.node_path(), &text)
    }

    /// The node's state file, for log lines.
    pub fn node_path(&self) -> PathBuf {
        self.dir.join(NODE)
    }

    /// The releases file, for log lines.
    pub fn releases_path(&self) -> PathBuf {
        self.dir.join(RELEASES)
    }
}

/// Writes `bytes` to a new file beside `path`, fsyncs it, renames it over `path` and fsyncs
/// the directory (so that the rename itself survives a power cut). The voters file is written
/// the same way. Readable by the owner only: the node's state holds the live settings, and
/// with them the seed of a lottery not yet drawn.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".new");
    let tmp = path.with_file_name(name);
    // A file left by a crash keeps its mode when opened again: start afresh.
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitingroom_core::TicketId;

    #[test]
    fn releases_come_back_and_a_corrupt_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("wr-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = StateDir::new(dir.clone());
        assert_eq!(state.read_releases(), Ok(Vec::new()), "no file yet");
        let kept = vec![Release {
            ticket: TicketId(7),
            until: 1_000,
        }];
        state.write_releases(kept.clone()).unwrap();
        assert_eq!(state.read_releases(), Ok(kept));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(state.releases_path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "readable by the owner only");
        }
        std::fs::write(state.releases_path(), "{").unwrap();
        let e = state.read_releases().unwrap_err();
        assert!(e.contains("is not a releases file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_node_state_comes_back_and_a_corrupt_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("wr-node-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = StateDir::new(dir.clone());
        assert_eq!(state.read_durable(), Ok(None), "no file yet");
        let kept = Durable {
            first_life: 3,
            last_record: Some((9, "link".into())),
            ..Durable::default()
        };
        state.write_durable(&kept).unwrap();
        assert_eq!(state.read_durable(), Ok(Some(kept)));
        std::fs::write(state.node_path(), "{").unwrap();
        let e = state.read_durable().unwrap_err();
        assert!(e.contains("node.json is not a node state file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
