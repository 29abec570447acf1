//! The harness every in-crate test uses: a single-node cluster with its real [`router`], driven
//! with `tower::ServiceExt::oneshot` (no socket, no child process; a real listener on 127.0.0.1
//! only where hyper's parser is the thing tested), and the requests tests send it: visitor
//! requests from a given client address, peer requests signed as another member would.

pub(super) use std::net::SocketAddr;
pub(super) use std::sync::Arc;
pub(super) use std::time::{Duration, Instant};

pub(super) use axum::Router;
pub(super) use axum::body::{Body, Bytes};
pub(super) use axum::extract::ConnectInfo;
pub(super) use axum::http::{HeaderMap, Request, StatusCode, header};
pub(super) use base64::Engine as _;
pub(super) use base64::engine::general_purpose::URL_SAFE_NO_PAD;
pub(super) use serde_json::{Value, json};
pub(super) use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
pub(super) use waitingroom_core::{ClusterKey, NodeId, Pass, Ticket, TicketId};

pub(super) use crate::api::router;
pub(super) use crate::app::App;
pub(super) use crate::clock::now_ms;
pub(super) use crate::config::{LimitOptions, NetworkOptions, Options, RoomOptions};
pub(super) use crate::crypto::Crypto;
pub(super) use crate::peer::auth::{RequestHead, Route};
pub(super) use crate::peer::{FORWARD_PATH, MESSAGES_PATH, Transport};

/// Fast timers; everything else as an operator gets it unless a test says otherwise.
pub(super) fn options() -> Options {
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
pub(super) struct TestNode {
    pub(super) app: Arc<App>,
    pub(super) router: Router,
}

/// A response, read whole.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl Reply {
    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts an error answer: the status, and a JSON `{"error","code"}` body with this code.
    #[track_caller]
    pub(super) fn assert_error(&self, status: StatusCode, code: &str) {
        let v = self.json();
        assert_eq!(self.status, status, "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
}

impl TestNode {
    /// A started single-node cluster; with `timer`, its timer task runs on the test's runtime
    /// (so visitors get admitted), else nobody is ever let out and positions stay put.
    pub(super) fn start(options: Options, timer: bool) -> TestNode {
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
    /// [`crate::server::serve`]); its address and the server task.
    pub(super) async fn listen(
        &self,
        header_read_timeout: Duration,
    ) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let (listener, addr) = crate::server::serve::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind 127.0.0.1");
        let router = self.router.clone();
        let server = tokio::spawn(crate::server::serve::serve(
            listener,
            router,
            header_read_timeout,
            std::future::pending(),
        ));
        (addr, server)
    }

    pub(super) async fn send(&self, req: Request<Body>) -> Reply {
        let (status, headers, body) = crate::api::call(&self.router, req).await;
        Reply {
            status,
            headers,
            body,
        }
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(post(path, body)).await
    }

    /// A ticket that has been let in (joins, then checks in until admitted).
    pub(super) async fn admitted_ticket(&self) -> String {
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
    pub(super) async fn ticket_and_pass(&self) -> (String, String) {
        let ticket = self.admitted_ticket().await;
        let r = self.post("/api/leave", json!({ "ticket": ticket })).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        let pass = r.json()["pass"].as_str().expect("pass").to_owned();
        (ticket, pass)
    }

    /// `GET /api/pass/verify` with the token as a bearer token.
    pub(super) async fn verify(&self, token: &str) -> Reply {
        let bearer = format!("Bearer {token}");
        self.send(bodiless(
            Request::get("/api/pass/verify"),
            header::AUTHORIZATION,
            &bearer,
        ))
        .await
    }

    /// The pass must be refused the same way at the gate and at refresh.
    pub(super) async fn assert_pass_refused(&self, token: &str, status: StatusCode, code: &str) {
        self.verify(token).await.assert_error(status, code);
        self.post("/api/pass/refresh", json!({ "pass": token }))
            .await
            .assert_error(status, code);
    }

    /// The forged pass must be refused as invalid at the gate and at refresh.
    pub(super) async fn assert_pass_invalid(&self, token: &str) {
        self.assert_pass_refused(token, StatusCode::UNAUTHORIZED, "invalid_token")
            .await;
    }

    /// A signed peer request.
    pub(super) fn peer_request(&self, path: &str, body: Vec<u8>) -> Request<Body> {
        signed(&self.app.crypto, path, body)
    }

    /// Peer requests refused for `reason`.
    pub(super) fn auth_failures(&self, reason: &'static str) -> u64 {
        self.app
            .metrics
            .peer_auth_failures
            .get_or_create(&crate::metrics::ReasonLabels { reason })
            .get()
    }

    pub(super) fn members(&self) -> usize {
        self.app.driver.status().members.len()
    }
}

pub(super) fn post(path: &str, body: Value) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// A request without a body, with one header.
pub(super) fn bodiless(
    req: axum::http::request::Builder,
    name: header::HeaderName,
    value: &str,
) -> Request<Body> {
    req.header(name, value)
        .body(Body::empty())
        .expect("request")
}

/// The request as if it came over TCP from `ip`.
pub(super) fn from(mut req: Request<Body>, ip: [u8; 4]) -> Request<Body> {
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40_000))));
    req
}

/// How a test signs a peer request: by default as node 2 would, for the test node (id 1,
/// incarnation 1, see [`App::single_node`]), now, with a fresh nonce.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerReq<'a> {
    pub(super) path: &'a str,
    pub(super) from: u64,
    pub(super) to: (u64, u64),
    /// With destination 0, the URL it is signed as sent to (`auth::peer_address`).
    pub(super) to_address: &'a str,
    pub(super) at: u64,
    pub(super) nonce: u64,
}

impl<'a> PeerReq<'a> {
    pub(super) fn new(path: &'a str) -> Self {
        PeerReq {
            path,
            from: 2,
            to: (1, 1),
            to_address: "",
            at: now_ms(),
            nonce: rand::random(),
        }
    }

    /// The headers of this request for `body`, signed with `crypto`'s key.
    pub(super) fn headers(&self, crypto: &Crypto, body: &[u8]) -> HeaderMap {
        let route = Route {
            path: self.path,
            from: NodeId(self.from),
            to: NodeId(self.to.0),
            to_incarnation: self.to.1,
        };
        let (head, mac) =
            RequestHead::sign_to(crypto, route, self.to_address, self.at, self.nonce, body);
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
    pub(super) fn sign(&self, crypto: &Crypto, body: Vec<u8>) -> Request<Body> {
        let headers = self.headers(crypto, &body);
        let mut req = Request::post(self.path)
            .body(Body::from(body))
            .expect("request");
        *req.headers_mut() = headers;
        req
    }
}

/// A peer request to the test node, signed with `crypto`'s key (see [`PeerReq`]).
pub(super) fn signed(crypto: &Crypto, path: &str, body: Vec<u8>) -> Request<Body> {
    PeerReq::new(path).sign(crypto, body)
}

pub(super) fn a_pass(now: u64) -> Pass {
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
pub(super) fn parts(token: &str) -> [String; 3] {
    let mut it = token.split('.').map(str::to_owned);
    let mut next = || it.next().expect("three parts");
    [next(), next(), next()]
}

pub(super) fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Sends `request` on a new connection and reads until the server closes it (bounded).
pub(super) async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
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
