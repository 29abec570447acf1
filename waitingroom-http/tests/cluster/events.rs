//! Scheduled events and random queueing: a pre-queue let out first in a random order, lotteries
//! that audit clean.

use crate::harness::*;

/// The scheduled events of node `i` (GET), or the answer to scheduling `event` there (POST).
async fn events(cl: &Cluster, i: usize, token: &str, event: Option<Value>) -> Value {
    let send = event.map(|e| (reqwest::Method::POST, e));
    admin_call(cl, i, token, "/admin/events", send).await
}

/// docs/operating.md#scheduled-events, end to end: an event scheduled at node 3 pre-queues visitors
/// on every node (`prequeue`, with the time to the start; nobody let out), and at the start
/// lets them out at its own cap of 2 per 200-ms round, all before anyone who joined later, in
/// an order about as far from join order as a random one (Kendall-Tau about 0.5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prequeue_is_let_out_first_in_a_random_order() {
    let (token, token_file) = admin_token_file("events");
    let path = token_file.to_str().unwrap();
    let cl = Cluster::start_with("events", 3, &["--admin-token-file", path], true).await;
    let now = events(&cl, 0, token, None).await["now_ms"]
        .as_u64()
        .unwrap();
    let event = json!({"name": "sale", "prequeue_start_ms": now, "start_ms": now + 4_000,
        "end_ms": now + 120_000, "shuffle_at_start": true,
        "settings": {"new_users_per_minute": 600}});
    let v = events(&cl, 2, token, Some(event)).await;
    assert_eq!(v["events"][0]["phase"], "prequeue", "{v}");
    // docs/operating.md#random-queueing: its lottery is committed to before anyone joins (on the
    // node it was scheduled at, at once), its seed unpublished until the start.
    let committed = lotteries(&cl, 2).await;
    assert_eq!(committed.len(), 1);
    assert_eq!(
        (committed[0].name.as_str(), &committed[0].seed),
        ("sale", &None)
    );
    assert_eq!(v["events"][0]["lottery_commit"], json!(committed[0].commit));
    assert!(v["events"][0].get("seed").is_none(), "{v}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while events(&cl, 0, token, None).await["events"][0]["phase"] != "prequeue" {
        assert!(Instant::now() < deadline, "node 1 never took the event");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = client();
    let mut tickets = Vec::new();
    for i in 0..30 {
        let (s, v) = post(&c, &format!("{}/api/join", cl.url(i % 3)), json!({})).await;
        assert_eq!(
            (s, v["status"].clone()),
            (StatusCode::OK, json!("prequeue")),
            "{v}"
        );
        let left = v["starts_in_ms"].as_u64().unwrap();
        assert!(left > 0 && left <= 4_000, "{v}");
        tickets.push(v["ticket"].as_str().unwrap().to_owned());
    }
    // They keep checking in, as their pages do, and stay pre-queued until the start (a round of
    // 30 check-ins on a busy machine may end past it: then "queued" is the right answer).
    let node_clock = || async {
        events(&cl, 0, token, None).await["now_ms"]
            .as_u64()
            .unwrap()
    };
    'prequeue: while node_clock().await < now + 3_800 {
        let seen = let_out_by(&cl, &[0, 1, 2]).await;
        assert!(
            seen == 0.0 || node_clock().await >= now + 4_000,
            "let out before the start"
        );
        for (i, t) in tickets.iter_mut().enumerate() {
            let url = format!("{}/api/checkin", cl.url((i + 1) % 3));
            let (s, v) = post(&c, &url, json!({ "ticket": t })).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            if v["status"] != "prequeue" {
                assert!(
                    node_clock().await >= now + 4_000,
                    "not pre-queued before the start: {v}"
                );
                break 'prequeue;
            }
            *t = v["ticket"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while events(&cl, 0, token, None).await["now_ms"]
        .as_u64()
        .unwrap()
        < now + 4_000
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..8 {
        tickets.push(join(&c, cl.url(i % 3)).await);
    }
    let nodes: Vec<String> = (0..3).map(|i| cl.url(i).to_owned()).collect();
    let (order, _, passes) = admit_all(&c, &nodes, tickets, Duration::from_secs(40)).await;
    let first_later = order.iter().position(|&i| i >= 30).unwrap();
    assert_eq!(first_later, 30, "the pre-queue goes first: {order:?}");
    let tau = waitingroom_core::kendall_tau_permutation(&order[..30]);
    assert!((0.25..0.75).contains(&tau), "against join order: {tau}");
    eprintln!("pre-queue let out with Kendall-Tau {tau:.3} against join order");
    // From the start every node shows the seed it committed to, and the audit recomputes each
    // pre-queued visitor's id from it and their pass's draw.
    for i in 0..3 {
        let revealed = lotteries(&cl, i).await;
        assert_eq!(revealed[0].commit, committed[0].commit, "node {}", i + 1);
        assert!(revealed[0].revealed_seed().is_some(), "node {}", i + 1);
    }
    let text = audit_passes(&cl, 0, &passes, true);
    assert!(
        text.contains("lotteries: 1 (1 revealed); lottery passes: 30, drawn from their seed: 30"),
        "{text}"
    );
    let _ = std::fs::remove_file(token_file);
}

/// docs/operating.md#random-queueing, end to end: with `queueing_method: random` set at node 2 and
/// a cap of 2 per 200-ms round, 30 visitors who joined one after another across 3 nodes are let
/// out in an order about as far from join order as a random one (Kendall-Tau about 0.5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queueing_lets_visitors_out_by_lottery() {
    let (token, token_file) = admin_token_file("random");
    let path = token_file.to_str().unwrap();
    let cl = Cluster::start_with("random", 3, &["--admin-token-file", path], true).await;
    let change = json!({"queueing_method": "random", "new_users_per_minute": 600});
    let v = admin(&cl, 1, token, Some(change)).await;
    assert_eq!(v["queueing_method"], "random", "{v}");
    let deadline = Instant::now() + Duration::from_secs(5);
    for i in [0, 2] {
        while status(&cl, i).await["settings"]["queueing_method"] != "random" {
            assert!(
                Instant::now() < deadline,
                "node {} never took the change",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let c = client();
    let tickets = join_each(&c, 30, Duration::from_millis(5), |i| {
        cl.url(i % 3).to_owned()
    })
    .await;
    let nodes: Vec<String> = (0..3).map(|i| cl.url(i).to_owned()).collect();
    let (order, _, passes) = admit_all(&c, &nodes, tickets, Duration::from_secs(40)).await;
    let tau = waitingroom_core::kendall_tau_permutation(&order);
    assert!(
        (0.25..0.75).contains(&tau),
        "against join order: {tau} ({order:?})"
    );
    eprintln!("random queueing let 30 out with Kendall-Tau {tau:.3} against join order");
    // docs/operating.md#random-queueing: while the lottery runs its seed is committed to, not
    // shown, and the audit can check nothing of the draws yet (and finds nothing wrong); once it is
    // switched off, the seed is shown and every draw checks.
    let text = audit_passes(&cl, 1, &passes, true);
    assert!(
        text.contains("lotteries: 1 (0 revealed); lottery passes: 30, drawn from their seed: 0"),
        "{text}"
    );
    let commit = lotteries(&cl, 1).await[0].commit.clone();
    admin(&cl, 1, token, Some(json!({"queueing_method": "fifo"}))).await;
    let shown = lotteries(&cl, 1).await;
    assert_eq!(shown[0].commit, commit);
    let text = audit_passes(&cl, 1, &passes, true);
    assert!(
        text.contains("lotteries: 1 (1 revealed); lottery passes: 30, drawn from their seed: 30"),
        "{text}"
    );
    // A pass whose draw does not give its id (an id picked, not drawn) is caught.
    let now = waitingroom_http::clock::now_ms();
    let mut pass = cl.crypto().verify_pass(&passes[0], now).unwrap();
    pass.draw = pass.draw.map(|d| d ^ 1);
    let forged = cl.crypto().sign_pass(&pass);
    let text = audit_passes(&cl, 1, &[forged], false);
    assert!(text.contains("NotDrawn"), "{text}");
    let _ = std::fs::remove_file(token_file);
}

/// The lottery records node `i` publishes, verified against the cluster's JWKS.
async fn lotteries(cl: &Cluster, i: usize) -> Vec<waitingroom_core::lottery::LotteryRecord> {
    let c = client();
    let jwks = get_json(&c, format!("{}/.well-known/jwks.json", cl.url(i))).await;
    let keys = waitingroom_core::VerifyingKeySet::from_jwks_json(&jwks.to_string()).unwrap();
    let list = get_json(&c, format!("{}/api/lotteries", cl.url(i))).await;
    list["lotteries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|jws| waitingroom_core::lottery::verify_lottery(&keys, jws.as_str().unwrap()).unwrap())
        .collect()
}

/// `waitingroom-node audit` of node `i` with `passes`: its report, which must say it `passed`
/// (or not).
fn audit_passes(cl: &Cluster, i: usize, passes: &[String], passed: bool) -> String {
    let file = cl.dir.join(format!("passes-{i}.txt"));
    std::fs::write(&file, passes.join("\n")).unwrap();
    audit_file(cl, i, &file, passed)
}
