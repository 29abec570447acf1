//! Visitor requests: anything anyone can send a node, fed to the server's real axum router in
//! this process (`tower::ServiceExt::oneshot`, no socket), against a started single-node
//! cluster.
//!
//! Each input is a short session of requests on one fresh node, so the fuzzer can reach deep
//! states (a ticket that was let in, exchanged for a pass, replayed...). What must hold:
//! no panic; every refusal is a 4xx, or a 502/503, never a 500; outside the HTML waiting page
//! every refusal is JSON `{"error", "code"}`; every token the node hands out verifies; and
//! afterwards the node still serves (`/livez`, a join, `/metrics`).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use serde_json::Value;
use tokio::runtime::Runtime;
use waitingroom_core::{NodeId, Ticket, TokenError};
use waitingroom_distributed::Node;
use waitingroom_http::api::{call, router};
use waitingroom_http::app::App;
use waitingroom_http::clock::now_ms;
use waitingroom_http::config::{
    NetworkOptions, Options, RoomOptions, ServerConfig, VisitorOptions,
};
use waitingroom_http::crypto::Crypto;
use waitingroom_http::peer::auth::{RequestHead, Route};

use crate::tokens::key;

/// Separates the requests of one input (ASCII record separator).
pub const REQUEST_SEPARATOR: u8 = 0x1e;
/// Most requests in one input: enough for join → check-in → leave → pass → replay.
const MAX_REQUESTS: usize = 8;
/// Most header lines read from one request.
const MAX_HEADERS: usize = 32;
/// Pseudo-header: the request comes from TCP peer 127.0.0.N (default N = 1).
pub const CLIENT_HEADER: &str = "x-fuzz-client";
/// Pseudo-header: the harness signs the request as a cluster peer would, so the fuzzer gets
/// past peer authentication into the peer decoders and handlers.
pub const SIGN_HEADER: &str = "x-fuzz-sign";
/// Where admitted visitors are sent.
const ORIGIN: &str = "http://127.0.0.1:9/origin";
/// The node's own address (never dialled: it is a lone member).
const ADVERTISE: &str = "http://127.0.0.1:1";

/// Input: a flags byte, then up to [`MAX_REQUESTS`] requests separated by
/// [`REQUEST_SEPARATOR`]. The flags configure the node:
///
/// - bit 0: admit straight through (else everyone queues, and nobody is let out: no timer runs);
/// - bit 1: one place on the site (else 100);
/// - bit 2: join rate limit 2 per second per client (else none);
/// - bit 3: the client is the last entry of `x-forwarded-for` (else the TCP peer);
/// - bit 4: visitor bodies up to 64 bytes, peer bodies up to 4 KiB (else the defaults).
///
/// A request is written as HTTP/1 text: `METHOD TARGET` on the first line, `name: value`
/// header lines, an empty line, then the body. In the target, header values and the body,
/// `$T` stands for the latest ticket the node handed out, `$0` for the first, `$P` for the
/// latest pass, and `$C` for the latest ticket's claims as JSON (what a forwarding node
/// sends); see also [`CLIENT_HEADER`] and [`SIGN_HEADER`]. Requests a real server would never
/// pass on (a target that is not a URI, a header that is not a header) are skipped: hyper
/// refuses them before the router.
pub fn visitor_request(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let requests: Vec<&[u8]> = rest
        .split(|&b| b == REQUEST_SEPARATOR)
        .take(MAX_REQUESTS)
        .collect();
    let app = fresh_app(flags);
    let router = router(app.clone());
    runtime().block_on(async {
        let mut session = Session::default();
        for raw in requests {
            if let Some(req) = session.build(raw, &app) {
                session.send(&router, &app, req).await;
            }
        }
        still_serving(&router, &app, session.signed, flags & 4 != 0).await;
    });
}

/// One current-thread runtime for the whole run. Peer traffic a signed request provokes is
/// spawned onto it and goes nowhere (see [`sandbox_client`]).
fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The HTTP client of the node's peer transport. Every request it makes goes to a proxy on
/// 127.0.0.1:9, where nothing listens: whatever address a signed peer message makes the node
/// write to, the fuzzer never sends a packet off this machine, and never resolves a name.
fn sandbox_client() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let proxy = reqwest::Proxy::all("http://127.0.0.1:9").expect("a proxy URL");
            waitingroom_http::crypto::tls::client_builder()
                .proxy(proxy)
                .connect_timeout(Duration::from_millis(100))
                .timeout(Duration::from_millis(500))
                .build()
                .expect("a client without TLS builds")
        })
        .clone()
}

