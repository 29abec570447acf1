//! Operators' restarts and stalls: a rolling restart with the README's command lines (node 1
//! without `--peers`) under a light load, and the root stopped (SIGSTOP) and thawed
//! (waitingroom-distributed/README.md#partitions, waitingroom-distributed/README.md#swim).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::harness::*;

/// Settings of the restart tests: node ids 1..n (node 1 is the root), the voters kept on disk
/// so that a node restarted alone waits for its cluster instead of founding one, a small
/// target and short passes so that passes come and go during the test.
fn restart_settings(voters: &str) -> Vec<String> {
    [
        "--node-id",
        "{node}",
        "--voters-file",
        voters,
        "--target-on-site",
        "3",
        "--pass-expiry-ms",
        "2000",
        "--ticket-expiry-ms",
        "2000",
    ]
    .map(String::from)
    .to_vec()
}

/// Node `i` again with the command line it started with (node 1 without `--peers`, the
/// others through node 1), at the same address, after `sig`.
pub(crate) async fn restart_in_place(cl: &mut Cluster, i: usize, sig: &str) {
    signal(&cl.nodes[i], sig);
    start_in_place(cl, i);
}

/// Node `i` again with the command line it started with, at the same address, once its
/// process exited.
pub(crate) fn start_in_place(cl: &mut Cluster, i: usize) {
    let _ = cl.nodes[i].child.wait();
    let listen = cl.nodes[i].url.trim_start_matches("http://").to_owned();
    let peer = (i > 0).then(|| cl.url(0).to_owned());
    cl.nodes[i] = cl.spawn_with(i, peer.as_deref(), &listen, &[]);
}

/// The node ids `node` lists as members (empty when it does not answer).
async fn member_ids(c: &reqwest::Client, node: &str) -> BTreeSet<u64> {
    let Ok(r) = c.get(format!("{node}/api/cluster")).send().await else {
        return BTreeSet::new();
    };
    let v: Value = r.json().await.unwrap_or(Value::Null);
    v["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_u64())
        .collect()
}

/// What the light load saw: each pass's validity (from its issue, ms since the epoch, to its
/// expiry), and how many visitors are still waiting.
#[derive(Default)]
struct Seen {
    passes: Vec<(u64, u64)>,
    waiting: usize,
}

/// The most passes valid at one moment.
fn most_valid_at_once(passes: &[(u64, u64)]) -> usize {
    passes
        .iter()
        .map(|&(at, _)| {
            passes
                .iter()
                .filter(|&&(from, to)| from <= at && at < to)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn epoch_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis() as u64)
}

/// One visitor (counted in `seen.waiting` by the caller) as the page behaves: joins at some
/// node, checks in every 200 ms at the next node that answers, and leaves with a pass once
/// admitted. Nodes restarting refuse or fail some requests; the visitor tries the next node.
async fn visitor(c: reqwest::Client, nodes: Vec<String>, first: usize, seen: Arc<Mutex<Seen>>) {
    let mut k = first;
    let mut ticket = None;
    loop {
        let node = &nodes[k % nodes.len()];
        k += 1;
        let (route, body) = match &ticket {
            None => ("join", json!({})),
            Some(t) => ("checkin", json!({ "ticket": t })),
        };
        let answer = c
            .post(format!("{node}/api/{route}"))
            .json(&body)
            .send()
            .await;
        let Ok(answer) = answer else { continue };
        let ok = answer.status() == StatusCode::OK;
        let v: Value = answer.json().await.unwrap_or(Value::Null);
        if ok {
            ticket = v["ticket"].as_str().map(str::to_owned).or(ticket);
            if v["status"] == "admitted"
                && let Some(t) = &ticket
            {
                let issued = epoch_ms();
                let (s, left) =
                    post(&c, &format!("{node}/api/leave"), json!({ "ticket": t })).await;
                if s == StatusCode::OK {
                    let expires = left["expires_at_ms"].as_u64().unwrap_or(0);
                    let mut seen = seen.lock().unwrap();
                    seen.passes.push((issued, expires));
                    seen.waiting -= 1;
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// waitingroom-distributed/README.md#partitions: a rolling restart with the README's command
/// lines under a light load: node 1 comes back without `--peers` (and first with SIGKILL, so
/// before the others noticed it went), the others through node 1. After each restart the nodes
/// are one cluster again within a few probe periods; nobody is lost; never more passes valid
/// than the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_the_readmes_command_lines_converges() {
    let dir = std::env::temp_dir().join(format!("wr-restarts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let voters = dir.join("voters-{node}.json").display().to_string();
    let settings = restart_settings(&voters);
    let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut cl = Cluster::start("restarts", 3, &extra).await;
    // The voters are on disk before anyone restarts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let urls = cl.urls();
    let mut load = Vec::new();
    let c = client();
    let mut took = Vec::new();
    for (i, sig) in [(0, "-KILL"), (1, "-TERM"), (2, "-TERM"), (0, "-TERM")] {
        for v in 0..4 {
            seen.lock().unwrap().waiting += 1;
            let task = visitor(c.clone(), urls.clone(), v + i, seen.clone());
            load.push(tokio::spawn(task));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let t0 = Instant::now();
        restart_in_place(&mut cl, i, sig).await;
        cl.settle(3).await;
        took.push(t0.elapsed());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().waiting > 0 {
        assert!(Instant::now() < deadline, "visitors never let in");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = seen.lock().unwrap();
    let most = most_valid_at_once(&seen.passes);
    eprintln!(
        "restarts: back in one cluster after {took:?}; {} passes, at most {most} valid at once",
        seen.passes.len()
    );
    assert_eq!(seen.passes.len(), 16, "every visitor let in");
    assert!(most <= 3, "{most} passes valid at once, target 3");
    for t in &took {
        assert!(*t < Duration::from_secs(10), "back after {t:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// waitingroom-distributed/README.md#swim: the root stopped (SIGSTOP) far longer than the
/// failure detection takes is removed by the others; thawed, it blames no healthy node for the
/// probe it had out across its own pause, and its stale membership is not merged back: nodes 2
/// and 3 stay members all along, and the three are one cluster again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thawed_root_evicts_no_healthy_node() {
    let cl = Cluster::start("thaw", 3, &["--node-id", "{node}"]).await;
    let c = client();
    let healthy = BTreeSet::from([2, 3]);
    signal(&cl.nodes[0], "-STOP");
    tokio::time::sleep(Duration::from_secs(20)).await;
    for i in [1, 2] {
        let ids = member_ids(&c, cl.url(i)).await;
        assert_eq!(ids, healthy, "node {} while node 1 is stopped", i + 1);
    }
    signal(&cl.nodes[0], "-CONT");
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        for i in [1, 2] {
            let ids = member_ids(&c, cl.url(i)).await;
            assert!(
                ids.is_superset(&healthy),
                "node {} lists {ids:?} after the thaw",
                i + 1
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cl.settle(3).await;
}
