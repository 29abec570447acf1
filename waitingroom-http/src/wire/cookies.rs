//! The room's cookies: the ticket (a waiting visitor's), the pass (an admitted visitor's) and
//! the page's leave key. Ticket and pass are `HttpOnly; Path=/`, so page scripts cannot read
//! them, and `SameSite=Lax` by default, so other sites cannot make a browser send them with a
//! cross-site POST. An operator may set their `Domain`, their `SameSite` and a suffix to their
//! names (two rooms on one domain) with `cookie_domain`, `cookie_samesite` and
//! `cookie_name_suffix` ([`CookieOptions`]).

use axum::http::{HeaderMap, HeaderValue, header};
use clap::ValueEnum;
use serde::Deserialize;

use super::PassAnswer;
use crate::clock::now_ms;

/// The ticket cookie's name, before the operator's suffix.
pub const TICKET: &str = "wr_ticket";
/// The pass cookie's name, before the operator's suffix.
pub const PASS: &str = "wr_pass";
/// The waiting page's `Idempotency-Key` for its leave (set by its script before it leaves), so
/// that the page asked again after a lost answer gets the same pass (`app/leaves.rs`); its
/// name, before the operator's suffix.
pub const LEAVE_KEY: &str = "wr_leave_key";

/// A cookie's `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SameSite {
    /// Sent on top-level navigation from other sites, not on their POSTs or frames.
    #[default]
    Lax,
    /// Never sent from other sites.
    Strict,
    /// Always sent (a room embedded in another site); needs `Secure`.
    None,
}

impl SameSite {
    fn attribute(self) -> &'static str {
        match self {
            SameSite::Lax => "Lax",
            SameSite::Strict => "Strict",
            SameSite::None => "None",
        }
    }
}

/// The cookies' names and attributes (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieOptions {
    /// `Secure`: sent over HTTPS only.
    pub secure: bool,
    /// `Domain`, if any.
    pub domain: Option<String>,
    /// `SameSite`.
    pub same_site: SameSite,
    /// The ticket cookie's name.
    pub ticket: String,
    /// The pass cookie's name.
    pub pass: String,
    /// The leave key cookie's name.
    pub leave_key: String,
    /// How long the ticket cookie is kept, s: as long as a ticket stays valid without a
    /// check-in (the configuration sets it from the ticket expiry).
    pub ticket_max_age_s: u64,
}

impl Default for CookieOptions {
    fn default() -> Self {
        CookieOptions::new(false, None, SameSite::Lax, "")
    }
}

impl CookieOptions {
    /// Options with the names suffixed by `suffix` (checked by the configuration).
    pub fn new(secure: bool, domain: Option<String>, same_site: SameSite, suffix: &str) -> Self {
        CookieOptions {
            secure,
            domain,
            same_site,
            ticket: format!("{TICKET}{suffix}"),
            pass: format!("{PASS}{suffix}"),
            leave_key: format!("{LEAVE_KEY}{suffix}"),
            ticket_max_age_s: 0,
        }
    }

    /// A `Set-Cookie` value. `max_age_s` None: a session cookie.
    pub fn set(&self, name: &str, value: &str, max_age_s: Option<u64>) -> HeaderValue {
        let same_site = self.same_site.attribute();
        let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite={same_site}");
        if let Some(age) = max_age_s {
            c.push_str(&format!("; Max-Age={age}"));
        }
        if let Some(domain) = &self.domain {
            c.push_str(&format!("; Domain={domain}"));
        }
        if self.secure {
            c.push_str("; Secure");
        }
        // Tokens are base64url and dots, and the domain was checked, so the value is always a
        // valid header.
        HeaderValue::from_str(&c)
            .unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
    }

    /// A `Set-Cookie` value that deletes cookie `name`.
    pub fn clear(&self, name: &str) -> HeaderValue {
        self.set(name, "", Some(0))
    }
}

/// The value of cookie `name`, if the request has one.
pub fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

impl CookieOptions {
    /// The ticket cookie for `token`.
    pub fn for_ticket(&self, token: &str) -> HeaderValue {
        self.set(&self.ticket, token, Some(self.ticket_max_age_s))
    }

    /// The pass cookie for pass `p`: kept as long as the pass stays valid without a refresh
    /// (the pass expiry is a live setting, so it is read off the pass, not the file).
    pub fn for_pass(&self, p: &PassAnswer) -> HeaderValue {
        let max_age = p.expires_at_ms.saturating_sub(now_ms()).div_ceil(1000);
        self.set(&self.pass, &p.pass, Some(max_age))
    }

    /// The cookies of a ticket exchanged for the pass `p`: the pass set, the ticket deleted.
    pub fn after_leave(&self, p: &PassAnswer) -> Vec<HeaderValue> {
        vec![self.for_pass(p), self.clear(&self.ticket)]
    }
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cookies() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; wr_ticket=abc.def"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("wr_pass=p"));
        assert_eq!(get(&h, TICKET), Some("abc.def"));
        assert_eq!(get(&h, PASS), Some("p"));
        assert_eq!(get(&h, "b"), None);
        let secure = CookieOptions {
            secure: true,
            ..CookieOptions::default()
        };
        let v = secure.set(TICKET, "x", Some(30));
        assert_eq!(
            v.to_str().unwrap(),
            "wr_ticket=x; Path=/; HttpOnly; SameSite=Lax; Max-Age=30; Secure"
        );
    }

    #[test]
    fn options_name_and_shape_the_cookies() {
        let c = CookieOptions::new(true, Some("example.com".into()), SameSite::None, "_shop");
        assert_eq!(
            (c.ticket.as_str(), c.pass.as_str()),
            ("wr_ticket_shop", "wr_pass_shop")
        );
        assert_eq!(c.leave_key, "wr_leave_key_shop");
        assert_eq!(
            c.set(&c.pass, "p", None).to_str().unwrap(),
            "wr_pass_shop=p; Path=/; HttpOnly; SameSite=None; Domain=example.com; Secure"
        );
        let strict = CookieOptions::new(false, None, SameSite::Strict, "");
        assert_eq!(
            strict.clear(&strict.ticket).to_str().unwrap(),
            "wr_ticket=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        );
    }
}
