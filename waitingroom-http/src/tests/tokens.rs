//! Forged, replayed and confused tokens: tickets replayed after a leave, tickets presented as
//! passes and passes as tickets, another cluster's key, edited claims, `alg` none and HS256; and
//! passes given again after a lost answer, refreshed no further than their longest life, and the
//! way back that only the gate may sign.

use super::harness::*;

#[tokio::test]
async fn replayed_ticket_after_leave_is_refused_at_checkin() {
    let n = TestNode::start(options(), true);
    let (ticket, _) = n.ticket_and_pass().await;
    n.post("/api/checkin", json!({ "ticket": ticket }))
        .await
        .assert_error(StatusCode::CONFLICT, "already_left");
}

#[tokio::test]
async fn replayed_ticket_after_leave_is_refused_at_leave() {
    let n = TestNode::start(options(), true);
    let (ticket, _) = n.ticket_and_pass().await;
    // One pass per ticket, from the body or from the cookie alike.
    n.post("/api/leave", json!({ "ticket": ticket }))
        .await
        .assert_error(StatusCode::CONFLICT, "already_left");
    let cookie = format!("wr_ticket={ticket}");
    n.send(bodiless(
        Request::post("/api/leave"),
        header::COOKIE,
        &cookie,
    ))
    .await
    .assert_error(StatusCode::CONFLICT, "already_left");
}

/// A leave repeated with its `Idempotency-Key` (its answer was lost on the way) gets the same
/// pass again; a replay without the key, or with another one, still gets nothing.
#[tokio::test]
async fn a_leave_repeated_with_its_idempotency_key_gets_the_same_pass() {
    let n = TestNode::start(options(), true);
    let ticket = n.admitted_ticket().await;
    let leave = |key: Option<&str>| {
        let mut req = post("/api/leave", json!({ "ticket": ticket }));
        if let Some(key) = key {
            req.headers_mut()
                .insert("idempotency-key", key.parse().expect("header value"));
        }
        req
    };
    let first = n.send(leave(Some("visit-7f3a"))).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.json());
    let again = n.send(leave(Some("visit-7f3a"))).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.json());
    assert_eq!(
        again.json(),
        first.json(),
        "the same pass, not a second one"
    );
    n.send(leave(Some("another-key")))
        .await
        .assert_error(StatusCode::CONFLICT, "already_left");
    n.send(leave(None))
        .await
        .assert_error(StatusCode::CONFLICT, "already_left");
    n.send(leave(Some("with space")))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "bad_idempotency_key");
}

/// The waiting page loaded again after the answer that carried the pass was lost (the redirect
/// to the origin never arrived) gets the same pass, by the leave key its script set, or the
/// page's own without script; another key gets nothing.
#[tokio::test]
async fn the_page_loaded_again_after_a_lost_answer_gets_the_same_pass() {
    let n = TestNode::start(options(), true);
    let page = |ticket: &str, leave_key: Option<&str>| {
        let mut cookie = format!("wr_ticket={ticket}");
        if let Some(k) = leave_key {
            cookie.push_str(&format!("; wr_leave_key={k}"));
        }
        Request::get("/")
            .header(header::ACCEPT, "text/html")
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .expect("request")
    };
    let pass_cookie = |r: &Reply| {
        assert_eq!(
            r.status,
            StatusCode::SEE_OTHER,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        r.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("wr_pass="))
            .map(|c| c.split(';').next().unwrap_or_default().to_owned())
            .expect("a pass cookie")
    };
    for key in [Some("0123456789abcdef"), None] {
        let ticket = n.admitted_ticket().await;
        let first = pass_cookie(&n.send(page(&ticket, key)).await);
        let again = pass_cookie(&n.send(page(&ticket, key)).await);
        assert_eq!(first, again, "the same pass, key {key:?}");
        let other = n.send(page(&ticket, Some("another"))).await;
        assert_eq!(other.status, StatusCode::OK, "a new visit, not a pass");
        assert!(
            !other
                .headers
                .get_all(header::SET_COOKIE)
                .iter()
                .any(|v| { v.to_str().is_ok_and(|c| c.starts_with("wr_pass=")) })
        );
    }
}

