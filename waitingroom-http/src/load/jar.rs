//! A visitor's cookies, kept as a browser keeps them: what a `Set-Cookie` answer gave is sent
//! back as `Cookie` on every later request. A balancer that keeps each visitor on one node
//! (`scripts/cluster.sh`'s HAProxy names the node in a cookie) then sends the load generator's
//! visitors where it sends a browser's: to the node that holds their ticket.
//!
//! Names and values only: attributes (path, expiry, domain) are not looked at, since every
//! request of a run goes to the same site and a run is shorter than any cookie's life.

use reqwest::header::{HeaderMap, HeaderValue, SET_COOKIE};

/// The cookies of one visitor, by name, in the order first set, and the `Cookie` header they
/// make (built when they change, not on every request).
#[derive(Debug, Default)]
pub(super) struct Jar {
    cookies: Vec<(String, String)>,
    header: Option<HeaderValue>,
}

impl Jar {
    /// Keeps the cookies `headers` set, replacing earlier ones of the same name.
    pub(super) fn store(&mut self, headers: &HeaderMap) {
        let mut changed = false;
        for value in headers.get_all(SET_COOKIE) {
            let Some((name, value)) = value
                .to_str()
                .ok()
                .and_then(|v| v.split(';').next()?.split_once('='))
            else {
                continue;
            };
            let (name, value) = (name.trim(), value.trim());
            match self.cookies.iter_mut().find(|(n, _)| n == name) {
                Some(kept) => kept.1 = value.to_owned(),
                None => self.cookies.push((name.to_owned(), value.to_owned())),
            }
            changed = true;
        }
        if changed {
            let pairs: Vec<String> = self
                .cookies
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            // A value that cannot be a header (a control character) is not sent back.
            self.header = HeaderValue::from_str(&pairs.join("; ")).ok();
        }
    }

    /// The `Cookie` header to send, if any cookie is kept.
    pub(super) fn header(&self) -> Option<&HeaderValue> {
        self.header.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(SET_COOKIE, v.parse().unwrap());
        }
        headers
    }

    #[test]
    fn keeps_names_and_values_and_sends_them_back() {
        let mut jar = Jar::default();
        assert_eq!(jar.header(), None);
        jar.store(&set(&["wr_node=node2; path=/; HttpOnly", "lang=de"]));
        assert_eq!(jar.header().unwrap(), "wr_node=node2; lang=de");
        // A later answer replaces a cookie of the same name and keeps the others.
        jar.store(&set(&["wr_node=node3"]));
        assert_eq!(jar.header().unwrap(), "wr_node=node3; lang=de");
    }

    #[test]
    fn ignores_what_is_not_a_cookie() {
        let mut jar = Jar::default();
        jar.store(&set(&["no equals sign", "; x=1"]));
        assert_eq!(jar.header(), None);
    }
}
