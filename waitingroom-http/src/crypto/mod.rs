//! The cluster's keys as the server uses them: making and checking tickets and passes, and
//! authenticating peer requests.
//!
//! Every node holds the same cluster key, so any node checks what any other made. Passes are
//! EdDSA (Ed25519) tokens that origins verify offline from the JWKS; tickets, which only the
//! cluster reads, are HMAC-SHA256 tokens under a secret derived from the cluster key (see
//! [`waitingroom_core::token`]). Peer requests and their answers carry an HMAC-SHA256 keyed with
//! another derived secret, separate from the pass-signing key: only holders of the cluster key
//! can make one, at a small fraction of the cost of an Ed25519 signature and its check.
//! What that MAC covers, and the replay and destination checks around it, are
//! [`crate::peer::auth`]'s business.
//!
//! For a key rotation a node holds previous keys besides the current one
//! ([`Crypto::with_previous`]): it makes everything with the current key and accepts tickets,
//! passes and peer requests made with any of them (see [`KeyRing`] for the steps).
//!
//! Beside it: [`return_path`], the MAC on the way back to the page a visitor asked for (its key
//! is derived from the cluster key too), and [`tls`], mutual TLS on the internal listener and
//! the TLS clients every outgoing request uses.

pub mod return_path;
pub mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use thiserror::Error;
use waitingroom_core::lottery::{self, LotteryRecord};
use waitingroom_core::round_records::{self, RoundRecord};

use return_path::ReturnPathKey;
use waitingroom_core::{Pass, Ticket, Time};

use waitingroom_core::{CachedPassVerifier, ClusterKey, KeyRing};
pub use waitingroom_core::{KeyError, TokenError};

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

