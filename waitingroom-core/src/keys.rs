//! The cluster's keys: the Ed25519 signing key, the symmetric secrets derived from it, and the
//! public keys that check what it signed.
//!
//! Every node of a cluster holds the same [`ClusterKey`], so a ticket issued on one node is
//! accepted on any other. From it each node derives, with HKDF-SHA256 (RFC 5869), the secret
//! that authenticates tickets (HMAC-SHA256: only the cluster reads tickets) and the one that
//! authenticates requests between nodes; neither is the pass-signing key, and none reveals
//! another. Anyone holding only the public half, as a [`Jwk`] or a JWKS document, can verify
//! passes offline with a stock JOSE library; inside this crate that is a [`VerifyingKeySet`].
//!
//! A [`KeyRing`] is what a node works with: the current key, which signs, and the previous keys
//! still accepted, so a cluster can rotate keys without invalidating tickets, passes and peer
//! requests made just before the switch.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use ed25519_dalek::pkcs8::DecodePrivateKey as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit as _, Mac as _};
use rand::CryptoRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use crate::jose::{TokenKind, encoded_header};

/// How far in the future, in milliseconds, a token's `issued_at` may be before it is refused as
/// not yet valid: room for clock skew between nodes.
pub const DEFAULT_LEEWAY_MS: u64 = 5_000;

/// HKDF `info` label of the secret that keys ticket MACs.
const TICKET_MAC_INFO: &[u8] = b"waitingroom v1 ticket hmac-sha256";
/// HKDF `info` label of the secret that keys peer request MACs.
const PEER_MAC_INFO: &[u8] = b"waitingroom v1 peer request hmac-sha256";
/// HKDF `info` label of the secret that keys return-path MACs (the origin's gate holds it).
const RETURN_PATH_INFO: &[u8] = b"waitingroom v1 return path hmac-sha256";

/// The fixed DER prefix of an RFC 8410 PKCS#8 v1 Ed25519 private key: SEQUENCE { version 0,
/// AlgorithmIdentifier { 1.3.101.112 }, OCTET STRING { OCTET STRING (32 bytes) } }. The 32-byte
/// seed follows it.
const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// Why a key could not be read, or a key set could not be built or used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// The text looked like PEM but is not an unencrypted PKCS#8 Ed25519 private key.
    #[error("invalid PKCS#8 PEM Ed25519 private key: {0}")]
    Pem(String),
    /// Hex or base64 decoded, but not to the 32 bytes of an Ed25519 seed.
    #[error("an Ed25519 seed is 32 bytes, this one is {0}")]
    SeedLength(usize),
    /// The text is neither PEM, nor 64 hex digits, nor base64.
    #[error(
        "unrecognised key format: expected a PKCS#8 PEM private key or a 32-byte seed \
         written as 64 hex digits or base64"
    )]
    UnrecognisedFormat,
    /// A JWK is not an Ed25519 signing key (wrong `kty`, `crv`, `alg` or `use`, or bad `x`).
    #[error("unusable JWK: {0}")]
    InvalidJwk(String),
    /// A JWK's `x` is not a point that can be used as an Ed25519 public key.
    #[error("JWK `x` is not a valid Ed25519 public key")]
    InvalidPublicKey,
    /// A JWKS document is not JSON of the form `{"keys":[...]}`, or holds no key.
    #[error("invalid JWKS document: {0}")]
    InvalidJwks(String),
    /// Two different public keys were given the same key id.
    #[error("key id `{0}` is already used by a different key")]
    DuplicateKid(String),
    /// No key with this id is in the set.
    #[error("no verifying key with id `{0}`")]
    UnknownKid(String),
    /// The signature does not match the message and key.
    #[error("signature does not verify")]
    BadSignature,
}

/// A public Ed25519 key as a JSON Web Key (RFC 7517, RFC 8037).
///
/// Members other than these are ignored when reading, as RFC 7517 asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    /// Key type: always `"OKP"`.
    pub kty: String,
    /// Curve: always `"Ed25519"`.
    pub crv: String,
    /// The 32-byte public key, base64url without padding.
    pub x: String,
    /// The key id tokens name in their `kid` header. When absent, the RFC 7638 thumbprint is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// The algorithm this key is for: `"EdDSA"` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// What the key is for: `"sig"` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#use: Option<String>,
}

impl Jwk {
    fn from_verifying_key(key: &VerifyingKey, kid: &str) -> Self {
        Jwk {
            kty: "OKP".to_owned(),
            crv: "Ed25519".to_owned(),
            x: URL_SAFE_NO_PAD.encode(key.as_bytes()),
            kid: Some(kid.to_owned()),
            alg: Some("EdDSA".to_owned()),
            r#use: Some("sig".to_owned()),
        }
    }

