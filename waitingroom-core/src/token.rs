//! Tickets and passes as signed tokens.
//!
//! Both are JWS in compact serialization (RFC 7515): `header.payload.signature`, each part
//! base64url without padding, the payload the claims as JSON.
//!
//! - A **pass** is signed with EdDSA over Ed25519 (RFC 8037), so an origin checks it offline
//!   with the cluster's public keys (its JWKS) and any stock JOSE or JWT library. Header:
//!   `{"alg":"EdDSA","kid":"<key id>","typ":"wr-pass+jwt"}`.
//! - A **ticket** is read only by the nodes of the cluster, so it is authenticated with
//!   HMAC-SHA256 (`alg` `HS256`, RFC 7518 §3.2) under a secret every node derives from the
//!   cluster key (see [`crate::keys`]): a microsecond where an Ed25519 signature costs tens.
//!   Header: `{"alg":"HS256","kid":"<key id>","typ":"wr-ticket+jwt"}`, where `kid` names the
//!   cluster key the secret is derived from.
//!
//! Each key's two headers are encoded once, when the key is made. The payload holds every field
//! of the [`Ticket`] or [`Pass`] (times in milliseconds), a `kind` claim (`"ticket"` or
//! `"pass"`), and the registered JWT claims `jti` (the ticket id), and `iat`, `nbf`, `exp` in
//! seconds (`issued_at` and `expires_at` rounded down), so generic libraries enforce expiry too:
//!
//! ```json
//! {"kind":"pass","jti":"0123456789abcdef","iat":1700000100,"nbf":1700000100,
//!  "exp":1700000700,"id":"0123456789abcdef","node":3,"queue_join_time":1700000000000,
//!  "created_at":1700000100500,"issued_at":1700000100500,"expires_at":1700000700500,
//!  "eviction_time":1700000100000}
//! ```
//!
//! Verification pins the algorithm to the kind of token asked for (RFC 8725 §3.1): a pass is
//! accepted only as EdDSA under a public key, a ticket only as HS256 under a derived ticket
//! secret. So neither `alg` `none`, nor an HMAC keyed with the public key (the classic key
//! confusion), nor a token of the other kind gets through. The header's `kid` is taken on trust
//! only to pick the key; the claims are read only once the signature or MAC checks out, and both
//! the header `typ` and the `kind` claim must match the kind asked for.

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::{DecodeSliceError, Engine as _};
use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::jose::{JoseHeader, TokenKind, to_json};
use crate::keys::{ClusterKey, KeyRing, VerifyingKeySet};
use crate::types::{NodeId, Pass, Ticket, TicketId, Time};

/// Tokens longer than this many bytes are refused before any decoding. Real tokens are about
/// 400 bytes; the bound keeps the work an attacker can cause per request small.
pub const MAX_TOKEN_LEN: usize = 4096;

/// Bytes of an Ed25519 signature.
const SIGNATURE_LEN: usize = 64;
/// Bytes of an HMAC-SHA256 tag.
const MAC_LEN: usize = 32;
/// Room for a decoded signature part: base64 decoding wants a buffer of its estimate, 3 bytes
/// per 4 characters rounded up, which is 66 for the 86 characters of an Ed25519 signature.
const SIGNATURE_BUF: usize = 66;
/// Room for the decoded payload of the longest token allowed, so it is decoded on the stack.
const PAYLOAD_BUF: usize = MAX_TOKEN_LEN / 4 * 3;

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
    /// that is not 64 bytes (a pass) or a MAC that is not 32 bytes (a ticket).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The header's `alg` is not the one of the kind asked for (`EdDSA` for a pass, `HS256`
    /// for a ticket); `none` included.
    #[error("unsupported token algorithm `{0}` for this kind of token")]
    UnsupportedAlgorithm(String),
    /// The header has no `kid`, or names a key not in the set.
    #[error("token is signed with an unknown key")]
    UnknownKey,
    /// The signature or MAC does not match the header, payload and key.
    #[error("token signature does not verify")]
    BadSignature,
    /// A token of the other kind, or of no kind this crate issues: told by the header's `alg`
    /// and `typ` together (before any check: an origin holds no key to check a ticket's MAC),
    /// or by an authentic token's `typ` or `kind` claim.
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

