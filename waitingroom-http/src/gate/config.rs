//! What a gate is told: where the room's keys are and where visitors go, and which requests
//! skip the room.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::http::HeaderName;
use subtle::ConstantTimeEq as _;

use crate::crypto::return_path::ReturnPathKey;
use crate::wire::client_addr::Cidr;
use crate::wire::cookies;

/// Where the gate gets its keys and sends visitors.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// A node's (or the balancer's) `/.well-known/jwks.json`.
    pub jwks_url: String,
    /// The waiting room as the visitor's browser reaches it; visitors without a valid pass are
    /// sent here, with `return_to` added to its query.
    pub waiting_room_url: String,
    /// Least time between two JWKS fetches caused by unknown key ids.
    pub refetch_interval: Duration,
    /// Requests that skip the room altogether.
    pub bypass: Bypass,
    /// The pass cookie's name: `wr_pass`, with the room's `cookie_name_suffix` if it has one.
    pub pass_cookie: String,
    /// Signs the way back (`waitingroom-node gate-secret`); without it visitors are sent to the
    /// room without one, and land on the site's front page once let in.
    pub return_key: Option<ReturnPathKey>,
}

impl GateConfig {
    /// The usual settings: refetch at most every 30 s, nothing bypasses the room.
    pub fn new(jwks_url: impl Into<String>, waiting_room_url: impl Into<String>) -> Self {
        GateConfig {
            jwks_url: jwks_url.into(),
            waiting_room_url: waiting_room_url.into(),
            refetch_interval: Duration::from_secs(30),
            bypass: Bypass::default(),
            pass_cookie: cookies::PASS.to_owned(),
            return_key: None,
        }
    }
}

/// Requests the gate lets through without a pass (and without counting them against the
/// target): health checks and static files by path, monitoring and staff networks, and
/// trusted callers that present a secret header. Such a request carries no
/// [`Pass`](waitingroom_core::Pass).
#[derive(Debug, Clone, Default)]
pub struct Bypass {
    /// Path prefixes, e.g. `/healthz`, `/static/` (compared with the request's path as is).
    pub path_prefixes: Vec<String>,
    /// Client networks (the TCP peer, `ConnectInfo<SocketAddr>`; behind a proxy, the proxy's
    /// address: list the networks the proxy itself is told to pass).
    pub networks: Vec<Cidr>,
    /// A header and its secret value, compared in constant time.
    pub header: Option<(HeaderName, String)>,
}

impl Bypass {
    /// Whether `req` skips the room.
    pub fn matches(&self, req: &Request) -> bool {
        let path = req.uri().path();
        if self
            .path_prefixes
            .iter()
            .any(|p| path.starts_with(p.as_str()))
        {
            return true;
        }
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if peer.is_some_and(|ip| self.networks.iter().any(|n| n.contains(ip))) {
            return true;
        }
        self.header.as_ref().is_some_and(|(name, secret)| {
            req.headers()
                .get(name)
                .is_some_and(|v| bool::from(v.as_bytes().ct_eq(secret.as_bytes())))
        })
    }
}
