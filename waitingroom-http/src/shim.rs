//! TEMPORARY stand-in for `waitingroom_core::{keys, token}` until that work lands on main.
//!
//! Mirrors the names and signatures of the core API the server uses (`ClusterKey`,
//! `VerifyingKeySet`, `sign_ticket`, `sign_pass`, `TokenError`, `KeyError`) so that switching
//! to the real module is a change of `use` lines in `crypto.rs`. Tokens are JWS compact with
//! EdDSA, as the real ones; this file is deleted once the merge happens.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::pkcs8::DecodePrivateKey as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use waitingroom_core::{Pass, Ticket, Time};

const BYTES_CONTEXT: &[u8] = b"waitingroom peer message v1\0";
const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// Why a key could not be read or a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// Bad PEM.
    #[error("invalid PKCS#8 PEM Ed25519 private key: {0}")]
    Pem(String),
    /// Not a key.
    #[error("unrecognised key format")]
    UnrecognisedFormat,
    /// Bad JWKS.
    #[error("invalid JWKS document: {0}")]
    InvalidJwks(String),
    /// Unknown kid.
    #[error("no verifying key with id `{0}`")]
    UnknownKid(String),
    /// Bad signature.
    #[error("signature does not verify")]
    BadSignature,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenError {
    /// Malformed.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// Unknown key.
    #[error("token is signed with an unknown key")]
    UnknownKey,
    /// Bad signature.
    #[error("token signature does not verify")]
    BadSignature,
    /// Wrong kind.
    #[error("wrong token kind")]
    WrongKind,
    /// Expired.
    #[error("token expired")]
    Expired,
}

/// The cluster signing key.
#[derive(Clone)]
pub struct ClusterKey {
    signing: SigningKey,
    kid: String,
}

impl ClusterKey {
    /// From a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        let x = URL_SAFE_NO_PAD.encode(signing.verifying_key().as_bytes());
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(x.as_bytes()));
        ClusterKey { signing, kid }
    }

    /// PKCS#8 PEM.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        SigningKey::from_pkcs8_pem(pem.trim())
            .map(|k| Self::from_seed(k.to_bytes()))
            .map_err(|e| KeyError::Pem(e.to_string()))
    }

    /// PKCS#8 PEM.
    pub fn to_pkcs8_pem(&self) -> String {
        let mut der = [0u8; 48];
        der[..16].copy_from_slice(&PKCS8_V1_PREFIX);
        der[16..].copy_from_slice(self.signing.as_bytes());
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(der)
        )
    }

    /// PEM only in the shim.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        if text.trim().starts_with("-----BEGIN") {
            Self::from_pkcs8_pem(text)
        } else {
            Err(KeyError::UnrecognisedFormat)
        }
    }

    /// Key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Public JWK.
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(self.signing.verifying_key().as_bytes()),
        })
    }

    /// Verifying keys.
    pub fn verifying_keys(&self) -> VerifyingKeySet {
        VerifyingKeySet {
            keys: vec![(self.kid.clone(), self.signing.verifying_key())],
        }
    }

    /// Signs bytes with a context prefix.
    pub fn sign_bytes(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(&with_context(message)).to_bytes()
    }
}

fn with_context(message: &[u8]) -> Vec<u8> {
    let mut buf = BYTES_CONTEXT.to_vec();
    buf.extend_from_slice(message);
    buf
}

/// Public keys.
#[derive(Debug, Clone)]
pub struct VerifyingKeySet {
    keys: Vec<(String, VerifyingKey)>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    kid: String,
    typ: String,
}

#[derive(Serialize, Deserialize)]
struct Claims<T> {
    kind: String,
    #[serde(flatten)]
    body: T,
}