/// JWT NumericDate: whole seconds, rounded down so generic libraries never accept a token past
/// its millisecond expiry.
fn seconds(ms: Time) -> u64 {
    ms / 1000
}

/// What the claims of both kinds share, for [`read_claims`].
trait Claims<'a>: Deserialize<'a> {
    /// The kind of token these claims belong in.
    const KIND: TokenKind;
    /// The `kind` claim as read.
    fn kind(&self) -> &str;
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TicketClaims<'a> {
    // Borrowed from the payload when read, from a constant when written: no allocation.
    #[serde(borrow)]
    kind: Cow<'a, str>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    draw: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    round: Option<u64>,
}

impl<'a> Claims<'a> for TicketClaims<'a> {
    const KIND: TokenKind = TokenKind::Ticket;
    fn kind(&self) -> &str {
        &self.kind
    }
}

impl TicketClaims<'_> {
    fn new(t: &Ticket) -> Self {
        TicketClaims {
            kind: Cow::Borrowed(TokenKind::Ticket.claim()),
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
            draw: t.draw,
            round: t.round,
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
            draw: self.draw,
            round: self.round,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PassClaims<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    round: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    draw: Option<u64>,
}

impl<'a> Claims<'a> for PassClaims<'a> {
    const KIND: TokenKind = TokenKind::Pass;
    fn kind(&self) -> &str {
        &self.kind
    }
}

impl PassClaims<'_> {
    fn new(p: &Pass) -> Self {
        PassClaims {
            kind: Cow::Borrowed(TokenKind::Pass.claim()),
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
            round: p.round,
            draw: p.draw,
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
            round: self.round,
            draw: self.draw,
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

/// Only the `kind` claim: read when claims fail to parse, so a token of the other kind is
/// reported as such rather than as having unknown fields.
#[derive(Deserialize)]
struct KindPeek {
    #[serde(default)]
    kind: Option<String>,
}

/// The JWS signing input, `header.payload`, with room left for the signature's `signature_chars`
/// characters: the one string the token is built in.
fn signing_input(header: &str, payload: &[u8], signature_chars: usize) -> String {
    let payload_chars = payload.len().div_ceil(3) * 4;
    let mut token = String::with_capacity(header.len() + payload_chars + 2 + signature_chars);
    token.push_str(header);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(payload, &mut token);
    token
}

fn push_signature(mut token: String, signature: &[u8]) -> String {
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(signature, &mut token);
    token
}

/// Characters of a base64url signature of `len` bytes, unpadded.
const fn signature_chars(len: usize) -> usize {
    (len * 4).div_ceil(3)
}

/// The ticket as a token: HS256 under the key's derived ticket secret.
pub fn sign_ticket(key: &ClusterKey, t: &Ticket) -> String {
    let claims = to_json(&TicketClaims::new(t));
    let header = key.header(TokenKind::Ticket);
    let token = signing_input(header, &claims, signature_chars(MAC_LEN));
    let mac = key.ticket_mac().tag(&[token.as_bytes()]);
    push_signature(token, &mac)
}

/// The pass as a token: EdDSA with the key.
pub fn sign_pass(key: &ClusterKey, p: &Pass) -> String {
    let claims = to_json(&PassClaims::new(p));
    let header = key.header(TokenKind::Pass);
    let token = signing_input(header, &claims, signature_chars(SIGNATURE_LEN));
    let signature = key.sign_jws_input(token.as_bytes());
    push_signature(token, &signature)
}

/// Signs `payload` with EdDSA under the protected header `header_json`, as given, into a JWS
/// compact token.
///
/// Low level: nothing checks that the header says `EdDSA` or names this key. Use
/// [`sign_ticket`] and [`sign_pass`] for tokens.
pub fn sign_compact(key: &ClusterKey, header_json: &str, payload: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(header_json);
    let token = signing_input(&header, payload, signature_chars(SIGNATURE_LEN));
    let signature = key.sign_jws_input(token.as_bytes());
    push_signature(token, &signature)
}

/// Authenticates `payload` with HMAC-SHA256 under the key's derived ticket secret and the
/// protected header `header_json`, as given, into a JWS compact token.
///
/// Low level, like [`sign_compact`]: for tests and fuzzing of what a node does with a token
/// only the cluster could have made. Use [`sign_ticket`] for tickets.
pub fn mac_compact(key: &ClusterKey, header_json: &str, payload: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(header_json);
    let token = signing_input(&header, payload, signature_chars(MAC_LEN));
    let mac = key.ticket_mac().tag(&[token.as_bytes()]);
    push_signature(token, &mac)
}

/// A token cut into its three parts, nothing decoded yet.
struct Parts<'a> {
    header: &'a str,
    /// The JWS signing input: the encoded header, a dot, the encoded payload.
    signing_input: &'a str,
    payload: &'a str,
    signature: &'a str,
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
    Ok(Parts {
        header,
        // Both parts are prefixes of `token`, so this slice is on character boundaries.
        signing_input: &token[..header.len() + 1 + payload.len()],
        payload,
        signature,
    })
}

impl Parts<'_> {
    fn decode_header(&self) -> Result<JoseHeader, TokenError> {
        let mut buf = [0u8; PAYLOAD_BUF];
        let json = decode_into("header", self.header, &mut buf)?;
        serde_json::from_slice(json).map_err(|e| TokenError::Malformed(format!("header: {e}")))
    }

    /// The payload, decoded into `buf`.
    fn decode_payload<'b>(&self, buf: &'b mut [u8; PAYLOAD_BUF]) -> Result<&'b [u8], TokenError> {
        decode_into("payload", self.payload, buf)
    }

    /// The signature (or MAC) part, which must decode to exactly `N` bytes.
    fn signature<const N: usize>(&self) -> Result<[u8; N], TokenError> {
        let mut buf = [0u8; SIGNATURE_BUF];
        let wrong_length = || TokenError::Malformed(format!("signature is not {N} bytes"));
        match URL_SAFE_NO_PAD.decode_slice(self.signature, &mut buf) {
            Ok(len) => buf[..len].try_into().map_err(|_| wrong_length()),
            Err(DecodeSliceError::OutputSliceTooSmall) => Err(wrong_length()),
            Err(DecodeSliceError::DecodeError(e)) => Err(TokenError::Malformed(format!(
                "signature is not base64url: {e}"
            ))),
        }
    }
}