fn crypto() -> Arc<Crypto> {
    static CRYPTO: OnceLock<Arc<Crypto>> = OnceLock::new();
    CRYPTO
        .get_or_init(|| Arc::new(Crypto::new(key().0.clone())))
        .clone()
}

/// A started node for each protocol setting the flags pick (bits 0 and 1), built once: it has
/// completed its first count rounds, so it knows how many it may let straight in.
struct Template {
    cfg: ServerConfig,
    node: Node,
}

fn template(flags: u8) -> &'static Template {
    static T: [OnceLock<Template>; 4] = [const { OnceLock::new() }; 4];
    let i = usize::from(flags & 3);
    T[i].get_or_init(|| {
        let cfg = Options {
            network: NetworkOptions {
                key_file: Some("unused: the key is given in-process".into()),
                node_id: Some(1),
                advertise: Some(ADVERTISE.into()),
                ..Default::default()
            },
            visitors: VisitorOptions {
                origin_url: Some(ORIGIN.into()),
                ..Default::default()
            },
            room: RoomOptions {
                admit_straight_through: Some(flags & 1 != 0),
                target_on_site: Some(if flags & 2 != 0 { 1 } else { 100 }),
                eviction_interval_ms: Some(5),
                ..Default::default()
            },
            ..Options::default()
        }
        .resolve()
        .expect("valid fuzz settings");
        let mut node = Node::new(cfg.node_config(NodeId(1), 1, ADVERTISE, 0)).expect("settings");
        node.start_cluster(now_ms());
        // Three eviction boundaries (5 ms apart): the lone member counts and sets its budget.
        for _ in 0..3 {
            let due = node.poll_timeout().unwrap_or(0);
            let wait = due.saturating_sub(now_ms()).min(50);
            std::thread::sleep(Duration::from_millis(wait));
            node.handle_timeout(now_ms().max(due));
            while node.poll_transmit().is_some() {}
            while node.poll_event().is_some() {}
        }
        Template { cfg, node }
    })
}

fn fresh_app(flags: u8) -> Arc<App> {
    let t = template(flags);
    let mut cfg = t.cfg.clone();
    cfg.limits.join_rate_limit = if flags & 4 != 0 { 2 } else { 0 };
    cfg.limits.join_burst = cfg.limits.join_rate_limit;
    cfg.limits.client_ip_header = (flags & 8 != 0).then(|| "x-forwarded-for".to_owned());
    if flags & 16 != 0 {
        cfg.limits.visitor_body = 64;
        cfg.limits.peer_body = 4096;
    }
    App::assemble(Arc::new(cfg), crypto(), t.node.clone(), sandbox_client())
}

/// Tokens the node handed out so far, for the placeholders.
#[derive(Default)]
struct Session {
    first_ticket: Option<String>,
    ticket: Option<String>,
    claims: Option<String>,
    pass: Option<String>,
    /// Whether any request was signed as a peer's: a peer may legitimately take the node out of
    /// the cluster, so it may then answer joins with 503.
    signed: bool,
    /// The nonce of the next signed request (each app is fresh, so its replay cache is empty).
    nonces: u64,
}