    /// The RFC 7638 thumbprint: base64url SHA-256 of the required members in canonical form.
    ///
    /// Only `crv`, `kty` and `x` take part, so `kid`, `alg` and `use` never change it.
    pub fn thumbprint(&self) -> String {
        thumbprint_of(&self.crv, &self.kty, &self.x)
    }

    /// The public key this JWK describes, after checking it is an Ed25519 signing key.
    fn verifying_key(&self) -> Result<VerifyingKey, KeyError> {
        if self.kty != "OKP" {
            return Err(KeyError::InvalidJwk(format!(
                "kty is `{}`, expected `OKP`",
                self.kty
            )));
        }
        if self.crv != "Ed25519" {
            return Err(KeyError::InvalidJwk(format!(
                "crv is `{}`, expected `Ed25519`",
                self.crv
            )));
        }
        if let Some(alg) = self.alg.as_deref().filter(|alg| *alg != "EdDSA") {
            return Err(KeyError::InvalidJwk(format!(
                "alg is `{alg}`, expected `EdDSA`"
            )));
        }
        if let Some(usage) = self.r#use.as_deref().filter(|usage| *usage != "sig") {
            return Err(KeyError::InvalidJwk(format!(
                "use is `{usage}`, expected `sig`"
            )));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(&self.x)
            .map_err(|e| KeyError::InvalidJwk(format!("x is not base64url: {e}")))?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| {
            KeyError::InvalidJwk(format!("x is {} bytes, expected 32", bytes.len()))
        })?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::InvalidPublicKey)?;
        // A small-order key would accept forged signatures under non-strict verification, and
        // no honestly generated key is one.
        if key.is_weak() {
            return Err(KeyError::InvalidPublicKey);
        }
        Ok(key)
    }

    /// The key id to file this key under: `kid` if given, else the thumbprint.
    fn effective_kid(&self) -> String {
        self.kid.clone().unwrap_or_else(|| self.thumbprint())
    }
}

fn thumbprint_of(crv: &str, kty: &str, x: &str) -> String {
    // RFC 7638 §3.3: members in lexicographic order, no whitespace. serde_json's string
    // rendering supplies the escaping the RFC requires should a member ever need it.
    let canonical = format!(
        "{{\"crv\":{},\"kty\":{},\"x\":{}}}",
        serde_json::Value::from(crv),
        serde_json::Value::from(kty),
        serde_json::Value::from(x)
    );
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// An HMAC-SHA256 key (RFC 2104) derived from the cluster key for one use.
///
/// It holds the keyed state rather than the key: the two padded key blocks are hashed once
/// here, so each MAC hashes only its message.
#[derive(Clone)]
pub(crate) struct MacKey(Hmac<Sha256>);

impl MacKey {
    /// The key `info` names, expanded from the cluster key's HKDF pseudo-random key.
    fn derive(hkdf: &Hkdf<Sha256>, info: &[u8]) -> Self {
        let mut secret = [0u8; 32];
        // HKDF-SHA256 refuses only outputs longer than 255 * 32 bytes.
        hkdf.expand(info, &mut secret)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        // HMAC takes a key of any length; only fixed-size-key MACs can refuse one.
        MacKey(Hmac::new_from_slice(&secret).expect("HMAC accepts any key length"))
    }

    /// The MAC of the concatenation of `parts`.
    pub(crate) fn tag(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.with_parts(parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is the MAC of the concatenation of `parts`, compared in constant time so a
    /// refusal does not tell how many leading bytes matched.
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.with_parts(parts).verify_slice(tag).is_ok()
    }

    fn with_parts(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part);
        }
        mac
    }
}

/// The cluster's Ed25519 signing key, with the key id its tokens carry, and what is derived
/// from it.
///
/// The symmetric secrets come from the private seed by HKDF-SHA256 (RFC 5869) with no salt (the
/// seed is already 32 uniformly random bytes) and one `info` label per use, so they are
/// unrelated to each other and to the signing key. The encoded token headers are kept too, so
/// no token serialises a header.
///
/// `Debug` shows the key id and public key only.
#[derive(Clone)]
pub struct ClusterKey {
    signing: SigningKey,
    kid: String,
    /// Keys ticket MACs.
    ticket_mac: MacKey,
    /// Keys peer request MACs.
    peer_mac: MacKey,
    /// The base64url protected headers of tickets and of passes: they name `kid`.
    ticket_header: String,
    pass_header: String,
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterKey")
            .field("kid", &self.kid)
            .field(
                "public",
                &URL_SAFE_NO_PAD.encode(self.signing.verifying_key().as_bytes()),
            )
            .finish_non_exhaustive()
    }
}

