//! The two cookies: `wr_ticket` (a waiting visitor's ticket) and `wr_pass` (an admitted
//! visitor's pass). Both `HttpOnly; SameSite=Lax; Path=/`, so page scripts cannot read them and
//! other sites cannot make a browser send them with a cross-site POST.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::clock::now_ms;
use crate::config::ServerConfig;
use crate::wire::PassAnswer;

/// Cookie holding the ticket.
pub const TICKET: &str = "wr_ticket";
/// Cookie holding the pass.
pub const PASS: &str = "wr_pass";
/// The waiting page's `Idempotency-Key` for its leave (set by its script before it leaves), so
/// that the page asked again after a lost answer gets the same pass ([`crate::leaves`]).
pub const LEAVE_KEY: &str = "wr_leave_key";

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

/// A `Set-Cookie` value. `max_age_s` None: a session cookie.
pub fn set(name: &str, value: &str, max_age_s: Option<u64>, secure: bool) -> HeaderValue {
    let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax");
    if let Some(age) = max_age_s {
        c.push_str(&format!("; Max-Age={age}"));
    }
    if secure {
        c.push_str("; Secure");
    }
    // Tokens are base64url and dots, so the value is always a valid header.
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
}

/// A `Set-Cookie` value that deletes cookie `name`.
pub fn clear(name: &str, secure: bool) -> HeaderValue {
    set(name, "", Some(0), secure)
}

/// The ticket cookie for `token`: kept as long as a ticket stays valid without a check-in.
pub fn for_ticket(cfg: &ServerConfig, token: &str) -> HeaderValue {
    let max_age = cfg.settings.ticket_expiry_ms.div_ceil(1000);
    set(TICKET, token, Some(max_age), cfg.cookie_secure)
}

/// The pass cookie for pass `p`: kept as long as the pass stays valid without a refresh (the
/// pass expiry is a live setting, so it is read off the pass, not the file).
pub fn for_pass(cfg: &ServerConfig, p: &PassAnswer) -> HeaderValue {
    let max_age = p.expires_at_ms.saturating_sub(now_ms()).div_ceil(1000);
    set(PASS, &p.pass, Some(max_age), cfg.cookie_secure)
}

/// The cookies of a ticket exchanged for the pass `p`: the pass set, the ticket deleted.
pub fn after_leave(cfg: &ServerConfig, p: &PassAnswer) -> Vec<HeaderValue> {
    vec![for_pass(cfg, p), clear(TICKET, cfg.cookie_secure)]
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
        let v = set(TICKET, "x", Some(30), true);
        assert_eq!(
            v.to_str().unwrap(),
            "wr_ticket=x; Path=/; HttpOnly; SameSite=Lax; Max-Age=30; Secure"
        );
    }
}