/// The cluster's current key, any previous keys still accepted, and what is derived from them.
#[derive(Clone)]
pub struct Crypto {
    keys: KeyRing,
    /// The ring's public keys, remembering the passes they verified: a gate checks the same
    /// pass on every request of its visitor (`waitingroom_core::verified`).
    passes: Arc<CachedPassVerifier>,
    /// The lottery records last signed, with their JWS: they change only with the settings or
    /// at a reveal, so `GET /api/lotteries` signs nothing most of the time.
    lotteries: Arc<Mutex<Vec<(LotteryRecord, String)>>>,
    /// Return-path keys of the current key and the earlier ones (`return_path.rs`).
    return_keys: Vec<ReturnPathKey>,
    /// The current key's return-path secret, base64url: what a gate sends to have a way back
    /// signed (derived once, compared on every refused check a gate makes).
    gate_secret: String,
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
        Crypto::from_ring(KeyRing::new(key))
    }

    fn from_ring(keys: KeyRing) -> Self {
        use base64::Engine as _;
        let secrets: Vec<[u8; 32]> = std::iter::once(keys.current())
            .chain(keys.previous())
            .map(ClusterKey::return_path_secret)
            .collect();
        Crypto {
            return_keys: secrets.iter().map(ReturnPathKey::new).collect(),
            gate_secret: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secrets[0]),
            passes: Arc::new(CachedPassVerifier::new(keys.public().clone())),
            keys,
            lotteries: Arc::default(),
        }
    }

    /// Makes everything with `current`, and also accepts what the `previous` keys made: the
    /// overlap of a key rotation. Fails if a previous key is a different key under a key id
    /// already in use.
    pub fn with_previous(current: ClusterKey, previous: Vec<ClusterKey>) -> Result<Self, KeyError> {
        KeyRing::with_previous(current, previous).map(Crypto::from_ring)
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

    /// Signs a round record with the current key (`typ` `wr-round+jwt`).
    pub fn sign_record(&self, record: &RoundRecord) -> String {
        round_records::sign_record(self.keys.current(), record)
    }

    /// Checks a round record another node signed (any key of the ring, `typ` `wr-round+jwt`)
    /// and returns its claims.
    pub fn verify_record(&self, jws: &str) -> Result<RoundRecord, round_records::RecordError> {
        round_records::verify_record(self.keys.public(), jws)
    }

    /// Signs lottery records with the current key (`typ` `wr-lottery+jwt`), reusing the
    /// signature of a record signed before.
    pub fn sign_lotteries(&self, records: Vec<LotteryRecord>) -> Vec<String> {
        let mut cache = self
            .lotteries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let signed: Vec<(LotteryRecord, String)> = records
            .into_iter()
            .map(|r| match cache.iter().find(|(old, _)| *old == r) {
                Some((_, jws)) => (r, jws.clone()),
                None => {
                    let jws = lottery::sign_lottery(self.keys.current(), &r);
                    (r, jws)
                }
            })
            .collect();
        let out = signed.iter().map(|(_, jws)| jws.clone()).collect();
        *cache = signed;
        out
    }

    /// The return-path keys: the current key's first, then those of a rotation's overlap.
    pub fn return_keys(&self) -> &[ReturnPathKey] {
        &self.return_keys
    }

    /// The signed way back to `path` (`return_to=…&return_sig=…&return_exp=…`), under the
    /// current key, for anyone who comes with it.
    pub fn return_query(&self, path: &str) -> String {
        self.return_keys[0].query(path)
    }

    /// The signed way back to `path` for the holder of ticket `visitor` (and of its pass) only.
    pub fn return_query_for(&self, path: &str, visitor: waitingroom_core::TicketId) -> String {
        self.return_keys[0].query_at(path, crate::clock::now_ms(), Some(visitor))
    }

    /// The current return-path secret as `waitingroom-node gate-secret` prints it (base64url),
    /// for the origin's gate.
    pub fn gate_secret(&self) -> &str {
        &self.gate_secret
    }

    /// Verifies a ticket token at `now`.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        self.keys.verify_ticket(token, now)
    }

    /// Verifies a pass token at `now`.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.passes.verify_pass(token, now)
    }

    /// The id of the key everything is made with.
    pub fn kid(&self) -> &str {
        self.keys.current().kid()
    }

    /// The HMAC-SHA256 of a peer request or answer whose canonical text is `message`, under
    /// the current key's derived peer secret (see [`crate::peer::auth`] for what it covers).
    pub fn peer_mac(&self, message: &[u8]) -> [u8; 32] {
        self.keys.peer_mac(&[message])
    }

    /// Checks a peer MAC made with the key `kid` names, in constant time.
    pub fn verify_peer_mac(&self, kid: &str, message: &[u8], mac: &[u8]) -> Result<(), KeyError> {
        self.keys.verify_peer_mac(kid, &[message], mac)
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

/// HMAC-SHA256 under any key: the tests forge tokens with it.
#[cfg(test)]
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Verifies passes with public keys only (a JWKS document), as an origin would, remembering
/// the passes it verified (`waitingroom_core::verified`).
#[derive(Debug)]
pub struct PassVerifier(CachedPassVerifier);

impl PassVerifier {
    /// Reads a JWKS document (`{"keys":[...]}`).
    pub fn from_jwks_json(json: &str) -> Result<Self, KeyError> {
        waitingroom_core::VerifyingKeySet::from_jwks_json(json)
            .map(|keys| PassVerifier(CachedPassVerifier::new(keys)))
    }

    /// Verifies a pass token at `now`.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.0.verify_pass(token, now)
    }

    /// Whether `other` holds the same keys (and leeway).
    pub fn same_keys(&self, other: &PassVerifier) -> bool {
        self.0.keys() == other.0.keys()
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
            draw: None,
            round: None,
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
    fn peer_macs_depend_on_the_message_and_the_key() {
        let a = Crypto::generate();
        let mac = a.peer_mac(b"request");
        assert_eq!(a.verify_peer_mac(a.kid(), b"request", &mac), Ok(()));
        assert_eq!(
            a.verify_peer_mac(a.kid(), b"requesT", &mac),
            Err(KeyError::BadSignature)
        );
        let b = Crypto::generate();
        assert!(b.verify_peer_mac(a.kid(), b"request", &mac).is_err());
        assert!(b.verify_peer_mac(b.kid(), b"request", &mac).is_err());
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
            round: None,
            draw: None,
        };
        let (old_ticket, old_pass) = (old.sign_ticket(&t), old.sign_pass(&pass));
        let old_mac = old.peer_mac(b"request");
        assert_eq!(both.verify_ticket(&old_ticket, 1_500), Ok(t.clone()));
        assert_eq!(both.verify_pass(&old_pass, 1_500), Ok(pass.clone()));
        assert_eq!(
            both.verify_peer_mac(old.kid(), b"request", &old_mac),
            Ok(())
        );
        assert!(only_new.verify_ticket(&old_ticket, 1_500).is_err());
        assert!(only_new.verify_pass(&old_pass, 1_500).is_err());
        assert_eq!(
            only_new.verify_peer_mac(old.kid(), b"request", &old_mac),
            Err(KeyError::UnknownKid(old_key.kid().to_owned()))
        );
        // Everything is made with the new key, and the JWKS lists both, the new one first.
        assert_eq!(only_new.verify_ticket(&both.sign_ticket(&t), 1_500), Ok(t));
        assert_eq!(
            only_new.verify_pass(&both.sign_pass(&pass), 1_500),
            Ok(pass)
        );
        assert_eq!(both.kid(), new_key.kid());
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
