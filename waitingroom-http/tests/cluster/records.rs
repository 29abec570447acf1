//! Round records: every node publishes the same ones, and they audit clean, also when a node
//! dies mid-run.

use crate::harness::*;

/// 300 visitors of the load generator through all of `cl`'s nodes (node `kill`, if any,
/// SIGKILLed 1.5 s in; the generator goes on sending a third of its requests there, as a client
/// without a balancer would), their passes saved; nobody may be lost. Then
/// `waitingroom-node audit` of node `audit_at`'s records and those passes must pass: its
/// report.
async fn load_then_audit(cl: &Cluster, kill: Option<usize>, audit_at: usize) -> String {
    let urls: Vec<&str> = (0..cl.nodes.len()).map(|i| cl.url(i)).collect();
    let passes = cl.dir.join("passes.txt");
    let load = Command::new(BIN)
        .args(["load", "--url", &urls.join(","), "--users", "300"])
        .args([
            "--concurrency",
            "150",
            "--max-seconds",
            "60",
            "--progress-s",
            "0",
        ])
        .args(["--json", "--save-passes"])
        .arg(&passes)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(i) = kill {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        signal(&cl.nodes[i], "-KILL");
    }
    let out = tokio::task::spawn_blocking(move || load.wait_with_output().unwrap())
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["lost"], 0, "{report}");
    let text = audit_file(cl, audit_at, &passes, true);
    assert!(text.contains("passes checked: 300"), "{text}");
    let c = client();
    let node = cl.url(audit_at);
    let back = metric(&c, node, "waitingroom_records_cutoff_back_last_hour").await;
    let bound = metric(&c, node, "waitingroom_records_inversions_bound_last_hour").await;
    eprintln!("live figure: {back} rounds went back, at most {bound} pairs out of order");
    text
}

/// docs/operating.md#fairness-records, end to end: with 40 places and short passes, 300 visitors of
/// the load generator are let out over several rounds by 3 nodes; every node publishes the
/// same signed, chained records (`GET /api/rounds`), numbered from 0, and
/// `waitingroom-node audit` checks them and the 300 passes (`--save-passes`): no violation,
/// every pass covered by the round it names, nothing to list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_publishes_the_same_round_records_and_they_audit_clean() {
    let extra = ["--target-on-site", "40", "--pass-expiry-ms", "300"];
    let cl = Cluster::start("rounds", 3, &extra).await;
    let text = load_then_audit(&cl, None, 1).await;
    assert!(
        text.contains("violations: 0") && !text.contains("note:"),
        "{text}"
    );
    let c = client();
    let mut published = Vec::new();
    for i in 0..3 {
        let url = format!("{}/api/rounds", cl.url(i));
        let v: Value = c.get(url).send().await.unwrap().json().await.unwrap();
        published.push(v["rounds"].as_array().unwrap().clone());
    }
    assert!(published[0].len() >= 5, "{} records", published[0].len());
    let bytes: usize = published[0].iter().map(|r| r.as_str().unwrap().len()).sum();
    eprintln!("{} bytes per record", bytes / published[0].len());
    let shortest = published.iter().map(Vec::len).min().unwrap();
    for p in &published {
        assert_eq!(
            p[..shortest],
            published[0][..shortest],
            "the same records everywhere"
        );
    }
    // The live figure from the same records: no round went back, on any node.
    for i in 0..3 {
        let rounds = metric(&c, cl.url(i), "waitingroom_records_last_hour").await;
        assert!(rounds >= 5.0, "node {i}: {rounds} records");
        let back = metric(&c, cl.url(i), "waitingroom_records_cutoff_back_last_hour").await;
        let bound = metric(
            &c,
            cl.url(i),
            "waitingroom_records_inversions_bound_last_hour",
        )
        .await;
        assert_eq!((back, bound), (0.0, 0.0), "node {i}");
    }
}

/// docs/operating.md#fairness-records: the same with node 3 SIGKILLed 1.5 s into the run: nobody is
/// lost, the survivors' records audit clean, and the passes of the visitors re-queued from
/// node 3 are covered by their rounds (a late pass or a fork is listed, not a violation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_records_audit_clean_when_a_node_dies_mid_run() {
    let extra = ["--target-on-site", "40", "--pass-expiry-ms", "300"];
    let cl = Cluster::start("rounds-kill", 3, &extra).await;
    let text = load_then_audit(&cl, Some(2), 0).await;
    assert!(text.contains("violations: 0"), "{text}");
}
