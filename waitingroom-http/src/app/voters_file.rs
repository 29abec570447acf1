//! `--voters-file`: the voters the cluster last agreed on, kept on disk across restarts
//! (docs/operating.md#lost-majority; `voters.rs` in the protocol crate).
//!
//! The majority rule needs a node to know the voters; in memory only, a restarted node forgets
//! them and could, with another restarted node cut off with it, make itself part of a cluster
//! of its own. The driver writes them here whenever they change (a whole new file renamed over
//! the old one, so a crash never leaves half a file) and the server gives them back to the node
//! at start. The file names the node it belongs to: a file of another node id is ignored.

use std::path::Path;

use serde::{Deserialize, Serialize};
use waitingroom_core::NodeId;
use waitingroom_distributed::voters::Voters;

/// What the file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    node: NodeId,
    voters: Voters,
}

/// The voters `path` keeps for node `me`: None when there is no file yet; an error when it
/// cannot be read, is not such a file, or belongs to another node.
pub fn read(path: &Path, me: NodeId) -> Result<Option<Voters>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let kept: Kept = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a voters file: {e}", path.display()))?;
    if kept.node != me {
        return Err(format!(
            "{} belongs to node {}, not to this node ({})",
            path.display(),
            kept.node.0,
            me.0
        ));
    }
    Ok(Some(kept.voters))
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
            prev: [NodeId(1), NodeId(2)].into(),
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
