//! The cluster key as the server uses it: signing tickets and passes, verifying them, and
//! authenticating peer requests.
//!
//! Every node holds the same Ed25519 key, so any node verifies what any other signed. Peer
//! requests carry an HMAC-SHA256 over `method \n path \n timestamp \n body`, keyed with a
//! secret derived from the cluster key ([`ClusterKey::derive_secret`]): only holders of the key
//! can make one, and it costs a microsecond where an Ed25519 signature and its check cost about
//! 70. A request older than [`MAX_PEER_SKEW_MS`] (or as far in the future) is refused, which
//! bounds replays to that window (and the protocol's per-link sequence numbers drop replayed
//! channel messages anyway).

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use waitingroom_core::{Pass, Ticket, Time};

use waitingroom_core::token as tokens;
use waitingroom_core::{ClusterKey, VerifyingKeySet};
pub use waitingroom_core::{KeyError, TokenError};

/// Header naming the signing key of a peer request.
pub const HEADER_KID: &str = "x-waitingroom-kid";
/// Header carrying the Unix time in milliseconds at which a peer request was signed.
pub const HEADER_TIMESTAMP: &str = "x-waitingroom-timestamp";
/// Header carrying the base64url HMAC-SHA256 of a peer request.
pub const HEADER_SIGNATURE: &str = "x-waitingroom-signature";
/// Peer requests signed further than this from our clock are refused.
pub const MAX_PEER_SKEW_MS: u64 = 30_000;

/// Why a peer request was not accepted as coming from a cluster member.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PeerAuthError {
    /// A signature header is missing or unreadable.
    #[error("missing or malformed peer signature headers")]
    Missing,
    /// The timestamp is too far from our clock.
    #[error(
        "peer request timestamp is more than {MAX_PEER_SKEW_MS} ms away from this node's clock"
    )]
    Stale,
    /// The MAC does not match: the sender does not hold this cluster's key.
    #[error("peer request signature does not verify: {0}")]
    BadSignature(KeyError),
}

/// Why the cluster key could not be loaded.
#[derive(Debug, Error)]
pub enum LoadKeyError {
    /// The file could not be read.
    #[error("cannot read key file {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("key file {path} does not hold a usable key: {source}")]
    Parse {
        /// The path.
        path: String,
        /// Why.
        source: KeyError,
    },
}

/// Signed headers of one peer request.
#[derive(Debug, Clone)]
pub struct PeerSignature {
    /// Key id.
    pub kid: String,
    /// Unix ms.
    pub timestamp: u64,
    /// base64url HMAC-SHA256.
    pub signature: String,
}

/// The cluster key and the public keys derived from it.
#[derive(Clone)]
pub struct Crypto {
    key: ClusterKey,
    keys: VerifyingKeySet,
    /// Secret of the peer request MACs.
    peer_mac_key: [u8; 32],
}

impl std::fmt::Debug for Crypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crypto")
            .field("kid", &self.key.kid())
            .finish_non_exhaustive()
    }
}

impl Crypto {
    /// Wraps a cluster key.
    pub fn new(key: ClusterKey) -> Self {
        let keys = key.verifying_keys();
        let peer_mac_key = key.derive_secret(PEER_MAC_LABEL);
        Crypto {
            key,
            keys,
            peer_mac_key,
        }
    }

    /// A fresh random key (from the OS generator).
    pub fn generate() -> Self {
        // The OS generator; whoever could predict the key could forge passes.
        Self::new(ClusterKey::from_seed(rand::random()))
    }

    /// Reads the key file (PKCS#8 PEM, or whatever `ClusterKey::parse` accepts).
    pub fn load(path: &Path) -> Result<Self, LoadKeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadKeyError::Read {
            path: shown.clone(),
            source,
        })?;
        let key = ClusterKey::parse(&text).map_err(|source| LoadKeyError::Parse {
            path: shown,
            source,
        })?;
        Ok(Self::new(key))
    }

    /// The private key as PKCS#8 PEM, for `keygen`.
    pub fn to_pkcs8_pem(&self) -> String {
        self.key.to_pkcs8_pem()
    }

    /// The public key as a JWK (JSON).
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::to_value(self.key.public_jwk()).unwrap_or_default()
    }

    /// The JWKS document served at `/.well-known/jwks.json`.
    pub fn jwks(&self) -> serde_json::Value {
        self.keys.jwks()
    }

    /// Signs a ticket.
    pub fn sign_ticket(&self, ticket: &Ticket) -> String {
        tokens::sign_ticket(&self.key, ticket)
    }

    /// Signs a pass.
    pub fn sign_pass(&self, pass: &Pass) -> String {
        tokens::sign_pass(&self.key, pass)
    }

    /// Verifies a ticket token at `now`.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        self.keys.verify_ticket(token, now)
    }

    /// Verifies a pass token at `now`.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.keys.verify_pass(token, now)
    }

    /// Signs a peer request (HMAC-SHA256 with the cluster's derived peer secret).
    pub fn sign_request(&self, method: &str, path: &str, now: Time, body: &[u8]) -> PeerSignature {
        let mac = hmac_sha256(
            &self.peer_mac_key,
            &request_message(method, path, now, body),
        );
        PeerSignature {
            kid: self.key.kid().to_owned(),
            timestamp: now,
            signature: URL_SAFE_NO_PAD.encode(mac),
        }
    }

    /// Checks a peer request's signature headers (`kid`, `timestamp`, `signature`, as sent).
    pub fn verify_request(
        &self,
        method: &str,
        path: &str,
        headers: (Option<&str>, Option<&str>, Option<&str>),
        body: &[u8],
        now: Time,
    ) -> Result<(), PeerAuthError> {
        let (Some(kid), Some(timestamp), Some(signature)) = headers else {
            return Err(PeerAuthError::Missing);
        };
        let timestamp: u64 = timestamp.parse().map_err(|_| PeerAuthError::Missing)?;
        if timestamp.abs_diff(now) > MAX_PEER_SKEW_MS {
            return Err(PeerAuthError::Stale);
        }
        let mac: [u8; 32] = URL_SAFE_NO_PAD
            .decode(signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(PeerAuthError::Missing)?;
        if kid != self.key.kid() {
            return Err(PeerAuthError::BadSignature(KeyError::UnknownKid(
                kid.to_owned(),
            )));
        }
        let expected = hmac_sha256(
            &self.peer_mac_key,
            &request_message(method, path, timestamp, body),
        );
        // Constant time: the comparison must not tell an attacker how many bytes matched.
        let diff = mac.iter().zip(&expected).fold(0u8, |d, (a, b)| d | (a ^ b));
        if diff == 0 {
            Ok(())
        } else {
            Err(PeerAuthError::BadSignature(KeyError::BadSignature))
        }
    }
}

