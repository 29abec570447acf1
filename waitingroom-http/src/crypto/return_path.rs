//! The way back: the page a visitor asked for at the origin, which the gate hands the room and
//! the room sends them back to once they are let in (docs/operating.md#origin-gating).
//!
//! It rides in the room's query as `return_to=PATH&return_sig=MAC&return_exp=MS`. The path must
//! be one on the origin ([`safe_return_path`]: never another host), and the MAC proves the
//! origin's gate (or the room) wrote it: HMAC-SHA256 under a secret derived from the cluster key
//! (`ClusterKey::return_path_secret`) of the path, its expiry and — once the visitor holds a
//! ticket — the visitor's ticket id, the first 16 bytes, base64url. A gate holds only that
//! secret (`waitingroom-node gate-secret`), not the cluster key. Without a valid MAC the room
//! ignores the path and sends the visitor to the site's front page, so a link made up by
//! someone else cannot send visitors, after their wait, to a page of that someone's choosing.
//!
//! A way back lives [`RETURN_PATH_LIFE_MS`] (a day: longer than a wait), so one copied from a
//! link is good for that long at most. The gate signs it for nobody in particular (the visitor
//! has no place yet); the room signs it again for the visitor's ticket once they take a place
//! (the page's own button), and such a way back is followed only for the holder of that ticket
//! or of its pass. An expired one, or one signed for another visitor, is refused: the visitor
//! goes to the front page, and the node logs why and counts it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use waitingroom_core::{TicketId, Time};

/// Longest return path handed to the room; a longer one is dropped (the room then sends the
/// visitor to the site's front page).
pub const MAX_RETURN_PATH: usize = 2048;

/// Bytes of the MAC kept: 128 bits, as many as a forger would have to guess.
const MAC_BYTES: usize = 16;

/// How long a signed way back is good for: a day, longer than any wait it has to outlast.
pub const RETURN_PATH_LIFE_MS: Time = 24 * 3_600_000;

/// Why a way back in a query is not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a path on the origin that is safe to send a browser to.
    #[error("the return path is not a path on the origin")]
    Unsafe,
    /// No signature, no expiry, or a signature by no key of the cluster for this visitor (made
    /// up, changed, or signed for another visitor's ticket).
    #[error("the return path is not signed for this visitor")]
    Unsigned,
    /// Signed, but its time is over.
    #[error("the return path expired at {expired_at_ms} ms")]
    Expired {
        /// When it expired (Unix ms).
        expired_at_ms: Time,
    },
}

impl Refused {
    /// The metric and log label of this refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Unsafe => "unsafe",
            Refused::Unsigned => "unsigned",
            Refused::Expired { .. } => "expired",
        }
    }
}

/// A return-path secret, ready to sign and check paths.
#[derive(Clone)]
pub struct ReturnPathKey(Hmac<Sha256>);

impl std::fmt::Debug for ReturnPathKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReturnPathKey(..)")
    }
}

impl ReturnPathKey {
    /// The key of `secret` (`ClusterKey::return_path_secret`).
    pub fn new(secret: &[u8; 32]) -> Self {
        ReturnPathKey(Hmac::new_from_slice(secret).expect("HMAC accepts any key length"))
    }