/// A pass is extended no further than `pass_max_lifetime_ms` from its creation: refreshing
/// it then is refused with 403 `pass_lifetime_over`. Margins of a second either way: no timing
/// is tight.
#[tokio::test]
async fn a_pass_is_not_refreshed_past_its_longest_lifetime() {
    let n = TestNode::start(
        Options {
            room: RoomOptions {
                pass_expiry_ms: Some(2_000),
                pass_max_lifetime_ms: Some(3_000),
                // Not above the pass expiry: a pass lasts at least its admission's claim window.
                ticket_expiry_ms: Some(2_000),
                ..options().room
            },
            ..options()
        },
        true,
    );
    let (_, pass) = n.ticket_and_pass().await;
    let refresh = |pass: String| post("/api/pass/refresh", json!({ "pass": pass }));
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let r = n.send(refresh(pass)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let created = |r: &Reply| {
        n.app
            .crypto
            .verify_pass(r.json()["pass"].as_str().unwrap(), now_ms())
    };
    let p = created(&r).expect("a valid pass");
    assert_eq!(
        p.expires_at,
        p.created_at + 3_000,
        "cut to the longest lifetime"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    n.send(refresh(r.json()["pass"].as_str().unwrap().to_owned()))
        .await
        .assert_error(StatusCode::FORBIDDEN, "pass_lifetime_over");
}

/// Sessions renewed by activity (docs/operating.md#sessions): a pass checked at the gate past
/// half its life comes back renewed as a cookie; before half its life, or once its longest life
/// is reached, it does not (and it stays valid until it expires).
#[tokio::test]
async fn a_pass_in_use_is_renewed_at_the_gate_past_half_its_life() {
    let n = TestNode::start(
        Options {
            room: RoomOptions {
                pass_expiry_ms: Some(1_000),
                pass_max_lifetime_ms: Some(2_500),
                // Not above the pass expiry: a pass lasts at least its admission's claim window.
                ticket_expiry_ms: Some(1_000),
                ..options().room
            },
            ..options()
        },
        true,
    );
    let (_, pass) = n.ticket_and_pass().await;
    let r = n.verify(&pass).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(
        r.headers.get(header::SET_COOKIE).is_none(),
        "renewed too early"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = n.verify(&pass).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let cookie = r.headers[header::SET_COOKIE].to_str().expect("ASCII");
    let renewed = cookie
        .strip_prefix("wr_pass=")
        .and_then(|c| c.split(';').next())
        .expect("a pass cookie")
        .to_owned();
    let (old, new) = (
        n.app
            .crypto
            .verify_pass(&pass, now_ms())
            .expect("still valid"),
        n.app.crypto.verify_pass(&renewed, now_ms()).expect("valid"),
    );
    assert!(new.expires_at > old.expires_at, "{new:?} vs {old:?}");
    // Used all along, the session ends at the longest life (2.5 s from creation): renewals
    // stop, and none reaches past it.
    let mut current = renewed;
    let mut stopped = false;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let r = n.verify(&current).await;
        let Some(c) = r.headers.get(header::SET_COOKIE) else {
            stopped = true;
            break;
        };
        let c = c.to_str().expect("ASCII");
        current = c["wr_pass=".len()..]
            .split(';')
            .next()
            .expect("pass")
            .to_owned();
        let p = n.app.crypto.verify_pass(&current, now_ms()).expect("valid");
        assert!(p.expires_at <= p.created_at + 2_500, "{p:?}");
    }
    assert!(stopped, "renewed past the longest life");
}

#[tokio::test]
async fn ticket_presented_as_pass_is_refused() {
    let n = TestNode::start(options(), true);
    // An admitted ticket: the most a visitor could hope to pass off as a pass.
    let ticket = n.admitted_ticket().await;
    n.assert_pass_invalid(&ticket).await;
    let cookie = format!("wr_pass={ticket}");
    n.send(bodiless(
        Request::get("/api/pass/verify"),
        header::COOKIE,
        &cookie,
    ))
    .await
    .assert_error(StatusCode::UNAUTHORIZED, "invalid_token");
}

/// docs/operating.md#origin-gating: the verify endpoint signs the way back only for a gate that
/// holds the return-path secret, only for a path on the site; and the waiting page follows only a
/// signed one (an unsigned or re-pointed one is ignored and counted).
#[tokio::test]
async fn only_the_gate_gets_a_way_back_signed_and_only_a_signed_one_is_followed() {
    let n = TestNode::start(options(), true);
    let verify = |secret: &str, path: &str| {
        let mut req = Request::get("/api/pass/verify")
            .header("x-original-uri", path)
            .body(Body::empty())
            .unwrap();
        if !secret.is_empty() {
            let v = axum::http::HeaderValue::from_str(secret).unwrap();
            req.headers_mut().insert("x-waitingroom-gate-secret", v);
        }
        n.send(req)
    };
    let secret = n.app.crypto.gate_secret();
    let r = verify(secret, "/shop/cart").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let back = r.headers["x-waitingroom-return"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        back.starts_with("return_to=%2Fshop%2Fcart&return_sig="),
        "{back}"
    );
    for (secret, path) in [
        ("", "/shop/cart"),
        ("wrong", "/shop/cart"),
        (secret, "//evil.example/"),
    ] {
        let r = verify(secret, path).await;
        assert!(
            r.headers.get("x-waitingroom-return").is_none(),
            "{secret:?} {path:?}"
        );
    }
    // A visitor with a pass, sent to the page with the signed way back, goes on to that page;
    // with a made-up one, or the signed one re-pointed, to the front page.
    let (_, pass) = n.ticket_and_pass().await;
    let cookie = format!("wr_pass={pass}");
    let page = |query: String| {
        let uri = format!("/?{query}");
        n.send(bodiless(
            Request::get(uri.as_str()),
            header::COOKIE,
            &cookie,
        ))
    };
    let location = |r: &Reply| r.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(location(&page(back.clone()).await).ends_with("/shop/cart"));
    let made_up = page("return_to=%2Fadmin".into()).await;
    let moved = page(back.replace("cart", "admin")).await;
    for r in [made_up, moved] {
        assert_eq!(r.status, StatusCode::SEE_OTHER);
        assert!(!location(&r).contains("/admin"), "{}", location(&r));
    }
    assert_eq!(n.app.metrics.return_paths_refused.get(), 2);
}

#[tokio::test]
async fn pass_presented_as_ticket_is_refused() {
    let n = TestNode::start(options(), true);
    let (_, pass) = n.ticket_and_pass().await;
    for path in ["/api/checkin", "/api/leave"] {
        n.post(path, json!({ "ticket": pass }))
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "invalid_token");
    }
}

#[tokio::test]
async fn pass_from_another_cluster_key_is_refused() {
    let n = TestNode::start(options(), false);
    let pass = a_pass(now_ms());
    // Sanity: the same claims signed with this cluster's key are a valid pass.
    assert_eq!(
        n.verify(&n.app.crypto.sign_pass(&pass)).await.status,
        StatusCode::NO_CONTENT
    );
    let other = Crypto::generate();
    n.assert_pass_invalid(&other.sign_pass(&pass)).await;
    // Another key posing under this cluster's key id: the signature does not verify.
    let kid = n.app.crypto.jwks()["keys"][0]["kid"]
        .as_str()
        .expect("kid")
        .to_owned();
    let impostor = Crypto::new(ClusterKey::from_seed([9; 32]).with_kid(kid));
    n.assert_pass_invalid(&impostor.sign_pass(&pass)).await;
}

#[tokio::test]
async fn expired_pass_is_refused() {
    let n = TestNode::start(options(), false);
    let now = now_ms();
    let expired = n.app.crypto.sign_pass(&Pass {
        issued_at: now - 20_000,
        expires_at: now - 1,
        ..a_pass(now)
    });
    n.assert_pass_refused(&expired, StatusCode::UNAUTHORIZED, "expired_token")
        .await;
}

#[tokio::test]
async fn pass_with_edited_claims_is_refused() {
    let n = TestNode::start(options(), true);
    let (_, pass) = n.ticket_and_pass().await;
    // The visitor's own valid pass, its expiry pushed a year out, the signature kept.
    let [h, p, s] = parts(&pass);
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&p).expect("base64url")).expect("JSON");
    let year = 365 * 24 * 3_600_000u64;
    let expires = claims["expires_at"].as_u64().expect("expires_at") + year;
    claims["expires_at"] = json!(expires);
    claims["exp"] = json!(expires / 1000);
    let edited = format!("{h}.{}.{s}", b64(claims.to_string().as_bytes()));
    n.assert_pass_invalid(&edited).await;
    // The untouched pass is still good: the refusal was for the edit.
    assert_eq!(n.verify(&pass).await.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn token_with_alg_none_is_refused() {
    let n = TestNode::start(options(), false);
    let now = now_ms();
    let [_, pass_claims, _] = parts(&n.app.crypto.sign_pass(&a_pass(now)));
    let unsecured = |typ: &str, claims: &str| {
        let header = json!({ "alg": "none", "typ": typ }).to_string();
        // RFC 7519 §6: an unsecured JWT has an empty signature.
        format!("{}.{claims}.", b64(header.as_bytes()))
    };
    n.assert_pass_invalid(&unsecured("wr-pass+jwt", &pass_claims))
        .await;
    let ticket = n.app.crypto.sign_ticket(&Ticket {
        id: TicketId(5),
        join_time: now,
        node: NodeId(1),
        issued_at: now,
        next_refresh: now + 1_000,
        expires_at: now + 10_000,
        previous_position: None,
        eviction_time: Some(now),
        draw: None,
        round: None,
    });
    let [_, ticket_claims, _] = parts(&ticket);
    for path in ["/api/checkin", "/api/leave"] {
        n.post(
            path,
            json!({ "ticket": unsecured("wr-ticket+jwt", &ticket_claims) }),
        )
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "invalid_token");
    }
}