/// Label of the secret that keys peer request MACs.
const PEER_MAC_LABEL: &str = "waitingroom peer request hmac-sha256";

/// HMAC-SHA256 (RFC 2104) with a key of at most 64 bytes.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    debug_assert!(key.len() <= 64);
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().take(64).enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Verifies passes with public keys only (a JWKS document), as an origin would.
#[derive(Debug, Clone)]
pub struct PassVerifier(VerifyingKeySet);

impl PassVerifier {
    /// Reads a JWKS document (`{"keys":[...]}`).
    pub fn from_jwks_json(json: &str) -> Result<Self, KeyError> {
        VerifyingKeySet::from_jwks_json(json).map(PassVerifier)
    }

    /// Verifies a pass token at `now`.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.0.verify_pass(token, now)
    }
}

/// What a peer request signature covers. The body goes last so no choice of body can make
/// two different (method, path, timestamp) triples produce the same bytes.
fn request_message(method: &str, path: &str, timestamp: u64, body: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(method.len() + path.len() + 24 + body.len());
    msg.extend_from_slice(method.as_bytes());
    msg.push(b'\n');
    msg.extend_from_slice(path.as_bytes());
    msg.push(b'\n');
    msg.extend_from_slice(timestamp.to_string().as_bytes());
    msg.push(b'\n');
    msg.extend_from_slice(body);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitingroom_core::{NodeId, TicketId};

    fn ticket(now: Time) -> Ticket {
        Ticket {
            id: TicketId(7),
            join_time: now,
            node: NodeId(1),
            issued_at: now,
            next_refresh: now + 1000,
            expires_at: now + 10_000,
            previous_position: Some(3),
            eviction_time: None,
        }
    }

    #[test]
    fn tokens_round_trip_and_other_keys_fail() {
        let a = Crypto::generate();
        let b = Crypto::generate();
        let t = ticket(1_000);
        let token = a.sign_ticket(&t);
        assert_eq!(a.verify_ticket(&token, 1_500).unwrap(), t);
        assert!(b.verify_ticket(&token, 1_500).is_err());
        assert!(a.verify_pass(&token, 1_500).is_err(), "a ticket is no pass");
        assert!(a.verify_ticket(&token, 11_000).is_err(), "expired");
    }

    #[test]
    fn request_signatures_cover_every_part() {
        let a = Crypto::generate();
        let s = a.sign_request("POST", "/peer/messages", 5_000, b"[]");
        let hdr = |s: &PeerSignature| (s.kid.clone(), s.timestamp.to_string(), s.signature.clone());
        let (k, t, g) = hdr(&s);
        let h = (Some(k.as_str()), Some(t.as_str()), Some(g.as_str()));
        a.verify_request("POST", "/peer/messages", h, b"[]", 6_000)
            .unwrap();
        assert!(
            a.verify_request("POST", "/peer/messages", h, b"[1]", 6_000)
                .is_err()
        );
        assert!(
            a.verify_request("POST", "/peer/other", h, b"[]", 6_000)
                .is_err()
        );
        assert_eq!(
            a.verify_request("POST", "/peer/messages", h, b"[]", 60_000),
            Err(PeerAuthError::Stale)
        );
        let b = Crypto::generate();
        assert!(
            b.verify_request("POST", "/peer/messages", h, b"[]", 6_000)
                .is_err()
        );
        assert_eq!(
            a.verify_request("POST", "/peer/messages", (None, None, None), b"[]", 6_000),
            Err(PeerAuthError::Missing)
        );
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn pem_round_trip() {
        let a = Crypto::generate();
        let pem = a.to_pkcs8_pem();
        let dir = std::env::temp_dir().join(format!("wr-key-{}", std::process::id()));
        std::fs::write(&dir, &pem).unwrap();
        let b = Crypto::load(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        let token = a.sign_ticket(&ticket(0));
        assert!(b.verify_ticket(&token, 1).is_ok());
    }
}
