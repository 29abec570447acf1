//! The cluster's keys as the server uses them: making and checking tickets and passes, and
//! authenticating peer requests.
//!
//! Every node holds the same cluster key, so any node checks what any other made. Passes are
//! EdDSA (Ed25519) tokens that origins verify offline from the JWKS; tickets, which only the
//! cluster reads, are HMAC-SHA256 tokens under a secret derived from the cluster key (see
//! [`waitingroom_core::token`]). Peer requests carry an HMAC-SHA256 over
//! `method \n path \n timestamp \n body`, keyed with another derived secret, separate from the
//! pass-signing key: only holders of the cluster key can make one, for a microsecond where an
//! Ed25519 signature and its check cost about 100. A request older than [`MAX_PEER_SKEW_MS`] (or
//! as far in the future) is refused, which bounds replays to that window (and the protocol's
//! per-link sequence numbers drop replayed channel messages anyway).
//!
//! For a key rotation a node holds previous keys besides the current one
//! ([`Crypto::with_previous`]): it makes everything with the current key and accepts tickets,
//! passes and peer requests made with any of them (see [`KeyRing`] for the steps).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use thiserror::Error;
use waitingroom_core::{Pass, Ticket, Time};

use waitingroom_core::{ClusterKey, KeyRing, VerifyingKeySet};
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

/// Why the cluster keys could not be loaded.
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
    /// A previous key is a different key under a key id already in use.
    #[error("a previous key clashes with another key: {0}")]
    Clash(KeyError),
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

/// The cluster's current key, any previous keys still accepted, and what is derived from them.
#[derive(Clone)]
pub struct Crypto {
    keys: KeyRing,
}

impl std::fmt::Debug for Crypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crypto")
            .field("kid", &self.keys.current().kid())
            .finish_non_exhaustive()
    }
}

impl Crypto {
    /// Wraps a cluster key.
    pub fn new(key: ClusterKey) -> Self {
        Crypto {
            keys: KeyRing::new(key),
        }
    }

    /// Makes everything with `current`, and also accepts what the `previous` keys made: the
    /// overlap of a key rotation. Fails if a previous key is a different key under a key id
    /// already in use.
    pub fn with_previous(current: ClusterKey, previous: Vec<ClusterKey>) -> Result<Self, KeyError> {
        KeyRing::with_previous(current, previous).map(|keys| Crypto { keys })
    }

    /// A fresh random key (from the OS generator).
    pub fn generate() -> Self {
        // The OS generator; whoever could predict the key could forge passes.
        Self::new(ClusterKey::from_seed(rand::random()))
    }

    /// Reads the key file (PKCS#8 PEM, or whatever `ClusterKey::parse` accepts).
    pub fn load(path: &Path) -> Result<Self, LoadKeyError> {
        read_key(path).map(Self::new)
    }

    /// Reads the current key file and the files of the previous keys still accepted.
    pub fn load_with_previous(path: &Path, previous: &[PathBuf]) -> Result<Self, LoadKeyError> {
        let current = read_key(path)?;
        let previous = previous
            .iter()
            .map(|p| read_key(p))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_previous(current, previous).map_err(LoadKeyError::Clash)
    }

    /// The private key as PKCS#8 PEM, for `keygen`.
    pub fn to_pkcs8_pem(&self) -> String {
        self.keys.current().to_pkcs8_pem()
    }

    /// The current public key as a JWK (JSON).
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::to_value(self.keys.current().public_jwk()).unwrap_or_default()
    }

    /// The JWKS document served at `/.well-known/jwks.json`: every key, current first.
    pub fn jwks(&self) -> serde_json::Value {
        self.keys.public().jwks()
    }

    /// Makes a ticket token (HMAC-SHA256, current key).
    pub fn sign_ticket(&self, ticket: &Ticket) -> String {
        self.keys.sign_ticket(ticket)
    }

    /// Signs a pass (EdDSA, current key).
    pub fn sign_pass(&self, pass: &Pass) -> String {
        self.keys.sign_pass(pass)
    }

    /// Verifies a ticket token at `now`.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        self.keys.verify_ticket(token, now)
    }

    /// Verifies a pass token at `now`.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.keys.verify_pass(token, now)
    }

    /// Signs a peer request (HMAC-SHA256 with the current key's derived peer secret).
    pub fn sign_request(&self, method: &str, path: &str, now: Time, body: &[u8]) -> PeerSignature {
        let timestamp = now.to_string();
        let mac = self
            .keys
            .peer_mac(&request_parts(method, path, &timestamp, body));
        PeerSignature {
            kid: self.keys.current().kid().to_owned(),
            timestamp: now,
            signature: URL_SAFE_NO_PAD.encode(mac),
        }
    }

    /// Checks a peer request's signature headers (`kid`, `timestamp`, `signature`, as sent)
    /// against the peer secret of the key `kid` names.
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
        let timestamp_ms: u64 = timestamp.parse().map_err(|_| PeerAuthError::Missing)?;
        if timestamp_ms.abs_diff(now) > MAX_PEER_SKEW_MS {
            return Err(PeerAuthError::Stale);
        }
        // 43 characters decode to 32 bytes; base64 wants room for its estimate, 33.
        let mut mac = [0u8; 33];
        let Ok(32) = URL_SAFE_NO_PAD.decode_slice(signature, &mut mac) else {
            return Err(PeerAuthError::Missing);
        };
        // The timestamp as sent: the MAC covers exactly the header's text.
        self.keys
            .verify_peer_mac(
                kid,
                &request_parts(method, path, timestamp, body),
                &mac[..32],
            )
            .map_err(PeerAuthError::BadSignature)
    }
}

