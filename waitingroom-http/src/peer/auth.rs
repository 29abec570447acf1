//! Authenticating node-to-node requests and their answers from their headers alone.
//!
//! A peer request carries, in headers, everything its MAC covers: the method and logical path,
//! the key id, a timestamp, a random nonce, the sender's node id, the destination's node id and
//! incarnation, the body's length and the body's SHA-256 digest (see [`RequestHead`]). So a
//! receiver decides whether a request comes from a cluster member — and is meant for it, now,
//! for the first time — before it reads a single body byte: an unauthenticated request costs a
//! header parse and one HMAC, never memory for its body. Only then is the body read, up to the
//! length the MAC covers, and its digest compared.
//!
//! What each part defends against:
//! - the key id and MAC: requests from outside the cluster (see [`crate::crypto`]);
//! - the destination id and incarnation: a request captured on its way to node A and sent to
//!   node B, or to a later life of A, is refused (421). Destination 0 means "whoever listens at
//!   this URL": only protocol messages to a node known by address alone (a join request or a
//!   ping to a seed) may use it, and the MAC then covers that URL ([`peer_address`]): a node
//!   takes such a request only if the URL is the one it advertises, so a copy sent to another
//!   node is refused (401);
//! - the timestamp: a request is accepted only within `peer_clock_window_ms` of the receiver's
//!   clock, so a captured request is good for a few seconds at most;
//! - the nonce: within those seconds the receiver remembers every nonce it accepted
//!   ([`super::replay::ReplayCache`]) and refuses a second copy.
//!
//! An answer to a forwarded visitor request is authenticated too ([`ReplyHead`]): the owner's
//! MAC covers the request's nonce, the status, its own id and the body's digest, so the
//! forwarding node trusts only an answer the owner made for this very request.

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use waitingroom_core::{KeyError, NodeId, Time};

use super::replay::{Admit, ReplayCache};
use crate::crypto::Crypto;

/// Header naming the key a peer request or answer is authenticated with.
pub const HEADER_KID: &str = "x-waitingroom-kid";
/// Header carrying the Unix time in milliseconds at which a peer request was made.
pub const HEADER_TIMESTAMP: &str = "x-waitingroom-timestamp";
/// Header carrying a peer request's random nonce (16 lowercase hex digits).
pub const HEADER_NONCE: &str = "x-waitingroom-nonce";
/// Header carrying the sending node's id.
pub const HEADER_FROM: &str = "x-waitingroom-from";
/// Header carrying the destination node's id (0: whoever listens at the URL).
pub const HEADER_TO: &str = "x-waitingroom-to";
/// Header carrying the destination node's incarnation (0 with destination 0).
pub const HEADER_TO_INCARNATION: &str = "x-waitingroom-to-incarnation";
/// Header carrying, for destination 0, the URL the request was sent to ([`peer_address`]);
/// empty for any other destination.
pub const HEADER_TO_ADDRESS: &str = "x-waitingroom-to-address";
/// Header carrying the base64url SHA-256 digest of the body.
pub const HEADER_DIGEST: &str = "x-waitingroom-body-sha256";
/// Header carrying the base64url HMAC-SHA256 of a peer request or answer.
pub const HEADER_SIGNATURE: &str = "x-waitingroom-signature";

/// Every header a peer request's MAC covers (`content-length` included), in the order of
/// [`RequestHead`]'s fields.
pub const COVERED_HEADERS: [&str; 10] = [
    HEADER_KID,
    HEADER_TIMESTAMP,
    HEADER_NONCE,
    HEADER_FROM,
    HEADER_TO,
    HEADER_TO_INCARNATION,
    HEADER_TO_ADDRESS,
    HEADER_DIGEST,
    HEADER_SIGNATURE,
    "content-length",
];

