//! Forged peer messages and passes, the internal routes on their own listener, and mutual TLS
//! on it.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_peer_messages_and_passes_are_rejected() {
    let cl = Cluster::start("forge", 1, &[]).await;
    let c = client();
    let url = cl.url(0);
    // A join request from a node that is not in the cluster, which would add a member if it
    // were accepted.
    let batch = json!([{
        "from": {"id": 4242, "incarnation": 1, "addr": "http://127.0.0.1:9"},
        "to": 0, "to_incarnation": 0,
        "body": {"JoinRequest": {"contact": {"id": 4242, "incarnation": 1, "addr": "http://127.0.0.1:9"}}}
    }]);
    let body = serde_json::to_vec(&batch).unwrap();
    let now = waitingroom_http::clock::now_ms();
    let send = |sig: Option<Vec<(&'static str, String)>>| {
        let mut r = c
            .post(format!("{url}/peer/messages"))
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in sig.into_iter().flatten() {
            r = r.header(name, value);
        }
        r.send()
    };
    let sign = |crypto: &Crypto, path: &str, at: u64, signed_body: &[u8]| {
        let route = Route {
            path,
            from: NodeId(4242),
            to: NodeId(0),
            to_incarnation: 0,
        };
        let (head, mac) = RequestHead::sign(crypto, route, at, rand::random(), signed_body);
        Some(head.headers(&mac).to_vec())
    };
    let other = Crypto::generate();
    let right = cl.crypto();
    let attempts = [
        ("unsigned", None),
        ("other key", sign(&other, "/peer/messages", now, &body)),
        (
            "signed for another body",
            sign(&right, "/peer/messages", now, b"[]"),
        ),
        (
            "stale timestamp",
            sign(&right, "/peer/messages", now - 60_000, &body),
        ),
        (
            "signed for another path",
            sign(&right, "/peer/visitor/checkin", now, &body),
        ),
    ];
    for (what, sig) in attempts {
        let r = send(sig).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{what}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "unauthorized_peer", "{what}");
    }
    let status: Value = get_json(&c, format!("{url}/api/cluster")).await;
    assert_eq!(
        status["members"].as_array().unwrap().len(),
        1,
        "nothing changed"
    );
    assert_eq!(
        metric(&c, url, "waitingroom_peer_auth_failures_total").await,
        5.0
    );
    // A forwarded check-in without a signature is refused too.
    let (s, _) = post(
        &c,
        &format!("{url}/peer/visitor/checkin"),
        json!({"ticket": "x"}),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Passes: forged with another key, edited, a ticket instead of a pass, garbage, none.
    let now = waitingroom_http::clock::now_ms();
    let pass = Pass {
        id: TicketId(1),
        node: NodeId(1),
        queue_join_time: now - 1000,
        created_at: now,
        issued_at: now,
        expires_at: now + 60_000,
        eviction_time: now,
        round: None,
        draw: None,
    };
    let good = right.sign_pass(&pass);
    assert_eq!(verify(&c, url, &good).await, StatusCode::NO_CONTENT);
    let forged = other.sign_pass(&pass);
    let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let edited_claims = right.sign_pass(&Pass {
        expires_at: now + 600_000_000,
        ..pass.clone()
    });
    parts[1] = edited_claims.split('.').nth(1).unwrap().to_owned();
    let edited = parts.join(".");
    let ticket = right.sign_ticket(&Ticket {
        id: TicketId(2),
        join_time: now,
        node: NodeId(1),
        issued_at: now,
        next_refresh: now,
        expires_at: now + 60_000,
        previous_position: None,
        eviction_time: Some(now),
        draw: None,
        round: None,
    });
    for (what, token) in [
        ("other key", forged),
        ("edited claims", edited),
        ("ticket as pass", ticket),
        ("garbage", "a.b.c".to_owned()),
    ] {
        assert_eq!(
            verify(&c, url, &token).await,
            StatusCode::UNAUTHORIZED,
            "{what}"
        );
        let r = c
            .get(format!("{url}/api/pass/verify"))
            .header("cookie", format!("wr_pass={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{what} (cookie)");
    }
    let r = c
        .get(format!("{url}/api/pass/verify"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "missing_token");
}

/// Two listeners per node: the cluster forms over the internal ones (the advertised URL is the
/// internal address), visitors are served on the public ones, forwarded between nodes, and the
/// public ports answer 404 on every internal route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_live_on_their_own_listener() {
    let cl = Cluster::start_with("ports", 2, &["--target-on-site", "5"], true).await;
    let c = client();
    let (public, internal) = (cl.url(0), cl.nodes[0].internal_url());
    assert_ne!(public, internal);
    for path in ["/metrics", "/api/cluster", "/peer/messages"] {
        let r = c
            .get(format!("{public}{path}"))
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.json::<Value>().await.unwrap()["code"], "not_found");
    }
    let r = c
        .post(format!("{public}/peer/messages"))
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = c.post(format!("{internal}/api/join")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let status: Value = get_json(&c, format!("{internal}/api/cluster")).await;
    let addrs: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["addr"].as_str().unwrap())
        .collect();
    assert!(
        addrs.contains(&internal),
        "members advertise their internal URL: {addrs:?}"
    );
    // A visitor joins at node 1 and is served at node 2 (forwarded over the internal ports).
    let t = join(&c, cl.url(0)).await;
    let (_, _, passes) = admit_all(&c, &cl.urls()[1..], vec![t], Duration::from_secs(20)).await;
    assert_eq!(
        verify(&c, cl.url(0), &passes[0]).await,
        StatusCode::NO_CONTENT
    );
    assert!(
        metric(
            &c,
            cl.nodes[1].internal_url(),
            "waitingroom_forwards_total{result=\"ok\"}"
        )
        .await
            > 0.0
    );
}

