//! Tickets and passes as signed tokens.
//!
//! A token is a JWS in compact serialization (RFC 7515) signed with EdDSA over Ed25519
//! (RFC 8037), so any stock JOSE or JWT library can check a pass offline with the cluster's
//! public key. The protected header is
//!
//! ```json
//! {"alg":"EdDSA","kid":"<key id>","typ":"wr-pass+jwt"}
//! ```
//!
//! with `typ` `wr-ticket+jwt` for tickets. The payload holds every field of the [`Ticket`] or
//! [`Pass`] (times in milliseconds), a `kind` claim (`"ticket"` or `"pass"`), and the registered
//! JWT claims `jti` (the ticket id), and `iat`, `nbf`, `exp` in seconds (`issued_at` and
//! `expires_at` rounded down), so generic libraries enforce expiry too:
//!
//! ```json
//! {"kind":"pass","jti":"0123456789abcdef","iat":1700000100,"nbf":1700000100,
//!  "exp":1700000700,"id":"0123456789abcdef","node":3,"queue_join_time":1700000000000,
//!  "created_at":1700000100500,"issued_at":1700000100500,"expires_at":1700000700500,
//!  "eviction_time":1700000100000}
//! ```
//!
//! Verification takes the header's `alg` and `kid` on trust only to pick the key, checks the
//! signature, and only then reads the claims. A ticket is never accepted where a pass is
//! expected or the other way round: both the header `typ` and the `kind` claim must match.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{ClusterKey, VerifyingKeySet};
use crate::types::{NodeId, Pass, Ticket, TicketId, Time};

/// Tokens longer than this many bytes are refused before any decoding. Real tokens are about
/// 400 bytes; the bound keeps the work an attacker can cause per request small.
pub const MAX_TOKEN_LEN: usize = 4096;

/// How far in the future, in milliseconds, a token's `issued_at` may be before it is refused as
/// not yet valid: room for clock skew between nodes.
pub const DEFAULT_LEEWAY_MS: u64 = 5_000;

/// The only JWS `alg` accepted.
const ALG: &str = "EdDSA";

/// The two kinds of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A [`Ticket`]: a waiting visitor's place in line.
    Ticket,
    /// A [`Pass`]: an admitted visitor's permission to be on the site.
    Pass,
}

impl TokenKind {
    /// The JWS header `typ` of this kind (RFC 8725 §3.11 explicit typing).
    pub fn typ(self) -> &'static str {
        match self {
            TokenKind::Ticket => "wr-ticket+jwt",
            TokenKind::Pass => "wr-pass+jwt",
        }
    }

    /// The value of the payload's `kind` claim for this kind.
    pub fn claim(self) -> &'static str {
        match self {
            TokenKind::Ticket => "ticket",
            TokenKind::Pass => "pass",
        }
    }
}

impl std::fmt::Display for TokenKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.claim())
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenError {
    /// Longer than [`MAX_TOKEN_LEN`]; nothing was decoded.
    #[error("token is {len} bytes, more than the {max} allowed")]
    TooLong {
        /// The token's length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not a JWS compact token: not three parts, bad base64url, bad header JSON, or a signature
    /// that is not 64 bytes.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The header's `alg` is not `EdDSA` (`none` and `HS256` included).
    #[error("unsupported token algorithm `{0}`, only EdDSA is accepted")]
    UnsupportedAlgorithm(String),
    /// The header has no `kid`, or names a key not in the set.
    #[error("token is signed with an unknown key")]
    UnknownKey,
    /// The signature does not match the header, payload and key.
    #[error("token signature does not verify")]
    BadSignature,
    /// An authentic token of the other kind, or of no kind this crate issues.
    #[error(
        "expected a {expected} token, found {}",
        .found.as_deref().unwrap_or("a token with no type")
    )]
    WrongKind {
        /// The kind asked for.
        expected: TokenKind,
        /// The `typ` header or `kind` claim the token carries, if any.
        found: Option<String>,
    },
    /// Correctly signed, but the claims are not what this crate writes: a missing or unknown
    /// field, or registered claims that disagree with the millisecond fields.
    #[error("invalid token claims: {0}")]
    InvalidClaims(String),
    /// `now` is at or past the token's `expires_at`.
    #[error("token expired")]
    Expired,
    /// The token's `issued_at` is further ahead of `now` than the leeway allows.
    #[error("token is not valid yet")]
    NotYetValid,
}