/// Clock skew (waitingroom-http/README.md#clocks): a ticket issued by a node whose clock is ahead
/// by more than the leeway is "not valid yet" here. The visitor must keep it and ask again: 503
/// with Retry-After for the API, and the page does not start a new visit.
#[tokio::test]
async fn a_ticket_from_a_clock_ahead_is_kept_not_replaced() {
    let n = TestNode::start(options(), false);
    let ahead = now_ms() + 60_000;
    let ticket = n.app.crypto.sign_ticket(&Ticket {
        id: TicketId(7),
        join_time: ahead,
        node: NodeId(1),
        issued_at: ahead,
        next_refresh: ahead + 1_000,
        expires_at: ahead + 30_000,
        previous_position: None,
        eviction_time: None,
        draw: None,
        round: None,
    });
    let r = n.post("/api/checkin", json!({ "ticket": ticket })).await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "token_not_yet_valid");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    let page = Request::get("/")
        .header(header::ACCEPT, "text/html")
        .header(header::COOKIE, format!("wr_ticket={ticket}"))
        .body(Body::empty())
        .expect("request");
    let r = n.send(page).await;
    let html = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{html}");
    assert!(!html.contains(r#"var status = "new""#), "{html}");
    // A pass from the future stays a plain 401 at the gate: origin gates read anything but
    // 2xx/401 as the room failing.
    let pass = n.app.crypto.sign_pass(&Pass {
        issued_at: ahead,
        ..a_pass(ahead)
    });
    n.assert_pass_invalid(&pass).await;
}

#[tokio::test]
async fn token_with_alg_hs256_is_refused() {
    let n = TestNode::start(options(), false);
    let jwk = &n.app.crypto.jwks()["keys"][0];
    let kid = jwk["kid"].as_str().expect("kid");
    // The classic key-confusion forgery: HMAC keyed with the (public) verification key, as a
    // verifier that let the token pick its algorithm would check it.
    let public = URL_SAFE_NO_PAD
        .decode(jwk["x"].as_str().expect("x"))
        .expect("base64url");
    let [_, claims, _] = parts(&n.app.crypto.sign_pass(&a_pass(now_ms())));
    for key in [public.as_slice(), b"secret".as_slice()] {
        let header = json!({ "alg": "HS256", "kid": kid, "typ": "wr-pass+jwt" }).to_string();
        let input = format!("{}.{claims}", b64(header.as_bytes()));
        let mac = crate::crypto::hmac_sha256(key, input.as_bytes());
        let forged = format!("{input}.{}", b64(&mac));
        n.assert_pass_invalid(&forged).await;
    }
}