/// Why a peer request (or a peer's answer) was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PeerAuthError {
    /// A header the MAC covers is missing or malformed.
    #[error("missing or malformed peer header {0}")]
    Missing(&'static str),
    /// The timestamp is further from this node's clock than the window allows.
    #[error("peer request timestamp is more than {window_ms} ms away from this node's clock")]
    Stale {
        /// The accepted distance, ms.
        window_ms: u64,
    },
    /// The MAC does not match: the sender does not hold this cluster's key.
    #[error("peer signature does not verify: {0}")]
    BadSignature(KeyError),
    /// The request is signed for another node (or another life of this one).
    #[error("peer request is addressed to node {to} incarnation {incarnation}, not to this node")]
    Misdirected {
        /// Destination id as signed.
        to: u64,
        /// Destination incarnation as signed.
        incarnation: u64,
    },
    /// Sent to destination 0 at another node's URL: a copy of a request meant for another node.
    #[error("peer request to destination 0 was sent to {address}, not to this node's URL")]
    WrongAddress {
        /// The URL as signed.
        address: String,
    },
    /// This nonce was accepted before, within the window.
    #[error("peer request replayed (nonce seen before)")]
    Replayed,
    /// The replay cache is full: the request cannot be checked for replay now.
    #[error("too many recent peer requests to check for replay; retry shortly")]
    ReplayCacheFull,
    /// The declared body is larger than this node accepts.
    #[error("peer request body of {len} bytes is larger than the {limit} allowed")]
    TooLarge {
        /// Declared length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The body is not the one the MAC covers.
    #[error("peer request body does not match its signed length and digest")]
    BodyMismatch,
}

impl PeerAuthError {
    /// Every [`PeerAuthError::reason`], so a dashboard finds each series before its first
    /// refusal.
    pub const REASONS: [&'static str; 9] = [
        "missing",
        "stale",
        "bad_signature",
        "misdirected",
        "wrong_address",
        "replayed",
        "replay_cache_full",
        "too_large",
        "body_mismatch",
    ];

    /// The metric label of this refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            PeerAuthError::Missing(_) => "missing",
            PeerAuthError::Stale { .. } => "stale",
            PeerAuthError::BadSignature(_) => "bad_signature",
            PeerAuthError::Misdirected { .. } => "misdirected",
            PeerAuthError::WrongAddress { .. } => "wrong_address",
            PeerAuthError::Replayed => "replayed",
            PeerAuthError::ReplayCacheFull => "replay_cache_full",
            PeerAuthError::TooLarge { .. } => "too_large",
            PeerAuthError::BodyMismatch => "body_mismatch",
        }
    }
}

/// The SHA-256 digest of a body.
pub fn body_digest(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// What a peer request's MAC covers: everything about it, the body by its length and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// HTTP method.
    pub method: String,
    /// Logical path (whatever URL prefix the advertised address has).
    pub path: String,
    /// The key the MAC is made with.
    pub kid: String,
    /// Unix ms at which the request was made.
    pub timestamp_ms: Time,
    /// Random, unique per request.
    pub nonce: u64,
    /// The sending node.
    pub from: NodeId,
    /// The destination node; 0: whoever listens at the URL.
    pub to: NodeId,
    /// The destination's incarnation (0 with destination 0).
    pub to_incarnation: u64,
    /// With destination 0, the URL the request was sent to ([`peer_address`]); else empty.
    pub to_address: String,
    /// Body length, bytes.
    pub content_length: u64,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
}

/// Who is sending a request, to whom, and what: the parts of a [`RequestHead`] the caller
/// chooses (the rest come from the key, the clock and the body).
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// Logical path.
    pub path: &'a str,
    /// The sending node.
    pub from: NodeId,
    /// The destination node (0: known by address only).
    pub to: NodeId,
    /// The destination's incarnation.
    pub to_incarnation: u64,
}

/// A peer URL as a request to destination 0 names it: scheme, host and port (the default port
/// left out), then the path without a trailing `/`; so two spellings of one URL sign the same.
/// Text that is not a URL stays as it is (and matches no node's).
pub fn peer_address(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}{}",
            u.origin().ascii_serialization(),
            u.path().trim_end_matches('/')
        ),
        Err(_) => url.to_owned(),
    }
}