/// A JWS protected header as this crate reads it.
///
/// Members other than these are refused: in particular `crit` (no extension is understood) and
/// `b64` (RFC 7797 would change what the signature covers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoseHeader {
    /// Signature algorithm.
    pub alg: String,
    /// Id of the signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// Token type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
}

/// The header this crate writes; borrowed so signing copies nothing.
#[derive(Serialize)]
struct HeaderOut<'a> {
    alg: &'static str,
    kid: &'a str,
    typ: &'static str,
}

/// JWT NumericDate: whole seconds, rounded down so generic libraries never accept a token past
/// its millisecond expiry.
fn seconds(ms: Time) -> u64 {
    ms / 1000
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TicketClaims {
    kind: String,
    jti: TicketId,
    iat: u64,
    nbf: u64,
    exp: u64,
    id: TicketId,
    join_time: Time,
    node: NodeId,
    issued_at: Time,
    next_refresh: Time,
    expires_at: Time,
    // `deserialize_with` makes serde require the field even though it is an `Option`: the
    // signer always writes it, so its absence means a token this crate did not produce.
    #[serde(deserialize_with = "Option::deserialize")]
    previous_position: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    eviction_time: Option<Time>,
}

impl TicketClaims {
    fn new(t: &Ticket) -> Self {
        TicketClaims {
            kind: TokenKind::Ticket.claim().to_owned(),
            jti: t.id,
            iat: seconds(t.issued_at),
            nbf: seconds(t.issued_at),
            exp: seconds(t.expires_at),
            id: t.id,
            join_time: t.join_time,
            node: t.node,
            issued_at: t.issued_at,
            next_refresh: t.next_refresh,
            expires_at: t.expires_at,
            previous_position: t.previous_position,
            eviction_time: t.eviction_time,
        }
    }

    fn into_ticket(self) -> Result<Ticket, TokenError> {
        check_registered(
            self.jti,
            [self.iat, self.nbf, self.exp],
            self.id,
            self.issued_at,
            self.expires_at,
        )?;
        Ok(Ticket {
            id: self.id,
            join_time: self.join_time,
            node: self.node,
            issued_at: self.issued_at,
            next_refresh: self.next_refresh,
            expires_at: self.expires_at,
            previous_position: self.previous_position,
            eviction_time: self.eviction_time,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PassClaims {
    kind: String,
    jti: TicketId,
    iat: u64,
    nbf: u64,
    exp: u64,
    id: TicketId,
    node: NodeId,
    queue_join_time: Time,
    created_at: Time,
    issued_at: Time,
    expires_at: Time,
    eviction_time: Time,
}

impl PassClaims {
    fn new(p: &Pass) -> Self {
        PassClaims {
            kind: TokenKind::Pass.claim().to_owned(),
            jti: p.id,
            iat: seconds(p.issued_at),
            nbf: seconds(p.issued_at),
            exp: seconds(p.expires_at),
            id: p.id,
            node: p.node,
            queue_join_time: p.queue_join_time,
            created_at: p.created_at,
            issued_at: p.issued_at,
            expires_at: p.expires_at,
            eviction_time: p.eviction_time,
        }
    }

    fn into_pass(self) -> Result<Pass, TokenError> {
        check_registered(
            self.jti,
            [self.iat, self.nbf, self.exp],
            self.id,
            self.issued_at,
            self.expires_at,
        )?;
        Ok(Pass {
            id: self.id,
            node: self.node,
            queue_join_time: self.queue_join_time,
            created_at: self.created_at,
            issued_at: self.issued_at,
            expires_at: self.expires_at,
            eviction_time: self.eviction_time,
        })
    }
}

/// The registered claims are copies for generic libraries; if they disagree with the fields this
/// crate acts on, the token was not made by [`sign_ticket`] or [`sign_pass`].
fn check_registered(
    jti: TicketId,
    [iat, nbf, exp]: [u64; 3],
    id: TicketId,
    issued_at: Time,
    expires_at: Time,
) -> Result<(), TokenError> {
    if jti != id {
        return Err(TokenError::InvalidClaims("jti differs from id".to_owned()));
    }
    if iat != seconds(issued_at) || nbf != iat {
        return Err(TokenError::InvalidClaims(
            "iat or nbf differs from issued_at".to_owned(),
        ));
    }
    if exp != seconds(expires_at) {
        return Err(TokenError::InvalidClaims(
            "exp differs from expires_at".to_owned(),
        ));
    }
    Ok(())
}

/// Only the `kind` claim, read before the full claims so a token of the other kind is reported
/// as such rather than as having unknown fields.
#[derive(Deserialize)]
struct KindPeek {
    #[serde(default)]
    kind: Option<String>,
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // serde_json fails only on maps with non-string keys or on a Serialize impl that reports an
    // error; headers and claims are structs of strings, integers and ids, so this cannot fail.
    serde_json::to_vec(value).expect("token header and claims always serialise")
}

/// Signs `payload` under the protected header `header_json`, as given, into a JWS compact token.
///
/// Low level: nothing checks that the header says `EdDSA` or names this key. Use
/// [`sign_ticket`] and [`sign_pass`] for tokens.
pub fn sign_compact(key: &ClusterKey, header_json: &str, payload: &[u8]) -> String {
    sign_parts(key, header_json.as_bytes(), payload)
}

fn sign_parts(key: &ClusterKey, header: &[u8], payload: &[u8]) -> String {
    // 4/3 for base64, two dots, 86 characters of signature.
    let mut token = String::with_capacity((header.len() + payload.len()) * 4 / 3 + 96);
    URL_SAFE_NO_PAD.encode_string(header, &mut token);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(payload, &mut token);
    let signature = key.sign_jws_input(token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(signature, &mut token);
    token
}

fn sign_kind<T: Serialize>(key: &ClusterKey, kind: TokenKind, claims: &T) -> String {
    let header = to_json(&HeaderOut {
        alg: ALG,
        kid: key.kid(),
        typ: kind.typ(),
    });
    sign_parts(key, &header, &to_json(claims))
}

/// The ticket as a signed token.
pub fn sign_ticket(key: &ClusterKey, t: &Ticket) -> String {
    sign_kind(key, TokenKind::Ticket, &TicketClaims::new(t))
}

/// The pass as a signed token.
pub fn sign_pass(key: &ClusterKey, p: &Pass) -> String {
    sign_kind(key, TokenKind::Pass, &PassClaims::new(p))
}

/// A token cut into its three parts, with the header decoded.
struct Parts<'a> {
    header: JoseHeader,
    /// The JWS signing input: the encoded header, a dot, the encoded payload.
    signing_input: &'a str,
    payload: &'a str,
    signature: &'a str,
}

fn decode_part(what: &str, part: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| TokenError::Malformed(format!("{what} is not base64url: {e}")))
}

fn split(token: &str) -> Result<Parts<'_>, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLong {
            len: token.len(),
            max: MAX_TOKEN_LEN,
        });
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "expected three dot-separated parts".to_owned(),
        ));
    };
    let header_json = decode_part("header", header)?;
    let header_value: JoseHeader = serde_json::from_slice(&header_json)
        .map_err(|e| TokenError::Malformed(format!("header: {e}")))?;
    Ok(Parts {
        header: header_value,
        // Both parts are prefixes of `token`, so this slice is on character boundaries.
        signing_input: &token[..header.len() + 1 + payload.len()],
        payload,
        signature,
    })
}

