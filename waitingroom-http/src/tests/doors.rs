//! The doors around the tokens: which routes each listener serves, slow request heads.

use super::harness::*;
use crate::api::{internal_router, public_router};
use crate::config::{LimitOptions, VisitorOptions};
use crate::crypto::return_path;

/// On the public listener the internal routes do not exist: 404 JSON `not_found`, also for a
/// browser (never the waiting page), also for a correctly signed peer request. The internal
/// listener serves them, and nothing of the visitor API. Health is on both.
#[tokio::test]
async fn internal_routes_are_not_on_the_public_listener() {
    let n = TestNode::start(options(), false);
    let public = TestNode {
        router: public_router(n.app.clone()),
        app: n.app.clone(),
    };
    let internal = TestNode {
        router: internal_router(n.app.clone()),
        app: n.app.clone(),
    };
    let get = |path: &str, accept: &str| bodiless(Request::get(path), header::ACCEPT, accept);
    for path in [
        "/metrics",
        "/api/cluster",
        "/peer/messages",
        "/admin/settings",
    ] {
        for accept in ["*/*", "text/html"] {
            public
                .send(get(path, accept))
                .await
                .assert_error(StatusCode::NOT_FOUND, "not_found");
        }
    }
    for path in [MESSAGES_PATH, FORWARD_PATH] {
        public
            .send(signed(&n.app.crypto, path, b"[]".to_vec()))
            .await
            .assert_error(StatusCode::NOT_FOUND, "not_found");
    }
    let r = internal
        .send(signed(&n.app.crypto, MESSAGES_PATH, b"[]".to_vec()))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    for path in ["/metrics", "/api/cluster", "/livez", "/readyz"] {
        let r = internal.send(get(path, "*/*")).await;
        assert_eq!(r.status, StatusCode::OK, "internal {path}");
    }
    for path in ["/livez", "/readyz", "/.well-known/jwks.json"] {
        let r = public.send(get(path, "*/*")).await;
        assert_eq!(r.status, StatusCode::OK, "public {path}");
    }
    internal
        .send(post("/api/join", json!({})))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    internal
        .send(get("/", "text/html"))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(
        public.post("/api/join", json!({})).await.status,
        StatusCode::OK
    );
}

/// A client that sends half a request head and then nothing is disconnected after the header
/// read timeout; so is an idle kept-alive connection.
#[tokio::test]
async fn a_half_sent_request_head_is_cut_off() {
    let n = TestNode::start(options(), false);
    let (addr, server) = n.listen(Duration::from_millis(300)).await;
    let started = Instant::now();
    let r = raw_http(addr, b"GET /livez HTTP/1.1\r\nhost: x\r\nx-slow: ").await;
    let held = started.elapsed();
    assert!(r.is_empty() || r.starts_with("HTTP/1.1 408"), "{r}");
    assert!(
        held >= Duration::from_millis(250) && held < Duration::from_secs(3),
        "held {held:?}"
    );
    // A whole request is answered; the connection, then idle, is closed after the timeout.
    let started = Instant::now();
    let r = raw_http(addr, b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(3));
    server.abort();
}

/// The request as if from `ip` (IPv4 or IPv6) over TCP.
fn from_ip(mut req: Request<Body>, ip: std::net::IpAddr) -> Request<Body> {
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40_000)));
    req
}

/// A JSON POST to `path` whose client sends the head and never the body.
fn body_never_sent(path: &str) -> Request<Body> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("value"),
    );
    super::peer::watched(path, headers, None).0
}

fn join_status(r: &Reply) -> StatusCode {
    r.status
}

/// The join limit is on without configuration: a client gets its burst (40), then the rate
/// (20 a second).
#[tokio::test]
async fn the_join_limit_is_on_by_default() {
    let n = TestNode::start(options(), false);
    assert_eq!(
        (
            n.app.cfg.limits.join_rate_limit,
            n.app.cfg.limits.join_burst
        ),
        (20, 40),
        "the documented defaults"
    );
    let ip = [198, 51, 100, 20];
    let mut ok = 0;
    for _ in 0..60 {
        let r = n.send(from(post("/api/join", json!({})), ip)).await;
        match r.status {
            StatusCode::OK => ok += 1,
            _ => r.assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        }
    }
    // The burst, plus what refilled while the joins were made (well under a second).
    assert!((40..45).contains(&ok), "{ok} of 60 joins accepted");
}