impl RequestHead {
    /// Signs a POST of `body` along `route` at `now` with `nonce`: the head and its MAC. A
    /// request to destination 0 is signed for no address: use [`RequestHead::sign_to`].
    pub fn sign(
        crypto: &Crypto,
        route: Route<'_>,
        now: Time,
        nonce: u64,
        body: &[u8],
    ) -> (RequestHead, [u8; 32]) {
        Self::sign_to(crypto, route, "", now, nonce, body)
    }

    /// [`RequestHead::sign`], bound to `address` ([`peer_address`] of the URL it is sent to)
    /// when the destination is 0.
    pub fn sign_to(
        crypto: &Crypto,
        route: Route<'_>,
        address: &str,
        now: Time,
        nonce: u64,
        body: &[u8],
    ) -> (RequestHead, [u8; 32]) {
        let head = RequestHead {
            method: "POST".to_owned(),
            path: route.path.to_owned(),
            kid: crypto.kid().to_owned(),
            timestamp_ms: now,
            nonce,
            from: route.from,
            to: route.to,
            to_incarnation: route.to_incarnation,
            to_address: if route.to.0 == 0 {
                peer_address(address)
            } else {
                String::new()
            },
            content_length: body.len() as u64,
            body_sha256: body_digest(body),
        };
        let mac = crypto.peer_mac(head.signed_text().as_bytes());
        (head, mac)
    }

    /// The canonical text the MAC covers. Every field is a number, a fixed-alphabet encoding,
    /// or text without line breaks (header values cannot hold one), so no two heads share it.
    fn signed_text(&self) -> String {
        format!(
            "waitingroom peer request v3\n{}\n{}\n{}\n{}\n{:016x}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.method,
            self.path,
            self.kid,
            self.timestamp_ms,
            self.nonce,
            self.from.0,
            self.to.0,
            self.to_incarnation,
            self.to_address,
            self.content_length,
            URL_SAFE_NO_PAD.encode(self.body_sha256),
        )
    }