fn check_signature(key: &VerifyingKey, parts: &Parts<'_>) -> Result<(), TokenError> {
    let signature: [u8; 64] = decode_part("signature", parts.signature)?
        .try_into()
        .map_err(|_| TokenError::Malformed("signature is not 64 bytes".to_owned()))?;
    // Strict verification refuses small-order keys and points, so no second signature for
    // the same message can be made from a valid one.
    key.verify_strict(
        parts.signing_input.as_bytes(),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| TokenError::BadSignature)
}

impl VerifyingKeySet {
    /// Checks a JWS compact token's form, algorithm, key and signature, and returns its header
    /// and payload bytes. Claims are not looked at; prefer [`VerifyingKeySet::verify_ticket`]
    /// and [`VerifyingKeySet::verify_pass`].
    pub fn verify_compact(&self, token: &str) -> Result<(JoseHeader, Vec<u8>), TokenError> {
        let parts = split(token)?;
        if parts.header.alg != ALG {
            return Err(TokenError::UnsupportedAlgorithm(parts.header.alg));
        }
        let key = parts
            .header
            .kid
            .as_deref()
            .and_then(|kid| self.get(kid))
            .ok_or(TokenError::UnknownKey)?;
        check_signature(key, &parts)?;
        let payload = decode_part("payload", parts.payload)?;
        Ok((parts.header, payload))
    }