    /// Reads a secret as `waitingroom-node gate-secret` prints it (base64url, 32 bytes).
    pub fn from_text(text: &str) -> Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|e| format!("not base64url: {e}"))?;
        let secret: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "must be 32 bytes (from `waitingroom-node gate-secret`)".to_owned())?;
        Ok(ReturnPathKey::new(&secret))
    }

    /// The MAC over `path`, its expiry `exp` and the visitor it is for, if any.
    fn mac(&self, path: &str, exp: Time, visitor: Option<TicketId>) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        let visitor = visitor.map_or_else(String::new, |id| id.to_string());
        mac.update(format!("waitingroom return path v2\n{exp}\n{visitor}\n").as_bytes());
        mac.update(path.as_bytes());
        mac
    }

    /// The MAC of `path` expiring at `exp`, for `visitor` (None: anyone who comes with it).
    pub fn sign(&self, path: &str, exp: Time, visitor: Option<TicketId>) -> String {
        let mac = self.mac(path, exp, visitor).finalize().into_bytes();
        URL_SAFE_NO_PAD.encode(&mac[..MAC_BYTES])
    }

    /// Whether `sig` is the MAC of `path`, `exp` and `visitor` (compared in constant time).
    pub fn verify(&self, path: &str, exp: Time, visitor: Option<TicketId>, sig: &str) -> bool {
        let Ok(tag) = URL_SAFE_NO_PAD.decode(sig) else {
            return false;
        };
        let mac = self.mac(path, exp, visitor);
        tag.len() == MAC_BYTES && mac.verify_truncated_left(&tag).is_ok()
    }

    /// `return_to=PATH&return_sig=MAC&return_exp=MS`, form-encoded: how `path` rides in the
    /// room's query, signed at `now` for [`RETURN_PATH_LIFE_MS`], for `visitor` if given.
    pub fn query_at(&self, path: &str, now: Time, visitor: Option<TicketId>) -> String {
        let exp = now.saturating_add(RETURN_PATH_LIFE_MS);
        form_urlencoded::Serializer::new(String::new())
            .append_pair("return_to", path)
            .append_pair("return_sig", &self.sign(path, exp, visitor))
            .append_pair("return_exp", &exp.to_string())
            .finish()
    }

    /// [`ReturnPathKey::query_at`] now, for anyone who comes with it: what a gate signs.
    pub fn query(&self, path: &str) -> String {
        self.query_at(path, crate::clock::now_ms(), None)
    }
}

/// `raw` if it is a path on this site that is safe to send a browser back to: it starts with
/// exactly one `/` (`//host/...` is another site), holds no `\` (browsers read it as `/`), and
/// only visible ASCII (browsers drop tabs and newlines, so `/\t/host` would become `//host`).
/// Absolute URLs (`https://host/`) do not start with `/` and are refused too.
pub fn safe_return_path(raw: &str) -> Option<&str> {
    let ok = raw.len() <= MAX_RETURN_PATH
        && raw.starts_with('/')
        && !raw.starts_with("//")
        && raw.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    ok.then_some(raw)
}