    /// The headers that carry this head and its `mac` (besides `content-length`, which the
    /// HTTP client sets from the body).
    pub fn headers(&self, mac: &[u8; 32]) -> [(&'static str, String); 9] {
        [
            (HEADER_KID, self.kid.clone()),
            (HEADER_TIMESTAMP, self.timestamp_ms.to_string()),
            (HEADER_NONCE, format!("{:016x}", self.nonce)),
            (HEADER_FROM, self.from.0.to_string()),
            (HEADER_TO, self.to.0.to_string()),
            (HEADER_TO_INCARNATION, self.to_incarnation.to_string()),
            (HEADER_TO_ADDRESS, self.to_address.clone()),
            (HEADER_DIGEST, URL_SAFE_NO_PAD.encode(self.body_sha256)),
            (HEADER_SIGNATURE, URL_SAFE_NO_PAD.encode(mac)),
        ]
    }

    /// Reads the head of a `method` request to `path` and its MAC from `headers`. Strict: every
    /// number is plain decimal digits, the nonce 16 lowercase hex digits, digests and MACs
    /// unpadded base64url of 32 bytes.
    pub fn from_headers(
        method: &str,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<(RequestHead, [u8; 32]), PeerAuthError> {
        let head = RequestHead {
            method: method.to_owned(),
            path: path.to_owned(),
            kid: text(headers, HEADER_KID)?.to_owned(),
            timestamp_ms: number(headers, HEADER_TIMESTAMP)?,
            nonce: nonce(text(headers, HEADER_NONCE)?)
                .ok_or(PeerAuthError::Missing(HEADER_NONCE))?,
            from: NodeId(number(headers, HEADER_FROM)?),
            to: NodeId(number(headers, HEADER_TO)?),
            to_incarnation: number(headers, HEADER_TO_INCARNATION)?,
            to_address: text(headers, HEADER_TO_ADDRESS)?.to_owned(),
            content_length: number(headers, "content-length")?,
            body_sha256: bytes32(headers, HEADER_DIGEST)?,
        };
        Ok((head, bytes32(headers, HEADER_SIGNATURE)?))
    }
}

/// What a receiving node expects of a peer request.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// This node's id.
    pub me: NodeId,
    /// The URL this node advertises ([`peer_address`] of it): the only one a request to
    /// destination 0 may have been sent to.
    pub address: &'a str,
    /// This node's incarnation.
    pub incarnation: u64,
    /// Whether destination 0 (address only) is acceptable on this route.
    pub by_address: bool,
    /// Largest body accepted, bytes.
    pub max_body: u64,
    /// Largest distance between the request's timestamp and this node's clock, ms.
    pub window_ms: u64,
}

/// Checks a peer request from its headers alone, in this order: every covered header present
/// and well-formed; the timestamp within the window; the MAC; the declared body within the
/// limit; the destination; and last (so only authenticated requests ever take a place in it)
/// the replay cache. Returns the head; the caller then reads at most `content_length` body bytes
/// and checks them with [`check_body`].
pub fn check_head(
    crypto: &Crypto,
    expect: &Expect<'_>,
    method: &str,
    path: &str,
    headers: &HeaderMap,
    now: Time,
    replay: &ReplayCache,
) -> Result<RequestHead, PeerAuthError> {
    let (head, mac) = RequestHead::from_headers(method, path, headers)?;
    if head.timestamp_ms.abs_diff(now) > expect.window_ms {
        return Err(PeerAuthError::Stale {
            window_ms: expect.window_ms,
        });
    }
    crypto
        .verify_peer_mac(&head.kid, head.signed_text().as_bytes(), &mac)
        .map_err(PeerAuthError::BadSignature)?;
    if head.content_length > expect.max_body {
        return Err(PeerAuthError::TooLarge {
            len: head.content_length,
            limit: expect.max_body,
        });
    }
    let to_me = head.to == expect.me && head.to_incarnation == expect.incarnation;
    let by_address = expect.by_address && head.to.0 == 0 && head.to_incarnation == 0;
    if !(to_me || by_address) {
        return Err(PeerAuthError::Misdirected {
            to: head.to.0,
            incarnation: head.to_incarnation,
        });
    }
    if by_address && head.to_address != expect.address {
        return Err(PeerAuthError::WrongAddress {
            address: head.to_address,
        });
    }
    match replay.admit(head.nonce, head.timestamp_ms, now) {
        Admit::Fresh => Ok(head),
        Admit::Replayed => Err(PeerAuthError::Replayed),
        // The clock stepped back past a forgotten nonce's time: too old to tell from a replay.
        Admit::TooOld => Err(PeerAuthError::Stale {
            window_ms: expect.window_ms,
        }),
        Admit::Full => Err(PeerAuthError::ReplayCacheFull),
    }
}

/// Checks that `body` is the one `head` covers.
pub fn check_body(head: &RequestHead, body: &[u8]) -> Result<(), PeerAuthError> {
    if body.len() as u64 == head.content_length && body_digest(body) == head.body_sha256 {
        Ok(())
    } else {
        Err(PeerAuthError::BodyMismatch)
    }
}

/// What the MAC of an answer to a forwarded request covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHead {
    /// The nonce of the request answered.
    pub request_nonce: u64,
    /// HTTP status of the answer.
    pub status: u16,
    /// The key the MAC is made with.
    pub kid: String,
    /// The answering node.
    pub from: NodeId,
    /// Body length, bytes.
    pub content_length: u64,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
}

