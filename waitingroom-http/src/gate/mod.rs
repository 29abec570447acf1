//! An origin gate for axum/tower sites: a [`tower::Layer`] that lets a request through only with
//! a valid pass, checked offline with the waiting room's public keys.
//!
//! An origin written in Rust puts [`GateLayer`] in front of its routes instead of asking a node
//! `GET /api/pass/verify` on every request (what the nginx, Caddy, Traefik and Envoy gates in
//! `deploy/` and `scripts/` do): the pass is an EdDSA token (`wr_pass` cookie or
//! `Authorization: Bearer`), so the keys from the room's `/.well-known/jwks.json` are all it
//! needs. A valid pass reaches the inner service as a request extension
//! ([`waitingroom_core::Pass`]); anything else (no pass, garbage, forged, expired, a ticket) is
//! sent to the room with a `302` and the path it asked for in `return_to`, signed with the
//! return-path secret ([`GateConfig::return_key`], `crypto/return_path.rs`).
//!
//! Keys rotate (`run --extra-verify-key`): a pass signed with a key this gate has not seen yet
//! names an unknown `kid`, and the gate fetches the JWKS again, at most once per
//! [`GateConfig::refetch_interval`], so a stream of forged `kid`s costs the room one JWKS request
//! per interval, not one per request.
//!
//! Here the [`Gate`] itself (its keys, the check, the way to the room); `config.rs` what it is
//! told ([`GateConfig`], [`Bypass`]); `layer.rs` the [`GateLayer`] that runs it on every request.

mod config;
mod layer;

pub use config::{Bypass, GateConfig};
pub use layer::{GateLayer, GateService};

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use thiserror::Error;
use waitingroom_core::{Pass, Time, TokenError};

use crate::crypto::return_path::safe_return_path;
use crate::crypto::{KeyError, PassVerifier};
use crate::wire::cookies;

/// Why the JWKS could not be had.
#[derive(Debug, Error)]
pub enum GateError {
    /// The request failed or answered an error status.
    #[error("cannot fetch the JWKS from {url}: {source}")]
    Fetch {
        /// The JWKS URL.
        url: String,
        /// Cause.
        source: reqwest::Error,
    },
    /// The document is not a JWKS this crate reads.
    #[error("the JWKS from {url} is not usable: {source}")]
    Parse {
        /// The JWKS URL.
        url: String,
        /// Cause.
        source: KeyError,
    },
}

/// Why a request was not let through.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// Neither a `wr_pass` cookie nor a bearer token.
    #[error("no pass")]
    Missing,
    /// The token is not a valid pass (even after fetching the keys again, for an unknown key).
    #[error(transparent)]
    Invalid(#[from] TokenError),
}

/// The gate's shared state: the keys, and when they were last fetched.
#[derive(Debug)]
pub struct Gate {
    cfg: GateConfig,
    client: reqwest::Client,
    keys: RwLock<Arc<PassVerifier>>,
    /// When a refetch last ran; the lock is held across the fetch, so concurrent requests
    /// with the same new key wait for one fetch instead of each making their own.
    last_refetch: tokio::sync::Mutex<Option<Instant>>,
}

impl Gate {
    /// A gate with keys already in hand (tests, or keys shipped with the origin).
    pub fn with_keys(cfg: GateConfig, client: reqwest::Client, keys: PassVerifier) -> Arc<Self> {
        Arc::new(Gate {
            cfg,
            client,
            keys: RwLock::new(Arc::new(keys)),
            last_refetch: tokio::sync::Mutex::new(None),
        })
    }

