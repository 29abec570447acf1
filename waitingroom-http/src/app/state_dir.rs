//! `--state-dir`: what a restart must not forget, one file per kind in one directory
//! (docs/operating.md#state-directory). It keeps the node's durable state (`node.json`: the
//! visitors it let out who still hold a place, the used tickets, the record chain's head and
//! the departed places it holds; waitingroom-distributed/README.md#durable-state), so that a
//! whole-cluster restart still counts the passes given before it; and the passes given back
//! (`releases.json`): the cluster learns them from any live member, but after every node
//! stopped at once only a file remembers them, and a revoked bypass pass lives up to 30 days.
//!
//! Each file is written whole to a new file beside it, fsynced, and renamed over the old one (a
//! crash never leaves half a file), and only when what it keeps changed. The node's state
//! changes with every visitor let out, so between two whole writes its changes are appended to
//! `node.journal` (`waitingroom_distributed::DurableDelta`, one JSON line each, fsynced): a
//! whole write costs the whole room, an appended line one visitor. Each whole `node.json`
//! names a new generation and the lines carry theirs, so lines left from before the last whole
//! write (a crash between its rename and the journal's removal) are not applied to it; a last
//! line cut short by a crash was never acknowledged, and is dropped. A file that cannot be
//! read back stops the start: a node that silently forgot its revocations would take them again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use waitingroom_distributed::released::Release;
use waitingroom_distributed::{Durable, DurableDelta};

/// The releases file in a state directory.
const RELEASES: &str = "releases.json";

/// The node's durable state in a state directory.
const NODE: &str = "node.json";

/// The changes to the node's durable state since `node.json` was written.
const JOURNAL: &str = "node.journal";

/// What `node.json` holds: the node's durable state, and the generation of the journal lines
/// that follow it (0 for a file from before the journal).
#[derive(Debug, Serialize, Deserialize)]
struct Whole {
    #[serde(default)]
    generation: u64,
    #[serde(flatten)]
    durable: Durable,
}

/// One line of `node.journal`.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    generation: u64,
    #[serde(flatten)]
    delta: DurableDelta,
}

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
        let Some(text) = read_if_there(&path)? else {
            return Ok(Vec::new());
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

    /// The node's durable state kept, with its journal applied: None when there is no file
    /// yet (a first start); an error naming the file when it cannot be read or is not such a
    /// file.
    pub fn read_durable(&self) -> Result<Option<Durable>, String> {
        let path = self.node_path();
        let Some(text) = read_if_there(&path)? else {
            return Ok(None);
        };
        let mut whole: Whole = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not a node state file: {e}", path.display()))?;
        let journal = self.dir.join(JOURNAL);
        let text = read_if_there(&journal)?.unwrap_or_default();
        let mut lines = text.split_inclusive(|&b| b == b'\n').peekable();
        while let Some(line) = lines.next() {
            let cut_short = lines.peek().is_none() && !line.ends_with(b"\n");
            match serde_json::from_slice::<Line>(line) {
                Ok(l) if l.generation == whole.generation => whole.durable.apply(l.delta),
                Ok(_) => {}
                Err(_) if cut_short => {}
                Err(e) => return Err(format!("{} is not a journal: {e}", journal.display())),
            }
        }
        Ok(Some(whole.durable))
    }

    /// Writes `durable` over the node's state file under `generation`, then removes the
    /// journal (its lines are in it). Returns the bytes written.
    pub fn write_durable(&self, durable: &Durable, generation: u64) -> std::io::Result<u64> {
        let whole = Whole {
            generation,
            durable: durable.clone(),
        };
        let text = serde_json::to_vec(&whole).map_err(std::io::Error::other)?;
        write_atomically(&self.node_path(), &text)?;
        match std::fs::remove_file(self.dir.join(JOURNAL)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        Ok(text.len() as u64)
    }

    /// Appends `delta` to the journal of the state file written under `generation`, and
    /// fsyncs it. Returns the bytes written.
    pub fn append_durable(&self, delta: DurableDelta, generation: u64) -> std::io::Result<u64> {
        let mut text =
            serde_json::to_vec(&Line { generation, delta }).map_err(std::io::Error::other)?;
        text.push(b'\n');
        let mut options = std::fs::OpenOptions::new();
        options.append(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(self.dir.join(JOURNAL))?;
        file.write_all(&text)?;
        file.sync_data()?;
        Ok(text.len() as u64)
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

/// What `path` holds: None when there is no such file; an error naming it when it cannot be
/// read.
fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
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
        state.write_durable(&kept, 5).unwrap();
        assert_eq!(state.read_durable(), Ok(Some(kept)));
        std::fs::write(state.node_path(), "{").unwrap();
        let e = state.read_durable().unwrap_err();
        assert!(e.contains("node.json is not a node state file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The journal's lines of the whole file's generation are applied in order; lines of an
    /// earlier generation and a last line cut short by a crash are not; a line spoilt in the
    /// middle is an error.
    #[test]
    fn the_journal_after_the_whole_file_comes_back_with_it() {
        use waitingroom_core::KeptVisitor;
        let dir = std::env::temp_dir().join(format!("wr-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = StateDir::new(dir.clone());
        let left = |ticket, counted| KeptVisitor::Left {
            ticket: TicketId(ticket),
            pass_expires: 10,
            forget_at: 20,
            counted,
        };
        let delta = |visitors: Vec<KeptVisitor>| DurableDelta {
            visitors,
            rest: None,
        };
        state.append_durable(delta(vec![left(9, true)]), 1).unwrap();
        let whole = Durable {
            visitors: vec![left(1, true)],
            ..Durable::default()
        };
        state.write_durable(&whole, 2).unwrap();
        assert_eq!(
            state.read_durable(),
            Ok(Some(whole.clone())),
            "journal removed"
        );
        state.append_durable(delta(vec![left(2, true)]), 1).unwrap();
        state
            .append_durable(delta(vec![left(2, false)]), 2)
            .unwrap();
        let mut rest = whole.clone();
        rest.first_life = 7;
        let line = DurableDelta {
            visitors: vec![left(3, true)],
            rest: Some(Durable {
                visitors: Vec::new(),
                ..rest
            }),
        };
        state.append_durable(line, 2).unwrap();
        let journal = dir.join(JOURNAL);
        let mut text = std::fs::read(&journal).unwrap();
        text.extend_from_slice(b"{\"generation\": 2, \"visi");
        std::fs::write(&journal, &text).unwrap();
        let back = state.read_durable().unwrap().unwrap();
        assert_eq!(
            back.visitors,
            [left(1, true), left(2, false), left(3, true)]
        );
        assert_eq!(back.first_life, 7);
        text.extend_from_slice(b"\n{}\n");
        std::fs::write(&journal, &text).unwrap();
        let e = state.read_durable().unwrap_err();
        assert!(e.contains("node.journal is not a journal"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
