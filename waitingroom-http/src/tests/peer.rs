//! Attacks on the peer routes: bodies sent to make a node buffer them, requests replayed,
//! redirected, stale or with another body, too many at once, and forged answers to forwarded
//! requests.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http_body::Frame;
use waitingroom_distributed::Contact;

use super::harness::*;
use crate::peer::auth::{HEADER_NONCE, ReplyHead};
use crate::peer::{ForwardItem, ForwardOp};

/// A request body that records whether anyone read from it; with `len` bytes of spaces to give,
/// or none ever (it stays pending: a client that never sends its body).
struct Watched {
    read: Arc<AtomicBool>,
    left: Option<usize>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.read.store(true, Ordering::SeqCst);
        match self.left {
            None => Poll::Pending,
            Some(0) => Poll::Ready(None),
            Some(n) => {
                let chunk = n.min(64 * 1024);
                self.left = Some(n - chunk);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b' '; chunk])))))
            }
        }
    }
}

/// A request to `path` with `headers` and a watched body of `len` bytes (`None`: never sent).
pub(super) fn watched(
    path: &str,
    headers: HeaderMap,
    len: Option<usize>,
) -> (Request<Body>, Arc<AtomicBool>) {
    let read = Arc::new(AtomicBool::new(false));
    let body = Watched {
        read: read.clone(),
        left: len,
    };
    let mut req = Request::post(path).body(Body::new(body)).expect("request");
    *req.headers_mut() = headers;
    (req, read)
}

const EIGHT_MIB: usize = 8 * 1024 * 1024;

/// An unsigned (or wrongly signed, or too large) peer request is refused from its headers: not
/// one byte of its body is read, so 8 MiB bodies cost the node nothing.
#[tokio::test]
async fn unauthenticated_peer_bodies_are_never_read() {
    let n = TestNode::start(options(), false);
    let declared = |len: usize| {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, len.into());
        h
    };
    let other = Crypto::generate();
    for path in [MESSAGES_PATH, FORWARD_PATH] {
        let cases = [
            ("unsigned", declared(EIGHT_MIB), StatusCode::UNAUTHORIZED),
            (
                "another cluster's key",
                PeerReq::new(path).headers(&other, &vec![b' '; EIGHT_MIB]),
                StatusCode::UNAUTHORIZED,
            ),
            (
                "signed, over the body limit",
                PeerReq::new(path).headers(&n.app.crypto, &vec![b' '; EIGHT_MIB]),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
        ];
        for (what, headers, status) in cases {
            let (req, read) = watched(path, headers, Some(EIGHT_MIB));
            let r = n.send(req).await;
            assert_eq!(r.status, status, "{path} {what}: {}", r.json());
            assert!(
                !read.load(Ordering::SeqCst),
                "{path} {what}: the body was read"
            );
        }
    }
    assert_eq!(n.auth_failures("missing"), 2);
    assert_eq!(n.auth_failures("bad_signature"), 2);
    assert_eq!(n.auth_failures("too_large"), 2);
}

/// A body other than the one signed (same length, other bytes) is refused after it is read.
#[tokio::test]
async fn a_body_other_than_the_signed_one_is_refused() {
    let n = TestNode::start(options(), false);
    let headers = PeerReq::new(MESSAGES_PATH).headers(&n.app.crypto, b"[]");
    let mut req = Request::post(MESSAGES_PATH)
        .body(Body::from("{}"))
        .expect("request");
    *req.headers_mut() = headers;
    n.send(req)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
    assert_eq!(n.auth_failures("body_mismatch"), 1);
}

/// The same signed request twice: the second copy is refused, whatever it carries.
#[tokio::test]
async fn a_replayed_peer_request_is_refused() {
    let n = TestNode::start(options(), false);
    let req = PeerReq::new(MESSAGES_PATH);
    let first = n.send(req.sign(&n.app.crypto, b"[]".to_vec())).await;
    assert_eq!(first.status, StatusCode::NO_CONTENT);
    n.send(req.sign(&n.app.crypto, b"[]".to_vec()))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
    assert_eq!(n.auth_failures("replayed"), 1);
}