fn read_key(path: &Path) -> Result<ClusterKey, LoadKeyError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadKeyError::Read {
        path: shown.clone(),
        source,
    })?;
    ClusterKey::parse(&text).map_err(|source| LoadKeyError::Parse {
        path: shown,
        source,
    })
}

/// What a peer request MAC covers, in order. The body goes last so no choice of body can make
/// two different (method, path, timestamp) triples produce the same bytes.
fn request_parts<'a>(
    method: &'a str,
    path: &'a str,
    timestamp: &'a str,
    body: &'a [u8],
) -> [&'a [u8]; 7] {
    [
        method.as_bytes(),
        b"\n",
        path.as_bytes(),
        b"\n",
        timestamp.as_bytes(),
        b"\n",
        body,
    ]
}

/// HMAC-SHA256 under any key: the tests forge tokens with it.
#[cfg(test)]
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(message);
    mac.finalize().into_bytes().into()
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
    fn previous_keys_are_accepted_through_a_rotation_and_not_after() {
        let old_key = ClusterKey::from_seed([1; 32]);
        let new_key = ClusterKey::from_seed([2; 32]);
        let old = Crypto::new(old_key.clone());
        let both = Crypto::with_previous(new_key.clone(), vec![old_key.clone()]).unwrap();
        let only_new = Crypto::new(new_key.clone());
        let t = ticket(1_000);
        let pass = Pass {
            id: t.id,
            node: t.node,
            queue_join_time: t.join_time,
            created_at: 1_000,
            issued_at: 1_000,
            expires_at: 11_000,
            eviction_time: 900,
        };
        let (old_ticket, old_pass) = (old.sign_ticket(&t), old.sign_pass(&pass));
        let s = old.sign_request("POST", "/peer/messages", 5_000, b"[]");
        let ts = s.timestamp.to_string();
        let h = (
            Some(s.kid.as_str()),
            Some(ts.as_str()),
            Some(s.signature.as_str()),
        );
        assert_eq!(both.verify_ticket(&old_ticket, 1_500), Ok(t.clone()));
        assert_eq!(both.verify_pass(&old_pass, 1_500), Ok(pass.clone()));
        assert_eq!(
            both.verify_request("POST", "/peer/messages", h, b"[]", 6_000),
            Ok(())
        );
        assert!(only_new.verify_ticket(&old_ticket, 1_500).is_err());
        assert!(only_new.verify_pass(&old_pass, 1_500).is_err());
        assert_eq!(
            only_new.verify_request("POST", "/peer/messages", h, b"[]", 6_000),
            Err(PeerAuthError::BadSignature(KeyError::UnknownKid(
                old_key.kid().to_owned()
            )))
        );
        // Everything is made with the new key, and the JWKS lists both, the new one first.
        assert_eq!(only_new.verify_ticket(&both.sign_ticket(&t), 1_500), Ok(t));
        assert_eq!(
            only_new.verify_pass(&both.sign_pass(&pass), 1_500),
            Ok(pass)
        );
        assert_eq!(
            both.sign_request("POST", "/x", 5_000, b"").kid,
            new_key.kid()
        );
        let kids: Vec<_> = both.jwks()["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(kids, [new_key.kid(), old_key.kid()]);
        assert_eq!(both.public_jwk()["kid"], new_key.kid());
    }

    #[test]
    fn previous_keys_load_from_their_files() {
        let dir = std::env::temp_dir().join(format!("wr-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (current, previous) = (Crypto::generate(), Crypto::generate());
        let write = |name: &str, c: &Crypto| {
            let path = dir.join(name);
            std::fs::write(&path, c.to_pkcs8_pem()).unwrap();
            path
        };
        let (current_path, previous_path) =
            (write("current", &current), write("previous", &previous));
        let loaded = Crypto::load_with_previous(&current_path, &[previous_path]);
        let missing = Crypto::load_with_previous(&current_path, &[dir.join("missing")]);
        let _ = std::fs::remove_dir_all(&dir);
        let loaded = loaded.unwrap();
        assert!(
            loaded
                .verify_ticket(&previous.sign_ticket(&ticket(0)), 1)
                .is_ok()
        );
        assert!(
            current
                .verify_ticket(&loaded.sign_ticket(&ticket(0)), 1)
                .is_ok()
        );
        assert!(matches!(missing, Err(LoadKeyError::Read { .. })));
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
