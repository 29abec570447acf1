//! A visitor's whole flow across nodes (join here, check in there, leave, verify the pass), and
//! bad input answered with JSON errors.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitor_flow_across_nodes() {
    let cl = Cluster::start(
        "flow",
        3,
        // The ticket expiry (an admission's claim window) no longer than the pass expiry, so
        // that passes expire after it (docs/operating.md#sessions).
        &[
            "--target-on-site",
            "2",
            "--pass-expiry-ms",
            "1500",
            "--ticket-expiry-ms",
            "1500",
        ],
    )
    .await;
    let c = client();
    let urls = cl.urls();

    // Join at node 1, check in at nodes 2 and 3 (forwarded to node 1).
    let tickets = join_each(&c, 4, Duration::from_millis(5), |_| urls[0].clone()).await;
    let (order, tickets, passes) =
        admit_all(&c, &urls[1..], tickets, Duration::from_secs(20)).await;
    // Two places: visitors let out in the same round may notice in either order.
    assert!(
        order[..2].contains(&0) && order[..2].contains(&1),
        "{order:?}"
    );
    assert!(metric(&c, &urls[1], "waitingroom_forwards_total{result=\"ok\"}").await > 0.0);

    // Passes (from leaves at nodes 2 and 3) verify at node 2 and refresh at node 1.
    let last = *order.last().unwrap();
    let pass = passes[last].clone();
    assert_eq!(verify(&c, &urls[1], &pass).await, StatusCode::NO_CONTENT);
    // A pass is extended at most once per quarter of the pass expiry.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (s, v) = post(
        &c,
        &format!("{}/api/pass/refresh", urls[0]),
        json!({ "pass": pass }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        verify(&c, &urls[0], v["pass"].as_str().unwrap()).await,
        StatusCode::NO_CONTENT
    );

    // The same ticket never gets a second pass, on any node.
    for u in &urls {
        let (s, v) = post(
            &c,
            &format!("{u}/api/leave"),
            json!({ "ticket": tickets[last] }),
        )
        .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["code"], "already_left");
        let (s, v) = post(
            &c,
            &format!("{u}/api/checkin"),
            json!({ "ticket": tickets[last] }),
        )
        .await;
        assert_eq!(
            s,
            StatusCode::CONFLICT,
            "replayed check-in after leave: {v}"
        );
    }

    // Passes expire; refresh of an expired pass is refused.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(verify(&c, &urls[1], &pass).await, StatusCode::UNAUTHORIZED);
    let (s, v) = post(
        &c,
        &format!("{}/api/pass/refresh", urls[0]),
        json!({ "pass": pass }),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");

    // The waiting page: a browser without cookies gets the page that takes a place (a GET
    // never takes one); its button (POST /) does, with a ticket cookie; once admitted, the
    // same page sets the pass cookie and redirects to the origin.
    let page = c
        .get(format!("{}/some/page", urls[1]))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers().get("set-cookie").is_none());
    let html = page.text().await.unwrap();
    assert!(html.contains("id=\"position\"") && html.contains("data-status=\"new\""));
    let button = c
        .post(format!("{}/", urls[1]))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(button.status(), StatusCode::SEE_OTHER);
    let cookie = button
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("wr_ticket=") && cookie.contains("HttpOnly"));
    let ticket_cookie = cookie.split(';').next().unwrap().to_owned();
    let mut cookie = ticket_cookie;
    let deadline = Instant::now() + Duration::from_secs(20);
    let location = loop {
        assert!(
            Instant::now() < deadline,
            "the page never sent the visitor on"
        );
        let r = c
            .get(format!("{}/", urls[2]))
            .header("accept", "text/html")
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::SEE_OTHER {
            let pass_cookie = r
                .headers()
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .find(|v| v.starts_with("wr_pass="))
                .expect("pass cookie");
            assert!(pass_cookie.contains("HttpOnly") && pass_cookie.contains("SameSite=Lax"));
            let pass = pass_cookie.split(';').next().unwrap()["wr_pass=".len()..].to_owned();
            assert_eq!(verify(&c, &urls[0], &pass).await, StatusCode::NO_CONTENT);
            break r.headers()["location"].to_str().unwrap().to_owned();
        }
        assert_eq!(r.status(), StatusCode::OK);
        if let Some(v) = r.headers().get("set-cookie") {
            cookie = v.to_str().unwrap().split(';').next().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(location, "http://127.0.0.1:9/origin");
    assert_eq!(
        metric(&c, &urls[0], "waitingroom_admission_inversions_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_json_errors() {
    let cl = Cluster::start("bad", 1, &["--target-on-site", "1"]).await;
    let c = client();
    let url = cl.url(0);
    let raw = |path: &str, ctype: &str, body: Vec<u8>| {
        c.post(format!("{url}{path}"))
            .header("content-type", ctype.to_owned())
            .body(body)
            .send()
    };
    let cases: Vec<(&str, &str, Vec<u8>, StatusCode, &str)> = vec![
        (
            "/api/checkin",
            "application/json",
            b"{".to_vec(),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            "/api/checkin",
            "text/plain",
            b"{}".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "/api/join",
            "application/json",
            br#"{"admin":true}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            "/api/checkin",
            "application/json",
            br#"{"ticket":"x","extra":1}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            "/api/checkin",
            "application/json",
            br#"{"ticket":42}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            "/api/checkin",
            "application/json",
            vec![b' '; 16 * 1024 + 100],
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            "/api/checkin",
            "application/json",
            br#"{"ticket":"not.a.token"}"#.to_vec(),
            StatusCode::UNAUTHORIZED,
            "invalid_token",
        ),
        (
            "/api/checkin",
            "application/json",
            b"{}".to_vec(),
            StatusCode::BAD_REQUEST,
            "missing_token",
        ),
        (
            "/api/leave",
            "application/json",
            br#"{"ticket":""}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "missing_token",
        ),
        (
            "/api/pass/refresh",
            "application/json",
            br#"{"pass":"x.y.z"}"#.to_vec(),
            StatusCode::UNAUTHORIZED,
            "invalid_token",
        ),
    ];
    for (path, ctype, body, status, code) in cases {
        let r = raw(path, ctype, body).await.unwrap();
        assert_eq!(r.status(), status, "{path} {code}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], code, "{path}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // An expired ticket, correctly signed.
    let now = waitingroom_http::clock::now_ms();
    let expired = cl.crypto().sign_ticket(&Ticket {
        id: TicketId(9),
        join_time: now - 10_000,
        node: NodeId(1),
        issued_at: now - 10_000,
        next_refresh: now - 9_000,
        expires_at: now - 5_000,
        previous_position: None,
        eviction_time: None,
        draw: None,
        round: None,
    });
    let (s, v) = post(
        &c,
        &format!("{url}/api/checkin"),
        json!({ "ticket": expired }),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(v["code"], "expired_token");
    // Still queued: leave is refused with 409.
    let t = join(&c, url).await;
    let (s, v) = post(&c, &format!("{url}/api/leave"), json!({ "ticket": t })).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["code"], "not_admitted");
    // Wrong methods and unknown routes are JSON too.
    let r = c.get(format!("{url}/api/join")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = c.get(format!("{url}/nope")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "not_found");
    // The node is still fine.
    let r = c.get(format!("{url}/livez")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let jwks: Value = get_json(&c, format!("{url}/.well-known/jwks.json")).await;
    assert_eq!(jwks["keys"][0]["alg"], "EdDSA");
}