/// Decodes a base64url part into `buf`: no allocation.
fn decode_into<'b>(what: &str, part: &str, buf: &'b mut [u8]) -> Result<&'b [u8], TokenError> {
    match URL_SAFE_NO_PAD.decode_slice(part, buf) {
        Ok(len) => Ok(&buf[..len]),
        // Unreachable within MAX_TOKEN_LEN, which the buffers are sized for.
        Err(DecodeSliceError::OutputSliceTooSmall) => {
            Err(TokenError::Malformed(format!("{what} is too long")))
        }
        Err(DecodeSliceError::DecodeError(e)) => Err(TokenError::Malformed(format!(
            "{what} is not base64url: {e}"
        ))),
    }
}

/// The algorithm is the one of the kind asked for, never the one the token names. A token that
/// says it is of the other kind, by algorithm and type, is reported as such.
fn pin_algorithm(header: &JoseHeader, kind: TokenKind) -> Result<(), TokenError> {
    if header.alg == kind.alg() {
        return Ok(());
    }
    let other = kind.other();
    if header.alg == other.alg() && header.typ.as_deref() == Some(other.typ()) {
        return Err(TokenError::WrongKind {
            expected: kind,
            found: header.typ.clone(),
        });
    }
    Err(TokenError::UnsupportedAlgorithm(header.alg.clone()))
}

/// An authentic token's `typ` must be the kind asked for.
fn check_typ(header: JoseHeader, kind: TokenKind) -> Result<(), TokenError> {
    if header.typ.as_deref() == Some(kind.typ()) {
        Ok(())
    } else {
        Err(TokenError::WrongKind {
            expected: kind,
            found: header.typ,
        })
    }
}