impl ReplyHead {
    /// Signs an answer to the request with nonce `request_nonce`: the headers to send with it.
    pub fn sign(
        crypto: &Crypto,
        request_nonce: u64,
        status: u16,
        from: NodeId,
        body: &[u8],
    ) -> [(&'static str, String); 3] {
        let head = ReplyHead {
            request_nonce,
            status,
            kid: crypto.kid().to_owned(),
            from,
            content_length: body.len() as u64,
            body_sha256: body_digest(body),
        };
        let mac = crypto.peer_mac(head.signed_text().as_bytes());
        [
            (HEADER_KID, head.kid),
            (HEADER_DIGEST, URL_SAFE_NO_PAD.encode(head.body_sha256)),
            (HEADER_SIGNATURE, URL_SAFE_NO_PAD.encode(mac)),
        ]
    }

    fn signed_text(&self) -> String {
        format!(
            "waitingroom peer reply v2\n{:016x}\n{}\n{}\n{}\n{}\n{}",
            self.request_nonce,
            self.status,
            self.kid,
            self.from.0,
            self.content_length,
            URL_SAFE_NO_PAD.encode(self.body_sha256),
        )
    }

    /// Checks an answer from node `from` to the request with nonce `request_nonce`: its status,
    /// headers and whole body.
    pub fn check(
        crypto: &Crypto,
        request_nonce: u64,
        from: NodeId,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), PeerAuthError> {
        let head = ReplyHead {
            request_nonce,
            status,
            kid: text(headers, HEADER_KID)?.to_owned(),
            from,
            content_length: body.len() as u64,
            body_sha256: bytes32(headers, HEADER_DIGEST)?,
        };
        let mac = bytes32(headers, HEADER_SIGNATURE)?;
        crypto
            .verify_peer_mac(&head.kid, head.signed_text().as_bytes(), &mac)
            .map_err(PeerAuthError::BadSignature)?;
        if body_digest(body) == head.body_sha256 {
            Ok(())
        } else {
            Err(PeerAuthError::BodyMismatch)
        }
    }
}

fn text<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, PeerAuthError> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        // Exactly one line: two could be read differently by two readers.
        (Some(v), None) => v.to_str().map_err(|_| PeerAuthError::Missing(name)),
        _ => Err(PeerAuthError::Missing(name)),
    }
}

fn number(headers: &HeaderMap, name: &'static str) -> Result<u64, PeerAuthError> {
    let t = text(headers, name)?;
    // `u64::from_str` also takes a leading `+`; only digits, at most 20 of them.
    if t.is_empty() || t.len() > 20 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PeerAuthError::Missing(name));
    }
    t.parse().map_err(|_| PeerAuthError::Missing(name))
}

fn nonce(t: &str) -> Option<u64> {
    let ok = t.len() == 16 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| u64::from_str_radix(t, 16).ok()).flatten()
}

fn bytes32(headers: &HeaderMap, name: &'static str) -> Result<[u8; 32], PeerAuthError> {
    let t = text(headers, name)?;
    // 43 characters decode to 32 bytes; base64 wants room for its estimate, 33.
    let mut out = [0u8; 33];
    match URL_SAFE_NO_PAD.decode_slice(t, &mut out) {
        Ok(32) if t.len() == 43 => {
            let mut b = [0u8; 32];
            b.copy_from_slice(&out[..32]);
            Ok(b)
        }
        _ => Err(PeerAuthError::Missing(name)),
    }
}

/// How this node's signatures fare with its peers: when a peer last refused one of its signed
/// requests (401: not the cluster's key, or a timestamp outside the peer's window), and when it
/// last heard valid peer traffic (a request that passed [`check_head`], or a peer that took one
/// of its requests). A node whose requests are refused and who hears nothing valid is not part
/// of the cluster, whatever its own membership says: `/readyz` fails
/// (docs/operating.md#readiness). Times are this node's clock, ms (0: never).
#[derive(Debug, Default)]
pub struct Standing {
    refused_at: std::sync::atomic::AtomicU64,
    heard_at: std::sync::atomic::AtomicU64,
}

