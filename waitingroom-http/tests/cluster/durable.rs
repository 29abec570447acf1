//! docs/operating.md#state-directory, end to end: every node of a cluster killed at once and
//! started again with the same command lines keeps counting the passes it gave, refuses a
//! second pass for a used ticket and a pass given back
//! (waitingroom-distributed/README.md#durable-state); without a state directory, a cluster
//! whose nodes keep voters files holds the whole target after such a restart.

use crate::harness::*;
use crate::passes::{admitted_at, refused_by};
use crate::restarts::start_in_place;

/// A visitor joined at `node` keeps checking in there for `secs` seconds and is never let in.
async fn kept_waiting(c: &reqwest::Client, node: &str, secs: u64, why: &str) {
    let mut ticket = join(c, node).await;
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        let url = format!("{node}/api/checkin");
        let (s, v) = post(c, &url, json!({ "ticket": ticket })).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_ne!(v["status"], "admitted", "let in while {why}: {v}");
        ticket = v["ticket"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills (SIGKILL) every node of `cl`, then starts each again with its command line at its
/// address, node 1 first (without `--peers`: it founds the cluster).
async fn kill_and_restart_all(cl: &mut Cluster) {
    for node in &cl.nodes {
        signal(node, "-KILL");
    }
    for i in 0..cl.nodes.len() {
        start_in_place(cl, i);
    }
    cl.settle(cl.nodes.len()).await;
}

/// A pass's id, issue and expiry: a second pass for one ticket differs in them.
fn claims(cl: &Cluster, pass: &str) -> (u64, u64, u64) {
    let p = (cl.crypto())
        .verify_pass(pass, waitingroom_http::clock::now_ms())
        .expect("a valid pass");
    (p.id.0, p.created_at, p.expires_at)
}

/// Three passes valid (one per node) and one given back when all three nodes are killed; after
/// the restart a visitor waits while the passes are valid, a used ticket neither queues again
/// nor gets another pass from a leave, and the pass given back stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_killed_and_restarted_with_its_state_still_counts_the_passes() {
    let (cl_dir, state) = state_dirs("durable");
    let extra = [
        "--target-on-site",
        "3",
        "--pass-expiry-ms",
        "60000",
        "--ticket-expiry-ms",
        "60000",
        "--state-dir",
        &state,
    ];
    let mut cl = Cluster::start("durable", 3, &extra).await;
    let c = client();
    let mut used = Vec::new();
    for i in 0..3 {
        let ticket = admitted_at(&c, cl.url(i), join(&c, cl.url(i)).await).await;
        let pass = leave(&c, cl.url(i), &ticket).await;
        used.push((i, ticket, pass));
    }
    // The third pass is given back; a fourth visitor takes its place.
    let (_, _, released) = used.pop().unwrap();
    let url = format!("{}/api/pass/release", cl.url(2));
    let (s, v) = post(&c, &url, json!({ "pass": released })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ticket = admitted_at(&c, cl.url(2), join(&c, cl.url(2)).await).await;
    let pass = leave(&c, cl.url(2), &ticket).await;
    used.push((2, ticket, pass));
    // The releases file is written at most a second after it changed.
    tokio::time::sleep(Duration::from_millis(2_000)).await;

    kill_and_restart_all(&mut cl).await;
    kept_waiting(&c, cl.url(1), 6, "3 passes are valid").await;
    for i in 0..3 {
        let hold = status(&cl, i).await["forgotten_past_hold_ms"].clone();
        assert_eq!(hold, json!(0), "node {} restored its state: no hold", i + 1);
    }
    for (i, ticket, pass) in &used {
        for node in cl.urls() {
            let url = format!("{node}/api/checkin");
            let (s, v) = post(&c, &url, json!({ "ticket": ticket })).await;
            assert_eq!(
                (s, v["code"].clone()),
                (StatusCode::CONFLICT, json!("already_left")),
                "node {}'s used ticket checks in again at {node}: {v}",
                i + 1
            );
        }
        for node in cl.urls() {
            let url = format!("{node}/api/leave");
            let (s, v) = post(&c, &url, json!({ "ticket": ticket })).await;
            if s == StatusCode::OK {
                let again = v["pass"].as_str().unwrap();
                assert_eq!(
                    claims(&cl, again),
                    claims(&cl, pass),
                    "a second pass at {node} for node {}'s visitor",
                    i + 1
                );
            }
        }
    }
    refused_by(
        &c,
        &cl.urls(),
        &released,
        "after the whole cluster restarted",
    )
    .await;
    let _ = std::fs::remove_dir_all(&cl_dir);
}

/// Without a state directory, nodes that kept their voters (so were in a cluster before) and
/// are all killed and restarted found the cluster afresh: the founder holds the whole target
/// for as long as a pass of the earlier life could be valid, every member reports the hold,
/// and nobody is let in meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restarted_without_state_holds_the_target() {
    let dir = std::env::temp_dir().join(format!(
        "wr-cold-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let voters = format!("{}/voters{{node}}.json", dir.display());
    let extra = [
        "--node-id",
        "{node}",
        "--voters-file",
        &voters,
        "--target-on-site",
        "3",
        "--pass-expiry-ms",
        "60000",
    ];
    let mut cl = Cluster::start("cold-restart", 3, &extra).await;
    let c = client();
    // A first start holds nothing: visitors get in.
    for i in 0..3 {
        assert_eq!(status(&cl, i).await["forgotten_past_hold_ms"], json!(0));
        let ticket = admitted_at(&c, cl.url(i), join(&c, cl.url(i)).await).await;
        leave(&c, cl.url(i), &ticket).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(1..=3).all(|i| dir.join(format!("voters{i}.json")).exists()) {
        assert!(Instant::now() < deadline, "voters files never written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    kill_and_restart_all(&mut cl).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        while status(&cl, i).await["forgotten_past_hold_ms"].as_u64() == Some(0) {
            assert!(Instant::now() < deadline, "node {} reports no hold", i + 1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let url = cl.nodes[i].internal_url().to_owned();
        let held = metric(&c, &url, "waitingroom_forgotten_past_hold_seconds").await;
        assert!(held > 30.0, "node {}: held {held} s", i + 1);
    }
    kept_waiting(&c, cl.url(0), 4, "the earlier life's passes may be valid").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A state directory per node (`{node}` in the path) under a new temporary directory.
fn state_dirs(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!(
        "wr-{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let state = format!("{}/node{{node}}", dir.display());
    (dir, state)
}

/// The target node `i` goes by, and the names of the events it knows.
async fn settings_of(cl: &Cluster, i: usize, token: &str) -> (Value, Vec<String>) {
    let target = status(cl, i).await["settings"]["target_on_site"].clone();
    let events = admin_call(cl, i, token, "/admin/events", None).await;
    let names = (events["events"].as_array().into_iter().flatten())
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect();
    (target, names)
}

/// docs/operating.md#state-directory: a target changed live and an event scheduled survive a
/// restart of the whole cluster, one node stopped (TERM) and the others killed: every node
/// goes by them again, not by its command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_settings_and_events_survive_a_whole_cluster_restart() {
    let (dir, state) = state_dirs("live-state");
    let (token, token_file) = admin_token_file("live-state");
    let path = token_file.to_str().unwrap();
    let extra = [
        "--target-on-site",
        "3",
        "--admin-token-file",
        path,
        "--state-dir",
        &state,
    ];
    let mut cl = Cluster::start("live-state", 3, &extra).await;
    admin(&cl, 1, token, Some(json!({"target_on_site": 7}))).await;
    let now = admin_call(&cl, 2, token, "/admin/events", None).await["now_ms"]
        .as_u64()
        .unwrap();
    let event = json!({"name": "later", "prequeue_start_ms": now + 3_600_000,
        "start_ms": now + 3_700_000, "end_ms": now + 7_200_000,
        "settings": {"new_users_per_minute": 600}});
    let send = Some((reqwest::Method::POST, event));
    admin_call(&cl, 2, token, "/admin/events", send).await;
    let changed = (json!(7), vec!["later".to_owned()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        while settings_of(&cl, i, token).await != changed {
            assert!(Instant::now() < deadline, "node {} never took them", i + 1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    signal(&cl.nodes[2], "-TERM");
    let _ = cl.nodes[2].child.wait();
    for node in &cl.nodes[..2] {
        signal(node, "-KILL");
    }
    for i in 0..3 {
        start_in_place(&mut cl, i);
    }
    cl.settle(3).await;
    for i in 0..3 {
        assert_eq!(
            settings_of(&cl, i, token).await,
            changed,
            "node {} after the restart",
            i + 1
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&token_file);
}

/// A node finds its cluster from the peers its state directory kept: the whole cluster is
/// killed and nodes 2 and 3 start again with their command lines, whose `--peers` names only
/// node 1, which stays gone; they find each other and form one cluster again. The state
/// directories keep the voters too (no `--voters-file`), so the two need each other: a
/// majority of the three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_whose_seed_is_gone_find_each_other_from_their_state() {
    let (dir, state) = state_dirs("peers-state");
    let mut cl = Cluster::start("peers-state", 3, &["--state-dir", &state]).await;
    // The state files name the other members once the membership reached them.
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 2..=3 {
        let peers = || kept_peers(&dir.join(format!("node{i}")));
        let voters = || {
            let text = std::fs::read(dir.join(format!("node{i}/voters.json"))).unwrap_or_default();
            let kept: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
            kept["voters"]["set"].as_array().map_or(0, Vec::len)
        };
        while peers() < 2 || voters() < 3 {
            assert!(
                Instant::now() < deadline,
                "node {i} never kept its peers and voters"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for node in &cl.nodes {
        signal(node, "-KILL");
    }
    for i in 1..3 {
        start_in_place(&mut cl, i);
    }
    let members = |v: &Value| -> Vec<u64> {
        let all = v["members"].as_array().into_iter().flatten();
        all.filter_map(|m| m["id"].as_u64()).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (two, three) = (status(&cl, 1).await, status(&cl, 2).await);
        if members(&two).len() == 2 && members(&two) == members(&three) {
            break;
        }
        assert!(Instant::now() < deadline, "apart: {two} and {three}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many peers the state directory `dir` keeps: in `node.json`, or in the latest line of
/// its journal that carries the rest of the state.
fn kept_peers(dir: &std::path::Path) -> usize {
    let whole = std::fs::read(dir.join("node.json")).unwrap_or_default();
    let whole: Value = serde_json::from_slice(&whole).unwrap_or(Value::Null);
    let journal = std::fs::read_to_string(dir.join("node.journal")).unwrap_or_default();
    let lines = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok());
    let mut rests = lines.filter_map(|l| l.get("rest").cloned());
    let latest = rests.next_back().unwrap_or(whole);
    latest["peers"].as_array().map_or(0, Vec::len)
}

/// The id and incarnation of node `i`.
async fn life_of(cl: &Cluster, i: usize) -> (u64, u64) {
    let v = status(cl, i).await;
    (
        v["id"].as_u64().unwrap(),
        v["incarnation"].as_u64().unwrap(),
    )
}

/// Node 2 restarted (`sig`) from its state while the site holds two of a target of three,
/// one of them let out by node 2 and valid for a minute: how long from its restart until a
/// visitor who joins node 1 once the new life is a member is let in (the third place used
/// again), and until then, until the new life is a member.
async fn recovery(sig: &str) -> (Duration, Duration) {
    let (dir, state) = state_dirs("recovery");
    let extra = [
        "--target-on-site",
        "3",
        "--pass-expiry-ms",
        "60000",
        "--state-dir",
        &state,
    ];
    let mut cl = Cluster::start("recovery", 3, &extra).await;
    let c = client();
    for i in [1, 0] {
        let ticket = admitted_at(&c, cl.url(i), join(&c, cl.url(i)).await).await;
        leave(&c, cl.url(i), &ticket).await;
    }
    let (id, before) = life_of(&cl, 1).await;
    signal(&cl.nodes[1], sig);
    let _ = cl.nodes[1].child.wait();
    let started = Instant::now();
    start_in_place(&mut cl, 1);
    let deadline = started + Duration::from_secs(20);
    loop {
        let all = status(&cl, 0).await["members"].clone();
        let all = all.as_array().cloned().unwrap_or_default();
        if (all.iter()).any(|m| m["id"] == id && m["incarnation"] != before) {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 never back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = started.elapsed();
    let ticket = join(&c, cl.url(0)).await;
    admitted_at(&c, cl.url(0), ticket).await;
    let _ = std::fs::remove_dir_all(&dir);
    (back, started.elapsed())
}

/// Issue 35's recovery, from a state directory: a node restarted (TERM, and KILL: its new life
/// replaces the old one before the others noticed it died) while a pass it gave is valid for a
/// minute is counted right at once: the earlier life's departed places are dropped at the new
/// life's first count, not held until they expire (a grant's, a ticket's and a pass's life:
/// over a minute here), so the whole target is used again within seconds. Prints the times
/// (docs/benchmarks.md#recovery-after-a-restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_from_its_state_gives_the_whole_target_back_at_once() {
    for sig in ["-TERM", "-KILL"] {
        let (back, used) = recovery(sig).await;
        eprintln!(
            "recovery after {sig}: a member again after {} ms, the target used after {} ms",
            back.as_millis(),
            used.as_millis()
        );
    }
}