/// Only a trusted proxy's word counts: a client that talks to the node directly and rotates
/// `X-Forwarded-For` is keyed on its own address; behind the trusted balancer (loopback by
/// default) the balancer's entry is the client.
#[tokio::test]
async fn rotating_forwarded_for_does_not_buy_joins() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                join_rate_limit: Some(1),
                join_burst: Some(3),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let join = |peer: [u8; 4], xff: String| {
        let mut req = from(post("/api/join", json!({})), peer);
        req.headers_mut()
            .insert("x-forwarded-for", xff.parse().expect("header value"));
        req
    };
    let direct = [203, 0, 113, 9];
    let mut accepted = 0;
    for i in 0..50u8 {
        let r = n.send(join(direct, format!("10.0.{i}.1"))).await;
        accepted += u32::from(r.status == StatusCode::OK);
    }
    assert_eq!(
        accepted, 3,
        "the direct client's own burst, whatever it claims"
    );
    let balancer = [127, 0, 0, 1];
    for i in 0..5u8 {
        let r = n.send(join(balancer, format!("198.51.100.{i}"))).await;
        assert_eq!(
            join_status(&r),
            StatusCode::OK,
            "client {i} behind the balancer"
        );
    }
}

/// An IPv6 client is keyed by its /64: the addresses of one host's /64 share one allowance.
#[tokio::test]
async fn ipv6_clients_share_their_64() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                join_rate_limit: Some(1),
                join_burst: Some(2),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let ip = |last: u16| {
        std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 5, 6, 0, 0, 0, last))
    };
    let join = |last| from_ip(post("/api/join", json!({})), ip(last));
    assert_eq!(n.send(join(1)).await.status, StatusCode::OK);
    assert_eq!(n.send(join(2)).await.status, StatusCode::OK);
    n.send(join(3))
        .await
        .assert_error(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    let other = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 5, 7, 0, 0, 0, 1));
    assert_eq!(
        n.send(from_ip(post("/api/join", json!({})), other))
            .await
            .status,
        StatusCode::OK,
        "another /64"
    );
}

/// A GET never takes a place: the page without a ticket is shown (it takes the place with its
/// own POST), and neither it nor an image request, a prefetch or a HEAD makes a visitor; the
/// page's button (`POST /`) does, and sends the browser back to the page. So another site's
/// `<img>`, a prefetcher or a crawler cannot fill the site.
#[tokio::test]
async fn a_get_never_takes_a_place() {
    let n = TestNode::start(options(), false);
    let visitors = |n: &TestNode| {
        n.app
            .driver
            .read(|node| node.room().queued() + node.room().on_site())
    };
    for (path, accept) in [
        ("/", "text/html"),
        ("/shop/item/42", "text/html,application/xhtml+xml"),
        ("/", "image/avif,image/webp,*/*"),
        ("/favicon.ico", "*/*"),
    ] {
        let r = n
            .send(bodiless(Request::get(path), header::ACCEPT, accept))
            .await;
        assert!(
            !r.headers.contains_key(header::SET_COOKIE),
            "{path}: a cookie"
        );
        if path == "/favicon.ico" {
            r.assert_error(StatusCode::NOT_FOUND, "not_found");
        } else {
            assert_eq!(r.status, StatusCode::OK);
            let html = String::from_utf8_lossy(&r.body);
            assert!(html.contains("data-status=\"new\""), "{path}: {html}");
            assert!(html.contains("<form class=\"join\" method=\"post\" action=\"/\">"));
        }
    }
    let head = bodiless(Request::head("/"), header::ACCEPT, "text/html");
    assert_eq!(n.send(head).await.status, StatusCode::OK);
    assert_eq!(visitors(&n), 0, "no GET made a visitor");
    let form = Request::post("/")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("request");
    let r = n.send(form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.headers[header::LOCATION], "/");
    let cookie = r.headers[header::SET_COOKIE].to_str().expect("ASCII");
    assert!(cookie.starts_with("wr_ticket="), "{cookie}");
    assert_eq!(visitors(&n), 1, "the button took a place");
    // Back on the page with the cookie: the position.
    let ticket = cookie.split(';').next().expect("cookie").to_owned();
    let mut page = bodiless(Request::get("/"), header::ACCEPT, "text/html");
    page.headers_mut()
        .insert(header::COOKIE, ticket.parse().expect("header value"));
    let r = n.send(page).await;
    let html = String::from_utf8_lossy(&r.body);
    assert!(html.contains("data-status=\"queued\""), "{html}");
    assert_eq!(visitors(&n), 1);
}