impl Session {
    fn substitute(&self, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if raw[i] == b'$' && i + 1 < raw.len() {
                let with = match raw[i + 1] {
                    b'T' => Some(&self.ticket),
                    b'0' => Some(&self.first_ticket),
                    b'P' => Some(&self.pass),
                    b'C' => Some(&self.claims),
                    _ => None,
                };
                if let Some(v) = with {
                    out.extend_from_slice(v.as_deref().unwrap_or_default().as_bytes());
                    i += 2;
                    continue;
                }
            }
            out.push(raw[i]);
            i += 1;
        }
        out
    }

    /// Parses one request of the input; None when hyper would not have passed it on.
    fn build(&mut self, raw: &[u8], app: &App) -> Option<Request<Body>> {
        let (head, body) = split_head(raw);
        let mut lines = head.split(|&b| b == b'\n').map(trim_cr);
        let first = lines.next()?;
        let (method, target) = match first.iter().position(|&b| b == b' ') {
            Some(at) => (&first[..at], &first[at + 1..]),
            None => (first, &b"/"[..]),
        };
        let method = Method::from_bytes(method).ok()?;
        let uri = Uri::try_from(self.substitute(target.trim_ascii())).ok()?;
        let mut headers = HeaderMap::new();
        let mut client = 1u8;
        let mut sign = false;
        for line in lines.take(MAX_HEADERS) {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let Ok(name) = HeaderName::from_bytes(line[..colon].trim_ascii()) else {
                continue;
            };
            let value = self.substitute(line[colon + 1..].trim_ascii());
            if name == CLIENT_HEADER {
                client = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                continue;
            }
            if name == SIGN_HEADER {
                sign = true;
                continue;
            }
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.append(name, value);
            }
        }
        let body = self.substitute(body);
        if sign {
            self.signed = true;
            // As node 2 would sign it for this node (id 1, incarnation 1), now, fresh.
            let route = Route {
                path: uri.path(),
                from: NodeId(2),
                to: NodeId(1),
                to_incarnation: 1,
            };
            let nonce = self.nonces;
            self.nonces += 1;
            let (head, mac) = RequestHead::sign(&app.crypto, route, now_ms(), nonce, &body);
            for (name, value) in head.headers(&mac) {
                let value = HeaderValue::from_str(&value).expect("signature headers are ASCII");
                headers.insert(name, value);
            }
            headers.insert(header::CONTENT_LENGTH, body.len().into());
        }
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::from(body))
            .ok()?;
        *req.headers_mut() = headers;
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, client], 40_000))));
        Some(req)
    }

    async fn send(&mut self, router: &Router, app: &App, req: Request<Body>) {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let (status, headers, body) = call(router, req).await;
        let what = format!("{method} {path} -> {status}");
        let html = content_type(&headers).starts_with("text/html");
        assert!(
            !status.is_server_error()
                || status == StatusCode::BAD_GATEWAY
                || status == StatusCode::SERVICE_UNAVAILABLE,
            "{what}: a server error other than 502/503: {}",
            String::from_utf8_lossy(&body)
        );
        if status.is_client_error() || status.is_server_error() {
            if html {
                // Only the waiting page answers in HTML: to GET (and HEAD), and to its button
                // (POST /).
                assert!(
                    method == Method::GET
                        || method == Method::HEAD
                        || (method == Method::POST && path == "/"),
                    "{what}: an HTML error"
                );
            } else {
                check_json_error(&what, &method, &headers, &body);
            }
        }
        if status == StatusCode::SEE_OTHER {
            // The page's button sends the browser back to the page; everything else to the
            // origin.
            let to = if method == Method::POST { "/" } else { ORIGIN };
            assert_eq!(
                headers.get(header::LOCATION).map(HeaderValue::as_bytes),
                Some(to.as_bytes()),
                "{what}: redirects go to the origin"
            );
        }
        if status.is_success() {
            self.learn_from_body(app, &what, &body);
        }
        self.learn_from_cookies(app, &what, &headers);
    }

    fn learn_from_body(&mut self, app: &App, what: &str, body: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        // A visitor answer, or a forwarded batch's answers (`[{"status","body"}]`).
        let answers: Vec<&Value> = match &v {
            Value::Array(items) => items.iter().map(|i| &i["body"]).collect(),
            other => vec![other],
        };
        for a in answers {
            if let Some(t) = a["ticket"].as_str() {
                self.learn_ticket(app, what, t);
            }
            if let Some(p) = a["pass"].as_str() {
                self.learn_pass(app, what, p);
            }
        }
    }

    fn learn_from_cookies(&mut self, app: &App, what: &str, headers: &HeaderMap) {
        for c in headers.get_all(header::SET_COOKIE) {
            let Ok(c) = c.to_str() else {
                panic!("{what}: a Set-Cookie that is not text");
            };
            let value = c.split(';').next().unwrap_or_default();
            if let Some(t) = value.strip_prefix("wr_ticket=").filter(|t| !t.is_empty()) {
                self.learn_ticket(app, what, t);
            }
            if let Some(p) = value.strip_prefix("wr_pass=").filter(|p| !p.is_empty()) {
                self.learn_pass(app, what, p);
            }
        }
    }

    /// Whatever ticket the node signs must verify: a node never hands out a token it refuses.
    fn learn_ticket(&mut self, app: &App, what: &str, token: &str) {
        let ticket: Ticket = app
            .crypto
            .verify_ticket(token, now_ms())
            .unwrap_or_else(|e| panic!("{what}: the node handed out a bad ticket: {e}"));
        self.first_ticket.get_or_insert_with(|| token.to_owned());
        self.ticket = Some(token.to_owned());
        self.claims = serde_json::to_string(&ticket).ok();
    }

    /// Same for passes; an expired one is no bug (a refresh of a pass that runs out now).
    fn learn_pass(&mut self, app: &App, what: &str, token: &str) {
        match app.crypto.verify_pass(token, now_ms()) {
            Ok(_) | Err(TokenError::Expired) => {}
            Err(e) => panic!("{what}: the node handed out a bad pass: {e}"),
        }
        self.pass = Some(token.to_owned());
    }
}

