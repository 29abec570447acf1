//! Abuse at the HTTP level, in-process: the real [`router`] of a single-node cluster driven
//! with `tower::ServiceExt::oneshot` (no socket, no child process), except the header-limit
//! test, which needs hyper's parser and so a real listener on 127.0.0.1.
//!
//! One test per abuse case: forged, replayed and confused tokens; body, header and peer-batch
//! limits; the per-client join limit; and that a flood of joins from one client does not push
//! honest visitors back further than the flooder's allowance.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use waitingroom_core::{ClusterKey, NodeId, Pass, Ticket, TicketId};

use crate::api::router;
use crate::app::App;
use crate::clock::now_ms;
use crate::config::{LimitOptions, NetworkOptions, Options, RoomOptions};
use crate::crypto::Crypto;
use crate::peer::{FORWARD_PATH, MESSAGES_PATH, Transport};
use crate::peer_auth::{RequestHead, Route};

mod admin;
mod doors;
mod peer;

/// Fast timers; everything else as an operator gets it unless a test says otherwise.
fn options() -> Options {
    Options {
        network: NetworkOptions {
            key_file: Some("unused: the key is given in-process".into()),
            ..Default::default()
        },
        room: RoomOptions {
            eviction_interval_ms: Some(20),
            cleanup_interval_ms: Some(20),
            refresh_interval_ms: Some(50),
            ticket_expiry_ms: Some(10_000),
            ..Default::default()
        },
        ..Options::default()
    }
}

/// One node and its router.
struct TestNode {
    app: Arc<App>,
    router: Router,
}

/// A response, read whole.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts an error answer: the status, and a JSON `{"error","code"}` body with this code.
    #[track_caller]
    fn assert_error(&self, status: StatusCode, code: &str) {
        let v = self.json();
        assert_eq!(self.status, status, "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
}

impl TestNode {
    /// A started single-node cluster; with `timer`, its timer task runs on the test's runtime
    /// (so visitors get admitted), else nobody is ever let out and positions stay put.
    fn start(options: Options, timer: bool) -> TestNode {
        let cfg = options.resolve().expect("valid test options");
        let app = App::single_node(cfg, Crypto::generate(), Transport::build_client())
            .expect("valid protocol settings");
        if timer {
            tokio::spawn(app.driver.clone().run_timer());
        }
        TestNode {
            router: router(app.clone()),
            app,
        }
    }

    /// Serves the router on a real listener on 127.0.0.1, as the node does (see
    /// [`crate::serve`]); its address and the server task.
    async fn listen(
        &self,
        header_read_timeout: Duration,
    ) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let (listener, addr) = crate::serve::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind 127.0.0.1");
        let router = self.router.clone();
        let server = tokio::spawn(crate::serve::serve(
            listener,
            router,
            header_read_timeout,
            std::future::pending(),
        ));
        (addr, server)
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let (status, headers, body) = crate::api::call(&self.router, req).await;
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(post(path, body)).await
    }

    /// A ticket that has been let in (joins, then checks in until admitted).
    async fn admitted_ticket(&self) -> String {
        let r = self.post("/api/join", json!({})).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        let mut ticket = r.json()["ticket"].as_str().expect("ticket").to_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.post("/api/checkin", json!({ "ticket": ticket })).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.json());
            let v = r.json();
            ticket = v["ticket"].as_str().expect("ticket").to_owned();
            if v["status"] == "admitted" {
                return ticket;
            }
            assert!(Instant::now() < deadline, "never admitted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An admitted ticket, exchanged for a pass.
    async fn ticket_and_pass(&self) -> (String, String) {
        let ticket = self.admitted_ticket().await;
        let r = self.post("/api/leave", json!({ "ticket": ticket })).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        let pass = r.json()["pass"].as_str().expect("pass").to_owned();
        (ticket, pass)
    }

    /// `GET /api/pass/verify` with the token as a bearer token.
    async fn verify(&self, token: &str) -> Reply {
        let bearer = format!("Bearer {token}");
        self.send(bodiless(
            Request::get("/api/pass/verify"),
            header::AUTHORIZATION,
            &bearer,
        ))
        .await
    }

    /// The pass must be refused the same way at the gate and at refresh.
    async fn assert_pass_refused(&self, token: &str, status: StatusCode, code: &str) {
        self.verify(token).await.assert_error(status, code);
        self.post("/api/pass/refresh", json!({ "pass": token }))
            .await
            .assert_error(status, code);
    }

    /// The forged pass must be refused as invalid at the gate and at refresh.
    async fn assert_pass_invalid(&self, token: &str) {
        self.assert_pass_refused(token, StatusCode::UNAUTHORIZED, "invalid_token")
            .await;
    }

    /// A signed peer request.
    fn peer_request(&self, path: &str, body: Vec<u8>) -> Request<Body> {
        signed(&self.app.crypto, path, body)
    }

    /// Peer requests refused for `reason`.
    fn auth_failures(&self, reason: &'static str) -> u64 {
        self.app
            .metrics
            .peer_auth_failures
            .get_or_create(&crate::metrics::ReasonLabels { reason })
            .get()
    }

    fn members(&self) -> usize {
        self.app.driver.status().members.len()
    }
}

fn post(path: &str, body: Value) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// A request without a body, with one header.
fn bodiless(
    req: axum::http::request::Builder,
    name: header::HeaderName,
    value: &str,
) -> Request<Body> {
    req.header(name, value)
        .body(Body::empty())
        .expect("request")
}

/// The request as if it came over TCP from `ip`.
fn from(mut req: Request<Body>, ip: [u8; 4]) -> Request<Body> {
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40_000))));
    req
}