/// The path `query` returns to (None: it names none), if it is safe, signed by one of `keys`
/// (the current key's and those of a rotation's overlap) for anyone or for `visitor` (the
/// ticket id of the visitor asking, if they hold a ticket or a pass), and not expired at `now`.
pub fn checked(
    query: &str,
    keys: &[ReturnPathKey],
    now: Time,
    visitor: Option<TicketId>,
) -> Result<Option<String>, Refused> {
    let (mut path, mut sig, mut exp) = (None, None, None);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "return_to" => path = Some(v),
            "return_sig" => sig = Some(v),
            "return_exp" => exp = Some(v),
            _ => {}
        }
    }
    let Some(path) = path else {
        return Ok(None);
    };
    let path = safe_return_path(&path).ok_or(Refused::Unsafe)?;
    let sig = sig.ok_or(Refused::Unsigned)?;
    let exp: Time = exp.and_then(|e| e.parse().ok()).ok_or(Refused::Unsigned)?;
    let signed = |for_visitor| keys.iter().any(|k| k.verify(path, exp, for_visitor, &sig));
    if !(signed(None) || visitor.is_some() && signed(visitor)) {
        return Err(Refused::Unsigned);
    }
    if now >= exp {
        return Err(Refused::Expired { expired_at_ms: exp });
    }
    Ok(Some(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ReturnPathKey {
        ReturnPathKey::new(&[byte; 32])
    }

    const NOW: Time = 1_800_000_000_000;

    fn check(q: &str, keys: &[ReturnPathKey]) -> Option<String> {
        checked(q, keys, NOW, None).ok().flatten()
    }

    #[test]
    fn only_a_signed_safe_path_comes_back() {
        let k = key(1);
        let q = k.query_at("/shop/cart?item=3", NOW, None);
        assert_eq!(
            q.split('&').next(),
            Some("return_to=%2Fshop%2Fcart%3Fitem%3D3")
        );
        assert_eq!(
            check(&q, std::slice::from_ref(&k)),
            Some("/shop/cart?item=3".into())
        );
        // Under a rotation's overlap, a path signed with the earlier key still comes back.
        assert_eq!(
            check(&q, &[key(2), k.clone()]),
            Some("/shop/cart?item=3".into())
        );
        // Another key's signature, none, a changed path, a cut signature: ignored.
        assert_eq!(check(&q, &[key(2)]), None);
        assert_eq!(check("return_to=%2Fshop", std::slice::from_ref(&k)), None);
        let moved = q.replace("cart", "account");
        assert_eq!(check(&moved, std::slice::from_ref(&k)), None);
        let exp = NOW + RETURN_PATH_LIFE_MS;
        let cut = format!(
            "return_to=%2Fa&return_sig={}&return_exp={exp}",
            &k.sign("/a", exp, None)[..10]
        );
        assert_eq!(check(&cut, std::slice::from_ref(&k)), None);
        // A later expiry than the one signed: not the signed way back.
        let longer = q.replace(
            &format!("return_exp={exp}"),
            &format!("return_exp={}", exp + 1),
        );
        assert_eq!(
            checked(&longer, std::slice::from_ref(&k), NOW, None),
            Err(Refused::Unsigned)
        );
        assert_eq!(
            checked("other=1", std::slice::from_ref(&k), NOW, None),
            Ok(None)
        );
        // Signed, but not a path on this site: still refused.
        for other in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "/a\tb",
        ] {
            assert_eq!(
                check(&k.query_at(other, NOW, None), std::slice::from_ref(&k)),
                None,
                "{other:?}"
            );
        }
    }

    /// A way back expires a day after it was signed; one signed for a visitor's ticket is
    /// followed for that visitor only (their ticket, or the pass made from it), one signed for
    /// nobody in particular for anyone.
    #[test]
    fn a_way_back_expires_and_one_signed_for_a_visitor_is_theirs_alone() {
        let k = [key(1)];
        let (me, other) = (TicketId(7), TicketId(8));
        let anyone = k[0].query_at("/cart", NOW, None);
        let mine = k[0].query_at("/cart", NOW, Some(me));
        let end = NOW + RETURN_PATH_LIFE_MS;
        for at in [NOW, end - 1] {
            assert_eq!(checked(&anyone, &k, at, None), Ok(Some("/cart".into())));
            assert_eq!(
                checked(&anyone, &k, at, Some(other)),
                Ok(Some("/cart".into()))
            );
            assert_eq!(checked(&mine, &k, at, Some(me)), Ok(Some("/cart".into())));
        }
        for q in [&anyone, &mine] {
            assert_eq!(
                checked(q, &k, end, Some(me)),
                Err(Refused::Expired { expired_at_ms: end })
            );
        }
        assert_eq!(checked(&mine, &k, NOW, Some(other)), Err(Refused::Unsigned));
        assert_eq!(checked(&mine, &k, NOW, None), Err(Refused::Unsigned));
    }

    #[test]
    fn a_secret_reads_back_from_its_text() {
        let text = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let k = ReturnPathKey::from_text(&format!(" {text}\n")).unwrap();
        assert_eq!(k.sign("/x", 1, None), key(7).sign("/x", 1, None));
        assert!(ReturnPathKey::from_text("abc").is_err());
        assert!(ReturnPathKey::from_text("!!").is_err());
    }

    #[test]
    fn only_paths_on_this_site_are_return_paths() {
        for ok in [
            "/",
            "/shop/cart",
            "/search?q=a+b&page=2",
            "/a%2F%2Fb",
            "/%5Cx",
        ] {
            assert_eq!(safe_return_path(ok), Some(ok));
        }
        let long = format!("/{}", "a".repeat(MAX_RETURN_PATH));
        for bad in [
            "",
            "shop",
            "//evil.example/x",
            "///evil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "https://evil.example/",
            "/\t/evil.example",
            "/a b",
            "/caf\u{e9}",
            &long,
        ] {
            assert_eq!(safe_return_path(bad), None, "{bad:?}");
        }
    }
}
