//! Limits a client cannot push a node past: visitor body sizes, request heads (431 from hyper's
//! own parser, on a real listener), and the per-client join limit, also against a flood.

use super::harness::*;

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
