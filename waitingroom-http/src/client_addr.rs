//! Who a request comes from, for the per-client join limit.

use std::net::SocketAddr;

use axum::http::HeaderMap;

/// Who is asking, for the join rate limit: the last entry of the last `client_ip_header`
/// line (what the balancer in front of the node wrote), or the TCP peer address.
///
/// The *last* entry, because balancers that do not overwrite the header append to it (nginx's
/// `$proxy_add_x_forwarded_for`) or add a line after the client's own (HAProxy's `option
/// forwardfor`): everything before the balancer's entry is whatever the client sent, and keying
/// on it would let one client rotate fake addresses past the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAddr(pub String);

impl ClientAddr {
    /// Longest key kept, bytes. A textual IPv6 address is at most 45; the bound keeps the rate
    /// limiter's table small whatever a client puts in the header.
    pub const MAX_LEN: usize = 64;

    /// The client of a request with these headers and this TCP peer, keyed as configured.
    pub fn from_parts(
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
        client_ip_header: Option<&str>,
    ) -> Self {
        if let Some(name) = client_ip_header
            && let Some(v) = headers
                .get_all(name)
                .iter()
                .next_back()
                .and_then(|v| v.to_str().ok())
            && let Some(last) = v.rsplit(',').map(str::trim).find(|s| !s.is_empty())
        {
            // The header is visible ASCII (`to_str`), so any byte index is a char boundary.
            let key = &last[..last.len().min(Self::MAX_LEN)];
            return ClientAddr(key.to_owned());
        }
        ClientAddr(peer.map_or_else(|| "unknown".to_owned(), |p| p.ip().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn client_key_is_bounded_whatever_the_header_holds() {
        let mut h = HeaderMap::new();
        let long = format!("10.0.0.1, {}", "a".repeat(10_000));
        h.insert("x-forwarded-for", long.parse().expect("header value"));
        let key = ClientAddr::from_parts(&h, None, Some("x-forwarded-for"));
        assert_eq!(key.0.len(), ClientAddr::MAX_LEN);
        // Empty entries (a trailing comma) are skipped; an unreadable header falls back to the
        // peer.
        h.insert(
            "x-forwarded-for",
            "198.51.100.7, ".parse().expect("header value"),
        );
        let key = ClientAddr::from_parts(&h, None, Some("x-forwarded-for"));
        assert_eq!(key.0, "198.51.100.7");
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff").expect("opaque header value"),
        );
        let peer = SocketAddr::from(([127, 0, 0, 5], 1));
        let key = ClientAddr::from_parts(&h, Some(peer), Some("x-forwarded-for"));
        assert_eq!(key.0, "127.0.0.5");
    }
}
