//! The JOSE side of tokens, with no key in sight: the two kinds of token and the JWS protected
//! header each carries (RFC 7515 §4, RFC 8725 §3.11 explicit typing).
//!
//! Both [`crate::keys`] and [`crate::token`] need it: a [`crate::keys::ClusterKey`] encodes its
//! two headers once, when it is made, and the token code signs under them and checks what a
//! token's header says against the [`TokenKind`] asked for. Kept apart so that neither of those
//! two modules has to reach into the other for it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Serialised claims are about 300 bytes: written into a buffer this big, they never regrow it.
const CLAIMS_CAPACITY: usize = 512;

/// The two kinds of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A [`Ticket`](crate::Ticket): a waiting visitor's place in line.
    Ticket,
    /// A [`Pass`](crate::Pass): an admitted visitor's permission to be on the site.
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

    /// The only JWS `alg` accepted for this kind: `HS256` for tickets, `EdDSA` for passes.
    pub fn alg(self) -> &'static str {
        match self {
            TokenKind::Ticket => "HS256",
            TokenKind::Pass => "EdDSA",
        }
    }

    /// The kind this one is not.
    pub(crate) fn other(self) -> TokenKind {
        match self {
            TokenKind::Ticket => TokenKind::Pass,
            TokenKind::Pass => TokenKind::Ticket,
        }
    }
}

impl std::fmt::Display for TokenKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.claim())
    }
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

/// The header this crate writes; borrowed so encoding it copies nothing.
#[derive(Serialize)]
struct HeaderOut<'a> {
    alg: &'static str,
    kid: &'a str,
    typ: &'static str,
}

/// The base64url protected header of `kind` tokens made with the key `kid`: computed once per
/// key ([`ClusterKey`](crate::ClusterKey) keeps both), never per token.
pub(crate) fn encoded_header(kind: TokenKind, kid: &str) -> String {
    URL_SAFE_NO_PAD.encode(to_json(&HeaderOut {
        alg: kind.alg(),
        kid,
        typ: kind.typ(),
    }))
}

/// `value` as JSON: a header, or a token's claims.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    let mut json = Vec::with_capacity(CLAIMS_CAPACITY);
    // serde_json fails only on maps with non-string keys or on a Serialize impl that reports an
    // error; headers and claims are structs of strings, integers and ids, so this cannot fail.
    serde_json::to_writer(&mut json, value).expect("token header and claims always serialise");
    json
}
