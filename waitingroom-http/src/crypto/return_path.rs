//! The way back: the page a visitor asked for at the origin, which the gate hands the room and
//! the room sends them back to once they are let in (docs/operating.md#origin-gating).
//!
//! It rides in the room's query as `return_to=PATH&return_sig=MAC`. The path must be one on the
//! origin ([`safe_return_path`]: never another host), and the MAC proves the origin's gate wrote
//! it: HMAC-SHA256 of the path under a secret derived from the cluster key
//! (`ClusterKey::return_path_secret`), the first 16 bytes, base64url. A gate holds only that
//! secret (`waitingroom-node gate-secret`), not the cluster key. Without a valid MAC the room
//! ignores the path and sends the visitor to the site's front page, so a link made up by
//! someone else cannot send visitors, after their wait, to a page of that someone's choosing.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

/// Longest return path handed to the room; a longer one is dropped (the room then sends the
/// visitor to the site's front page).
pub const MAX_RETURN_PATH: usize = 2048;

/// Bytes of the MAC kept: 128 bits, as many as a forger would have to guess.
const MAC_BYTES: usize = 16;

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

    /// The MAC of `path`.
    pub fn sign(&self, path: &str) -> String {
        let mut mac = self.0.clone();
        mac.update(path.as_bytes());
        URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..MAC_BYTES])
    }

    /// Whether `sig` is the MAC of `path` (compared in constant time).
    pub fn verify(&self, path: &str, sig: &str) -> bool {
        let Ok(tag) = URL_SAFE_NO_PAD.decode(sig) else {
            return false;
        };
        let mut mac = self.0.clone();
        mac.update(path.as_bytes());
        tag.len() == MAC_BYTES && mac.verify_truncated_left(&tag).is_ok()
    }

    /// `return_to=PATH&return_sig=MAC`, form-encoded: how `path` rides in the room's query.
    pub fn query(&self, path: &str) -> String {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("return_to", path)
            .append_pair("return_sig", &self.sign(path))
            .finish()
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

/// The path `query` returns to, if it is safe and signed by one of `keys` (the current key's
/// and those of a rotation's overlap).
pub fn checked(query: &str, keys: &[ReturnPathKey]) -> Option<String> {
    let (mut path, mut sig) = (None, None);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "return_to" => path = Some(v),
            "return_sig" => sig = Some(v),
            _ => {}
        }
    }
    let (path, sig) = (path?, sig?);
    let path = safe_return_path(&path)?;
    keys.iter()
        .any(|k| k.verify(path, &sig))
        .then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ReturnPathKey {
        ReturnPathKey::new(&[byte; 32])
    }

    #[test]
    fn only_a_signed_safe_path_comes_back() {
        let k = key(1);
        let q = k.query("/shop/cart?item=3");
        assert_eq!(
            q.split('&').next(),
            Some("return_to=%2Fshop%2Fcart%3Fitem%3D3")
        );
        assert_eq!(
            checked(&q, std::slice::from_ref(&k)),
            Some("/shop/cart?item=3".into())
        );
        // Under a rotation's overlap, a path signed with the earlier key still comes back.
        assert_eq!(
            checked(&q, &[key(2), k.clone()]),
            Some("/shop/cart?item=3".into())
        );
        // Another key's signature, none, a changed path, a cut signature: ignored.
        assert_eq!(checked(&q, &[key(2)]), None);
        assert_eq!(checked("return_to=%2Fshop", std::slice::from_ref(&k)), None);
        let moved = q.replace("cart", "account");
        assert_eq!(checked(&moved, std::slice::from_ref(&k)), None);
        let cut = format!("return_to=%2Fa&return_sig={}", &k.sign("/a")[..10]);
        assert_eq!(checked(&cut, std::slice::from_ref(&k)), None);
        // Signed, but not a path on this site: still refused.
        for other in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "/a\tb",
        ] {
            assert_eq!(
                checked(&k.query(other), std::slice::from_ref(&k)),
                None,
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_secret_reads_back_from_its_text() {
        let text = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let k = ReturnPathKey::from_text(&format!(" {text}\n")).unwrap();
        assert_eq!(k.sign("/x"), key(7).sign("/x"));
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