impl Standing {
    /// A peer refused this node's signature at `now`.
    pub fn refused(&self, now: Time) {
        self.refused_at
            .fetch_max(now, std::sync::atomic::Ordering::AcqRel);
    }

    /// Valid peer traffic at `now`.
    pub fn heard(&self, now: Time) {
        self.heard_at
            .fetch_max(now, std::sync::atomic::Ordering::AcqRel);
    }

    /// Whether, at `now`, a peer refused this node since it last heard valid traffic, and that
    /// was `grace` ms ago or more: one peer that refuses it (one started with another key) is
    /// not enough while others talk to it.
    pub fn is_refused(&self, now: Time, grace: Time) -> bool {
        let refused = self.refused_at.load(std::sync::atomic::Ordering::Acquire);
        let heard = self.heard_at.load(std::sync::atomic::Ordering::Acquire);
        refused > 0 && refused >= heard && now.saturating_sub(heard) >= grace
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const ME: NodeId = NodeId(7);

    fn expect() -> Expect<'static> {
        Expect {
            me: ME,
            address: "http://10.0.0.7:9090",
            incarnation: 3,
            by_address: false,
            max_body: 1024,
            window_ms: 5_000,
        }
    }

    fn signed(crypto: &Crypto, to: (u64, u64), now: Time, nonce: u64, body: &[u8]) -> HeaderMap {
        signed_to(crypto, (to, "http://10.0.0.7:9090/"), now, nonce, body)
    }

    fn signed_to(
        crypto: &Crypto,
        (to, address): ((u64, u64), &str),
        now: Time,
        nonce: u64,
        body: &[u8],
    ) -> HeaderMap {
        let route = Route {
            path: "/peer/messages",
            from: NodeId(2),
            to: NodeId(to.0),
            to_incarnation: to.1,
        };
        let (head, mac) = RequestHead::sign_to(crypto, route, address, now, nonce, body);
        let mut h = HeaderMap::new();
        for (name, value) in head.headers(&mac) {
            h.insert(name, HeaderValue::from_str(&value).unwrap());
        }
        h.insert("content-length", body.len().into());
        h
    }

    fn check(
        c: &Crypto,
        e: &Expect,
        h: &HeaderMap,
        now: Time,
        r: &ReplayCache,
    ) -> Result<RequestHead, PeerAuthError> {
        check_head(c, e, "POST", "/peer/messages", h, now, r)
    }

    #[test]
    fn a_request_is_accepted_once_and_only_where_and_when_it_was_meant() {
        let c = Crypto::generate();
        let r = ReplayCache::new(16, 5_000);
        let h = signed(&c, (7, 3), 10_000, 1, b"[]");
        let head = check(&c, &expect(), &h, 12_000, &r).unwrap();
        check_body(&head, b"[]").unwrap();
        assert_eq!(check_body(&head, b"[1]"), Err(PeerAuthError::BodyMismatch));
        assert_eq!(
            check(&c, &expect(), &h, 12_000, &r),
            Err(PeerAuthError::Replayed)
        );
        // Another node, another life of this one, destination 0 where it is not allowed.
        for to in [(8, 3), (7, 4), (0, 0)] {
            let h = signed(&c, to, 10_000, 2, b"[]");
            assert!(
                matches!(
                    check(&c, &expect(), &h, 10_000, &r),
                    Err(PeerAuthError::Misdirected { .. })
                ),
                "{to:?}"
            );
        }
        let by_address = Expect {
            by_address: true,
            ..expect()
        };
        let h = signed(&c, (0, 0), 10_000, 3, b"[]");
        assert!(check(&c, &by_address, &h, 10_000, &r).is_ok());
        // Destination 0 is bound to the URL it was sent to: a copy sent to another node (whose
        // URL it is not) is refused, whatever its nonce; so is one signed for no URL.
        for (nonce, address) in [(30, "http://10.0.0.8:9090"), (31, "")] {
            let h = signed_to(&c, ((0, 0), address), 10_000, nonce, b"[]");
            assert_eq!(
                check(&c, &by_address, &h, 10_000, &r),
                Err(PeerAuthError::WrongAddress {
                    address: peer_address(address)
                }),
                "{address}"
            );
        }
        // Two spellings of the same URL are the same address.
        let h = signed_to(&c, ((0, 0), "HTTP://10.0.0.7:9090"), 10_000, 32, b"[]");
        assert!(check(&c, &by_address, &h, 10_000, &r).is_ok());
        // Too old, too new, another key, too big.
        let h = signed(&c, (7, 3), 10_000, 4, b"[]");
        assert_eq!(
            check(&c, &expect(), &h, 15_001, &r),
            Err(PeerAuthError::Stale { window_ms: 5_000 })
        );
        assert_eq!(
            check(&c, &expect(), &h, 4_999, &r),
            Err(PeerAuthError::Stale { window_ms: 5_000 })
        );
        let other = Crypto::generate();
        assert!(matches!(
            check(&other, &expect(), &h, 10_000, &r),
            Err(PeerAuthError::BadSignature(_))
        ));
        let big = signed(&c, (7, 3), 10_000, 5, &[b' '; 1025]);
        assert!(matches!(
            check(&c, &expect(), &big, 10_000, &r),
            Err(PeerAuthError::TooLarge { .. })
        ));
    }