/// Mutual TLS on the internal listeners: peers talk over it (a visitor's check-ins are forwarded
/// between nodes), and the internal routes refuse plain HTTP, a client without a certificate and
/// one whose certificate another CA signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_listeners_take_only_mutual_tls() {
    let cl = Cluster::start_tls("mtls", 3, &[]).await;
    let internal = cl.nodes[0].internal_url().to_owned();
    assert!(internal.starts_with("https://127.0.0.1:"), "{internal}");
    let status = status(&cl, 0).await;
    let members = status["members"].as_array().unwrap();
    assert!(
        members
            .iter()
            .all(|m| m["addr"].as_str().unwrap().starts_with("https://"))
    );
    // A visitor joins at node 1 and is served at nodes 2 and 3 (forwarded over TLS).
    let c = client();
    let t = join(&c, cl.url(0)).await;
    let (_, _, passes) = admit_all(&c, &cl.urls()[1..], vec![t], Duration::from_secs(20)).await;
    assert_eq!(
        verify(&c, cl.url(0), &passes[0]).await,
        StatusCode::NO_CONTENT
    );
    let forwarded = metric(
        &cl.client,
        cl.nodes[1].internal_url(),
        "waitingroom_forwards_total{result=\"ok\"}",
    )
    .await;
    assert!(forwarded > 0.0);
    // Refused: plain HTTP, TLS without a client certificate, a certificate from another CA.
    let plain = internal.replacen("https://", "http://", 1);
    assert!(c.get(format!("{plain}/livez")).send().await.is_err());
    let tls = InternalTls::load(cl.tls.as_ref().unwrap()).unwrap();
    let roots = tls.client.clone();
    let no_cert = rustls_client_without_cert(&cl);
    assert!(
        no_cert
            .get(format!("{internal}/livez"))
            .send()
            .await
            .is_err()
    );
    let other = make_ca(&cl.dir, "other");
    let other = InternalTls::load(&TlsFiles {
        ca: cl.tls.as_ref().unwrap().ca.clone(),
        ..other
    })
    .unwrap();
    let stranger = Transport::build_client_with(Duration::from_secs(5), Some(other.client));
    assert!(
        stranger
            .get(format!("{internal}/livez"))
            .send()
            .await
            .is_err()
    );
    // The cluster's own certificate still gets in.
    let ours = Transport::build_client_with(Duration::from_secs(5), Some(roots));
    let r = ours.get(format!("{internal}/livez")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A client that trusts the cluster's CA but has no certificate of its own.
fn rustls_client_without_cert(cl: &Cluster) -> reqwest::Client {
    let ca = std::fs::read(&cl.tls.as_ref().unwrap().ca).unwrap();
    let ca = reqwest::Certificate::from_pem(&ca).unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    waitingroom_http::crypto::tls::client_builder()
        .tls_certs_only([ca])
        .build()
        .unwrap()
}
