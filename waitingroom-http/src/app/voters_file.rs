//! `--voters-file`: the voters the cluster last agreed on, kept on disk across restarts
//! (docs/operating.md#lost-majority; `voters.rs` in the protocol crate).
//!
//! The majority rule needs a node to know the voters; in memory only, a restarted node forgets
//! them and could, with another restarted node cut off with it, make itself part of a cluster
//! of its own. The driver writes them here whenever they change (a whole new file renamed over
//! the old one, so a crash never leaves half a file) and the server gives them back to the node
//! at start. The file names the node it belongs to.
//!
//! Files fail loudly: a file that cannot be read back, is not a voters file or belongs to
//! another node stops the start ([`restore`]), as a node that silently forgot its voters could
//! make a cluster of its own. The voters' epoch moves on every completed round while the set
//! rarely does, so [`Keeper`] writes only when the set (or the one before it) changed: a
//! restarted node needs a majority of the set, and takes a newer epoch from any peer it meets.
//! A write that fails is logged once when it starts failing and once when it works again,
//! counted in `waitingroom_state_write_failures_total{file="voters"}`, and makes `/readyz` fail
//! (`voters_file`, docs/operating.md#readiness).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use waitingroom_core::NodeId;
use waitingroom_distributed::Node;
use waitingroom_distributed::voters::Voters;

use crate::metrics::{FileLabels, Metrics};

/// What the file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    node: NodeId,
    voters: Voters,
}

/// The voters `path` keeps for node `me`: None when there is no file yet; an error when it
/// cannot be read, is not such a file, or belongs to another node. For tests: a node reads
/// its file once, at start ([`restore`]).
#[cfg(test)]
pub fn read(path: &Path, me: NodeId) -> Result<Option<Voters>, String> {
    match read_kept(path)? {
        Some(kept) if kept.node != me => Err(other_node(path, kept.node, me)),
        kept => Ok(kept.map(|k| k.voters)),
    }
}

/// What `path` holds: None when there is no file yet; an error when it cannot be read or is
/// not such a file.
fn read_kept(path: &Path) -> Result<Option<Kept>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{} is not a voters file: {e}", path.display()))
}

fn other_node(path: &Path, theirs: NodeId, me: NodeId) -> String {
    format!(
        "{} belongs to node {}, not to this node ({})",
        path.display(),
        theirs.0,
        me.0
    )
}

/// What [`restore`] does with a file another node id wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Stop the start: the operator named this file for this node (`--voters-file`), so
    /// another id in it is a mistake (two nodes given one file, or a changed `--node-id`).
    Refuse,
    /// Start without voters, and keep this id's there from now on: the file is the state
    /// directory's own and the node's id changed since (derived from an address that changed,
    /// as a Kubernetes pod's does). A node under a new id joins as a new member, which the
    /// earlier id's voters do not bind.
    Ignore,
}

/// Writes `voters` of node `me` to `path`: to a new file beside it, then renamed over it.
pub fn write(path: &Path, me: NodeId, voters: &Voters) -> std::io::Result<()> {
    let kept = Kept {
        node: me,
        voters: voters.clone(),
    };
    let text = serde_json::to_vec(&kept).map_err(std::io::Error::other)?;
    super::state_dir::write_atomically(path, &text)
}

/// Gives `node` the voters its file at `path` keeps, before it starts or joins: Ok when there
/// is no file yet; an error naming the file when it cannot be read, is not a voters file, or
/// belongs to another node and `foreign` refuses that (the start stops there).
pub fn restore(path: &Path, node: &mut Node, foreign: Foreign) -> Result<(), String> {
    let Some(kept) = read_kept(path)? else {
        return Ok(());
    };
    if kept.node != node.id() {
        let e = other_node(path, kept.node, node.id());
        if foreign == Foreign::Refuse {
            return Err(e);
        }
        tracing::warn!("voters file: {e}; this node's id changed, it starts as a new member");
        return Ok(());
    }
    tracing::info!(epoch = kept.voters.epoch, voters = ?kept.voters.set, path = %path.display(),
        "voters file: this node needs a majority of the voters it knew");
    node.remember_voters(&kept.voters);
    Ok(())
}

/// Keeps one node's agreed voters in its file: writes them when they changed, and says
/// whether the last write failed.
#[derive(Debug)]
pub struct Keeper {
    path: PathBuf,
    /// The voters on disk (None: none written yet).
    saved: Mutex<Option<Voters>>,
    /// Whether the latest write failed (and the voters on disk are older than the node's).
    failing: AtomicBool,
}

impl Keeper {
    /// Keeps voters in `path`, which holds `saved` already (those given back at start).
    pub fn new(path: PathBuf, saved: Option<Voters>) -> Self {
        Keeper {
            path,
            saved: Mutex::new(saved),
            failing: AtomicBool::new(false),
        }
    }

    /// Whether the latest write failed.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// Whether `now` should be written: their set (or the one before) differs from the
    /// file's. Cheap, so the driver asks it with the node locked and copies the voters only
    /// when it says yes.
    pub fn needs(&self, now: &Voters) -> bool {
        let saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        if same_sets(saved.as_ref(), now) {
            if self.failing.swap(false, Ordering::AcqRel) {
                tracing::info!(path = %self.path.display(), "voters file: up to date again");
            }
            return false;
        }
        true
    }

    /// Writes node `me`'s agreed voters `now`. A failure is counted each time and logged when
    /// the writes start failing; the next round tries again ([`Keeper::needs`] still says yes).
    pub fn save(&self, me: NodeId, now: Voters, metrics: &Metrics) {
        let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        match write(&self.path, me, &now) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    tracing::info!(path = %self.path.display(), "voters file: written again");
                }
                tracing::info!(epoch = now.epoch, voters = ?now.set, "voters kept on disk");
                *saved = Some(now);
            }
            Err(e) => {
                metrics
                    .state_write_failures
                    .get_or_create(&FileLabels { file: "voters" })
                    .inc();
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::error!(error = %e, path = %self.path.display(),
                        "voters file: cannot write it (tried again every round, not ready \
                         until it works); a restart would forget the voters");
                }
            }
        }
    }
}

/// Whether `saved` holds the same voters and voters before them as `now` (whatever the epoch).
fn same_sets(saved: Option<&Voters>, now: &Voters) -> bool {
    saved.is_some_and(|s| s.set == now.set && s.prev == now.prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_voters_come_back_for_their_own_node_only() {
        let dir = std::env::temp_dir().join(format!("wr-voters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("voters.json");
        assert_eq!(read(&path, NodeId(1)), Ok(None));
        let voters = Voters {
            epoch: 4,
            set: [NodeId(1), NodeId(2), NodeId(3)].into(),
            prev: [NodeId(1), NodeId(2), NodeId(4)].into(),
            resigned: [NodeId(4)].into(),
        };
        write(&path, NodeId(1), &voters).unwrap();
        assert_eq!(read(&path, NodeId(1)), Ok(Some(voters.clone())));
        assert!(
            read(&path, NodeId(2))
                .unwrap_err()
                .contains("belongs to node 1")
        );
        std::fs::write(&path, "{").unwrap();
        assert!(
            read(&path, NodeId(1))
                .unwrap_err()
                .contains("not a voters file")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
