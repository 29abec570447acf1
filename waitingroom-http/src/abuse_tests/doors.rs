//! The doors around the tokens (issue 17, items 1, 4 and 6): which routes each listener serves,
//! slow request heads.

use super::*;
use crate::api::{internal_router, public_router};

/// On the public listener the internal routes do not exist: 404 JSON `not_found`, also for a
/// browser (never the waiting page), also for a correctly signed peer request. The internal
/// listener serves them, and nothing of the visitor API. Health is on both. (Before: one port
/// served everything, and the balancer configs passed every path on.)
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
/// read timeout; so is an idle kept-alive connection. (Before: `axum::serve` set no timer and
/// held such a connection for as long as the client liked — 75 s and counting.)
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