/// How a test signs a peer request: by default as node 2 would, for the test node (id 1,
/// incarnation 1, see [`App::single_node`]), now, with a fresh nonce.
#[derive(Debug, Clone, Copy)]
struct PeerReq<'a> {
    path: &'a str,
    from: u64,
    to: (u64, u64),
    at: u64,
    nonce: u64,
}

impl<'a> PeerReq<'a> {
    fn new(path: &'a str) -> Self {
        PeerReq {
            path,
            from: 2,
            to: (1, 1),
            at: now_ms(),
            nonce: rand::random(),
        }
    }

    /// The headers of this request for `body`, signed with `crypto`'s key.
    fn headers(&self, crypto: &Crypto, body: &[u8]) -> HeaderMap {
        let route = Route {
            path: self.path,
            from: NodeId(self.from),
            to: NodeId(self.to.0),
            to_incarnation: self.to.1,
        };
        let (head, mac) = RequestHead::sign(crypto, route, self.at, self.nonce, body);
        let mut h = HeaderMap::new();
        for (name, value) in head.headers(&mac) {
            h.insert(name, value.parse().expect("header value"));
        }
        h.insert(header::CONTENT_LENGTH, body.len().into());
        h.insert(
            header::CONTENT_TYPE,
            "application/json".parse().expect("header value"),
        );
        h
    }

    /// The request, body and all.
    fn sign(&self, crypto: &Crypto, body: Vec<u8>) -> Request<Body> {
        let headers = self.headers(crypto, &body);
        let mut req = Request::post(self.path)
            .body(Body::from(body))
            .expect("request");
        *req.headers_mut() = headers;
        req
    }
}

/// A peer request to the test node, signed with `crypto`'s key (see [`PeerReq`]).
fn signed(crypto: &Crypto, path: &str, body: Vec<u8>) -> Request<Body> {
    PeerReq::new(path).sign(crypto, body)
}

fn a_pass(now: u64) -> Pass {
    Pass {
        id: TicketId(0x0bad_cafe),
        node: NodeId(1),
        queue_join_time: now - 5_000,
        created_at: now - 1_000,
        issued_at: now - 1_000,
        expires_at: now + 600_000,
        eviction_time: now - 2_000,
        round: None,
        draw: None,
    }
}