    /// Fetches the JWKS (trying again every 200 ms for up to `wait`: the room may be starting
    /// alongside the origin) and makes the gate. Build `client` from
    /// [`crate::crypto::tls::client_builder`] (reqwest has no crypto provider of its own here).
    pub async fn connect(
        cfg: GateConfig,
        client: reqwest::Client,
        wait: Duration,
    ) -> Result<Arc<Self>, GateError> {
        let deadline = Instant::now() + wait;
        loop {
            match fetch_jwks(&client, &cfg.jwks_url).await {
                Ok(keys) => return Ok(Self::with_keys(cfg, client, keys)),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The layer to put in front of the protected routes.
    pub fn layer(self: &Arc<Self>) -> GateLayer {
        GateLayer { gate: self.clone() }
    }

    /// The pass a request carries, checked at `now` (bearer token first, then the cookie, as
    /// `/api/pass/verify` does).
    pub async fn check(&self, headers: &HeaderMap, now: Time) -> Result<Pass, Refusal> {
        let token = cookies::bearer(headers)
            .or_else(|| cookies::get(headers, &self.cfg.pass_cookie))
            .ok_or(Refusal::Missing)?;
        match self.keys().verify_pass(token, now) {
            Err(TokenError::UnknownKey) => {
                self.refetch().await;
                Ok(self.keys().verify_pass(token, now)?)
            }
            other => Ok(other?),
        }
    }

    fn keys(&self) -> Arc<PassVerifier> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Fetches the JWKS again unless that was done less than `refetch_interval` ago. A failed
    /// fetch keeps the keys the gate has (and counts as a fetch, so a room that is down is not
    /// asked on every request).
    async fn refetch(&self) {
        let mut last = self.last_refetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.cfg.refetch_interval) {
            return;
        }
        *last = Some(Instant::now());
        match fetch_jwks(&self.client, &self.cfg.jwks_url).await {
            Ok(keys) => {
                tracing::info!(url = %self.cfg.jwks_url, "unknown pass key id: JWKS fetched again");
                let mut held = self.keys.write().unwrap_or_else(PoisonError::into_inner);
                // Unchanged keys keep the verifier and the passes it remembers: anyone can
                // send an unknown key id, and each would otherwise cost every visitor on the
                // site a full check again.
                if !held.same_keys(&keys) {
                    *held = Arc::new(keys);
                }
            }
            Err(e) => tracing::warn!(error = %e, "unknown pass key id: JWKS refetch failed"),
        }
    }

    /// The answer to a request without a valid pass: to the room, with the way back.
    pub fn redirect(&self, method: &Method, uri: &Uri) -> Response {
        let mut location = self.cfg.waiting_room_url.clone();
        // Only a GET or HEAD can be repeated by following a link back.
        let back = (method == Method::GET || method == Method::HEAD)
            .then(|| uri.path_and_query().map(|p| p.as_str()))
            .flatten()
            .and_then(safe_return_path);
        if let (Some(path), Some(key)) = (back, &self.cfg.return_key) {
            location.push(if location.contains('?') { '&' } else { '?' });
            location.push_str(&key.query(path));
        }
        let mut resp = StatusCode::FOUND.into_response();
        let headers = resp.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        // The operator's URL plus a form-encoded path: always a valid header value, unless the
        // configured URL itself is not (then the visitor gets the bare 302).
        if let Ok(v) = HeaderValue::from_str(&location) {
            headers.insert(header::LOCATION, v);
        }
        resp
    }
}

async fn fetch_jwks(client: &reqwest::Client, url: &str) -> Result<PassVerifier, GateError> {
    let fetch_error = |source| GateError::Fetch {
        url: url.to_owned(),
        source,
    };
    let text = client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(fetch_error)?
        .text()
        .await
        .map_err(fetch_error)?;
    PassVerifier::from_jwks_json(&text).map_err(|source| GateError::Parse {
        url: url.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::body::Body;
    use axum::extract::{ConnectInfo, Extension, State};
    use axum::http::HeaderName;
    use axum::routing::get;
    use tower::ServiceExt as _;
    use waitingroom_core::{NodeId, Ticket, TicketId};

    use super::*;
    use crate::clock::now_ms;
    use crate::crypto::Crypto;
    use crate::wire::client_addr::Cidr;

    /// A stand-in room serving a JWKS the test can change, counting how often it is fetched.
    #[derive(Default)]
    struct Room {
        jwks: Mutex<String>,
        fetches: AtomicUsize,
    }

    async fn serve_room(room: Arc<Room>) -> String {
        let app = Router::new()
            .route(
                "/.well-known/jwks.json",
                get(|State(r): State<Arc<Room>>| async move {
                    r.fetches.fetch_add(1, Ordering::SeqCst);
                    r.jwks.lock().unwrap().clone()
                }),
            )
            .with_state(room);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/.well-known/jwks.json")
    }

    fn pass(expires_at: Time) -> Pass {
        Pass {
            id: TicketId(42),
            node: NodeId(1),
            queue_join_time: 1_000,
            created_at: 2_000,
            issued_at: 2_000,
            expires_at,
            eviction_time: 1_500,
            round: None,
            draw: None,
        }
    }

    fn later() -> Time {
        now_ms() + 60_000
    }

    /// A gate in front of an origin that answers with the pass id it was given.
    async fn gated(room: &Arc<Room>, keys: &Crypto) -> (Arc<Gate>, Router) {
        *room.jwks.lock().unwrap() = keys.jwks().to_string();
        let url = serve_room(room.clone()).await;
        let cfg = GateConfig {
            return_key: Some(keys.return_keys()[0].clone()),
            ..GateConfig::new(url, "https://room.example/?lang=en")
        };
        let gate = Gate::connect(
            cfg,
            crate::crypto::tls::client_builder().build().unwrap(),
            Duration::ZERO,
        )
        .await
        .unwrap();
        let origin = Router::new()
            .fallback(get(|Extension(p): Extension<Pass>| async move {
                format!("pass {}", p.id)
            }))
            .layer(gate.layer());
        (gate, origin)
    }

    /// Bypass rules: health checks and static files by path, a staff network, a caller with the
    /// secret header reach the origin without a pass (and without one in their extensions);
    /// everything else still goes to the room.
    #[tokio::test]
    async fn bypass_rules_let_requests_through_without_a_pass() {
        let room = Arc::new(Room::default());
        *room.jwks.lock().unwrap() = Crypto::generate().jwks().to_string();
        let url = serve_room(room.clone()).await;
        let mut cfg = GateConfig::new(url, "https://room.example/");
        cfg.bypass = Bypass {
            path_prefixes: vec!["/healthz".into(), "/static/".into()],
            networks: vec![Cidr::parse("10.1.0.0/16").unwrap()],
            header: Some((HeaderName::from_static("x-bypass"), "s3cret-value".into())),
        };
        let client = crate::crypto::tls::client_builder().build().unwrap();
        let gate = Gate::connect(cfg, client, Duration::ZERO).await.unwrap();
        let origin = Router::new()
            .fallback(get(|p: Option<Extension<Pass>>| async move {
                if p.is_some() { "pass" } else { "bypassed" }
            }))
            .layer(gate.layer());
        let call = |uri: &str, from: [u8; 4], header: Option<&str>| {
            let mut req = axum::http::Request::get(uri);
            if let Some(secret) = header {
                req = req.header("x-bypass", secret);
            }
            let mut req = req.body(Body::empty()).unwrap();
            req.extensions_mut()
                .insert(ConnectInfo(SocketAddr::from((from, 4000))));
            origin.clone().oneshot(req)
        };
        let outside = [192, 0, 2, 7];
        for (uri, from, header, through) in [
            ("/healthz", outside, None, true),
            ("/static/app.js", outside, None, true),
            ("/shop", outside, None, false),
            ("/shop", [10, 1, 2, 3], None, true),
            ("/shop", [10, 2, 0, 1], None, false),
            ("/shop", outside, Some("s3cret-value"), true),
            ("/shop", outside, Some("s3cret-valuX"), false),
        ] {
            let resp = call(uri, from, header).await.unwrap();
            let want = if through {
                StatusCode::OK
            } else {
                StatusCode::FOUND
            };
            assert_eq!(resp.status(), want, "{uri} from {from:?} with {header:?}");
        }
    }

    async fn send(origin: &Router, uri: &str, header: Option<(&str, String)>) -> Response {
        let mut req = axum::http::Request::get(uri);
        if let Some((name, value)) = header {
            req = req.header(name, value);
        }
        origin
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn cookie(token: &str) -> Option<(&'static str, String)> {
        Some(("cookie", format!("a=b; wr_pass={token}")))
    }

    fn location(resp: &Response) -> &str {
        assert_eq!(resp.status(), StatusCode::FOUND);
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-store");
        resp.headers()[header::LOCATION].to_str().unwrap()
    }

    async fn body(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_valid_pass_reaches_the_origin_by_cookie_or_bearer() {
        let (room, keys) = (Arc::new(Room::default()), Crypto::generate());
        let (_, origin) = gated(&room, &keys).await;
        let token = keys.sign_pass(&pass(later()));
        let resp = send(&origin, "/shop/cart", cookie(&token)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(body(resp).await, format!("pass {}", TicketId(42)));
        let bearer = Some(("authorization", format!("Bearer {token}")));
        assert_eq!(send(&origin, "/", bearer).await.status(), StatusCode::OK);
        assert_eq!(room.fetches.load(Ordering::SeqCst), 1, "keys fetched once");
    }

    #[tokio::test]
    async fn no_pass_garbage_expired_forged_or_a_ticket_go_to_the_room() {
        let (room, keys) = (Arc::new(Room::default()), Crypto::generate());
        let (gate, origin) = gated(&room, &keys).await;
        let good = keys.sign_pass(&pass(later()));
        let expired = keys.sign_pass(&pass(now_ms() - 1));
        // The pass's header and claims under the signature of another pass of the same key.
        let other = keys.sign_pass(&pass(later() + 1));
        let (head_claims, other_sig) = (good.rsplit_once('.').unwrap().0, other.rsplit('.').next());
        let forged = format!("{head_claims}.{}", other_sig.unwrap());
        let ticket = keys.sign_ticket(&Ticket {
            id: TicketId(42),
            join_time: 1_000,
            node: NodeId(1),
            issued_at: 1_000,
            next_refresh: 2_000,
            expires_at: later(),
            previous_position: None,
            eviction_time: Some(1_500),
            draw: None,
            round: None,
        });
        let room_url =
            "https://room.example/?lang=en&return_to=%2Fshop%2Fcart%3Fitem%3D3&return_sig=";
        for token in [
            None,
            Some("not.a.pass"),
            Some(&*expired),
            Some(&*forged),
            Some(&*ticket),
        ] {
            let resp = send(&origin, "/shop/cart?item=3", token.and_then(cookie)).await;
            let to = location(&resp);
            assert!(to.starts_with(room_url), "token {token:?}: {to}");
            // Signed (with its expiry) for anyone who comes with it.
            let query = to.trim_start_matches("https://room.example/?lang=en&");
            let back =
                crate::crypto::return_path::checked(query, keys.return_keys(), now_ms(), None);
            assert_eq!(
                back,
                Ok(Some("/shop/cart?item=3".to_owned())),
                "token {token:?}"
            );
        }
        let refusal = |t: &str| {
            let headers = header_map(format!("wr_pass={t}"));
            let gate = gate.clone();
            async move { gate.check(&headers, now_ms()).await }
        };
        assert_eq!(
            refusal(&expired).await,
            Err(Refusal::Invalid(TokenError::Expired))
        );
        assert_eq!(
            refusal(&forged).await,
            Err(Refusal::Invalid(TokenError::BadSignature))
        );
        assert!(matches!(
            refusal(&ticket).await,
            Err(Refusal::Invalid(TokenError::WrongKind { .. }))
        ));
        assert_eq!(
            room.fetches.load(Ordering::SeqCst),
            1,
            "no refetch: known key"
        );
    }

    fn header_map(cookie: String) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        h
    }

    #[tokio::test]
    async fn an_unknown_key_id_fetches_the_keys_again_at_most_once_per_interval() {
        let (room, old, new) = (
            Arc::new(Room::default()),
            Crypto::generate(),
            Crypto::generate(),
        );
        let (_, origin) = gated(&room, &old).await;
        // The room rotates to a new key; the gate has not seen it yet.
        let rotated = Crypto::with_previous(
            waitingroom_core::ClusterKey::parse(&new.to_pkcs8_pem()).unwrap(),
            vec![waitingroom_core::ClusterKey::parse(&old.to_pkcs8_pem()).unwrap()],
        )
        .unwrap();
        *room.jwks.lock().unwrap() = rotated.jwks().to_string();
        let resp = send(&origin, "/", cookie(&new.sign_pass(&pass(later())))).await;
        assert_eq!(resp.status(), StatusCode::OK, "refetched and verified");
        assert_eq!(room.fetches.load(Ordering::SeqCst), 2);
        let old_pass = old.sign_pass(&pass(later()));
        assert_eq!(
            send(&origin, "/", cookie(&old_pass)).await.status(),
            StatusCode::OK
        );
        // A key nobody published: refused, and within the interval no second refetch.
        let stranger = Crypto::generate().sign_pass(&pass(later()));
        for _ in 0..3 {
            let resp = send(&origin, "/", cookie(&stranger)).await;
            assert_eq!(resp.status(), StatusCode::FOUND);
        }
        assert_eq!(room.fetches.load(Ordering::SeqCst), 2, "rate-limited");
    }

    #[tokio::test]
    async fn a_refetch_of_the_same_keys_keeps_the_passes_the_gate_remembers() {
        let (room, keys) = (Arc::new(Room::default()), Crypto::generate());
        let (gate, origin) = gated(&room, &keys).await;
        let good = keys.sign_pass(&pass(later()));
        assert_eq!(
            send(&origin, "/", cookie(&good)).await.status(),
            StatusCode::OK
        );
        let held = gate.keys();
        let stranger = Crypto::generate().sign_pass(&pass(later()));
        let resp = send(&origin, "/", cookie(&stranger)).await;
        assert_eq!(resp.status(), StatusCode::FOUND);
        assert_eq!(room.fetches.load(Ordering::SeqCst), 2, "refetched");
        assert!(Arc::ptr_eq(&held, &gate.keys()), "same keys: same verifier");
    }

    #[tokio::test]
    async fn a_refetch_that_fails_keeps_the_keys() {
        let keys = Crypto::generate();
        let cfg = GateConfig {
            refetch_interval: Duration::ZERO,
            // Nothing listens on port 9 of loopback (discard): the fetch fails at once.
            ..GateConfig::new("http://127.0.0.1:9/jwks", "/room")
        };
        let verifier = PassVerifier::from_jwks_json(&keys.jwks().to_string()).unwrap();
        let gate = Gate::with_keys(
            cfg,
            crate::crypto::tls::client_builder().build().unwrap(),
            verifier,
        );
        let stranger = Crypto::generate().sign_pass(&pass(later()));
        let h = |t: &str| header_map(format!("wr_pass={t}"));
        assert_eq!(
            gate.check(&h(&stranger), now_ms()).await,
            Err(Refusal::Invalid(TokenError::UnknownKey))
        );
        let good = keys.sign_pass(&pass(later()));
        assert_eq!(
            gate.check(&h(&good), now_ms()).await.map(|p| p.id),
            Ok(TicketId(42))
        );
        assert!(matches!(
            gate.check(&HeaderMap::new(), now_ms()).await,
            Err(Refusal::Missing)
        ));
    }

    #[tokio::test]
    async fn unsafe_unrepeatable_or_unsigned_requests_go_to_the_room_without_a_return_path() {
        let (room, keys) = (Arc::new(Room::default()), Crypto::generate());
        let (gate, origin) = gated(&room, &keys).await;
        let resp = send(&origin, "//evil.example/x", None).await;
        assert_eq!(location(&resp), "https://room.example/?lang=en");
        let post = gate.redirect(&Method::POST, &Uri::from_static("/shop/pay"));
        assert_eq!(location(&post), "https://room.example/?lang=en");
        let plain = Gate::with_keys(
            GateConfig::new("http://127.0.0.1:9/jwks", "/room"),
            crate::crypto::tls::client_builder().build().unwrap(),
            PassVerifier::from_jwks_json(&keys.jwks().to_string()).unwrap(),
        );
        // A gate without the return-path secret sends no way back (the room would ignore it).
        let resp = plain.redirect(&Method::GET, &Uri::from_static("/a?b=c"));
        assert_eq!(location(&resp), "/room");
    }
}