impl ClusterKey {
    /// A new random key. Pass a cryptographically secure generator: whoever can predict its
    /// output can forge passes.
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        Self::from_signing_key(SigningKey::generate(rng))
    }

    /// The key whose RFC 8032 secret (seed) is `seed`.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self::from_signing_key(SigningKey::from_bytes(&seed))
    }

    fn from_signing_key(signing: SigningKey) -> Self {
        let x = URL_SAFE_NO_PAD.encode(signing.verifying_key().as_bytes());
        let kid = thumbprint_of("Ed25519", "OKP", &x);
        // The one place symmetric secrets are derived from the cluster key.
        let hkdf = Hkdf::<Sha256>::new(None, signing.as_bytes());
        ClusterKey {
            ticket_mac: MacKey::derive(&hkdf, TICKET_MAC_INFO),
            peer_mac: MacKey::derive(&hkdf, PEER_MAC_INFO),
            ticket_header: encoded_header(TokenKind::Ticket, &kid),
            pass_header: encoded_header(TokenKind::Pass, &kid),
            signing,
            kid,
        }
    }

    /// The secret that keys the MACs of return paths (the page a visitor asked for, which the
    /// origin's gate signs and the room checks): derived like the other secrets, so that the
    /// gate holds it without holding the cluster key.
    pub fn return_path_secret(&self) -> [u8; 32] {
        let mut secret = [0u8; 32];
        Hkdf::<Sha256>::new(None, self.signing.as_bytes())
            .expand(RETURN_PATH_INFO, &mut secret)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        secret
    }

    /// Reads an unencrypted PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`), as written by
    /// `openssl genpkey -algorithm ed25519` or [`ClusterKey::to_pkcs8_pem`].
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        SigningKey::from_pkcs8_pem(pem.trim())
            .map(Self::from_signing_key)
            .map_err(|e| KeyError::Pem(e.to_string()))
    }

    /// The key as an unencrypted PKCS#8 v1 PEM document, the form OpenSSL writes.
    ///
    /// Written by hand rather than through the `pkcs8` encoder because the DER of an Ed25519
    /// key is a fixed prefix and the seed, so this cannot fail.
    pub fn to_pkcs8_pem(&self) -> String {
        let mut der = [0u8; 48];
        der[..16].copy_from_slice(&PKCS8_V1_PREFIX);
        der[16..].copy_from_slice(self.signing.as_bytes());
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(der)
        )
    }

    /// Reads a key from configuration text: a PKCS#8 PEM private key, or the 32-byte seed as 64
    /// hex digits or as base64 (URL-safe or standard, padded or not). Surrounding whitespace is
    /// ignored.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyError::UnrecognisedFormat);
        }
        if text.starts_with("-----BEGIN") {
            return Self::from_pkcs8_pem(text);
        }
        // Hex digits are also base64 characters, so an even-length hex string is read as hex
        // before base64 gets a chance to misread it.
        if text.len() % 2 == 0 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return seed_from_vec(decode_hex(text));
        }
        for engine in [&URL_SAFE_NO_PAD, &URL_SAFE, &STANDARD, &STANDARD_NO_PAD] {
            if let Ok(bytes) = engine.decode(text) {
                return seed_from_vec(bytes);
            }
        }
        Err(KeyError::UnrecognisedFormat)
    }

    /// The same key, announced under `kid` instead of its thumbprint.
    pub fn with_kid(mut self, kid: String) -> Self {
        self.ticket_header = encoded_header(TokenKind::Ticket, &kid);
        self.pass_header = encoded_header(TokenKind::Pass, &kid);
        self.kid = kid;
        self
    }

    /// The key id put in every token's `kid` header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half as a JWK with `kid`, `alg` and `use`, ready to publish in a JWKS.
    pub fn public_jwk(&self) -> Jwk {
        Jwk::from_verifying_key(&self.signing.verifying_key(), &self.kid)
    }

    /// A key set that verifies what this key signs, with the default leeway.
    pub fn verifying_keys(&self) -> VerifyingKeySet {
        VerifyingKeySet {
            keys: vec![(self.kid.clone(), self.signing.verifying_key())],
            leeway_ms: DEFAULT_LEEWAY_MS,
        }
    }

    /// Signs a JWS signing input as is: only the token module signs with this key.
    pub(crate) fn sign_jws_input(&self, input: &[u8]) -> [u8; 64] {
        self.signing.sign(input).to_bytes()
    }

    /// The key of ticket MACs.
    pub(crate) fn ticket_mac(&self) -> &MacKey {
        &self.ticket_mac
    }

    /// The encoded protected header of `kind` tokens under this key.
    pub(crate) fn header(&self, kind: TokenKind) -> &str {
        match kind {
            TokenKind::Ticket => &self.ticket_header,
            TokenKind::Pass => &self.pass_header,
        }
    }
}