/// Reads an authentic payload as claims of kind `C::KIND`, in one parse when they are.
fn read_claims<'a, C: Claims<'a>>(payload: &'a [u8]) -> Result<C, TokenError> {
    // serde's derived structs also accept a JSON array of the field values in order, which this
    // crate never writes; only an object is a claim set.
    if payload.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(TokenError::InvalidClaims(
            "claims are not a JSON object".to_owned(),
        ));
    }
    let wrong_kind = |found: Option<String>| TokenError::WrongKind {
        expected: C::KIND,
        found,
    };
    let claims = serde_json::from_slice::<C>(payload).map_err(|e| {
        // Claims of the other kind fail on their fields: say which kind they are instead.
        match serde_json::from_slice::<KindPeek>(payload) {
            Ok(peek) if peek.kind.as_deref() != Some(C::KIND.claim()) => wrong_kind(peek.kind),
            _ => TokenError::InvalidClaims(e.to_string()),
        }
    })?;
    if claims.kind() != C::KIND.claim() {
        return Err(wrong_kind(Some(claims.kind().to_owned())));
    }
    Ok(claims)
}

pub(crate) fn check_times(
    leeway_ms: u64,
    issued_at: Time,
    expires_at: Time,
    now: Time,
) -> Result<(), TokenError> {
    if now >= expires_at {
        return Err(TokenError::Expired);
    }
    if issued_at > now.saturating_add(leeway_ms) {
        return Err(TokenError::NotYetValid);
    }
    Ok(())
}

fn check_signature(key: &VerifyingKey, parts: &Parts<'_>) -> Result<(), TokenError> {
    let signature: [u8; SIGNATURE_LEN] = parts.signature()?;
    // Strict verification refuses small-order keys and points, so no second signature for
    // the same message can be made from a valid one.
    key.verify_strict(
        parts.signing_input.as_bytes(),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| TokenError::BadSignature)
}

impl VerifyingKeySet {
    /// Checks an EdDSA JWS compact token's form, algorithm, key and signature, and returns its
    /// header and payload bytes. Claims are not looked at; prefer
    /// [`VerifyingKeySet::verify_pass`].
    pub fn verify_compact(&self, token: &str) -> Result<(JoseHeader, Vec<u8>), TokenError> {
        let parts = split(token)?;
        let header = parts.decode_header()?;
        if header.alg != TokenKind::Pass.alg() {
            return Err(TokenError::UnsupportedAlgorithm(header.alg));
        }
        self.check_eddsa(&header, &parts)?;
        let mut buf = [0u8; PAYLOAD_BUF];
        let payload = parts.decode_payload(&mut buf)?.to_vec();
        Ok((header, payload))
    }

    /// Verifies a pass token at time `now` (milliseconds) and returns the pass.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        let parts = split(token)?;
        let header = parts.decode_header()?;
        pin_algorithm(&header, TokenKind::Pass)?;
        self.check_eddsa(&header, &parts)?;
        check_typ(header, TokenKind::Pass)?;
        let mut buf = [0u8; PAYLOAD_BUF];
        let pass = read_claims::<PassClaims>(parts.decode_payload(&mut buf)?)?.into_pass()?;
        check_times(self.leeway_ms, pass.issued_at, pass.expires_at, now)?;
        Ok(pass)
    }

    /// The key the header names, and the signature under it.
    fn check_eddsa(&self, header: &JoseHeader, parts: &Parts<'_>) -> Result<(), TokenError> {
        let key = header
            .kid
            .as_deref()
            .and_then(|kid| self.get(kid))
            .ok_or(TokenError::UnknownKey)?;
        check_signature(key, parts)
    }
}

impl KeyRing {
    /// The ticket as a token, made with the current key.
    pub fn sign_ticket(&self, t: &Ticket) -> String {
        sign_ticket(self.current(), t)
    }

    /// The pass as a token, signed with the current key.
    pub fn sign_pass(&self, p: &Pass) -> String {
        sign_pass(self.current(), p)
    }

