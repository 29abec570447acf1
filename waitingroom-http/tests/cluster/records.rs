//! Round records: every node publishes the same ones, and they audit clean, also when a node
//! dies mid-run.

use crate::harness::*;

/// What happens to the cluster while the load runs.
#[derive(Clone, Copy)]
enum Disturb {
    /// Nothing.
    None,
    /// Node `i` is SIGKILLed 1.5 s in.
    Kill(usize),
    /// Nodes 1 and 2 in turn are SIGSTOPped for 700 ms every 1.5 s, six times from 0.5 s in:
    /// rounds are lost mid-count and mid-result, and roots change.
    Pulses,
}

/// `users` visitors of the load generator through all of `cl`'s nodes (disturbed as `disturb`
/// says; with a node killed the generator goes on sending a third of its requests there, as a
/// client without a balancer would), their passes saved; nobody may be lost (but with freezes,
/// whose recovery is not the subject here: there only the passes saved are checked). Then
/// `waitingroom-node audit` of node `audit_at`'s records and those passes must pass: its
/// report.
async fn load_then_audit(
    cl: &Cluster,
    (users, disturb): (usize, Disturb),
    audit_at: usize,
) -> String {
    let urls: Vec<&str> = (0..cl.nodes.len()).map(|i| cl.url(i)).collect();
    let passes = cl.dir.join("passes.txt");
    let load = Command::new(BIN)
        .args([
            "load",
            "--url",
            &urls.join(","),
            "--users",
            &users.to_string(),
        ])
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
    match disturb {
        Disturb::None => {}
        Disturb::Kill(i) => {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            signal(&cl.nodes[i], "-KILL");
        }
        Disturb::Pulses => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for pulse in 0..6 {
                let node = &cl.nodes[pulse % 2];
                signal(node, "-STOP");
                tokio::time::sleep(Duration::from_millis(700)).await;
                signal(node, "-CONT");
                tokio::time::sleep(Duration::from_millis(800)).await;
            }
        }
    }
    let out = tokio::task::spawn_blocking(move || load.wait_with_output().unwrap())
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let saved = std::fs::read_to_string(&passes).unwrap().lines().count();
    if !matches!(disturb, Disturb::Pulses) {
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(saved, users, "{report}");
    }
    let text = audit_file(cl, audit_at, &passes, true);
    if matches!(disturb, Disturb::Pulses) {
        // A visitor let out by a round whose node was then removed, and admitted again from
        // their ticket by a node that never had that round's record, can still get a pass
        // naming no round: at most one in a hundred here.
        let unnamed = (text.lines())
            .find_map(|l| l.strip_prefix("passes naming no round"))
            .and_then(|l| l.rsplit(": ").next())
            .and_then(|n| n.trim().parse::<usize>().ok())
            .expect("the audit says how many passes name no round");
        eprintln!("{unnamed} of {saved} passes name no round");
        assert!(unnamed * 100 <= saved, "{text}");
    } else {
        // Every pass saved is checked against the round it names: none names no round.
        assert!(text.contains(&format!("passes checked: {saved}")), "{text}");
    }
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
    // Passes last the claim window (the ticket expiry) at least: both short, places turn over.
    let extra = [
        "--target-on-site",
        "40",
        "--ticket-expiry-ms",
        "2500",
        "--pass-expiry-ms",
        "2500",
    ];
    let cl = Cluster::start("rounds", 3, &extra).await;
    let text = load_then_audit(&cl, (300, Disturb::None), 1).await;
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

/// docs/operating.md#fairness-records: any node answers for the whole cluster. A node that
/// joins after rounds let visitors out (as one stopped, cut off or restarting while they did)
/// fills in their records from its peers: within a few seconds it publishes the same list as
/// the others, and the audit of its records with the passes handed out before it came is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_rounds_fills_in_their_records_from_its_peers() {
    // 10 places for 100 visitors: many more rounds than a result carries the ranges of (a
    // node that joins learns those from the protocol itself).
    let extra = [
        "--target-on-site",
        "10",
        "--ticket-expiry-ms",
        "2500",
        "--pass-expiry-ms",
        "2500",
    ];
    let mut cl = Cluster::start("rounds-late", 2, &extra).await;
    load_then_audit(&cl, (100, Disturb::None), 0).await;
    let c = client();
    let list = |v: Value| v["rounds"].as_array().unwrap().clone();
    let before = list(get_json(&c, format!("{}/api/rounds", cl.url(0))).await);
    assert!(before.len() >= 10, "{} records", before.len());
    cl.grow(1).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let late = list(get_json(&c, format!("{}/api/rounds", cl.url(2))).await);
        if late.len() >= before.len() {
            assert_eq!(late[..before.len()], before[..], "the same records");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 3 holds {} of {} records",
            late.len(),
            before.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = audit_file(&cl, 2, &cl.dir.join("passes.txt"), true);
    assert!(text.contains("violations: 0"), "{text}");
}

/// docs/operating.md#fairness-records: the same with node 3 SIGKILLed 1.5 s into the run: nobody is
/// lost, the survivors' records audit clean, and the passes of the visitors re-queued from
/// node 3 are covered by their rounds (a late pass or a fork is listed, not a violation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_records_audit_clean_when_a_node_dies_mid_run() {
    // Passes last the claim window (the ticket expiry) at least. Tickets of 8 s: an admitted
    // visitor of the killed node waits for its removal within its claim window (with 5 s, one
    // visitor in 200 was refused its pass as `expired_token` in one CI run of two: see
    // waitingroom-sim/README.md's open findings).
    let extra = [
        "--target-on-site",
        "40",
        "--ticket-expiry-ms",
        "8000",
        "--pass-expiry-ms",
        "5000",
    ];
    let cl = Cluster::start("rounds-kill", 3, &extra).await;
    let text = load_then_audit(&cl, (200, Disturb::Kill(2)), 0).await;
    assert!(text.contains("violations: 0"), "{text}");
}

/// docs/operating.md#fairness-records: every admitting round is on the record whatever happens
/// to it. 3 nodes with 500-ms rounds, 600 visitors, and nodes 1 and 2 in turn frozen for 700 ms
/// every 1.5 s (rounds lost mid-count and mid-result, members removed and rejoining, roots taken
/// over): the passes saved name their rounds (nobody is let straight through here; at most one
/// in a hundred names none, see `load_then_audit`), and the audit of node 3's records with those
/// passes finds no violation: no pass names a round node 3 did not publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pass_names_a_recorded_round_when_rounds_are_lost() {
    let extra = [
        "--target-on-site",
        "40",
        "--ticket-expiry-ms",
        "2500",
        "--pass-expiry-ms",
        "2500",
        "--eviction-interval-ms",
        "500",
    ];
    let cl = Cluster::start("rounds-lost", 3, &extra).await;
    let text = load_then_audit(&cl, (600, Disturb::Pulses), 2).await;
    // All 600 passes checked against their rounds: none names no round.
    assert!(text.contains("violations: 0"), "{text}");
    let mut paused = 0;
    for node in &cl.nodes {
        let log = std::fs::read_to_string(&node.log).unwrap_or_default();
        paused += log.matches("lost_round").count();
    }
    eprintln!("{paused} log lines name a lost round");
}