/// The parts of a compact JWS.
fn parts(token: &str) -> [String; 3] {
    let mut it = token.split('.').map(str::to_owned);
    let mut next = || it.next().expect("three parts");
    [next(), next(), next()]
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

// ---- token abuse ---------------------------------------------------------------------------

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
/// page's own without script; another key gets nothing. (Before: the page's leave carried no
/// key, the second load found the ticket already exchanged and started a new visit at the back
/// of the queue.)
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
/// it then is refused with 403 `pass_lifetime_over`. (Before: refreshing kept a 3-s pass valid
/// after 14 s, and for ever.) Margins of a second either way: no timing is tight.
#[tokio::test]
async fn a_pass_is_not_refreshed_past_its_longest_lifetime() {
    let n = TestNode::start(
        Options {
            room: RoomOptions {
                pass_expiry_ms: Some(2_000),
                pass_max_lifetime_ms: Some(3_000),
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

/// Sessions renewed by activity (README, "Live settings"): a pass checked at the gate past
/// half its life comes back renewed as a cookie; before half its life, or once its longest life
/// is reached, it does not (and it stays valid until it expires).
#[tokio::test]
async fn a_pass_in_use_is_renewed_at_the_gate_past_half_its_life() {
    let n = TestNode::start(
        Options {
            room: RoomOptions {
                pass_expiry_ms: Some(1_000),
                pass_max_lifetime_ms: Some(2_500),
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

/// README, "Origin gating": the verify endpoint signs the way back only for a gate that holds
/// the return-path secret, only for a path on the site; and the waiting page follows only a
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

/// Issue 17, clock skew: a ticket issued by a node whose clock is ahead by more than the
/// leeway is "not valid yet" here. The visitor must keep it and ask again: 503 with
/// Retry-After for the API, and the page does not start a new visit (before: 401
/// `invalid_token`, and the page re-joined the visitor at the back of the line).
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

// ---- body, header and peer limits ----------------------------------------------------------

#[tokio::test]
async fn visitor_bodies_are_bounded() {
    let limit = 512;
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                visitor_body_limit: Some(limit),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let padded = |len: usize| {
        // `{}` padded with spaces: valid JSON of exactly `len` bytes.
        let mut body = vec![b' '; len];
        body[0] = b'{';
        body[len - 1] = b'}';
        body
    };
    let raw = |path: &str, body: Vec<u8>| {
        Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("request")
    };
    for path in [
        "/api/join",
        "/api/checkin",
        "/api/leave",
        "/api/pass/refresh",
    ] {
        n.send(raw(path, padded(limit + 1)))
            .await
            .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
        // At the limit the body is read (and then refused for what it says, if anything).
        let at = n.send(raw(path, padded(limit))).await;
        assert_ne!(at.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
}

/// A well-signed message the node does not act on is counted by why. (A message addressed to
/// another node never reaches the protocol: its request is refused as misdirected first.)
#[tokio::test]
async fn ignored_peer_messages_are_counted_by_reason() {
    let n = TestNode::start(options(), false);
    let contact = json!({"id": 2, "incarnation": 1, "addr": "http://127.0.0.1:9"});
    let unknown_probe = json!([{
        "from": contact, "to": 1, "to_incarnation": 1,
        "body": {"PingAck": {"nonce": 77, "target": 1, "view": {"version": 1, "digest": 0}}}
    }]);
    let body = unknown_probe.to_string().into_bytes();
    let r = n.send(n.peer_request(MESSAGES_PATH, body)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let reason = crate::metrics::ReasonLabels {
        reason: "unknown_probe",
    };
    assert_eq!(n.app.metrics.peer_ignored.get_or_create(&reason).get(), 1);
}

#[tokio::test]
async fn oversized_peer_batch_is_413_and_changes_nothing() {
    let limit = 2048;
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                peer_body_limit: Some(limit),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    // A correctly signed batch that would add a member, made one byte too long.
    let contact = json!({"id": 4242, "incarnation": 1, "addr": "http://127.0.0.1:9"});
    let batch = json!([{
        "from": contact, "to": 0, "to_incarnation": 0,
        "body": {"JoinRequest": {"contact": contact}}
    }])
    .to_string();
    let mut body = batch.into_bytes();
    body.resize(limit + 1, b' ');
    n.send(n.peer_request(MESSAGES_PATH, body))
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    assert_eq!(n.members(), 1, "the oversized batch changed nothing");
    // The same limit on the forwarded visitor batches.
    let mut items = b"[]".to_vec();
    items.resize(limit + 1, b' ');
    n.send(n.peer_request(FORWARD_PATH, items))
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    // At the limit a batch is read: an empty one, padded, is accepted.
    let mut empty = b"[".to_vec();
    empty.resize(limit - 1, b' ');
    empty.push(b']');
    let r = n.send(n.peer_request(MESSAGES_PATH, empty)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn forged_forwarded_leave_is_401_and_changes_nothing() {
    let n = TestNode::start(options(), true);
    let ticket = n.admitted_ticket().await;
    let claims = n
        .app
        .crypto
        .verify_ticket(&ticket, now_ms())
        .expect("own ticket");
    let batch = serde_json::to_vec(&json!([{ "op": "leave", "claims": claims }])).expect("JSON");
    // Signed with another cluster's key, and not signed at all.
    let other = signed(&Crypto::generate(), FORWARD_PATH, batch.clone());
    n.send(other)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
    let unsigned = Request::post(FORWARD_PATH)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(batch))
        .expect("request");
    n.send(unsigned)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
    assert_eq!(n.auth_failures("bad_signature"), 1);
    assert_eq!(n.auth_failures("missing"), 1);
    // Nothing was spent: the visitor's own leave still gets the one pass.
    let r = n.post("/api/leave", json!({ "ticket": ticket })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
}

/// hyper's parser bounds a request head: at most 100 header lines and about 400 KiB. Beyond
/// either the answer is 431 and the connection is closed; nothing grows without bound.
#[tokio::test]
async fn oversized_headers_get_431_and_the_node_keeps_serving() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                visitor_body_limit: Some(1024),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let (addr, server) = n.listen(Duration::from_secs(10)).await;

    let mut many = String::from("GET /livez HTTP/1.1\r\nhost: x\r\n");
    for i in 0..150 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let r = raw_http(addr, many.as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 431"), "150 header lines: {r}");

    // hyper's read buffer limit (8 KiB + 100 × 4 KiB, `DEFAULT_MAX_BUFFER_SIZE`) of a head
    // that never ends. Exactly that many bytes, so the server has read all of them when it
    // answers and closes (more would leave unread bytes, and a reset could eat the answer).
    let mut big = b"GET /livez HTTP/1.1\r\nhost: x\r\nx-big: ".to_vec();
    big.resize(8192 + 4096 * 100, b'a');
    let r = raw_http(addr, &big).await;
    assert!(r.starts_with("HTTP/1.1 431"), "400 KiB head: {r}");

    // A chunked body (no Content-Length to refuse up front) is cut off at the limit too.
    let mut chunked =
        b"POST /api/checkin HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
        transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            .to_vec();
    for _ in 0..4 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend_from_slice(&[b' '; 0x200]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw_http(addr, &chunked).await;
    assert!(r.starts_with("HTTP/1.1 413"), "chunked body: {r}");
    assert!(r.contains("\"code\":\"body_too_large\""), "{r}");

    let r = raw_http(
        addr,
        b"GET /livez HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "still serving: {r}");
    server.abort();
}

/// Sends `request` on a new connection and reads until the server closes it (bounded).
async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(request).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let out = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .expect("the server answered and closed within 10 s")
        .expect("connection");
    String::from_utf8_lossy(&out).into_owned()
}

// ---- join rate limit -----------------------------------------------------------------------

#[tokio::test]
async fn join_rate_limit_is_per_client_address() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                join_rate_limit: Some(2),
                join_burst: Some(2),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let join = |ip| from(post("/api/join", json!({})), ip);
    let a = [127, 0, 0, 2];
    assert_eq!(n.send(join(a)).await.status, StatusCode::OK);
    assert_eq!(n.send(join(a)).await.status, StatusCode::OK);
    let r = n.send(join(a)).await;
    r.assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    // Another address has its own allowance.
    assert_eq!(n.send(join([127, 0, 0, 3])).await.status, StatusCode::OK);
    // The waiting page's button joins through the same limit (and says so in HTML).
    let page = bodiless(Request::post("/"), header::ACCEPT, "text/html");
    let r = n.send(from(page, a)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(String::from_utf8_lossy(&r.body).contains("Too many visits"));
    assert_eq!(n.app.metrics.rate_limited.get(), 2);
    // The bucket refills at the rate: half a second later there is one join again.
    tokio::time::sleep(Duration::from_millis(550)).await;
    assert_eq!(n.send(join(a)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn join_rate_limit_keys_on_the_balancer_entry_of_the_header() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                join_rate_limit: Some(1),
                join_burst: Some(1),
                client_ip_header: Some("X-Forwarded-For".into()),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    // Every request comes from the balancer's address; the header names the client.
    let balancer = [127, 0, 0, 9];
    let join = |xff: &[&str]| {
        let mut req = from(post("/api/join", json!({})), balancer);
        for v in xff {
            req.headers_mut()
                .append("x-forwarded-for", v.parse().expect("header value"));
        }
        req
    };
    assert_eq!(n.send(join(&["198.51.100.7"])).await.status, StatusCode::OK);
    n.send(join(&["198.51.100.7"]))
        .await
        .assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    // Another client behind the same balancer.
    assert_eq!(n.send(join(&["203.0.113.1"])).await.status, StatusCode::OK);
    // A client's own fake entries come first, the balancer's last (nginx appends to the
    // value, HAProxy adds a line): neither gets the limited client a new allowance.
    for spoofed in [
        &["10.1.2.3, 198.51.100.7"][..],
        &["10.1.2.4", "198.51.100.7"][..],
    ] {
        n.send(join(spoofed))
            .await
            .assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    }
    // Without the header the TCP peer is the client.
    assert_eq!(n.send(join(&[])).await.status, StatusCode::OK);
    n.send(join(&[]))
        .await
        .assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
}

/// One client floods joins while ten honest visitors join from other addresses. With the limit
/// every flood join past the allowance is refused with 429, and each honest visitor's position
/// is exactly the honest visitors and the *accepted* flood joins ahead of them; without it the
/// same flood pushes the last honest visitor back by all 200 joins.
#[tokio::test]
async fn join_flood_does_not_push_honest_visitors_back() {
    const RATE: u32 = 3;
    const HONEST: u64 = 10;
    const FLOOD_PER_HONEST: u64 = 20;
    let flooder = [127, 0, 2, 1];
    let run = |limit: u32| async move {
        // No timer: nobody is let out, so positions are plain ranks in the queue.
        let n = TestNode::start(
            Options {
                room: RoomOptions {
                    admit_straight_through: Some(false),
                    ..options().room
                },
                limits: LimitOptions {
                    join_rate_limit: Some(limit),
                    join_burst: Some(limit),
                    ..Default::default()
                },
                ..options()
            },
            false,
        );
        let started = Instant::now();
        let (mut accepted, mut refused) = (0u64, 0u64);
        let mut honest = Vec::new();
        for k in 0..HONEST {
            for _ in 0..FLOOD_PER_HONEST {
                let r = n.send(from(post("/api/join", json!({})), flooder)).await;
                if r.status == StatusCode::OK {
                    accepted += 1;
                } else {
                    r.assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
                    refused += 1;
                }
            }
            // The queue is ordered by join time in milliseconds, ties by ticket id: a clear
            // millisecond on each side of the honest join makes "who is ahead" exact.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let ip = [127, 0, 1, u8::try_from(k).expect("few visitors")];
            let r = n.send(from(post("/api/join", json!({})), ip)).await;
            assert_eq!(r.status, StatusCode::OK, "honest visitor {k}: {}", r.json());
            let position = r.json()["position"].as_u64().expect("position");
            honest.push((position, accepted));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (honest, accepted, refused, started.elapsed())
    };

    let (honest, accepted, refused, elapsed) = run(RATE).await;
    // Burst of RATE, then RATE per second for as long as the flood lasted.
    let allowance = (f64::from(RATE) * (1.0 + elapsed.as_secs_f64())).floor() as u64;
    assert!(
        accepted <= allowance,
        "{accepted} flood joins accepted, allowance {allowance}"
    );
    assert_eq!(accepted + refused, HONEST * FLOOD_PER_HONEST);
    for (k, &(position, flood_ahead)) in honest.iter().enumerate() {
        let k = k as u64;
        assert_eq!(position, k + 1 + flood_ahead, "honest visitor {k}");
        assert!(position <= k + 1 + allowance, "honest visitor {k}");
    }

    let (unlimited, accepted, refused, _) = run(0).await;
    assert_eq!((accepted, refused), (HONEST * FLOOD_PER_HONEST, 0));
    let last = unlimited.last().expect("honest visitors").0;
    assert_eq!(last, HONEST + HONEST * FLOOD_PER_HONEST);
}
