//! `/readyz` tells a balancer the truth (docs/operating.md#readiness): a node started with
//! another cluster key is never ready; one node whose clock is 3 s off (libfaketime) is the only
//! one unready, and the others keep serving.

use crate::harness::*;

/// Node `node`'s `/readyz`: `ready`, or the error code.
async fn readyz(c: &reqwest::Client, node: &str) -> String {
    let r = c.get(format!("{node}/readyz")).send().await.unwrap();
    if r.status() == StatusCode::OK {
        return "ready".into();
    }
    let v: Value = r.json().await.unwrap_or(Value::Null);
    v["code"].as_str().unwrap_or("?").to_owned()
}

/// `/readyz` of each of `nodes`, every 100 ms for `span`: how many times each answered what.
async fn watch(
    c: &reqwest::Client,
    nodes: &[String],
    span: Duration,
) -> Vec<std::collections::BTreeMap<String, u32>> {
    let mut seen = vec![std::collections::BTreeMap::new(); nodes.len()];
    let end = Instant::now() + span;
    while Instant::now() < end {
        for (i, n) in nodes.iter().enumerate() {
            *seen[i].entry(readyz(c, n).await).or_insert(0) += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// A node started with another key, joining through a member, is refused by every peer: it
/// gives up joining and starts a cluster of its own, and is never ready (`refused_by_peers`);
/// the cluster stays ready without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_key_is_never_ready() {
    let cl = Cluster::start("ready-key", 2, &[]).await;
    let other = Cluster::empty("ready-stranger", &["--join-timeout-ms", "2000"], false);
    let stranger = other.spawn(0, Some(cl.nodes[0].internal_url()));
    let c = client();
    // Well past its join timeout: it is a member of a cluster of its own by then.
    let seen = watch(
        &c,
        std::slice::from_ref(&stranger.url),
        Duration::from_secs(6),
    )
    .await;
    eprintln!("stranger's /readyz over 6 s: {:?}", seen[0]);
    assert!(!seen[0].contains_key("ready"), "{:?}", seen[0]);
    let s = get_json(&c, format!("{}/api/cluster", stranger.url)).await;
    assert_eq!(s["members"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(readyz(&c, &stranger.url).await, "refused_by_peers");
    let log = std::fs::read_to_string(&stranger.log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("not ready") && l.contains("refused_by_peers")),
        "no log line says why"
    );
    assert!(
        metric(
            &c,
            &stranger.url,
            "waitingroom_unready_reason{reason=\"refused_by_peers\"}"
        )
        .await
            == 1.0
    );
    cl.settle(2).await;
}

/// libfaketime's library, installed as `scripts/clock-skew-test.sh` does (Debian's faketime
/// package, through `scripts/lib.sh`).
fn libfaketime() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = Command::new("bash")
        .args([
            "-c",
            "source scripts/lib.sh; dpkg -s libfaketime >/dev/null 2>&1 || apt_install faketime; \
             dpkg -L libfaketime | grep '/libfaketime\\.so\\.1$' | head -1",
        ])
        .env("ROOT", root)
        .current_dir(root)
        .output()
        .unwrap();
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        !path.is_empty(),
        "libfaketime not found: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Three nodes, the third's clock 3 s ahead (beyond `max_clock_offset_ms`, 2 s, and within
/// the peers' 5-s window): only the third is unready (`clock_skew`), the first two stay ready
/// and let visitors in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clock_off_makes_one_node_unready() {
    let lib = libfaketime();
    let mut cl = Cluster::start("ready-skew", 2, &[]).await;
    let first = cl.nodes[0].internal_url().to_owned();
    let skewed = cl.spawn_with(
        2,
        Some(&first),
        "127.0.0.1:0",
        &[("LD_PRELOAD", &lib), ("FAKETIME", "+3s")],
    );
    cl.nodes.push(skewed);
    let c = client();
    // Every node measures both others.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        loop {
            let s = status(&cl, i).await;
            if s["clock_offsets"].as_array().map(Vec::len) == Some(2) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} measured no clocks: {s}",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Settled: the first two ready, the third not (bounded; a busy machine may take a while).
    loop {
        let answers = [
            readyz(&c, cl.url(0)).await,
            readyz(&c, cl.url(1)).await,
            readyz(&c, cl.url(2)).await,
        ];
        if answers == ["ready", "ready", "clock_skew"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never settled: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = watch(&c, &cl.urls(), Duration::from_secs(3)).await;
    eprintln!("/readyz over 3 s, nodes 1-3: {seen:?}");
    for (i, answers) in seen.iter().enumerate().take(2) {
        assert_eq!(
            answers.keys().collect::<Vec<_>>(),
            ["ready"],
            "node {}",
            i + 1
        );
    }
    assert_eq!(seen[2].keys().collect::<Vec<_>>(), ["clock_skew"]);
    // The room serves through the ready nodes.
    let urls = cl.urls()[..2].to_vec();
    let tickets = join_each(&c, 3, Duration::from_millis(3), |i| urls[i % 2].clone()).await;
    admit_all(&c, &urls, tickets, Duration::from_secs(30)).await;
}
