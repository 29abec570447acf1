//! Visitors who play the rules against the room
//! (waitingroom-distributed/README.md#one-admission-one-pass): an admission banked by checking
//! in without leaving, one pass refreshed with the same old token at every node, a leave
//! replayed at another node once the owner is dead.

use crate::harness::*;
use crate::passes::admitted_at;

/// `POST url` with `body`: status, body and the `Retry-After` header.
async fn post_retry(
    c: &reqwest::Client,
    url: String,
    body: Value,
) -> (StatusCode, Value, Option<String>) {
    let r = c.post(url).json(&body).send().await.unwrap();
    with_retry_after(r).await
}

/// A visitor waiting at `node` in the background, checking in until admitted: their last ticket.
fn waiting(c: &reqwest::Client, node: &str, ticket: String) -> tokio::task::JoinHandle<String> {
    let (c, node) = (c.clone(), node.to_owned());
    tokio::spawn(async move { admitted_at(&c, &node, ticket).await })
}

/// Checks `ticket` in at `node` every 200 ms for up to `ms`, as a visitor who was let out and
/// never leaves, keeping the last ticket; returns at the first refusal, with its status and
/// code, or `None` if none came.
async fn bank(
    c: &reqwest::Client,
    node: &str,
    ticket: &mut String,
    ms: u64,
) -> Option<(StatusCode, Value)> {
    let deadline = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < deadline {
        let (s, v) = post(
            c,
            &format!("{node}/api/checkin"),
            json!({ "ticket": ticket }),
        )
        .await;
        if s != StatusCode::OK {
            return Some((s, v["code"].clone()));
        }
        assert_eq!(v["status"], "admitted", "{v}");
        *ticket = v["ticket"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// A visitor let out who keeps checking in but never leaves loses the admission when its claim
/// window (the ticket expiry, 1.5 s here) closes: their check-in and leave are refused from then
/// on, and the place goes to the next visitor. One node, one place: never two valid passes. The
/// same with the room switched to `reject`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banked_admission_lapses_and_gets_no_pass() {
    let (token, token_file) = admin_token_file("banked");
    let path = token_file.to_str().unwrap();
    let extra = [
        "--admin-token-file",
        path,
        "--target-on-site",
        "1",
        "--ticket-expiry-ms",
        "1500",
    ];
    let cl = Cluster::start_with("banked", 1, &extra, true).await;
    let c = client();
    let node = cl.url(0);
    let mut a = admitted_at(&c, node, join(&c, node).await).await;
    let b = waiting(&c, node, join(&c, node).await);
    let refused = bank(&c, node, &mut a, 4_000).await;
    assert_eq!(
        refused,
        Some((StatusCode::UNAUTHORIZED, json!("expired_token"))),
        "the admission lapses at the end of its claim window"
    );
    let b = b.await.unwrap();
    let pass_b = leave(&c, node, &b).await;
    let (s, v) = post(&c, &format!("{node}/api/leave"), json!({ "ticket": a })).await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "the lapsed admission gets no pass: {v}"
    );
    let internal = cl.nodes[0].internal_url();
    assert_eq!(metric(&c, internal, "waitingroom_on_site").await, 1.0);

    // The same with the room closed: a visitor let out by a round, who banks the admission
    // while the room switches to `reject`, gets nothing once it lapsed.
    let d = join(&c, node).await;
    let (s, _) = post(
        &c,
        &format!("{node}/api/pass/release"),
        json!({ "pass": pass_b }),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let mut d = admitted_at(&c, node, d).await;
    admin(&cl, 0, token, Some(json!({"mode": "reject"}))).await;
    let refused = bank(&c, node, &mut d, 4_000).await;
    assert_eq!(
        refused,
        Some((StatusCode::UNAUTHORIZED, json!("expired_token")))
    );
    let (s, v) = post(&c, &format!("{node}/api/leave"), json!({ "ticket": d })).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let (s, v) = post(&c, &format!("{node}/api/checkin"), json!({ "ticket": d })).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let _ = std::fs::remove_file(token_file);
}

/// The load generator's banked visitors (`--banked`) hold on to their admission past its claim
/// window, so the room refuses their tickets, as it must: counted as `lapsed`, not as places
/// lost (`rejoined`, which `scripts/swarm.sh` fails on). They join again and are let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_counts_a_lapsed_banked_admission_apart_from_a_place_lost() {
    let extra = ["--target-on-site", "1", "--ticket-expiry-ms", "1500"];
    let cl = Cluster::start("lapsed", 1, &extra).await;
    let out = Command::new(BIN)
        .args(["load", "--url", cl.url(0), "--users", "3"])
        .args([
            "--concurrency",
            "3",
            "--max-seconds",
            "30",
            "--progress-s",
            "0",
        ])
        .args(["--banked", "1", "--bank-ms", "2500", "--json"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["lapsed"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(report["rejoined"], 0, "{report}");
    assert_eq!(
        (report["lost"].clone(), report["admitted"].clone()),
        (json!(0), json!(3)),
        "{report}"
    );
}

/// `waitingroom_on_site` of each of `nodes`.
async fn on_site(c: &reqwest::Client, nodes: &[String]) -> Vec<f64> {
    let mut counts = Vec::new();
    for n in nodes {
        counts.push(metric(c, n, "waitingroom_on_site").await);
    }
    counts
}

/// A pass refreshed with the same old token at every node is counted once, at the node that
/// counts it: the others forward the refresh there, where a second one within a quarter of the
/// pass expiry is refused (429 `refresh_too_soon`, `Retry-After`). Two places, two passes,
/// never more counted; once they expire the next visitor gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_replayed_at_every_node_is_counted_once() {
    let extra = [
        "--target-on-site",
        "2",
        "--pass-expiry-ms",
        "4000",
        "--ticket-expiry-ms",
        "1500",
    ];
    let cl = Cluster::start("replayed-pass", 3, &extra).await;
    let c = client();
    let nodes = cl.urls();
    let first = admitted_at(&c, &nodes[0], join(&c, &nodes[0]).await).await;
    let second = admitted_at(&c, &nodes[0], join(&c, &nodes[0]).await).await;
    let pass = leave(&c, &nodes[0], &first).await;
    leave(&c, &nodes[0], &second).await;
    let next = waiting(&c, &nodes[1], join(&c, &nodes[1]).await);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let mut answers = Vec::new();
    for n in &nodes {
        let url = format!("{n}/api/pass/refresh");
        answers.push(post_retry(&c, url, json!({ "pass": pass })).await);
    }
    assert_eq!(answers[0].0, StatusCode::OK, "{}", answers[0].1);
    for (s, v, retry_after) in &answers[1..] {
        assert_eq!(*s, StatusCode::TOO_MANY_REQUESTS, "{v}");
        assert_eq!(v["code"], "refresh_too_soon", "{v}");
        assert!(v["retry_after_ms"].as_u64().is_some(), "{v}");
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    assert_eq!(on_site(&c, &nodes).await, vec![2.0, 0.0, 0.0]);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for n in &nodes[1..] {
        let url = format!("{n}/api/pass/refresh");
        let _ = post_retry(&c, url, json!({ "pass": pass })).await;
        assert_eq!(on_site(&c, &nodes).await, vec![2.0, 0.0, 0.0], "after {n}");
    }
    assert!(
        metric(
            &c,
            &nodes[0],
            "waitingroom_refreshes_total{result=\"too_soon\"}"
        )
        .await
            >= 2.0
    );
    // Nobody refreshes any more: the passes expire, and the visitor waiting gets in.
    while !next.is_finished() {
        let counted: f64 = on_site(&c, &nodes).await.iter().sum();
        assert!(counted <= 2.0, "{counted} places counted for 2 passes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    next.await.expect("the next visitor got in");
}

/// The node that exchanged a ticket dies; once the others have removed it, a leave of the
/// same ticket at another node gives the same pass (same id, same expiry), not a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_replayed_after_the_owner_died_gives_the_same_pass() {
    let extra = ["--target-on-site", "5", "--ticket-expiry-ms", "20000"];
    let mut cl = Cluster::start("replayed-leave", 3, &extra).await;
    let c = client();
    let ticket = admitted_at(&c, cl.url(0), join(&c, cl.url(0)).await).await;
    let first = leave(&c, cl.url(0), &ticket).await;
    drop(cl.nodes.remove(0)); // SIGKILL
    cl.settle(2).await;
    let crypto = cl.crypto();
    let claims = |token: &str| {
        let p = crypto
            .verify_pass(token, waitingroom_http::clock::now_ms())
            .expect("a valid pass");
        (p.id, p.created_at, p.expires_at)
    };
    for i in 0..2 {
        let (s, v) = post(
            &c,
            &format!("{}/api/leave", cl.url(i)),
            json!({ "ticket": ticket }),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let again = v["pass"].as_str().unwrap();
        assert_eq!(
            claims(again),
            claims(&first),
            "the same pass at node {}",
            i + 2
        );
    }
}
