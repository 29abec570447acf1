//! A visitor's affinity cookie: the cookie a balancer sets to keep a visitor on one node
//! (`scripts/cluster.sh`'s HAProxy names the node that answered the join, which holds the
//! ticket, in `wr_node`). Each visitor keeps it and sends it back as a browser would, so the
//! balancer sends the load generator's visitors where it sends a browser's: to the node that
//! holds their ticket rather than to one that forwards them to it.
//!
//! Only that cookie is kept. The room's own ticket cookie is not: the load generator sends its
//! ticket in the request body (the JSON API), and sending it twice would cost every request
//! about 700 bytes. Attributes (path, expiry) are not looked at: a run is shorter than the
//! cookie's life and every request goes to the same site.

use hyper::HeaderMap;
use hyper::header::SET_COOKIE;

/// The affinity cookie one visitor holds, as the `Cookie` header to send back.
#[derive(Debug, Default)]
pub(super) struct Affinity(Option<String>);

impl Affinity {
    /// Keeps the cookie called `name` if `headers` set it (an empty `name` keeps nothing).
    pub(super) fn store(&mut self, headers: &HeaderMap, name: &str) {
        if name.is_empty() {
            return;
        }
        for value in headers.get_all(SET_COOKIE) {
            let Some(pair) = value.to_str().ok().and_then(|v| v.split(';').next()) else {
                continue;
            };
            if pair.split_once('=').is_some_and(|(n, _)| n.trim() == name) {
                // `to_str` took only visible ASCII: the pair is a valid header value.
                self.0 = Some(pair.trim().to_owned());
            }
        }
    }

    /// The `Cookie` header to send, once the balancer has set the cookie.
    pub(super) fn header(&self) -> Option<&str> {
        self.0.as_deref()
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
    fn keeps_the_named_cookie_only_and_sends_it_back() {
        let mut affinity = Affinity::default();
        assert_eq!(affinity.header(), None);
        affinity.store(
            &set(&[
                "wr_ticket=eyJ.x.y; Path=/",
                "wr_node=node2; path=/; HttpOnly",
            ]),
            "wr_node",
        );
        assert_eq!(affinity.header().unwrap(), "wr_node=node2");
        // An answer without it keeps it; a new one replaces it (the node was down).
        affinity.store(&set(&["wr_ticket=eyJ.z.w"]), "wr_node");
        assert_eq!(affinity.header().unwrap(), "wr_node=node2");
        affinity.store(&set(&["wr_node=node3"]), "wr_node");
        assert_eq!(affinity.header().unwrap(), "wr_node=node3");
    }

    #[test]
    fn keeps_nothing_without_a_name_or_a_cookie() {
        let mut affinity = Affinity::default();
        affinity.store(&set(&["wr_node=node2"]), "");
        affinity.store(
            &set(&["no equals sign", "; wr_node=1", "wr_nodes=node1"]),
            "wr_node",
        );
        assert_eq!(affinity.header(), None);
    }
}