fn check_json_error(what: &str, method: &Method, headers: &HeaderMap, body: &[u8]) {
    assert!(
        content_type(headers).starts_with("application/json"),
        "{what}: an error that is not JSON ({:?})",
        headers.get(header::CONTENT_TYPE)
    );
    if *method == Method::HEAD {
        // HEAD answers have no body.
        return;
    }
    let v: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{what}: an error body that is not JSON: {e}"));
    let code = v["code"].as_str().unwrap_or_default();
    assert!(
        !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
        "{what}: error code {v}"
    );
    assert!(
        v["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{what}: error message {v}"
    );
    let later = [
        "rate_limited",
        "not_ready",
        "stopping",
        "owner_unavailable",
        "overloaded",
        "peer_busy",
    ];
    if later.contains(&code) {
        assert!(
            headers.contains_key(header::RETRY_AFTER),
            "{what}: {code} without Retry-After"
        );
    }
}

/// After the session the node must still serve: liveness, a join from a new client, metrics.
async fn still_serving(router: &Router, app: &App, signed: bool, rate_limited: bool) {
    let get = |path: &str| {
        Request::get(path)
            .body(Body::empty())
            .expect("a valid request")
    };
    let (status, _, _) = call(router, get("/livez")).await;
    assert_eq!(status, StatusCode::OK, "/livez after the session");
    let mut join = Request::post("/api/join")
        .body(Body::empty())
        .expect("a valid request");
    // An address no TCP peer of the session has (they are 127.0.0.N).
    join.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 1, 0, 1], 40_000))));
    let (status, _, body) = call(router, join).await;
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    if signed && status == StatusCode::SERVICE_UNAVAILABLE {
        // A peer's word can take the node out of its cluster; it must then say so.
        assert_eq!(v["code"], "not_ready", "a join after the session: {v}");
    } else if rate_limited && status == StatusCode::TOO_MANY_REQUESTS {
        // The session may have spent this address's joins (through x-forwarded-for).
        assert_eq!(v["code"], "rate_limited", "a join after the session: {v}");
    } else {
        assert_eq!(
            status,
            StatusCode::OK,
            "a join after the session: {}",
            String::from_utf8_lossy(&body)
        );
        let ticket = v["ticket"].as_str().unwrap_or_default();
        assert!(
            app.crypto.verify_ticket(ticket, now_ms()).is_ok(),
            "the join's ticket verifies: {v}"
        );
    }
    let (status, _, _) = call(router, get("/metrics")).await;
    assert_eq!(status, StatusCode::OK, "/metrics after the session");
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The head (request line and headers) and the body: split at the first empty line.
fn split_head(raw: &[u8]) -> (&[u8], &[u8]) {
    for at in 0..raw.len() {
        for sep in [&b"\n\n"[..], &b"\n\r\n"[..]] {
            if raw[at..].starts_with(sep) {
                return (&raw[..at], &raw[at + sep.len()..]);
            }
        }
    }
    (raw, &[])
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}