    #[test]
    fn every_covered_header_matters() {
        let c = Crypto::generate();
        let h = signed(&c, (7, 3), 10_000, 9, b"[]");
        for name in COVERED_HEADERS {
            let r = ReplayCache::new(16, 5_000);
            let mut missing = h.clone();
            missing.remove(name);
            assert!(
                check(&c, &expect(), &missing, 10_000, &r).is_err(),
                "without {name}"
            );
            let mut doubled = h.clone();
            doubled.append(name, h[name].clone());
            assert!(
                check(&c, &expect(), &doubled, 10_000, &r).is_err(),
                "twice {name}"
            );
        }
        // A changed value breaks the MAC (or the parse).
        for (name, value) in [
            (HEADER_TIMESTAMP, "10001"),
            (HEADER_NONCE, "000000000000000a"),
            (HEADER_FROM, "3"),
            (HEADER_TO_ADDRESS, "http://10.0.0.8:9090"),
            ("content-length", "3"),
            (HEADER_TIMESTAMP, "+10000"),
            (HEADER_NONCE, "000000000000000A"),
        ] {
            let r = ReplayCache::new(16, 5_000);
            let mut changed = h.clone();
            changed.insert(name, HeaderValue::from_static(value));
            assert!(
                check(&c, &expect(), &changed, 10_000, &r).is_err(),
                "{name}: {value}"
            );
        }
    }

    #[test]
    fn replies_are_bound_to_the_request_and_the_replier() {
        let c = Crypto::generate();
        let body = br#"[{"status":200,"body":{}}]"#;
        let mut h = HeaderMap::new();
        for (name, value) in ReplyHead::sign(&c, 42, 200, ME, body) {
            h.insert(name, HeaderValue::from_str(&value).unwrap());
        }
        ReplyHead::check(&c, 42, ME, 200, &h, body).unwrap();
        assert!(
            ReplyHead::check(&c, 43, ME, 200, &h, body).is_err(),
            "another request"
        );
        assert!(
            ReplyHead::check(&c, 42, NodeId(8), 200, &h, body).is_err(),
            "another node"
        );
        assert!(
            ReplyHead::check(&c, 42, ME, 503, &h, body).is_err(),
            "another status"
        );
        assert!(
            ReplyHead::check(&c, 42, ME, 200, &h, b"[]").is_err(),
            "another body"
        );
        assert!(ReplyHead::check(&Crypto::generate(), 42, ME, 200, &h, body).is_err());
        assert!(ReplyHead::check(&c, 42, ME, 200, &HeaderMap::new(), body).is_err());
    }
}
