//! `/readyz` and the voters file (docs/operating.md#readiness): a node refused by its peers
//! is not ready until it hears valid peer traffic; the voters file is written only when the
//! voters changed, and a write that fails makes the node unready and is counted; a file that
//! cannot be read back stops the start. The state directory's node file holds a pass as soon
//! as the pass is answered, and a write of it that fails is counted.

use std::path::PathBuf;

use super::harness::*;
use crate::app::voters_file;
use crate::config::RecordOptions;

async fn readyz(n: &TestNode) -> Reply {
    n.send(bodiless(Request::get("/readyz"), header::ACCEPT, "*/*"))
        .await
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wr-ready-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A single node keeping its voters in `path`, its timer running, with voters agreed (an
/// operator's reset: a lone founder's own voters are never written).
async fn keeping_voters_in(path: PathBuf) -> TestNode {
    let n = TestNode::start(
        Options {
            records: RecordOptions {
                voters_file: Some(path),
                ..Default::default()
            },
            ..options()
        },
        true,
    );
    n.app.driver.with(|node, _| node.reset_voters());
    n
}

/// Waits (bounded) until `/readyz` answers `code` (`ready` for 200).
async fn until_readyz(n: &TestNode, code: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = readyz(n).await;
        let got = if r.status == StatusCode::OK {
            "ready".to_owned()
        } else {
            r.json()["code"].as_str().unwrap_or("").to_owned()
        };
        if got == code {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz says {got}, not {code}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The voters change at every round (their epoch) while the set stays: the file is written
/// when the set (or the one before it) changes, not at every round.
#[tokio::test]
async fn the_voters_file_is_written_when_the_voters_change_only() {
    let dir = scratch("unchanged");
    let path = dir.join("voters.json");
    let n = keeping_voters_in(path.clone()).await;
    // The reset's voters, then the same set as the one before: two writes, then none.
    let deadline = Instant::now() + Duration::from_secs(5);
    while voters_file::read(&path, NodeId(1))
        .ok()
        .flatten()
        .is_none_or(|v| v.prev.is_empty())
    {
        assert!(Instant::now() < deadline, "voters never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let epoch = |n: &TestNode| {
        n.app
            .driver
            .read(|node| node.agreed_voters().unwrap().epoch)
    };
    let before = epoch(&n);
    std::fs::remove_file(&path).unwrap();
    // Ten rounds of 20 ms at least.
    while epoch(&n) < before + 10 {
        assert!(Instant::now() < deadline, "rounds stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!path.exists(), "rewritten though the voters did not change");
    until_readyz(&n, "ready").await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A voters file that cannot be written makes the node unready (`voters_file`) and is counted
/// at every try; once it can be written again the node is ready again.
#[tokio::test]
async fn an_unwritable_voters_file_makes_the_node_unready() {
    let dir = scratch("unwritable");
    // Its directory is a file: no write can succeed, not even as root.
    let blocker = dir.join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let path = blocker.join("voters.json");
    let n = keeping_voters_in(path.clone()).await;
    until_readyz(&n, "voters_file").await;
    let failures = || {
        n.app
            .metrics
            .state_write_failures
            .get_or_create(&crate::metrics::FileLabels { file: "voters" })
            .get()
    };
    assert!(failures() >= 1);
    let text = n
        .send(bodiless(Request::get("/metrics"), header::ACCEPT, "*/*"))
        .await;
    let text = String::from_utf8_lossy(&text.body).into_owned();
    assert!(
        text.contains("waitingroom_unready_reason{reason=\"voters_file\"} 1"),
        "{text}"
    );
    assert!(text.contains("waitingroom_ready 0"), "{text}");
    // The directory comes back: written at the next round, ready again.
    std::fs::remove_file(&blocker).unwrap();
    std::fs::create_dir(&blocker).unwrap();
    until_readyz(&n, "ready").await;
    assert!(voters_file::read(&path, NodeId(1)).unwrap().is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A voters file that is not one, or is another node's, stops the start with an error naming
/// it; no file is a first start. The state directory's own file written under another id (the
/// node's id changed) is a new member's start instead.
#[test]
fn a_corrupt_voters_file_stops_the_start() {
    use voters_file::Foreign::{Ignore, Refuse};
    let dir = scratch("corrupt");
    let path = dir.join("voters.json");
    let cfg = options().resolve().unwrap();
    let mut node =
        waitingroom_distributed::Node::new(cfg.node_config(NodeId(1), 1, "http://x", 0)).unwrap();
    assert_eq!(voters_file::restore(&path, &mut node, Refuse), Ok(()));
    std::fs::write(&path, "{\"node\": 1, \"voters\": ").unwrap();
    for foreign in [Refuse, Ignore] {
        let e = voters_file::restore(&path, &mut node, foreign).unwrap_err();
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("not a voters file"), "{e}");
    }
    let theirs = waitingroom_distributed::voters::Voters {
        epoch: 3,
        set: [NodeId(1), NodeId(2), NodeId(3)].into(),
        ..Default::default()
    };
    voters_file::write(&path, NodeId(2), &theirs).unwrap();
    let e = voters_file::restore(&path, &mut node, Refuse).unwrap_err();
    assert!(e.contains("belongs to node 2"), "{e}");
    assert_eq!(voters_file::restore(&path, &mut node, Ignore), Ok(()));
    assert!(
        node.agreed_voters().is_none(),
        "another id's voters bind no one"
    );
    voters_file::write(&path, NodeId(1), &theirs).unwrap();
    assert_eq!(voters_file::restore(&path, &mut node, Refuse), Ok(()));
    assert_eq!(node.voters(), [NodeId(1), NodeId(2), NodeId(3)]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A node whose signed requests a peer refused, and who has heard no valid peer traffic
/// since, is not ready (`refused_by_peers`); a valid peer request makes it ready again.
#[tokio::test]
async fn a_node_its_peers_refuse_is_not_ready() {
    let n = TestNode::start(options(), false);
    until_readyz(&n, "ready").await;
    n.app.transport.standing().refused(now_ms());
    until_readyz(&n, "refused_by_peers").await;
    let r = n.send(n.peer_request(MESSAGES_PATH, b"[]".to_vec())).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    until_readyz(&n, "ready").await;
}

/// A single node keeping its state in `dir`, its timer running.
fn keeping_state_in(dir: PathBuf) -> TestNode {
    let records = RecordOptions {
        state_dir: Some(dir),
        ..Default::default()
    };
    TestNode::start(
        Options {
            records,
            ..options()
        },
        true,
    )
}

/// A pass is on disk (`node.json` or its journal) when its leave is answered (the leave's own
/// call wrote it); a node file that cannot be written is counted (`file="node"`), makes the
/// node unready (`state_dir`) and is written at the next call once it can be.
#[tokio::test]
async fn a_pass_is_on_disk_when_its_leave_is_answered_and_a_failed_write_is_counted() {
    let dir = scratch("node-state");
    // Its temporary file is a directory: no write can succeed, not even as root.
    let blocker = dir.join("node.json.new");
    std::fs::create_dir(&blocker).unwrap();
    let n = keeping_state_in(dir.clone());
    let failures = || {
        (n.app.metrics.state_write_failures)
            .get_or_create(&crate::metrics::FileLabels { file: "node" })
            .get()
    };
    assert!(failures() >= 1, "the first write failed");
    until_readyz(&n, "state_dir").await;
    std::fs::remove_dir(&blocker).unwrap();
    let state = crate::app::state_dir::StateDir::new(dir.clone());
    let (_, pass) = n.ticket_and_pass().await;
    let kept = state.read_durable().unwrap().expect("node.json written");
    assert_eq!(
        kept.visitors.len(),
        1,
        "the pass's visitor is kept: {kept:?}"
    );
    assert!(!pass.is_empty());
    until_readyz(&n, "ready").await;
    std::fs::remove_dir_all(&dir).unwrap();
}