impl VerifyingKeySet {
    /// From a JWKS document.
    pub fn from_jwks_json(json: &str) -> Result<Self, KeyError> {
        let doc: serde_json::Value =
            serde_json::from_str(json).map_err(|e| KeyError::InvalidJwks(e.to_string()))?;
        let mut keys = Vec::new();
        for k in doc["keys"].as_array().into_iter().flatten() {
            let (Some(kid), Some(x)) = (k["kid"].as_str(), k["x"].as_str()) else {
                continue;
            };
            let bytes: [u8; 32] = URL_SAFE_NO_PAD
                .decode(x)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| KeyError::InvalidJwks("bad x".into()))?;
            let key = VerifyingKey::from_bytes(&bytes)
                .map_err(|_| KeyError::InvalidJwks("bad key".into()))?;
            keys.push((kid.to_owned(), key));
        }
        if keys.is_empty() {
            return Err(KeyError::InvalidJwks("it holds no key".into()));
        }
        Ok(VerifyingKeySet { keys })
    }

    /// JWKS.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<_> = self
            .keys
            .iter()
            .map(|(kid, k)| {
                serde_json::json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
                    "kid": kid, "x": URL_SAFE_NO_PAD.encode(k.as_bytes())})
            })
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// Verifies bytes signed by `sign_bytes`.
    pub fn verify_bytes(
        &self,
        kid: &str,
        message: &[u8],
        signature: &[u8; 64],
    ) -> Result<(), KeyError> {
        let key = self
            .get(kid)
            .ok_or_else(|| KeyError::UnknownKid(kid.to_owned()))?;
        key.verify_strict(&with_context(message), &Signature::from_bytes(signature))
            .map_err(|_| KeyError::BadSignature)
    }

    fn get(&self, kid: &str) -> Option<&VerifyingKey> {
        self.keys.iter().find(|(k, _)| k == kid).map(|(_, k)| k)
    }

    fn verify_kind<T: for<'de> Deserialize<'de>>(
        &self,
        token: &str,
        kind: &str,
    ) -> Result<T, TokenError> {
        let bad = |m: &str| TokenError::Malformed(m.to_owned());
        if token.len() > 4096 {
            return Err(bad("too long"));
        }
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("parts"));
        };
        let header: Header =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).map_err(|_| bad("b64"))?)
                .map_err(|_| bad("header"))?;
        if header.alg != "EdDSA" {
            return Err(bad("alg"));
        }
        let key = self.get(&header.kid).ok_or(TokenError::UnknownKey)?;
        let sig: [u8; 64] = URL_SAFE_NO_PAD
            .decode(s)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad("sig"))?;
        key.verify_strict(
            &token.as_bytes()[..h.len() + 1 + p.len()],
            &Signature::from_bytes(&sig),
        )
        .map_err(|_| TokenError::BadSignature)?;
        if header.typ != format!("wr-{kind}+jwt") {
            return Err(TokenError::WrongKind);
        }
        let claims: Claims<T> =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).map_err(|_| bad("b64"))?)
                .map_err(|e| TokenError::Malformed(e.to_string()))?;
        if claims.kind != kind {
            return Err(TokenError::WrongKind);
        }
        Ok(claims.body)
    }

    /// Verifies a ticket.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        let t: Ticket = self.verify_kind(token, "ticket")?;
        if now >= t.expires_at {
            return Err(TokenError::Expired);
        }
        Ok(t)
    }

    /// Verifies a pass.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        let p: Pass = self.verify_kind(token, "pass")?;
        if now >= p.expires_at {
            return Err(TokenError::Expired);
        }
        Ok(p)
    }
}

fn sign_kind<T: Serialize>(key: &ClusterKey, kind: &str, body: &T) -> String {
    let header = Header {
        alg: "EdDSA".into(),
        kid: key.kid.clone(),
        typ: format!("wr-{kind}+jwt"),
    };
    let claims = Claims {
        kind: kind.to_owned(),
        body,
    };
    let mut token = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap_or_default());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap_or_default()));
    let sig = key.signing.sign(token.as_bytes()).to_bytes();
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(sig));
    token
}

/// Signs a ticket.
pub fn sign_ticket(key: &ClusterKey, t: &Ticket) -> String {
    sign_kind(key, "ticket", t)
}

/// Signs a pass.
pub fn sign_pass(key: &ClusterKey, p: &Pass) -> String {
    sign_kind(key, "pass", p)
}