/// A request signed for another node, or another life of this one, is refused (421); so is
/// destination 0 ("whoever is at this URL") except for a join request or a ping, and an
/// envelope addressed otherwise than its request: a request captured on its way to one node
/// cannot be played to another.
#[tokio::test]
async fn a_peer_request_meant_for_another_node_is_refused() {
    let n = TestNode::start(options(), false);
    let empty = b"[]".to_vec();
    for (path, to) in [
        (MESSAGES_PATH, (2, 1)),
        (MESSAGES_PATH, (1, 2)),
        (FORWARD_PATH, (2, 1)),
        (FORWARD_PATH, (0, 0)),
    ] {
        let req = PeerReq {
            to,
            ..PeerReq::new(path)
        };
        n.send(req.sign(&n.app.crypto, empty.clone()))
            .await
            .assert_error(StatusCode::MISDIRECTED_REQUEST, "misdirected_peer");
    }
    // To destination 0 only a join request or a ping may go; every envelope as its request.
    let from = json!({"id": 2, "incarnation": 1, "addr": "http://127.0.0.1:9"});
    let envelope = |to: u64, body: Value| json!({"from": from, "to": to, "to_incarnation": if to == 0 { 0 } else { 1 }, "body": body});
    let update = json!({"ChannelAck": {"epoch": 1, "ack": 0, "resync": false}});
    let ping = json!({"Ping": {"nonce": 1, "view": {"version": 1, "digest": 0}}});
    let cases = [
        ((0, 0), json!([envelope(0, update.clone())]), false),
        ((1, 1), json!([envelope(0, ping.clone())]), false),
        ((1, 1), json!([envelope(1, update.clone())]), true),
        ((0, 0), json!([envelope(0, ping)]), true),
    ];
    let address = n.app.driver.read(|n| n.contact().addr.to_string());
    for (to, batch, accepted) in cases {
        let req = PeerReq {
            to,
            to_address: &address,
            ..PeerReq::new(MESSAGES_PATH)
        };
        let r = n
            .send(req.sign(&n.app.crypto, batch.to_string().into_bytes()))
            .await;
        if accepted {
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{batch}: {}", r.json());
        } else {
            r.assert_error(StatusCode::MISDIRECTED_REQUEST, "misdirected_peer");
        }
    }
    assert_eq!(n.auth_failures("misdirected"), 6);
}

/// A request to destination 0 (a join request or a ping to a node known by its URL alone) is
/// bound to the URL it was sent to: a copy captured on its way to another node and sent here —
/// a fresh nonce to this node — is refused with 401, counted and logged; so is one signed for no
/// URL. The same request signed for this node's URL is taken.
#[tokio::test]
async fn a_destination_0_request_sent_to_another_node_is_refused() {
    let n = TestNode::start(options(), false);
    let from = json!({"id": 2, "incarnation": 1, "addr": "http://127.0.0.1:9"});
    let ping = json!([{"from": from, "to": 0, "to_incarnation": 0,
        "body": {"Ping": {"nonce": 1, "view": {"version": 1, "digest": 0}}}}]);
    let mine = n.app.driver.read(|n| n.contact().addr.to_string());
    for address in ["http://127.0.0.1:1", "http://10.9.9.9:9090/", ""] {
        let req = PeerReq {
            to: (0, 0),
            to_address: address,
            ..PeerReq::new(MESSAGES_PATH)
        };
        n.send(req.sign(&n.app.crypto, ping.to_string().into_bytes()))
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
    }
    assert_eq!(n.auth_failures("wrong_address"), 3);
    let mine = format!("{mine}/");
    let req = PeerReq {
        to: (0, 0),
        to_address: &mine,
        ..PeerReq::new(MESSAGES_PATH)
    };
    let r = n
        .send(req.sign(&n.app.crypto, ping.to_string().into_bytes()))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.json());
}

/// Only requests made within the clock window (default 5 s) are accepted.
#[tokio::test]
async fn a_stale_peer_request_is_refused() {
    let n = TestNode::start(options(), false);
    let window = n.app.cfg.limits.peer_clock_window_ms;
    assert_eq!(window, 5_000, "the documented default");
    let now = now_ms();
    for (at, accepted) in [
        (now - 6_000, false),
        (now + 6_000, false),
        (now - 20_000, false),
        (now - 2_000, true),
    ] {
        let req = PeerReq {
            at,
            ..PeerReq::new(MESSAGES_PATH)
        };
        let r = n.send(req.sign(&n.app.crypto, b"[]".to_vec())).await;
        if accepted {
            assert_eq!(r.status, StatusCode::NO_CONTENT);
        } else {
            r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized_peer");
        }
    }
    assert_eq!(n.auth_failures("stale"), 3);
}

/// At most `max_peer_requests` peer requests are in progress: past it, 503 `peer_busy` with
/// `Retry-After` at once, and a slot frees up when a request ends. Here a peer that sends its
/// head and never its body holds the one slot.
#[tokio::test]
async fn peer_requests_beyond_the_cap_get_503() {
    let n = Arc::new(TestNode::start(
        Options {
            limits: LimitOptions {
                max_peer_requests: Some(1),
                ..Default::default()
            },
            ..options()
        },
        false,
    ));
    let headers = PeerReq::new(MESSAGES_PATH).headers(&n.app.crypto, b"[]");
    let (req, _) = watched(MESSAGES_PATH, headers, None);
    let stuck = tokio::spawn({
        let n = n.clone();
        async move { n.send(req).await }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while n.app.peer_slots.available_permits() > 0 {
        assert!(
            Instant::now() < deadline,
            "the stuck request never took a slot"
        );
        tokio::task::yield_now().await;
    }
    let r = n
        .send(signed(&n.app.crypto, MESSAGES_PATH, b"[]".to_vec()))
        .await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "peer_busy");
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    stuck.abort();
    let _ = stuck.await;
    let r = n
        .send(signed(&n.app.crypto, MESSAGES_PATH, b"[]".to_vec()))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "the slot is free again");
}