    /// Verifies a pass token at `now` against every key's public half.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        self.public().verify_pass(token, now)
    }

    /// Verifies a ticket token at time `now` (milliseconds), under the ticket secret of the key
    /// its `kid` names, and returns the ticket.
    ///
    /// The header is normally byte for byte one this ring writes, which names the key without
    /// decoding anything; any other header is decoded and checked as a pass header would be.
    pub fn verify_ticket(&self, token: &str, now: Time) -> Result<Ticket, TokenError> {
        let parts = split(token)?;
        let ours = self
            .keys()
            .find(|key| key.header(TokenKind::Ticket) == parts.header);
        let (key, header) = match ours {
            Some(key) => (key, None),
            None => {
                let header = parts.decode_header()?;
                pin_algorithm(&header, TokenKind::Ticket)?;
                let key = header.kid.as_deref().and_then(|kid| self.find(kid));
                (key.ok_or(TokenError::UnknownKey)?, Some(header))
            }
        };
        let mac: [u8; MAC_LEN] = parts.signature()?;
        if !key
            .ticket_mac()
            .verify(&[parts.signing_input.as_bytes()], &mac)
        {
            return Err(TokenError::BadSignature);
        }
        if let Some(header) = header {
            check_typ(header, TokenKind::Ticket)?;
        }
        let mut buf = [0u8; PAYLOAD_BUF];
        let ticket = read_claims::<TicketClaims>(parts.decode_payload(&mut buf)?)?.into_ticket()?;
        check_times(
            self.public().leeway_ms,
            ticket.issued_at,
            ticket.expires_at,
            now,
        )?;
        Ok(ticket)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::keys::DEFAULT_LEEWAY_MS;

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
            draw: None,
            round: None,
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
            round: None,
            draw: None,
        }
    }

    fn b64(bytes: impl AsRef<[u8]>) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn ring(key: &ClusterKey) -> KeyRing {
        KeyRing::new(key.clone())
    }

    fn header_for(key: &ClusterKey, kind: TokenKind) -> String {
        format!(
            r#"{{"alg":"{}","kid":"{}","typ":"{}"}}"#,
            kind.alg(),
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
            ring(&key).verify_ticket(&sign_ticket(&key, &t), NOW),
            Ok(t.clone())
        );
        t.previous_position = None;
        t.eviction_time = Some(NOW - 1);
        assert_eq!(ring(&key).verify_ticket(&sign_ticket(&key, &t), NOW), Ok(t));
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
        // A 32-byte MAC, where a pass carries a 64-byte signature.
        assert_eq!(parts(&ticket_token)[2].len(), 43);
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
        assert_eq!(parts.decode_header().unwrap().kid, None);
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
        let set = ring(&key);
        let relabel = |token: &str, header: String| {
            let p = parts(token);
            format!("{}.{}.{}", b64(header), p[1], p[2])
        };
        // Each kind's `typ` swapped for the other's, the algorithm kept: the signature (or MAC)
        // covers the header, so it no longer verifies.
        let pass_as_ticket = relabel(
            &sign_pass(&key, &pass()),
            format!(
                r#"{{"alg":"EdDSA","kid":"{}","typ":"wr-ticket+jwt"}}"#,
                key.kid()
            ),
        );
        assert_eq!(
            set.verify_pass(&pass_as_ticket, NOW),
            Err(TokenError::BadSignature)
        );
        let ticket_as_pass = relabel(
            &sign_ticket(&key, &ticket()),
            format!(
                r#"{{"alg":"HS256","kid":"{}","typ":"wr-pass+jwt"}}"#,
                key.kid()
            ),
        );
        assert_eq!(
            set.verify_ticket(&ticket_as_pass, NOW),
            Err(TokenError::BadSignature)
        );
        // The whole header swapped: a 32-byte MAC is no Ed25519 signature and the other way round.
        let ticket_under_pass_header = relabel(
            &sign_ticket(&key, &ticket()),
            header_for(&key, TokenKind::Pass),
        );
        assert!(matches!(
            set.verify_pass(&ticket_under_pass_header, NOW),
            Err(TokenError::Malformed(_))
        ));
        let pass_under_ticket_header = relabel(
            &sign_pass(&key, &pass()),
            header_for(&key, TokenKind::Ticket),
        );
        assert!(matches!(
            set.verify_ticket(&pass_under_ticket_header, NOW),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn ticket_mac_matches_an_independent_hkdf_and_hmac() {
        // Computed with Python's hmac and hashlib: RFC 5869 HKDF-SHA256 with no salt of the
        // seed and "waitingroom v1 ticket hmac-sha256", then RFC 2104 HMAC-SHA256 (RFC 7515
        // appendix A.1's steps) of the signing input. Nodes of every version must agree on it.
        assert_eq!(
            mac_compact(&key(), r#"{"alg":"HS256"}"#, b"waitingroom"),
            "eyJhbGciOiJIUzI1NiJ9.d2FpdGluZ3Jvb20.XcXXGrYZ13ust_zw9GIdfzBg0GIQcdWc8t_Kt_JAlMw"
        );
    }

    #[test]
    fn tampered_or_foreign_ticket_is_a_bad_signature() {
        let key = key();
        let set = ring(&key);
        let token = sign_ticket(&key, &ticket());
        let p = parts(&token);
        let mut claims = payload_json(&token);
        claims["expires_at"] = serde_json::json!(u64::MAX);
        let edited = format!("{}.{}.{}", p[0], b64(claims.to_string()), p[2]);
        assert_eq!(
            set.verify_ticket(&edited, NOW),
            Err(TokenError::BadSignature)
        );
        // Key confusion: the MAC keyed with the public key, or with the pass-signing seed.
        let public = URL_SAFE_NO_PAD.decode(&key.public_jwk().x).unwrap();
        for secret in [public, vec![42; 32]] {
            let input = format!("{}.{}", p[0], p[1]);
            let mac = {
                use hmac::{KeyInit as _, Mac as _};
                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&secret).unwrap();
                mac.update(input.as_bytes());
                mac.finalize().into_bytes()
            };
            let forged = format!("{input}.{}", b64(mac));
            assert_eq!(
                set.verify_ticket(&forged, NOW),
                Err(TokenError::BadSignature)
            );
        }
        // Another cluster's ticket under this cluster's key id.
        let impostor = ClusterKey::from_seed([7; 32]).with_kid(key.kid().to_owned());
        assert_eq!(
            set.verify_ticket(&sign_ticket(&impostor, &ticket()), NOW),
            Err(TokenError::BadSignature)
        );
        let short = format!("{}.{}.{}", p[0], p[1], &p[2][..40]);
        assert!(matches!(
            set.verify_ticket(&short, NOW),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn tickets_are_accepted_as_hs256_only() {
        let key = key();
        let set = ring(&key);
        let claims = to_json(&TicketClaims::new(&ticket()));
        // An Ed25519-signed ticket, as this crate once made them, is refused like any other
        // algorithm, however good its signature.
        let eddsa = sign_compact(
            &key,
            &header_for(&key, TokenKind::Ticket).replace("HS256", "EdDSA"),
            &claims,
        );
        assert_eq!(
            set.verify_ticket(&eddsa, NOW),
            Err(TokenError::UnsupportedAlgorithm("EdDSA".to_owned()))
        );
        for alg in ["none", "HS384", "HS512", "RS256", "hs256"] {
            let header = b64(format!(
                r#"{{"alg":"{alg}","kid":"{}","typ":"wr-ticket+jwt"}}"#,
                key.kid()
            ));
            for sig in [String::new(), b64([0u8; 32])] {
                let token = format!("{header}.{}.{sig}", b64(&claims));
                assert_eq!(
                    set.verify_ticket(&token, NOW),
                    Err(TokenError::UnsupportedAlgorithm(alg.to_owned()))
                );
            }
        }
    }

    #[test]
    fn ticket_headers_other_than_ours_are_checked_in_full() {
        let key = key();
        let set = ring(&key);
        let claims = to_json(&TicketClaims::new(&ticket()));
        let mac = |header: String| mac_compact(&key, &header, &claims);
        let kid = key.kid();
        // Authentic, members in another order: the fast path misses, the full check accepts.
        let reordered = mac(format!(
            r#"{{"typ":"wr-ticket+jwt","kid":"{kid}","alg":"HS256"}}"#
        ));
        assert_eq!(set.verify_ticket(&reordered, NOW), Ok(ticket()));
        let unknown = mac(r#"{"alg":"HS256","kid":"nobody","typ":"wr-ticket+jwt"}"#.to_owned());
        assert_eq!(
            set.verify_ticket(&unknown, NOW),
            Err(TokenError::UnknownKey)
        );
        let no_kid = mac(r#"{"alg":"HS256","typ":"wr-ticket+jwt"}"#.to_owned());
        assert_eq!(set.verify_ticket(&no_kid, NOW), Err(TokenError::UnknownKey));
        let untyped = mac(format!(r#"{{"alg":"HS256","kid":"{kid}"}}"#));
        assert_eq!(
            set.verify_ticket(&untyped, NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Ticket,
                found: None
            })
        );
        let crit = mac(format!(
            r#"{{"alg":"HS256","kid":"{kid}","typ":"wr-ticket+jwt","crit":["exp"]}}"#
        ));
        assert!(matches!(
            set.verify_ticket(&crit, NOW),
            Err(TokenError::Malformed(_))
        ));
        // Pass claims under the ticket header, authentic: the claims say which kind they are.
        let pass_claims = mac_compact(
            &key,
            &header_for(&key, TokenKind::Ticket),
            &to_json(&PassClaims::new(&pass())),
        );
        assert_eq!(
            set.verify_ticket(&pass_claims, NOW),
            Err(TokenError::WrongKind {
                expected: TokenKind::Ticket,
                found: Some("pass".to_owned())
            })
        );
    }

    #[test]
    fn rotation_accepts_what_the_previous_key_made_only_where_it_is_held() {
        let old = key();
        let new = ClusterKey::from_seed([8; 32]);
        let both = KeyRing::with_previous(new.clone(), [old.clone()]).unwrap();
        let only_new = ring(&new);
        let (old_ticket, old_pass) = (sign_ticket(&old, &ticket()), sign_pass(&old, &pass()));
        assert_eq!(both.verify_ticket(&old_ticket, NOW), Ok(ticket()));
        assert_eq!(both.verify_pass(&old_pass, NOW), Ok(pass()));
        assert_eq!(
            only_new.verify_ticket(&old_ticket, NOW),
            Err(TokenError::UnknownKey)
        );
        assert_eq!(
            only_new.verify_pass(&old_pass, NOW),
            Err(TokenError::UnknownKey)
        );
        // The ring makes tokens with the current key only.
        let (ticket_token, pass_token) = (both.sign_ticket(&ticket()), both.sign_pass(&pass()));
        assert_eq!(only_new.verify_ticket(&ticket_token, NOW), Ok(ticket()));
        assert_eq!(only_new.verify_pass(&pass_token, NOW), Ok(pass()));
        assert_eq!(
            ring(&old).verify_ticket(&ticket_token, NOW),
            Err(TokenError::UnknownKey)
        );
        assert_eq!(
            both.public().kids().collect::<Vec<_>>(),
            [new.kid(), old.kid()]
        );
        // Each key's tickets verify only under that key's own secret.
        let swapped = old.clone().with_kid(new.kid().to_owned());
        assert!(KeyRing::with_previous(new.clone(), [swapped.clone()]).is_err());
        assert_eq!(
            both.verify_ticket(&sign_ticket(&swapped, &ticket()), NOW),
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
        let set = ring(&key);
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
        let set = ring(&key);
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
        let set = ring(&key);
        assert_eq!(set.public().leeway_ms(), DEFAULT_LEEWAY_MS);
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
        let set = ring(&key());
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
        let set = ring(&key());
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
        let token = mac_compact(
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
        assert!(serde_json::from_str::<PassClaims>(&as_array.to_string()).is_ok());
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
            let set = ring(&key());
            let _ = set.verify_ticket(&text, NOW);
            let _ = set.verify_pass(&text, NOW);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let set = ring(&key());
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
            let set = ring(&key());
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
