//! One admission, one pass: a frozen or dead owner, a pass refreshed on another node, a captured
//! forward replayed elsewhere, a pass given back, a bypass pass.

use crate::harness::*;

/// A ticket checked in at `node` until it is admitted there: its last ticket.
pub(crate) async fn admitted_at(c: &reqwest::Client, node: &str, mut ticket: String) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, v) = post(
            c,
            &format!("{node}/api/checkin"),
            json!({ "ticket": ticket }),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        ticket = v["ticket"].as_str().unwrap().to_owned();
        if v["status"] == "admitted" {
            return ticket;
        }
        assert!(Instant::now() < deadline, "never admitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `POST /api/leave` at `node` with the `Idempotency-Key` `key`, if any: status, body and the
/// `Retry-After` header.
async fn leave_with(
    c: &reqwest::Client,
    node: &str,
    ticket: &str,
    key: Option<&str>,
) -> (StatusCode, Value, Option<String>) {
    let mut req = c
        .post(format!("{node}/api/leave"))
        .json(&json!({ "ticket": ticket }));
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    with_retry_after(req.send().await.unwrap()).await
}

/// Stops `node` (SIGSTOP) and waits until every thread of it has stopped: `kill` returns before
/// that, and a request it still took would be answered.
fn freeze(node: &NodeProc) {
    signal(node, "-STOP");
    let task = format!("/proc/{}/task", node.child.id());
    let stopped = || {
        std::fs::read_dir(&task).unwrap().all(|t| {
            let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised command name.
            stat.rsplit(") ")
                .next()
                .is_some_and(|rest| rest.starts_with('T'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while !stopped() {
        assert!(Instant::now() < deadline, "node did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The owner of a ticket is frozen (SIGSTOP) right after it exchanged the ticket for a pass.
/// Another node must not exchange it again while the owner is still a member: it answers 503
/// `owner_unavailable` with `Retry-After` to the leave and to the check-in. Once the owner
/// answers again, the leave repeated with its `Idempotency-Key` gets the same pass, and without
/// it nothing: one admission, never two passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_gives_no_second_pass() {
    // SWIM takes ~20 failed probe rounds to declare the frozen node dead: it stays a member
    // throughout.
    let cl = Cluster::start(
        "frozen",
        2,
        &["--target-on-site", "5", "--suspect-rounds", "20"],
    )
    .await;
    let c = client();
    let (owner, other) = (cl.url(0), cl.url(1));
    let ticket = admitted_at(&c, owner, join(&c, owner).await).await;
    let (s, first, _) = leave_with(&c, owner, &ticket, Some("visit-1")).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    freeze(&cl.nodes[0]);
    let frozen = Instant::now();
    for key in [None, Some("visit-1")] {
        let (s, v, retry_after) = leave_with(&c, other, &ticket, key).await;
        assert_eq!(
            s,
            StatusCode::SERVICE_UNAVAILABLE,
            "leave {key:?} at the other node: {v}"
        );
        assert_eq!(v["code"], "owner_unavailable", "{v}");
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    let r = c
        .post(format!("{other}/api/checkin"))
        .json(&json!({ "ticket": ticket }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.json::<Value>().await.unwrap()["code"],
        "owner_unavailable"
    );
    let members: Value = get_json(&c, format!("{}/api/cluster", cl.nodes[1].internal_url())).await;
    assert_eq!(
        members["members"].as_array().unwrap().len(),
        2,
        "still a member"
    );
    eprintln!(
        "refused for {:?} while the owner was frozen",
        frozen.elapsed()
    );
    signal(&cl.nodes[0], "-CONT");
    let (s, again, _) = leave_with(&c, other, &ticket, Some("visit-1")).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again, first, "the same pass, not a second one");
    let (s, v, _) = leave_with(&c, other, &ticket, None).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_left"))
    );
}

/// The owner of a ticket dies (SIGKILL) right after it exchanged the ticket for a pass, and
/// the answer never reached the visitor. Once the others have dropped it, the leave repeated
/// at another node with the same `Idempotency-Key` still gets a pass for that admission (the
/// signed ticket proves it), the same one when repeated there, and without the key nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_still_gives_the_pass() {
    let mut cl = Cluster::start("dead-owner", 3, &["--target-on-site", "5"]).await;
    let c = client();
    let other = cl.url(1).to_owned();
    let ticket = admitted_at(&c, cl.url(0), join(&c, cl.url(0)).await).await;
    let (s, lost, _) = leave_with(&c, cl.url(0), &ticket, Some("visit-9")).await;
    assert_eq!(s, StatusCode::OK, "{lost}");
    drop(cl.nodes.remove(0)); // SIGKILL
    cl.settle(2).await;
    let (s, first, _) = leave_with(&c, &other, &ticket, Some("visit-9")).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    let (s, again, _) = leave_with(&c, &other, &ticket, Some("visit-9")).await;
    assert_eq!((s, &again), (StatusCode::OK, &first), "the same pass again");
    assert_eq!(
        verify(&c, &other, first["pass"].as_str().unwrap()).await,
        StatusCode::NO_CONTENT
    );
    let (s, v, _) = leave_with(&c, &other, &ticket, None).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_left"))
    );
    assert_eq!(metric(&c, &other, "waitingroom_on_site").await, 1.0);
}

/// A pass refreshed at another node than the one that counts it is forwarded there and
/// extended there: one visitor, one place on the site, at the first node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_refreshed_elsewhere_is_counted_once() {
    let extra = [
        "--target-on-site",
        "5",
        "--pass-expiry-ms",
        "2000",
        "--ticket-expiry-ms",
        "1500",
    ];
    let cl = Cluster::start("refresh", 2, &extra).await;
    let c = client();
    let (first, other) = (cl.url(0), cl.url(1));
    let ticket = admitted_at(&c, first, join(&c, first).await).await;
    let pass = leave(&c, first, &ticket).await;
    assert_eq!(metric(&c, first, "waitingroom_on_site").await, 1.0);
    // A pass is extended at most once per quarter of the pass expiry.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (s, v) = post(
        &c,
        &format!("{other}/api/pass/refresh"),
        json!({ "pass": pass }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(metric(&c, other, "waitingroom_on_site").await, 0.0);
    assert_eq!(metric(&c, first, "waitingroom_on_site").await, 1.0);
    assert!(metric(&c, other, "waitingroom_forwards_total{result=\"ok\"}").await >= 1.0);
}

/// A forwarded leave captured on its way from node 2 to node 1 and sent to node 3 is refused
/// (421: it is signed for node 1); sent to node 1 again, it is a replay (401). And even a
/// request correctly signed for node 3 gets nothing for a ticket of node 1, a live member
/// (`wrong_node`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_forward_replayed_elsewhere_gets_nothing() {
    let cl = Cluster::start("replay", 3, &["--target-on-site", "5"]).await;
    let c = client();
    let ticket = admitted_at(&c, cl.url(0), join(&c, cl.url(0)).await).await;
    let claims = cl
        .crypto()
        .verify_ticket(&ticket, waitingroom_http::clock::now_ms())
        .unwrap();
    let status: Value = get_json(&c, format!("{}/api/cluster", cl.nodes[0].internal_url())).await;
    let contact = |i: usize| {
        let m = status["members"].as_array().unwrap();
        let url = cl.nodes[i].internal_url();
        let me = m.iter().find(|m| m["addr"] == url).unwrap();
        (
            NodeId(me["id"].as_u64().unwrap()),
            me["incarnation"].as_u64().unwrap(),
        )
    };
    let body = serde_json::to_vec(&json!([{ "op": "leave", "claims": claims }])).unwrap();
    let crypto = cl.crypto();
    let signed_for = |to: (NodeId, u64)| {
        let route = Route {
            path: "/peer/visitor/batch",
            from: contact(1).0,
            to: to.0,
            to_incarnation: to.1,
        };
        let now = waitingroom_http::clock::now_ms();
        let (head, mac) = RequestHead::sign(&crypto, route, now, rand::random(), &body);
        head.headers(&mac).to_vec()
    };
    let send = |node: usize, headers: Vec<(&'static str, String)>| {
        let mut r = c
            .post(format!(
                "{}/peer/visitor/batch",
                cl.nodes[node].internal_url()
            ))
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in headers {
            r = r.header(name, value);
        }
        r.send()
    };
    let captured = signed_for(contact(0));
    let r = send(2, captured.clone()).await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::MISDIRECTED_REQUEST,
        "to another node"
    );
    let r = send(0, captured.clone()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the original, to node 1");
    let answers: Value = r.json().await.unwrap();
    assert_eq!(answers[0]["status"], 200, "{answers}");
    let r = send(0, captured).await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "the replay, to node 1"
    );
    let r = send(2, signed_for(contact(2))).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let answers: Value = r.json().await.unwrap();
    assert_eq!(answers[0]["status"], 409, "{answers}");
    assert_eq!(answers[0]["body"]["code"], "wrong_node", "{answers}");
    let (s, v, _) = leave_with(&c, cl.url(1), &ticket, None).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_left"))
    );
}

/// docs/operating.md#sessions, end to end: with one place on the site and passes that last a
/// minute, a pass given back at node 3 (issued at another node) lets the next visitor in within a
/// few rounds, and every node refuses the pass from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_given_back_lets_the_next_visitor_in() {
    let cl = Cluster::start(
        "release",
        3,
        &["--target-on-site", "1", "--pass-expiry-ms", "60000"],
    )
    .await;
    let c = client();
    let nodes: Vec<String> = (0..3).map(|i| cl.url(i).to_owned()).collect();
    let first = vec![join(&c, cl.url(0)).await];
    let (_, _, passes) = admit_all(&c, &nodes, first, Duration::from_secs(10)).await;
    let second = join(&c, cl.url(1)).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let url = format!("{}/api/checkin", cl.url(1));
    let (s, v) = post(&c, &url, json!({ "ticket": second })).await;
    assert_eq!(
        (s, v["status"].clone()),
        (StatusCode::OK, json!("queued")),
        "{v}"
    );
    let given_back = Instant::now();
    let url = format!("{}/api/pass/release", cl.url(2));
    let (s, v) = post(&c, &url, json!({ "pass": passes[0] })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    admit_all(&c, &nodes, vec![second], Duration::from_secs(5)).await;
    eprintln!(
        "the next visitor was let in {:?} after the release",
        given_back.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    for node in &nodes {
        while verify(&c, node, &passes[0]).await != StatusCode::UNAUTHORIZED {
            assert!(Instant::now() < deadline, "{node} still takes the pass");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// docs/operating.md#bypass-passes, end to end: a bypass pass minted at node 3 passes the verify
/// endpoint of every node, is extended by none, and takes no place: with one place on the site, a
/// visitor still gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bypass_pass_works_everywhere_and_takes_no_place() {
    let (token, token_file) = admin_token_file("bypass");
    let path = token_file.to_str().unwrap();
    let extra = ["--admin-token-file", path, "--target-on-site", "1"];
    let cl = Cluster::start_with("bypass", 3, &extra, true).await;
    let mint = Some((reqwest::Method::POST, json!({"label": "monitoring"})));
    let v = admin_call(&cl, 2, token, "/admin/passes", mint).await;
    let pass = v["pass"].as_str().unwrap().to_owned();
    let c = client();
    for i in 0..3 {
        assert_eq!(verify(&c, cl.url(i), &pass).await, StatusCode::NO_CONTENT);
        let url = format!("{}/api/pass/refresh", cl.url(i));
        let (s, v) = post(&c, &url, json!({ "pass": pass })).await;
        assert_eq!(
            (s, v["code"].clone()),
            (StatusCode::FORBIDDEN, json!("bypass_pass")),
            "{v}"
        );
    }
    let nodes: Vec<String> = (0..3).map(|i| cl.url(i).to_owned()).collect();
    let visitor = vec![join(&c, cl.url(0)).await];
    admit_all(&c, &nodes, visitor, Duration::from_secs(10)).await;
    let _ = std::fs::remove_file(token_file);
}

/// Whether every node in `nodes` refuses `pass`: verify answers 401 and refresh 401 `released`.
pub(crate) async fn refused_by(c: &reqwest::Client, nodes: &[String], pass: &str, who: &str) {
    for node in nodes {
        assert_eq!(
            verify(c, node, pass).await,
            StatusCode::UNAUTHORIZED,
            "{who}: {node} takes the pass"
        );
        let url = format!("{node}/api/pass/refresh");
        let (s, v) = post(c, &url, json!({ "pass": pass })).await;
        assert_eq!(
            (s, v["code"].clone()),
            (StatusCode::UNAUTHORIZED, json!("released")),
            "{who}: {node} refreshes the pass: {v}"
        );
    }
}

/// waitingroom-distributed/README.md#passes-given-back, end to end: a pass given back at node 1
/// while node 3 was frozen (thawed ten rounds later, long after the rounds stopped carrying
/// the release) is refused by node 3 within a few rounds of its thaw, by a node added later and
/// by a node restarted (with nothing kept on disk) as soon as they are members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_given_back_stays_refused_by_frozen_new_and_restarted_nodes() {
    // The frozen node stays a member through its freeze (SWIM's 20 rounds are 6 s).
    let extra = [
        "--target-on-site",
        "5",
        "--pass-expiry-ms",
        "60000",
        "--suspect-rounds",
        "20",
    ];
    let mut cl = Cluster::start("released", 3, &extra).await;
    let c = client();
    let ticket = admitted_at(&c, cl.url(1), join(&c, cl.url(1)).await).await;
    let pass = leave(&c, cl.url(1), &ticket).await;
    freeze(&cl.nodes[2]);
    let url = format!("{}/api/pass/release", cl.url(0));
    let (s, v) = post(&c, &url, json!({ "pass": pass })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    signal(&cl.nodes[2], "-CONT");
    let thawed = Instant::now();
    let frozen = cl.url(2).to_owned();
    while verify(&c, &frozen, &pass).await != StatusCode::UNAUTHORIZED {
        assert!(
            thawed.elapsed() < Duration::from_secs(5),
            "the thawed node still takes the pass"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "the thawed node refused the pass {:?} after its thaw",
        thawed.elapsed()
    );
    refused_by(&c, &cl.urls(), &pass, "after the thaw").await;

    let added = cl.add_node();
    cl.settle(4).await;
    refused_by(&c, &[cl.url(added).to_owned()], &pass, "a node added later").await;

    let first = cl.nodes[0].internal_url().to_owned();
    cl.restart(1, Some(&first));
    cl.settle(4).await;
    refused_by(&c, &[cl.url(1).to_owned()], &pass, "a restarted node").await;
}

/// docs/operating.md#state-directory, end to end: with `--state-dir`, a pass given back stays
/// refused after every node of the cluster was killed and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_given_back_stays_refused_after_the_whole_cluster_restarts() {
    let cl_dir = std::env::temp_dir().join(format!(
        "wr-state-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let state = format!("{}/node{{node}}", cl_dir.display());
    let extra = [
        "--target-on-site",
        "5",
        "--pass-expiry-ms",
        "60000",
        "--state-dir",
        &state,
    ];
    let mut cl = Cluster::start("state-dir", 3, &extra).await;
    let c = client();
    let ticket = admitted_at(&c, cl.url(0), join(&c, cl.url(0)).await).await;
    let pass = leave(&c, cl.url(0), &ticket).await;
    let url = format!("{}/api/pass/release", cl.url(2));
    let (s, v) = post(&c, &url, json!({ "pass": pass })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // Every node has it, and wrote it (at most a second after it changed).
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    refused_by(&c, &cl.urls(), &pass, "before the restart").await;
    for node in &cl.nodes {
        signal(node, "-KILL");
    }
    cl.restart(0, None);
    let first = cl.nodes[0].internal_url().to_owned();
    for i in 1..3 {
        cl.restart(i, Some(&first));
    }
    cl.settle(3).await;
    refused_by(&c, &cl.urls(), &pass, "after the whole cluster restarted").await;
    let _ = std::fs::remove_dir_all(&cl_dir);
}