fn seed_from_vec(bytes: Vec<u8>) -> Result<ClusterKey, KeyError> {
    let len = bytes.len();
    let seed: [u8; 32] = bytes.try_into().map_err(|_| KeyError::SeedLength(len))?;
    Ok(ClusterKey::from_seed(seed))
}

/// Decodes text already checked to be an even number of ASCII hex digits.
fn decode_hex(text: &str) -> Vec<u8> {
    fn nibble(b: u8) -> u8 {
        match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => 0,
        }
    }
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect()
}

/// Public keys that tokens are checked against, each under its key id.
///
/// Holding several keys lets a cluster rotate: publish the new key alongside the old one, switch
/// signing to the new key, and drop the old one once tokens it signed have expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyingKeySet {
    keys: Vec<(String, VerifyingKey)>,
    pub(crate) leeway_ms: u64,
}

impl VerifyingKeySet {
    /// A set holding the one key `jwk` describes.
    pub fn from_jwk(jwk: &Jwk) -> Result<Self, KeyError> {
        let mut set = VerifyingKeySet {
            keys: Vec::with_capacity(1),
            leeway_ms: DEFAULT_LEEWAY_MS,
        };
        set.add(jwk)?;
        Ok(set)
    }

    /// Reads a JWKS document (`{"keys":[...]}`) holding at least one Ed25519 key.
    pub fn from_jwks_json(json: &str) -> Result<Self, KeyError> {
        #[derive(Deserialize)]
        struct Jwks {
            keys: Vec<Jwk>,
        }
        let doc: Jwks =
            serde_json::from_str(json).map_err(|e| KeyError::InvalidJwks(e.to_string()))?;
        if doc.keys.is_empty() {
            return Err(KeyError::InvalidJwks("it holds no key".to_owned()));
        }
        let mut set = VerifyingKeySet {
            keys: Vec::with_capacity(doc.keys.len()),
            leeway_ms: DEFAULT_LEEWAY_MS,
        };
        for jwk in &doc.keys {
            set.add(jwk)?;
        }
        Ok(set)
    }

    /// Adds a key, filed under its `kid` (or its thumbprint when it has none).
    ///
    /// Adding a key that is already present under the same id does nothing; a different key
    /// under an id already in use is refused, since tokens could then verify under either.
    pub fn add(&mut self, jwk: &Jwk) -> Result<(), KeyError> {
        let key = jwk.verifying_key()?;
        let kid = jwk.effective_kid();
        match self.get(&kid) {
            Some(existing) if *existing == key => Ok(()),
            Some(_) => Err(KeyError::DuplicateKid(kid)),
            None => {
                self.keys.push((kid, key));
                Ok(())
            }
        }
    }

    /// Removes the key with id `kid`, returning whether it was there.
    pub fn remove(&mut self, kid: &str) -> bool {
        let before = self.keys.len();
        self.keys.retain(|(k, _)| k != kid);
        self.keys.len() != before
    }

    /// The ids of the keys in the set, in the order they were added.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(kid, _)| kid.as_str())
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no key (possible only after [`VerifyingKeySet::remove`]).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The set as a JWKS document, `{"keys":[...]}`, for publishing.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<serde_json::Value> = self
            .keys
            .iter()
            .map(|(kid, key)| jwk_value(&Jwk::from_verifying_key(key, kid)))
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// The same set with a different tolerance, in milliseconds, for tokens issued slightly in
    /// the future by a node whose clock runs ahead. The default is
    /// [`DEFAULT_LEEWAY_MS`].
    pub fn with_leeway_ms(mut self, leeway_ms: u64) -> Self {
        self.leeway_ms = leeway_ms;
        self
    }

    /// The not-yet-valid tolerance in milliseconds.
    pub fn leeway_ms(&self) -> u64 {
        self.leeway_ms
    }

    pub(crate) fn get(&self, kid: &str) -> Option<&VerifyingKey> {
        self.keys.iter().find(|(k, _)| k == kid).map(|(_, key)| key)
    }
}