    /// Verifies a ticket token at time `now` (milliseconds) and returns the ticket.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        let payload = self.verify_kind(token, TokenKind::Ticket)?;
        let claims: TicketClaims = serde_json::from_slice(&payload)
            .map_err(|e| TokenError::InvalidClaims(e.to_string()))?;
        let ticket = claims.into_ticket()?;
        self.check_times(ticket.issued_at, ticket.expires_at, now)?;
        Ok(ticket)
    }

    /// Verifies a pass token at time `now` (milliseconds) and returns the pass.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        let payload = self.verify_kind(token, TokenKind::Pass)?;
        let claims: PassClaims = serde_json::from_slice(&payload)
            .map_err(|e| TokenError::InvalidClaims(e.to_string()))?;
        let pass = claims.into_pass()?;
        self.check_times(pass.issued_at, pass.expires_at, now)?;
        Ok(pass)
    }

    fn verify_kind(&self, token: &str, kind: TokenKind) -> Result<Vec<u8>, TokenError> {
        let (header, payload) = self.verify_compact(token)?;
        if header.typ.as_deref() != Some(kind.typ()) {
            return Err(TokenError::WrongKind {
                expected: kind,
                found: header.typ,
            });
        }
        // serde's derived structs also accept a JSON array of the field values in order,
        // which this crate never writes; only an object is a claim set.
        if payload.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(TokenError::InvalidClaims(
                "claims are not a JSON object".to_owned(),
            ));
        }
        let peek: KindPeek = serde_json::from_slice(&payload)
            .map_err(|e| TokenError::InvalidClaims(e.to_string()))?;
        if peek.kind.as_deref() != Some(kind.claim()) {
            return Err(TokenError::WrongKind {
                expected: kind,
                found: peek.kind,
            });
        }
        Ok(payload)
    }

    fn check_times(&self, issued_at: Time, expires_at: Time, now: Time) -> Result<(), TokenError> {
        if now >= expires_at {
            return Err(TokenError::Expired);
        }
        if issued_at > now.saturating_add(self.leeway_ms) {
            return Err(TokenError::NotYetValid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const NOW: Time = 1_700_000_100_500;

    fn key() -> ClusterKey {
        ClusterKey::from_seed([42; 32])
    }

    fn ticket() -> Ticket {
        Ticket {
            id: TicketId(0x0123_4567_89ab_cdef),
            join_time: NOW - 100_500,
            node: NodeId(3),
            issued_at: NOW,
            next_refresh: NOW + 30_000,
            expires_at: NOW + 600_000,
            previous_position: Some(17),
            eviction_time: None,
        }
    }

    fn pass() -> Pass {
        Pass {
            id: TicketId(0x0123_4567_89ab_cdef),
            node: NodeId(3),
            queue_join_time: NOW - 100_500,
            created_at: NOW,
            issued_at: NOW,
            expires_at: NOW + 600_000,
            eviction_time: NOW - 500,
        }
    }

    fn b64(bytes: impl AsRef<[u8]>) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn header_for(key: &ClusterKey, kind: TokenKind) -> String {
        format!(
            r#"{{"alg":"EdDSA","kid":"{}","typ":"{}"}}"#,
            key.kid(),
            kind.typ()
        )
    }

    fn parts(token: &str) -> Vec<String> {
        token.split('.').map(str::to_owned).collect()
    }

    fn payload_json(token: &str) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts(token)[1]).unwrap()).unwrap()
    }

    /// A correctly signed pass token whose claims are `edit`ed first.
    fn pass_with_claims(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let key = key();
        let mut claims = serde_json::to_value(PassClaims::new(&pass())).unwrap();
        edit(&mut claims);
        sign_compact(
            &key,
            &header_for(&key, TokenKind::Pass),
            claims.to_string().as_bytes(),
        )
    }

    #[test]
    fn ticket_round_trips() {
        let key = key();
        let mut t = ticket();
        assert_eq!(
            key.verifying_keys()
                .verify_ticket(&sign_ticket(&key, &t), NOW),
            Ok(t.clone())
        );
        t.previous_position = None;
        t.eviction_time = Some(NOW - 1);
        assert_eq!(
            key.verifying_keys()
                .verify_ticket(&sign_ticket(&key, &t), NOW),
            Ok(t)
        );
    }

    #[test]
    fn pass_round_trips() {
        let key = key();
        let token = sign_pass(&key, &pass());
        assert_eq!(key.verifying_keys().verify_pass(&token, NOW), Ok(pass()));
        assert!(token.len() < 600, "{} bytes", token.len());
    }

    #[test]
    fn wire_format_is_as_documented() {
        let key = key();
        let token = sign_pass(&key, &pass());
        let header = URL_SAFE_NO_PAD.decode(&parts(&token)[0]).unwrap();
        assert_eq!(
            String::from_utf8(header).unwrap(),
            header_for(&key, TokenKind::Pass)
        );
        let claims = payload_json(&token);
        assert_eq!(claims["kind"], "pass");
        assert_eq!(claims["jti"], "0123456789abcdef");
        assert_eq!(claims["id"], "0123456789abcdef");
        assert_eq!(claims["iat"], 1_700_000_100);
        assert_eq!(claims["nbf"], 1_700_000_100);
        assert_eq!(claims["exp"], 1_700_000_700);
        assert_eq!(claims["expires_at"], 1_700_000_700_500u64);

        let ticket_token = sign_ticket(&key, &ticket());
        let ticket_header = URL_SAFE_NO_PAD.decode(&parts(&ticket_token)[0]).unwrap();
        assert_eq!(
            String::from_utf8(ticket_header).unwrap(),
            header_for(&key, TokenKind::Ticket)
        );
        let claims = payload_json(&ticket_token);
        assert_eq!(claims["kind"], "ticket");
        assert_eq!(claims["previous_position"], 17);
        assert_eq!(claims["eviction_time"], serde_json::Value::Null);
    }

    #[test]
    fn rfc8037_appendix_a4_vector() {
        let key = ClusterKey::parse("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A").unwrap();
        let token = sign_compact(&key, r#"{"alg":"EdDSA"}"#, b"Example of Ed25519 signing");
        let expected = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.\
                        hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5Bh\
                        VsPt9g7sVvpAr_MuM0KAg";
        assert_eq!(token, expected);

        let public = key.verifying_keys();
        let parts = split(expected).unwrap();
        assert_eq!(parts.header.kid, None);
        let verifying = public.get(key.kid()).unwrap();
        assert_eq!(check_signature(verifying, &parts), Ok(()));
        // The vector's header has no kid, and this crate picks keys by kid only.
        assert_eq!(public.verify_compact(expected), Err(TokenError::UnknownKey));
    }

    #[test]
    fn verify_compact_returns_header_and_payload() {
        let key = key();
        let token = sign_compact(&key, &header_for(&key, TokenKind::Pass), b"hello");
        let (header, payload) = key.verifying_keys().verify_compact(&token).unwrap();
        assert_eq!(header.typ.as_deref(), Some("wr-pass+jwt"));
        assert_eq!(payload, b"hello");
    }

    #[test]
    fn tampered_payload_is_a_bad_signature() {
        let key = key();
        let token = sign_pass(&key, &pass());
        let p = parts(&token);
        let mut claims = payload_json(&token);
        claims["expires_at"] = serde_json::json!(u64::MAX);
        let forged = format!("{}.{}.{}", p[0], b64(claims.to_string()), p[2]);
        assert_eq!(
            key.verifying_keys().verify_pass(&forged, NOW),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn relabelled_header_is_a_bad_signature() {
        let key = key();
        let token = sign_ticket(&key, &ticket());
        let p = parts(&token);
        let forged = format!(
            "{}.{}.{}",
            b64(header_for(&key, TokenKind::Pass)),
            p[1],
            p[2]
        );
        assert_eq!(
            key.verifying_keys().verify_pass(&forged, NOW),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn truncated_tokens_are_malformed() {
        let key = key();
        let set = key.verifying_keys();
        let token = sign_pass(&key, &pass());
        let p = parts(&token);
        let cuts = [
            token[..token.len() - 1].to_owned(),
            token[..token.len() - 4].to_owned(),
            format!("{}.{}.", p[0], p[1]),
            format!("{}.{}", p[0], p[1]),
            p[0].clone(),
            token[..10].to_owned(),
        ];
        for cut in cuts {
            assert!(
                matches!(set.verify_pass(&cut, NOW), Err(TokenError::Malformed(_))),
                "{cut}: {:?}",
                set.verify_pass(&cut, NOW)
            );
        }
    }

    #[test]
    fn wrong_key_is_refused() {
        let key = key().with_kid("k1".to_owned());
        let other = ClusterKey::from_seed([7; 32]);
        // Same kid, different key: the signature cannot match.
        let impostor = other.clone().with_kid("k1".to_owned());
        let set = key.verifying_keys();
        assert_eq!(
            set.verify_pass(&sign_pass(&impostor, &pass()), NOW),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            set.verify_pass(&sign_pass(&other, &pass()), NOW),
            Err(TokenError::UnknownKey)
        );
        let no_kid = sign_compact(
            &key,
            r#"{"alg":"EdDSA","typ":"wr-pass+jwt"}"#,
            &to_json(&PassClaims::new(&pass())),
        );
        assert_eq!(set.verify_pass(&no_kid, NOW), Err(TokenError::UnknownKey));
    }

    #[test]
    fn rotated_set_accepts_both_keys() {
        let old = key();
        let new = ClusterKey::from_seed([8; 32]);
        let mut set = new.verifying_keys();
        set.add(&old.public_jwk()).unwrap();
        assert_eq!(set.verify_pass(&sign_pass(&old, &pass()), NOW), Ok(pass()));
        assert_eq!(set.verify_pass(&sign_pass(&new, &pass()), NOW), Ok(pass()));
    }

    #[test]
    fn ticket_is_never_a_pass_and_pass_is_never_a_ticket() {
        let key = key();
        let set = key.verifying_keys();
        assert_eq!(
            set.verify_pass(&sign_ticket(&key, &ticket()), NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Pass,
                found: Some("wr-ticket+jwt".to_owned()),
            })
        );
        assert_eq!(
            set.verify_ticket(&sign_pass(&key, &pass()), NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Ticket,
                found: Some("wr-pass+jwt".to_owned()),
            })
        );
        let untyped = sign_compact(
            &key,
            &format!(r#"{{"alg":"EdDSA","kid":"{}"}}"#, key.kid()),
            &to_json(&PassClaims::new(&pass())),
        );
        assert_eq!(
            set.verify_pass(&untyped, NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Pass,
                found: None,
            })
        );
    }

    #[test]
    fn kind_claim_must_agree_with_the_header() {
        let key = key();
        let set = key.verifying_keys();
        let ticket_claims_in_pass_header = sign_compact(
            &key,
            &header_for(&key, TokenKind::Pass),
            &to_json(&TicketClaims::new(&ticket())),
        );
        assert_eq!(
            set.verify_pass(&ticket_claims_in_pass_header, NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Pass,
                found: Some("ticket".to_owned()),
            })
        );
        let no_kind = pass_with_claims(|c| {
            c.as_object_mut().unwrap().remove("kind");
        });
        assert_eq!(
            set.verify_pass(&no_kind, NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Pass,
                found: None,
            })
        );
    }

    #[test]
    fn expiry_is_at_expires_at() {
        let key = key();
        let set = key.verifying_keys();
        let p = pass();
        let t = ticket();
        let pass_token = sign_pass(&key, &p);
        let ticket_token = sign_ticket(&key, &t);
        assert!(set.verify_pass(&pass_token, p.expires_at - 1).is_ok());
        assert_eq!(
            set.verify_pass(&pass_token, p.expires_at),
            Err(TokenError::Expired)
        );
        assert!(set.verify_ticket(&ticket_token, t.expires_at - 1).is_ok());
        assert_eq!(
            set.verify_ticket(&ticket_token, t.expires_at + 1),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn tokens_from_the_future_are_allowed_only_within_the_leeway() {
        let key = key();
        let set = key.verifying_keys();
        assert_eq!(set.leeway_ms(), DEFAULT_LEEWAY_MS);
        let pass_token = sign_pass(&key, &pass());
        let ticket_token = sign_ticket(&key, &ticket());
        let edge = NOW - DEFAULT_LEEWAY_MS;
        assert!(set.verify_pass(&pass_token, edge).is_ok());
        assert_eq!(
            set.verify_pass(&pass_token, edge - 1),
            Err(TokenError::NotYetValid)
        );
        assert!(set.verify_ticket(&ticket_token, edge).is_ok());
        assert_eq!(
            set.verify_ticket(&ticket_token, edge - 1),
            Err(TokenError::NotYetValid)
        );
        let strict = set.with_leeway_ms(0);
        assert!(strict.verify_pass(&pass_token, NOW).is_ok());
        assert_eq!(
            strict.verify_pass(&pass_token, NOW - 1),
            Err(TokenError::NotYetValid)
        );
    }

    #[test]
    fn other_algorithms_are_refused_before_anything_else() {
        let key = key();
        let set = key.verifying_keys();
        let claims = b64(to_json(&PassClaims::new(&pass())));
        for alg in ["none", "HS256", "RS256", "ES256", "Ed25519", "eddsa"] {
            let header = b64(format!(
                r#"{{"alg":"{alg}","kid":"{}","typ":"wr-pass+jwt"}}"#,
                key.kid()
            ));
            // `none` tokens carry an empty signature; others something HMAC-sized.
            for sig in [String::new(), b64([0u8; 32])] {
                let token = format!("{header}.{claims}.{sig}");
                assert_eq!(
                    set.verify_pass(&token, NOW),
                    Err(TokenError::UnsupportedAlgorithm(alg.to_owned()))
                );
            }
        }
    }

    #[test]
    fn unknown_kid_is_refused() {
        let key = key();
        let token = sign_compact(
            &key,
            r#"{"alg":"EdDSA","kid":"someone-else","typ":"wr-pass+jwt"}"#,
            &to_json(&PassClaims::new(&pass())),
        );
        assert_eq!(
            key.verifying_keys().verify_pass(&token, NOW),
            Err(TokenError::UnknownKey)
        );
    }

    #[test]
    fn garbage_is_malformed() {
        let set = key().verifying_keys();
        for garbage in [
            "",
            "garbage",
            "a.b.c",
            "..",
            "...",
            "a.b.c.d",
            "é.é.é",
            "eyJ9.e30.AAAA",
            "bnVsbA.e30.AAAA",
        ] {
            assert!(
                matches!(
                    set.verify_ticket(garbage, NOW),
                    Err(TokenError::Malformed(_))
                ),
                "{garbage:?}: {:?}",
                set.verify_ticket(garbage, NOW)
            );
        }
    }

    #[test]
    fn header_with_unknown_members_is_malformed() {
        let key = key();
        let set = key.verifying_keys();
        for extra in [
            r#""crit":["exp"]"#,
            r#""b64":false"#,
            r#""jku":"https://x""#,
        ] {
            let token = sign_compact(
                &key,
                &format!(
                    r#"{{"alg":"EdDSA","kid":"{}","typ":"wr-pass+jwt",{extra}}}"#,
                    key.kid()
                ),
                &to_json(&PassClaims::new(&pass())),
            );
            assert!(
                matches!(set.verify_pass(&token, NOW), Err(TokenError::Malformed(_))),
                "{extra}"
            );
        }
        let duplicate_alg = sign_compact(
            &key,
            &format!(
                r#"{{"alg":"EdDSA","alg":"none","kid":"{}","typ":"wr-pass+jwt"}}"#,
                key.kid()
            ),
            &to_json(&PassClaims::new(&pass())),
        );
        assert!(matches!(
            set.verify_pass(&duplicate_alg, NOW),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn non_canonical_base64_is_malformed() {
        let key = key();
        let set = key.verifying_keys();
        let token = sign_pass(&key, &pass());
        let p = parts(&token);
        // 64 bytes encode to 86 characters whose last one carries 4 unused bits; setting them
        // would give a second spelling of the same signature.
        let mut sig = p[2].clone().into_bytes();
        let last = sig.len() - 1;
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let index = alphabet.iter().position(|&c| c == sig[last]).unwrap();
        sig[last] = alphabet[index | 1];
        let respelt = format!("{}.{}.{}", p[0], p[1], String::from_utf8(sig).unwrap());
        assert_ne!(respelt, token);
        assert!(matches!(
            set.verify_pass(&respelt, NOW),
            Err(TokenError::Malformed(_))
        ));
        let padded = format!("{}.{}.{}==", p[0], p[1], p[2]);
        assert!(matches!(
            set.verify_pass(&padded, NOW),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn oversized_tokens_are_refused_up_front() {
        let set = key().verifying_keys();
        let huge = "A".repeat(MAX_TOKEN_LEN + 1);
        assert_eq!(
            set.verify_pass(&huge, NOW),
            Err(TokenError::TooLong {
                len: MAX_TOKEN_LEN + 1,
                max: MAX_TOKEN_LEN,
            })
        );
        let padded_real = format!(
            "{}{}",
            sign_pass(&key(), &pass()),
            " ".repeat(MAX_TOKEN_LEN)
        );
        assert!(matches!(
            set.verify_pass(&padded_real, NOW),
            Err(TokenError::TooLong { .. })
        ));
    }

    #[test]
    fn claims_this_crate_would_not_write_are_invalid() {
        let set = key().verifying_keys();
        type Edit = fn(&mut serde_json::Value);
        let cases: [(&str, Edit); 7] = [
            ("unknown field", |c| c["admin"] = true.into()),
            ("missing field", |c| {
                c.as_object_mut().unwrap().remove("created_at");
            }),
            ("jti mismatch", |c| c["jti"] = "0000000000000001".into()),
            ("exp mismatch", |c| c["exp"] = u64::MAX.into()),
            ("iat mismatch", |c| c["iat"] = 0.into()),
            ("nbf mismatch", |c| c["nbf"] = 0.into()),
            ("bad type", |c| c["node"] = "three".into()),
        ];
        for (name, edit) in cases {
            let token = pass_with_claims(edit);
            assert!(
                matches!(
                    set.verify_pass(&token, NOW),
                    Err(TokenError::InvalidClaims(_))
                ),
                "{name}: {:?}",
                set.verify_pass(&token, NOW)
            );
        }
        // A ticket's optional fields must be present, as null when empty.
        let key = key();
        let mut claims = serde_json::to_value(TicketClaims::new(&ticket())).unwrap();
        claims.as_object_mut().unwrap().remove("eviction_time");
        let token = sign_compact(
            &key,
            &header_for(&key, TokenKind::Ticket),
            claims.to_string().as_bytes(),
        );
        assert!(matches!(
            set.verify_ticket(&token, NOW),
            Err(TokenError::InvalidClaims(_))
        ));
        // The pass's claims as an array in field order: serde alone would accept it.
        let p = pass();
        let as_array = serde_json::json!([
            "pass",
            "0123456789abcdef",
            seconds(p.issued_at),
            seconds(p.issued_at),
            seconds(p.expires_at),
            "0123456789abcdef",
            p.node.0,
            p.queue_join_time,
            p.created_at,
            p.issued_at,
            p.expires_at,
            p.eviction_time,
        ]);
        assert!(serde_json::from_value::<PassClaims>(as_array.clone()).is_ok());
        let array_token = sign_compact(
            &key,
            &header_for(&key, TokenKind::Pass),
            &serde_json::to_vec(&as_array).unwrap(),
        );
        assert!(matches!(
            set.verify_pass(&array_token, NOW),
            Err(TokenError::InvalidClaims(_))
        ));
        let not_json = sign_compact(&key, &header_for(&key, TokenKind::Pass), b"[1,2");
        assert!(matches!(
            set.verify_pass(&not_json, NOW),
            Err(TokenError::InvalidClaims(_))
        ));
    }

    #[test]
    fn errors_read_well() {
        let e = TokenError::WrongKind {
            expected: TokenKind::Pass,
            found: Some("wr-ticket+jwt".to_owned()),
        };
        assert_eq!(e.to_string(), "expected a pass token, found wr-ticket+jwt");
        let e = TokenError::WrongKind {
            expected: TokenKind::Ticket,
            found: None,
        };
        assert_eq!(
            e.to_string(),
            "expected a ticket token, found a token with no type"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,600}") {
            let set = key().verifying_keys();
            let _ = set.verify_ticket(&text, NOW);
            let _ = set.verify_pass(&text, NOW);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let set = key().verifying_keys();
            let text = String::from_utf8_lossy(&bytes);
            let _ = set.verify_ticket(&text, NOW);
            let _ = set.verify_pass(&text, NOW);
        }

        #[test]
        fn token_shaped_noise_never_panics(
            header in proptest::collection::vec(any::<u8>(), 0..120),
            payload in proptest::collection::vec(any::<u8>(), 0..400),
            signature in proptest::collection::vec(any::<u8>(), 0..70),
        ) {
            let set = key().verifying_keys();
            let token = format!("{}.{}.{}", b64(&header), b64(&payload), b64(&signature));
            prop_assert!(set.verify_pass(&token, NOW).is_err());
            prop_assert!(set.verify_ticket(&token, NOW).is_err());
        }

        #[test]
        fn any_one_character_change_is_refused(index in 0usize..1000, replacement in any::<char>()) {
            let key = key();
            let token = sign_pass(&key, &pass());
            let index = index % token.len();
            let mut changed: String = token.chars().take(index).collect();
            changed.push(replacement);
            changed.extend(token.chars().skip(index + 1));
            prop_assume!(changed != token);
            prop_assert!(key.verifying_keys().verify_pass(&changed, NOW).is_err());
        }
    }
}