/// The replay cache does not grow past its capacity: full of nonces still within their time,
/// it refuses new requests with 503 (and remembers the ones it holds).
#[tokio::test]
async fn a_full_replay_cache_sheds_with_503() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                peer_replay_capacity: Some(2),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    for _ in 0..2 {
        let r = n
            .send(signed(&n.app.crypto, MESSAGES_PATH, b"[]".to_vec()))
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
    let r = n
        .send(signed(&n.app.crypto, MESSAGES_PATH, b"[]".to_vec()))
        .await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "peer_busy");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    assert_eq!(n.app.replay.len(), 2);
}

/// The forwarding node believes only an answer the owner made for this very request: an
/// unsigned one, one signed for another request (a captured answer played back) or by another
/// node are refused; the right one is taken.
#[tokio::test]
async fn forged_answers_to_a_forward_are_not_believed() {
    let n = TestNode::start(options(), false);
    let owner_id = NodeId(9);
    let pass = json!([{ "status": 200, "body": { "pass": "forged", "expires_at_ms": 1 } }]);
    let body = pass.to_string();
    for (what, believed) in [
        ("unsigned", false),
        ("another request's nonce", false),
        ("another node's MAC", false),
        ("the owner's MAC for this request", true),
    ] {
        let crypto = n.app.crypto.clone();
        let body = body.clone();
        let owner = Router::new().route(
            FORWARD_PATH,
            axum::routing::post(move |headers: HeaderMap| async move {
                let nonce = headers[HEADER_NONCE].to_str().expect("nonce");
                let nonce = u64::from_str_radix(nonce, 16).expect("hex nonce");
                let signed = match what {
                    "unsigned" => None,
                    "another request's nonce" => Some((nonce ^ 1, owner_id)),
                    "another node's MAC" => Some((nonce, NodeId(8))),
                    _ => Some((nonce, owner_id)),
                };
                let mut resp = axum::response::Response::new(Body::from(body.clone()));
                if let Some((nonce, from)) = signed {
                    for (name, value) in ReplyHead::sign(&crypto, nonce, 200, from, body.as_bytes())
                    {
                        resp.headers_mut()
                            .insert(name, value.parse().expect("header"));
                    }
                }
                resp
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(axum::serve(listener, owner).into_future());
        let contact = Contact {
            id: owner_id,
            incarnation: 1,
            addr: format!("http://{addr}").into(),
        };
        let joined = n.post("/api/join", json!({})).await.json();
        let token = joined["ticket"].as_str().expect("ticket");
        let claims = n
            .app
            .crypto
            .verify_ticket(token, now_ms())
            .expect("own ticket");
        let item = ForwardItem {
            op: ForwardOp::Leave,
            claims: Some(claims),
            pass: None,
            idempotency_key: None,
        };
        let r = n.app.transport.forward_batched(&contact, item).await;
        assert_eq!(r.is_ok(), believed, "{what}: {r:?}");
        server.abort();
    }
}

/// A forwarded leave for a ticket another node holds — a live member, or a node this one never
/// heard of — is refused (`wrong_node`), even when the request itself is genuine: only the node
/// a ticket names serves it, until SWIM removes that node. Here the ticket is admitted (it
/// carries an eviction time), so serving it would hand out a pass.
#[tokio::test]
async fn a_forwarded_ticket_of_another_node_is_refused() {
    let n = TestNode::start(options(), false);
    let now = now_ms();
    let ticket = |node: u64| Ticket {
        id: TicketId(0x5eed + node),
        join_time: now - 5_000,
        node: NodeId(node),
        issued_at: now - 1_000,
        next_refresh: now + 1_000,
        expires_at: now + 10_000,
        previous_position: None,
        eviction_time: Some(now - 500),
        draw: None,
        round: None,
    };
    let batch = |node: u64| {
        json!([{ "op": "leave", "claims": ticket(node) }])
            .to_string()
            .into_bytes()
    };
    let r = n.send(signed(&n.app.crypto, FORWARD_PATH, batch(7))).await;
    assert_eq!(r.status, StatusCode::OK);
    let answers = r.json();
    assert_eq!(answers[0]["status"], 409, "{answers}");
    assert_eq!(answers[0]["body"]["code"], "wrong_node", "{answers}");
    // Its own ticket it serves.
    let r = n.send(signed(&n.app.crypto, FORWARD_PATH, batch(1))).await;
    assert_eq!(r.json()[0]["status"], 200, "{}", r.json());
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