/// What a node signs and checks with: the current cluster key, and the previous keys still
/// accepted while a key rotation overlaps.
///
/// Tickets, passes and peer requests are made with the current key only. Passes are checked
/// against every key's public half (the JWKS lists them all, current first), tickets and peer
/// requests against the secrets derived from every key, chosen by `kid`.
///
/// A rotation, node by node, so that every node always accepts what any other makes:
/// 1. every node gets the new key as a previous key (it accepts it, and its JWKS publishes it,
///    before anything is signed with it);
/// 2. every node gets the new key as current and the old one as previous;
/// 3. once the last pass and ticket the old key made have expired, the old key is dropped.
#[derive(Clone)]
pub struct KeyRing {
    current: ClusterKey,
    previous: Vec<ClusterKey>,
    /// Every key's public half, current first: checks passes and is the published JWKS.
    public: VerifyingKeySet,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("kids", &self.public.kids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl KeyRing {
    /// A ring of one key, with the default leeway.
    pub fn new(current: ClusterKey) -> Self {
        KeyRing {
            public: current.verifying_keys(),
            current,
            previous: Vec::new(),
        }
    }

    /// The ring that signs with `current` and also accepts what `previous` made.
    ///
    /// A key given twice is kept once; a different key under a key id already in the ring is
    /// refused ([`KeyError::DuplicateKid`]), since a token could then verify under either.
    pub fn with_previous(
        current: ClusterKey,
        previous: impl IntoIterator<Item = ClusterKey>,
    ) -> Result<Self, KeyError> {
        let mut ring = Self::new(current);
        for key in previous {
            let before = ring.public.len();
            ring.public.add(&key.public_jwk())?;
            if ring.public.len() > before {
                ring.previous.push(key);
            }
        }
        Ok(ring)
    }

    /// The key that signs.
    pub fn current(&self) -> &ClusterKey {
        &self.current
    }

    /// The earlier keys still accepted (a rotation's overlap).
    pub fn previous(&self) -> &[ClusterKey] {
        &self.previous
    }

    /// Every key's public half, current first: what origins check passes with.
    pub fn public(&self) -> &VerifyingKeySet {
        &self.public
    }

    /// The same ring with a different not-yet-valid tolerance for tokens, in milliseconds (see
    /// [`VerifyingKeySet::with_leeway_ms`]).
    pub fn with_leeway_ms(mut self, leeway_ms: u64) -> Self {
        self.public.leeway_ms = leeway_ms;
        self
    }

    /// The MAC of a peer request whose signed parts are `parts`, concatenated, made with the
    /// current key's peer secret; the request names [`ClusterKey::kid`] of [`KeyRing::current`].
    pub fn peer_mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.current.peer_mac.tag(parts)
    }

    /// Checks a peer request MAC made by [`KeyRing::peer_mac`] at a node whose current key has
    /// id `kid`, in constant time.
    pub fn verify_peer_mac(&self, kid: &str, parts: &[&[u8]], tag: &[u8]) -> Result<(), KeyError> {
        let key = self
            .find(kid)
            .ok_or_else(|| KeyError::UnknownKid(kid.to_owned()))?;
        if key.peer_mac.verify(parts, tag) {
            Ok(())
        } else {
            Err(KeyError::BadSignature)
        }
    }

    /// The current key, then the previous ones.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &ClusterKey> {
        std::iter::once(&self.current).chain(&self.previous)
    }

    pub(crate) fn find(&self, kid: &str) -> Option<&ClusterKey> {
        self.keys().find(|key| key.kid == kid)
    }
}