/// Joins that a page of another site makes a browser send are refused (403 `cross_site`):
/// marked `Sec-Fetch-Site: cross-site`, or with an `Origin` that is not the room's (its Host,
/// or `public_url` when set; `null` neither). Requests from no page at all (no such headers)
/// go on.
#[tokio::test]
async fn joins_from_another_site_are_refused() {
    let join = |headers: &[(&str, &str)]| {
        let mut req = post("/api/join", json!({}));
        for (name, value) in headers {
            req.headers_mut().insert(
                header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        req
    };
    let n = TestNode::start(options(), false);
    let host = ("host", "room.example:8080");
    for headers in [
        vec![("sec-fetch-site", "cross-site")],
        vec![host, ("origin", "https://evil.example")],
        vec![host, ("origin", "null")],
        vec![host, ("origin", "http://room.example:8081")],
    ] {
        n.send(join(&headers))
            .await
            .assert_error(StatusCode::FORBIDDEN, "cross_site");
    }
    for headers in [
        vec![],
        vec![
            host,
            ("origin", "http://room.example:8080"),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![("sec-fetch-site", "none")],
    ] {
        assert_eq!(
            n.send(join(&headers)).await.status,
            StatusCode::OK,
            "{headers:?}"
        );
    }
    // The no-JavaScript button too (in HTML).
    let mut form = bodiless(Request::post("/"), header::ACCEPT, "text/html");
    form.headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().expect("value"));
    let r = n.send(form).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // With a public URL, that is the only origin: whatever the Host says.
    let n = TestNode::start(
        Options {
            visitors: VisitorOptions {
                public_url: Some("https://Queue.Shop.example/".into()),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let ok = [
        ("host", "evil.example"),
        ("origin", "https://queue.shop.example"),
    ];
    assert_eq!(n.send(join(&ok)).await.status, StatusCode::OK);
    let bad = [("host", "evil.example"), ("origin", "https://evil.example")];
    n.send(join(&bad))
        .await
        .assert_error(StatusCode::FORBIDDEN, "cross_site");
}

/// Past `max_pending_requests` requests in progress, a request gets 503 `overloaded` with
/// `Retry-After` at once (a browser the HTML page saying so) instead of queueing; `/livez` and
/// `/readyz` still answer. Here a client that never sends its body holds the one slot.
#[tokio::test]
async fn overload_is_shed_at_once() {
    let n = Arc::new(TestNode::start(
        Options {
            limits: LimitOptions {
                max_pending_requests: Some(1),
                ..Default::default()
            },
            ..options()
        },
        false,
    ));
    let req = body_never_sent("/api/join");
    let stuck = tokio::spawn({
        let n = n.clone();
        async move { n.send(req).await }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while n.app.pending.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the stuck request was never counted"
        );
        tokio::task::yield_now().await;
    }
    let started = Instant::now();
    let r = n.post("/api/join", json!({})).await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    assert!(started.elapsed() < Duration::from_millis(500), "at once");
    let page = n
        .send(bodiless(Request::get("/"), header::ACCEPT, "text/html"))
        .await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8_lossy(&page.body).contains("busy"));
    for path in ["/livez", "/readyz"] {
        let r = n
            .send(bodiless(Request::get(path), header::ACCEPT, "*/*"))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
    stuck.abort();
    let _ = stuck.await;
    assert_eq!(n.post("/api/join", json!({})).await.status, StatusCode::OK);
}

/// A handler that panics is answered 500 `internal_error` as JSON (and the node keeps serving)
/// instead of the connection being dropped.
#[tokio::test]
async fn a_panic_becomes_a_json_500() {
    let n = TestNode::start(options(), false);
    let boom = Router::new()
        .route(
            "/boom",
            axum::routing::get(|| async {
                panic!("a bug");
                #[allow(unreachable_code)]
                ""
            }),
        )
        .merge(router(n.app.clone()));
    let guarded = TestNode {
        router: crate::api::guarded(boom, &n.app),
        app: n.app.clone(),
    };
    guarded
        .send(bodiless(Request::get("/boom"), header::ACCEPT, "*/*"))
        .await
        .assert_error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
    let r = guarded
        .send(bodiless(Request::get("/livez"), header::ACCEPT, "*/*"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

/// A request that takes longer than `request_timeout_ms` — here a client that sends its head and
/// never its body — is answered 408 `request_timeout` as JSON.
#[tokio::test]
async fn a_slow_request_times_out_with_json() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                request_timeout_ms: Some(2_500),
                forward_timeout_ms: Some(1_000),
                ..Default::default()
            },
            ..options()
        },
        false,
    );
    let req = body_never_sent("/api/checkin");
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(10), n.send(req))
        .await
        .expect("an answer within 10 s");
    r.assert_error(StatusCode::REQUEST_TIMEOUT, "request_timeout");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2_400) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

/// The waiting page cannot be framed (clickjacking) and runs only its own script and style:
/// `X-Frame-Options: DENY` and a Content-Security-Policy with `frame-ancestors 'none'` whose
/// script and style sources are a fresh nonce per answer, the one the page's tags carry.
/// Other answers (a redirect, an error) are not to be framed either.
#[tokio::test]
async fn the_page_cannot_be_framed_and_runs_only_its_own_code() {
    let n = TestNode::start(options(), false);
    let page = || bodiless(Request::get("/"), header::ACCEPT, "text/html");
    let (a, b) = (n.send(page()).await, n.send(page()).await);
    for r in [&a, &b] {
        assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY");
        let csp = r.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("ASCII");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        let nonce = csp
            .split("script-src 'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .expect("a script nonce");
        let html = String::from_utf8_lossy(&r.body);
        assert!(
            html.contains(&format!("<script nonce=\"{nonce}\">")),
            "{html}"
        );
        assert!(html.contains(&format!("<style nonce=\"{nonce}\">")));
        assert!(!csp.contains("unsafe-inline"), "{csp}");
    }
    assert_ne!(
        a.headers[header::CONTENT_SECURITY_POLICY],
        b.headers[header::CONTENT_SECURITY_POLICY],
        "a fresh nonce per answer"
    );
    let form = n
        .send(bodiless(Request::post("/"), header::ACCEPT, "text/html"))
        .await;
    assert_eq!(form.status, StatusCode::SEE_OTHER);
    assert_eq!(form.headers[header::X_FRAME_OPTIONS], "DENY");
}

/// Cookies are `Secure` whenever the room's public URL is https, with no other setting.
#[tokio::test]
async fn cookies_are_secure_when_the_public_url_is_https() {
    for (public_url, secure) in [
        (None, false),
        (Some("http://queue.example"), false),
        (Some("https://queue.example"), true),
    ] {
        let n = TestNode::start(
            Options {
                visitors: VisitorOptions {
                    public_url: public_url.map(str::to_owned),
                    ..Default::default()
                },
                ..options()
            },
            false,
        );
        let r = n.post("/api/join", json!({})).await;
        let cookie = r.headers[header::SET_COOKIE].to_str().expect("ASCII");
        assert_eq!(
            cookie.contains("; Secure"),
            secure,
            "{public_url:?}: {cookie}"
        );
    }
}

/// A room in front of `https://shop.example/start`, its timer running.
fn shop_room() -> TestNode {
    TestNode::start(
        Options {
            visitors: VisitorOptions {
                origin_url: Some("https://shop.example/start".into()),
                ..Default::default()
            },
            ..options()
        },
        true,
    )
}

/// The waiting page asked for by a browser with `query` and the pass cookie `pass`.
fn page_with_pass(query: &str, pass: &str) -> Request<Body> {
    let mut req = bodiless(
        Request::get(format!("/?{query}")),
        header::ACCEPT,
        "text/html",
    );
    let cookie = format!("wr_pass={pass}");
    req.headers_mut()
        .insert(header::COOKIE, cookie.parse().expect("header value"));
    req
}

/// The visitor lands back on the page they asked for (the origin's gate sends them with
/// `return_to`): a path on the origin only; another host (`//host`, `/\host`, a URL) is ignored
/// and the visitor goes to `origin_url`. The no-JavaScript button keeps it.
#[tokio::test]
async fn an_admitted_visitor_returns_to_the_page_they_asked_for_on_the_origin_only() {
    let n = shop_room();
    let (_, pass) = n.ticket_and_pass().await;
    let page_at = |query: &str| page_with_pass(query, &pass);
    // Every way back signed as the origin's gate would: only a path on the origin is followed.
    let signed = |path: &str| n.app.crypto.return_query(path);
    for (path, to) in [
        ("/shop/cart?item=3", "https://shop.example/shop/cart?item=3"),
        ("//evil.example/x", "https://shop.example/start"),
        ("/\\evil.example", "https://shop.example/start"),
        ("https://evil.example/", "https://shop.example/start"),
        ("/a b", "https://shop.example/start"),
    ] {
        let r = n.send(page_at(&signed(path))).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(r.headers[header::LOCATION], to, "{path}");
    }
    for unsigned in ["return_to=%2Fshop%2Fcart", "other=1"] {
        let r = n.send(page_at(unsigned)).await;
        assert_eq!(r.headers[header::LOCATION], "https://shop.example/start");
    }
    // The page's button and its no-JavaScript form keep the signed way back.
    let back = signed("/shop/cart");
    let form = Request::post(format!("/?{back}"))
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("request");
    let r = n.send(form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    // Signed again, for the ticket the button took: the way back is now that visitor's alone.
    let location = r.headers[header::LOCATION]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        location.starts_with("/?return_to=%2Fshop%2Fcart&return_sig="),
        "{location}"
    );
    let ticket = r.headers[header::SET_COOKIE].to_str().expect("ascii");
    let ticket = ticket
        .split(';')
        .next()
        .and_then(|c| c.strip_prefix("wr_ticket="))
        .expect("the ticket cookie")
        .to_owned();
    let id = n
        .app
        .crypto
        .verify_ticket(&ticket, now_ms())
        .expect("ticket")
        .id;
    let query = location.trim_start_matches("/?");
    let keys = n.app.crypto.return_keys();
    let now = now_ms();
    assert_eq!(
        return_path::checked(query, keys, now, Some(id)),
        Ok(Some("/shop/cart".to_owned()))
    );
    assert_eq!(
        return_path::checked(query, keys, now, Some(TicketId(id.0 ^ 1))),
        Err(return_path::Refused::Unsigned)
    );
    let fresh = bodiless(
        Request::get(format!("/?{back}")),
        header::ACCEPT,
        "text/html",
    );
    let html = String::from_utf8_lossy(&n.send(fresh).await.body).into_owned();
    assert!(
        html.contains("action=\"/?return_to=%2Fshop%2Fcart&amp;return_sig="),
        "{html}"
    );
}

/// docs/operating.md#origin-gating: a way back expires a day after it was signed, and one the
/// room signed for a visitor's ticket takes only that visitor back (their ticket or the pass made
/// from it); anyone else, and anyone after the day, goes to the front page, and the node counts
/// it.
#[tokio::test]
async fn a_way_back_expires_and_is_followed_only_for_its_visitor() {
    let n = shop_room();
    let (_, pass) = n.ticket_and_pass().await;
    let now = now_ms();
    let me = n.app.crypto.verify_pass(&pass, now).expect("pass").id;
    let other = TicketId(me.0 ^ 1);
    let key = &n.app.crypto.return_keys()[0];
    let page_at = |query: &str| page_with_pass(query, &pass);
    let (back, front) = ("https://shop.example/cart", "https://shop.example/start");
    let day = return_path::RETURN_PATH_LIFE_MS;
    for (query, to) in [
        (key.query_at("/cart", now, None), back),
        (key.query_at("/cart", now, Some(me)), back),
        (key.query_at("/cart", now - day + 60_000, Some(me)), back),
        (key.query_at("/cart", now, Some(other)), front),
        (key.query_at("/cart", now - day, None), front),
        (key.query_at("/cart", now - day, Some(me)), front),
    ] {
        let r = n.send(page_at(&query)).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{query}");
        assert_eq!(r.headers[header::LOCATION], to, "{query}");
    }
    let metrics = n
        .send(bodiless(Request::get("/metrics"), header::ACCEPT, "*/*"))
        .await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("waitingroom_return_paths_refused_total 3"),
        "{text}"
    );
}

/// docs/operating.md#cookies: with a name suffix, a domain and `SameSite=Strict`, the room sets its
/// cookies under those names and attributes, reads only those names (another room's cookies
/// on the same domain are not its own), and the page's script uses the suffixed leave key.
#[tokio::test]
async fn cookie_options_name_and_shape_every_cookie() {
    let n = TestNode::start(
        Options {
            visitors: VisitorOptions {
                cookie_name_suffix: Some("_shop".into()),
                cookie_domain: Some("example.com".into()),
                cookie_samesite: Some(crate::wire::cookies::SameSite::Strict),
                ..Default::default()
            },
            ..options()
        },
        true,
    );
    let r = n.post("/api/join", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let set = r.headers[header::SET_COOKIE].to_str().expect("ascii");
    assert!(set.starts_with("wr_ticket_shop="), "{set}");
    assert!(
        set.contains("SameSite=Strict") && set.contains("Domain=example.com"),
        "{set}"
    );
    let ticket = r.json()["ticket"].as_str().expect("ticket").to_owned();
    let checkin_with = |cookie: String| {
        let mut req = post("/api/checkin", json!({}));
        req.headers_mut()
            .insert(header::COOKIE, cookie.parse().expect("header value"));
        req
    };
    let r = n
        .send(checkin_with(format!("wr_ticket_shop={ticket}")))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let other_room = n.send(checkin_with(format!("wr_ticket={ticket}"))).await;
    other_room.assert_error(StatusCode::BAD_REQUEST, "missing_token");
    let page = n
        .send(bodiless(Request::get("/"), header::ACCEPT, "text/html"))
        .await;
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains("\"wr_leave_key_shop\""),
        "the page's leave key cookie"
    );
}

/// docs/operating.md#sessions: a pass given back frees its place (the node's on-site count drops at
/// once) and is refused from then on at verify and refresh; twice is no error; garbage, a
/// missing pass and a cross-site request are refused with their codes.
#[tokio::test]
async fn a_pass_given_back_is_refused_and_its_place_freed() {
    let n = TestNode::start(options(), true);
    let (_, pass) = n.ticket_and_pass().await;
    let on_site = || n.app.driver.read(|node| node.room().on_site());
    assert_eq!(on_site(), 1);
    let r = n.post("/api/pass/release", json!({ "pass": pass })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json(), json!({"released": true}));
    let set = r.headers[header::SET_COOKIE].to_str().expect("ascii");
    assert!(
        set.starts_with("wr_pass=;") && set.contains("Max-Age=0"),
        "{set}"
    );
    assert_eq!(on_site(), 0, "the place is free at once");
    n.assert_pass_refused(&pass, StatusCode::UNAUTHORIZED, "released")
        .await;
    let again = n.post("/api/pass/release", json!({ "pass": pass })).await;
    assert_eq!(again.status, StatusCode::OK, "twice is no error");
    n.post("/api/pass/release", json!({ "pass": "x.y.z" }))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "invalid_token");
    n.post("/api/pass/release", json!({}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "missing_token");
    let (_, other) = n.ticket_and_pass().await;
    let mut cross = post("/api/pass/release", json!({ "pass": other }));
    cross.headers_mut().insert(
        "sec-fetch-site",
        "cross-site".parse().expect("header value"),
    );
    n.send(cross)
        .await
        .assert_error(StatusCode::FORBIDDEN, "cross_site");
    assert_eq!(n.verify(&other).await.status, StatusCode::NO_CONTENT);
}

/// A node that cannot reach a majority of the voters (here: it remembers voters 1, 2 and 3, and
/// runs alone) takes a release but cannot confirm it: 503 `release_pending` with `Retry-After`,
/// counted, the cookie kept, and the pass refused at this node all the same.
#[tokio::test]
async fn a_release_no_majority_holds_is_answered_release_pending() {
    let n = TestNode::start(
        Options {
            limits: LimitOptions {
                request_timeout_ms: Some(400),
                forward_timeout_ms: Some(100),
                ..Default::default()
            },
            ..options()
        },
        true,
    );
    let (_, pass) = n.ticket_and_pass().await;
    let voters = waitingroom_distributed::voters::Voters {
        epoch: 1_000_000,
        set: [1, 2, 3].map(waitingroom_core::NodeId).into(),
        ..Default::default()
    };
    n.app.driver.with(|node, _| node.remember_voters(&voters));
    for tries in 1..=2 {
        let r = n.post("/api/pass/release", json!({ "pass": pass })).await;
        r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "release_pending");
        assert!(r.headers.contains_key(header::RETRY_AFTER));
        assert!(
            !r.headers.contains_key(header::SET_COOKIE),
            "the pass is kept"
        );
        assert_eq!(n.app.metrics.releases_pending.get(), tries);
    }
    assert_eq!(n.app.metrics.passes_released.get(), 0);
    n.assert_pass_refused(&pass, StatusCode::UNAUTHORIZED, "released")
        .await;
}