/// A JWK as a JSON value, built member by member so it cannot fail.
fn jwk_value(jwk: &Jwk) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    map.insert("kty".to_owned(), jwk.kty.clone().into());
    map.insert("crv".to_owned(), jwk.crv.clone().into());
    map.insert("x".to_owned(), jwk.x.clone().into());
    for (name, value) in [("kid", &jwk.kid), ("alg", &jwk.alg), ("use", &jwk.r#use)] {
        if let Some(value) = value {
            map.insert(name.to_owned(), value.clone().into());
        }
    }
    serde_json::Value::Object(map)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const PEER_REQUEST: [&[u8]; 2] = [b"POST\n/peer/messages\n5000\n", b"[]"];

    #[test]
    fn peer_mac_matches_an_independent_hkdf_and_hmac() {
        // Computed with Python's hmac and hashlib: RFC 5869 HKDF-SHA256 with no salt of the
        // seed and "waitingroom v1 peer request hmac-sha256", then RFC 2104 HMAC-SHA256.
        let ring = KeyRing::new(ClusterKey::from_seed([1; 32]));
        let hex: String = ring
            .peer_mac(&PEER_REQUEST)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "f168f4962d295d3a52c52ca761f886792f1221c14f5b124ae364fa3fb814cb5e"
        );
    }

    #[test]
    fn derived_secrets_depend_on_key_and_label() {
        let a = ClusterKey::from_seed([1; 32]);
        let b = ClusterKey::from_seed([2; 32]);
        let message: [&[u8]; 1] = [b"x"];
        let peer = |key: &ClusterKey| KeyRing::new(key.clone()).peer_mac(&message);
        assert_eq!(peer(&a), peer(&a.clone().with_kid("other".to_owned())));
        assert_ne!(peer(&a), peer(&b));
        // Same key, same message, different labels: the ticket and peer secrets differ.
        assert_ne!(peer(&a), a.ticket_mac().tag(&message));
        // Where the message goes in pieces does not matter, only the bytes.
        assert_eq!(
            a.peer_mac.tag(&[b"ab", b"c"]),
            a.peer_mac.tag(&[b"a", b"bc"])
        );
        // The gate's return-path secret: per key, and none of the MAC keys.
        assert_ne!(a.return_path_secret(), b.return_path_secret());
        let gate = MacKey(Hmac::new_from_slice(&a.return_path_secret()).unwrap());
        assert_ne!(gate.tag(&message), peer(&a));
        assert_ne!(gate.tag(&message), a.ticket_mac().tag(&message));
    }

    // RFC 8037 appendix A.1 / A.2.
    const RFC8037_D: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
    const RFC8037_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    // RFC 8037 appendix A.3.
    const RFC8037_THUMBPRINT: &str = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k";

    // The example private key of RFC 8410 and the public key that goes with it.
    const RFC8410_PEM: &str = "-----BEGIN PRIVATE KEY-----\n\
        MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
        -----END PRIVATE KEY-----\n";
    const RFC8410_SEED_HEX: &str =
        "d4ee72dbf913584ad5b6d8f1f769f8ad3afe7c28cbf1d4fbe097a88f44755842";
    const RFC8410_PUBLIC_HEX: &str =
        "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1";

    fn rfc8037_key() -> ClusterKey {
        ClusterKey::parse(RFC8037_D).unwrap()
    }

    #[test]
    fn rfc8037_key_has_the_published_public_key_and_thumbprint() {
        let key = rfc8037_key();
        let jwk = key.public_jwk();
        assert_eq!(jwk.x, RFC8037_X);
        assert_eq!(jwk.thumbprint(), RFC8037_THUMBPRINT);
        assert_eq!(key.kid(), RFC8037_THUMBPRINT);
    }

    #[test]
    fn rfc8410_pem_reads_and_writes_back_byte_for_byte() {
        let key = ClusterKey::from_pkcs8_pem(RFC8410_PEM).unwrap();
        let public = URL_SAFE_NO_PAD.decode(&key.public_jwk().x).unwrap();
        assert_eq!(public, decode_hex(RFC8410_PUBLIC_HEX));
        assert_eq!(key.to_pkcs8_pem(), RFC8410_PEM);
        let from_hex = ClusterKey::parse(RFC8410_SEED_HEX).unwrap();
        assert_eq!(from_hex.public_jwk(), key.public_jwk());
    }

    #[test]
    fn pem_round_trip_of_a_generated_key() {
        let key = ClusterKey::generate(&mut ChaCha8Rng::seed_from_u64(7));
        let pem = key.to_pkcs8_pem();
        let back = ClusterKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(back.public_jwk(), key.public_jwk());
        let via_parse = ClusterKey::parse(&format!("\n  {pem}  \n")).unwrap();
        assert_eq!(via_parse.public_jwk(), key.public_jwk());
    }

    #[test]
    fn pem_with_the_public_key_embedded_is_read_too() {
        use ed25519_dalek::pkcs8::{EncodePrivateKey as _, spki::der::pem::LineEnding};
        let key = ClusterKey::from_seed([3; 32]);
        let v2 = key.signing.to_pkcs8_pem(LineEnding::LF).unwrap();
        let back = ClusterKey::parse(&v2).unwrap();
        assert_eq!(back.public_jwk(), key.public_jwk());
    }

    #[test]
    fn seed_parses_as_hex_and_every_base64_flavour() {
        let seed: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0xfb);
        let want = ClusterKey::from_seed(seed).public_jwk();
        let lower: String = seed.iter().map(|b| format!("{b:02x}")).collect();
        let texts = [
            lower.clone(),
            lower.to_uppercase(),
            URL_SAFE_NO_PAD.encode(seed),
            URL_SAFE.encode(seed),
            STANDARD.encode(seed),
            STANDARD_NO_PAD.encode(seed),
            format!("\t{}\n", STANDARD.encode(seed)),
        ];
        for text in texts {
            assert_eq!(
                ClusterKey::parse(&text).unwrap().public_jwk(),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn bad_key_text_gets_a_clear_error() {
        assert_eq!(ClusterKey::parse(""), Err(KeyError::UnrecognisedFormat));
        assert_eq!(
            ClusterKey::parse("not a key!"),
            Err(KeyError::UnrecognisedFormat)
        );
        assert_eq!(ClusterKey::parse("abcd"), Err(KeyError::SeedLength(2)));
        assert_eq!(
            ClusterKey::parse(&URL_SAFE_NO_PAD.encode([1u8; 31])),
            Err(KeyError::SeedLength(31))
        );
        assert!(matches!(
            ClusterKey::parse("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"),
            Err(KeyError::Pem(_))
        ));
        assert!(matches!(
            ClusterKey::parse(
                "-----BEGIN PUBLIC KEY-----\n\
                 MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n\
                 -----END PUBLIC KEY-----"
            ),
            Err(KeyError::Pem(_))
        ));
    }

    // Lets the error tests above compare whole results.
    impl PartialEq for ClusterKey {
        fn eq(&self, other: &Self) -> bool {
            self.signing == other.signing && self.kid == other.kid
        }
    }

    #[test]
    fn debug_does_not_show_the_secret() {
        let key = rfc8037_key();
        let shown = format!("{key:?}");
        assert!(shown.contains(RFC8037_X));
        assert!(!shown.contains(RFC8037_D));
        let seed_hex: String = key
            .signing
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(!shown.to_lowercase().contains(&seed_hex));
        assert!(!shown.contains(&format!("{:?}", key.signing.as_bytes())));
    }

    #[test]
    fn with_kid_overrides_the_thumbprint() {
        let key = rfc8037_key().with_kid("2026-01".to_owned());
        assert_eq!(key.kid(), "2026-01");
        assert_eq!(key.public_jwk().kid.as_deref(), Some("2026-01"));
        assert_eq!(key.public_jwk().thumbprint(), RFC8037_THUMBPRINT);
        assert_eq!(key.verifying_keys().kids().collect::<Vec<_>>(), ["2026-01"]);
    }

    #[test]
    fn public_jwk_serialises_with_the_standard_member_names() {
        let value = serde_json::to_value(rfc8037_key().public_jwk()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": RFC8037_X,
                "kid": RFC8037_THUMBPRINT,
                "alg": "EdDSA",
                "use": "sig",
            })
        );
    }

    #[test]
    fn jwks_round_trips_and_supports_rotation() {
        let old = ClusterKey::from_seed([1; 32]);
        let new = ClusterKey::from_seed([2; 32]).with_kid("new".to_owned());
        let mut set = old.verifying_keys();
        set.add(&new.public_jwk()).unwrap();
        assert_eq!(set.len(), 2);

        let json = set.jwks().to_string();
        let back = VerifyingKeySet::from_jwks_json(&json).unwrap();
        assert_eq!(back.jwks(), set.jwks());
        assert_eq!(back.kids().collect::<Vec<_>>(), [old.kid(), "new"]);

        let mut retired = back.clone();
        assert!(retired.remove(old.kid()));
        assert!(!retired.remove(old.kid()));
        assert_eq!(retired.kids().collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn jwks_from_elsewhere_without_optional_members_uses_thumbprints() {
        let json =
            format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{RFC8037_X}","ext":true}}]}}"#);
        let set = VerifyingKeySet::from_jwks_json(&json).unwrap();
        assert_eq!(set.kids().collect::<Vec<_>>(), [RFC8037_THUMBPRINT]);
    }

    #[test]
    fn bad_jwks_and_jwks_are_refused_with_distinct_errors() {
        let jwk = rfc8037_key().public_jwk();
        let with = |f: &dyn Fn(&mut Jwk)| {
            let mut j = jwk.clone();
            f(&mut j);
            VerifyingKeySet::from_jwk(&j).map(|_| ())
        };
        assert!(matches!(
            with(&|j| j.kty = "EC".into()),
            Err(KeyError::InvalidJwk(_))
        ));
        assert!(matches!(
            with(&|j| j.crv = "X25519".into()),
            Err(KeyError::InvalidJwk(_))
        ));
        assert!(matches!(
            with(&|j| j.alg = Some("RS256".into())),
            Err(KeyError::InvalidJwk(_))
        ));
        assert!(matches!(
            with(&|j| j.r#use = Some("enc".into())),
            Err(KeyError::InvalidJwk(_))
        ));
        assert!(matches!(
            with(&|j| j.x = "!!".into()),
            Err(KeyError::InvalidJwk(_))
        ));
        assert!(matches!(
            with(&|j| j.x = URL_SAFE_NO_PAD.encode([0u8; 31])),
            Err(KeyError::InvalidJwk(_))
        ));
        // The identity point: small order, so weak.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            with(&|j| j.x = URL_SAFE_NO_PAD.encode(identity)),
            Err(KeyError::InvalidPublicKey)
        );

        assert!(matches!(
            VerifyingKeySet::from_jwks_json("[]"),
            Err(KeyError::InvalidJwks(_))
        ));
        assert!(matches!(
            VerifyingKeySet::from_jwks_json(r#"{"keys":[]}"#),
            Err(KeyError::InvalidJwks(_))
        ));

        let mut set = rfc8037_key().verifying_keys();
        set.add(&jwk).unwrap();
        assert_eq!(set.len(), 1, "re-adding the same key is a no-op");
        let impostor = ClusterKey::from_seed([9; 32]).with_kid(jwk.kid.clone().unwrap());
        assert_eq!(
            set.add(&impostor.public_jwk()),
            Err(KeyError::DuplicateKid(RFC8037_THUMBPRINT.to_owned()))
        );
    }

    #[test]
    fn peer_macs_fail_on_any_change() {
        let key = ClusterKey::from_seed([5; 32]);
        let ring = KeyRing::new(key.clone());
        let tag = ring.peer_mac(&PEER_REQUEST);
        assert_eq!(ring.verify_peer_mac(key.kid(), &PEER_REQUEST, &tag), Ok(()));
        assert_eq!(
            ring.verify_peer_mac(key.kid(), &[PEER_REQUEST[0], b"[1]"], &tag),
            Err(KeyError::BadSignature)
        );
        let mut bent = tag;
        bent[10] ^= 1;
        assert_eq!(
            ring.verify_peer_mac(key.kid(), &PEER_REQUEST, &bent),
            Err(KeyError::BadSignature)
        );
        assert_eq!(
            ring.verify_peer_mac(key.kid(), &PEER_REQUEST, &tag[..31]),
            Err(KeyError::BadSignature)
        );
        assert_eq!(
            ring.verify_peer_mac("nobody", &PEER_REQUEST, &tag),
            Err(KeyError::UnknownKid("nobody".to_owned()))
        );
        // The peer secret is not the ticket secret.
        assert_ne!(tag, key.ticket_mac().tag(&PEER_REQUEST));
    }

    #[test]
    fn rotation_accepts_peer_macs_of_the_previous_key_only_where_it_is_held() {
        let old = ClusterKey::from_seed([1; 32]);
        let new = ClusterKey::from_seed([2; 32]).with_kid("new".to_owned());
        let both = KeyRing::with_previous(new.clone(), [old.clone(), new.clone()]).unwrap();
        let only_new = KeyRing::new(new.clone());
        let from_old = KeyRing::new(old.clone()).peer_mac(&PEER_REQUEST);
        assert_eq!(
            both.verify_peer_mac(old.kid(), &PEER_REQUEST, &from_old),
            Ok(())
        );
        assert_eq!(
            only_new.verify_peer_mac(old.kid(), &PEER_REQUEST, &from_old),
            Err(KeyError::UnknownKid(old.kid().to_owned()))
        );
        // It signs with the current key; the repeated key was kept once.
        let from_both = both.peer_mac(&PEER_REQUEST);
        assert_eq!(
            only_new.verify_peer_mac("new", &PEER_REQUEST, &from_both),
            Ok(())
        );
        assert_eq!(both.public().kids().collect::<Vec<_>>(), ["new", old.kid()]);
        let jwks = both.public().jwks();
        assert_eq!(jwks["keys"][0]["kid"], "new");
        assert_eq!(jwks["keys"][1]["x"], old.public_jwk().x.as_str());
        let impostor = ClusterKey::from_seed([3; 32]).with_kid("new".to_owned());
        assert_eq!(
            KeyRing::with_previous(new, [impostor]).map(|_| ()),
            Err(KeyError::DuplicateKid("new".to_owned()))
        );
    }
}
