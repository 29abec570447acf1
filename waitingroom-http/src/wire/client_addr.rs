//! Who a request comes from, for the per-client join limit.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;

/// Who is asking, for the join rate limit: the address the trusted balancer reports, or the TCP
/// peer's.
///
/// The client-address header (`client_ip_header`, `x-forwarded-for` by default) is read only
/// when the TCP peer is a trusted proxy (`trusted_proxies`, loopback by default): anyone else
/// could write anything there, and keying on it would let one client rotate fake addresses
/// past the limit. In the header, entries are read from the last (the one the balancer wrote,
/// whether it overwrites the header, appends to it as nginx's `$proxy_add_x_forwarded_for`
/// does, or adds a line after the client's own as HAProxy's `option forwardfor` does) towards
/// the first, skipping trusted proxies (a chain of them): the first other entry is the client.
/// Everything before it is whatever the client sent.
///
/// An IPv6 client is keyed by its /64: one host usually holds a whole /64, and keying on the
/// full address would give it 2^64 allowances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAddr(pub String);

impl ClientAddr {
    /// Longest key kept, bytes. A textual IPv6 address is at most 45; the bound keeps the rate
    /// limiter's table small whatever a client puts in the header.
    pub const MAX_LEN: usize = 64;

    /// The client of a request with these headers and this TCP peer: `header` is read when the
    /// peer is one of the `trusted` proxies.
    pub fn from_parts(
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
        header: Option<&str>,
        trusted: &[Cidr],
    ) -> Self {
        let Some(peer) = peer.map(|p| canonical(p.ip())) else {
            return ClientAddr("unknown".to_owned());
        };
        let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
        if let Some(name) = header
            && is_trusted(peer)
        {
            let lines: Vec<&str> = headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            let entries = lines
                .iter()
                .rev()
                .flat_map(|line| line.rsplit(',').map(str::trim))
                .filter(|e| !e.is_empty());
            for entry in entries {
                match entry.parse::<IpAddr>().map(canonical) {
                    Ok(ip) if is_trusted(ip) => continue,
                    Ok(ip) => return Self::of(ip),
                    // Not an address: the balancer wrote something else; keep it, bounded.
                    // (The header is visible ASCII, so any byte index is a char boundary.)
                    Err(_) => {
                        return ClientAddr(entry[..entry.len().min(Self::MAX_LEN)].to_owned());
                    }
                }
            }
        }
        Self::of(peer)
    }

    /// The key of an address: IPv4 as is, IPv6 by its /64.
    pub fn of(ip: IpAddr) -> Self {
        match canonical(ip) {
            IpAddr::V4(v4) => ClientAddr(v4.to_string()),
            IpAddr::V6(v6) => {
                let s = v6.segments();
                let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                ClientAddr(format!("{net}/64"))
            }
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, how a dual-stack socket shows IPv4 peers)
/// as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A network: an address and a prefix length (`10.0.0.0/8`, `::1/128`; an address alone is a
/// network of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    pub fn parse(s: &str) -> Option<Cidr> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net = canonical(addr.parse::<IpAddr>().ok()?);
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            // `u8::from_str` also takes a leading `+`.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
            Some(_) => return None,
            None => max,
        };
        (prefix <= max).then_some(Cidr { net, prefix })
    }

    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn loopback() -> Vec<Cidr> {
        ["127.0.0.0/8", "::1"]
            .iter()
            .filter_map(|c| Cidr::parse(c))
            .collect()
    }

    fn key(xff: &[&str], peer: [u8; 4], trusted: &[Cidr]) -> String {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append(
                "x-forwarded-for",
                HeaderValue::from_str(v).expect("header value"),
            );
        }
        let peer = SocketAddr::from((peer, 1));
        ClientAddr::from_parts(&h, Some(peer), Some("x-forwarded-for"), trusted).0
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_proxy() {
        let t = loopback();
        assert_eq!(key(&["198.51.100.7"], [127, 0, 0, 1], &t), "198.51.100.7");
        // Anyone else's header is ignored: the TCP peer is the client.
        assert_eq!(key(&["198.51.100.7"], [203, 0, 113, 9], &t), "203.0.113.9");
        assert_eq!(key(&["198.51.100.7"], [127, 0, 0, 1], &[]), "127.0.0.1");
        // The last entry that is not a trusted proxy: the client's own entries come first.
        assert_eq!(
            key(&["10.9.9.9, 198.51.100.7"], [127, 0, 0, 1], &t),
            "198.51.100.7"
        );
        assert_eq!(
            key(&["10.9.9.9", "198.51.100.7"], [127, 0, 0, 1], &t),
            "198.51.100.7"
        );
        let chain = [Cidr::parse("10.0.0.0/8").unwrap(), loopback()[0]];
        assert_eq!(
            key(&["198.51.100.7, 10.0.0.2"], [127, 0, 0, 1], &chain),
            "198.51.100.7"
        );
        // Nothing but proxies in the header: the peer.
        assert_eq!(key(&["127.0.0.3"], [127, 0, 0, 1], &t), "127.0.0.1");
        assert_eq!(key(&[], [127, 0, 0, 1], &t), "127.0.0.1");
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64() {
        let t = loopback();
        assert_eq!(
            key(&["2001:db8:1:2:aaaa::1"], [127, 0, 0, 1], &t),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            key(&["2001:db8:1:2:bbbb::9"], [127, 0, 0, 1], &t),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            key(&["::ffff:198.51.100.7"], [127, 0, 0, 1], &t),
            "198.51.100.7"
        );
        let v6_peer = SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 7, 7, 1, 2, 3, 4), 1));
        let k = ClientAddr::from_parts(&HeaderMap::new(), Some(v6_peer), None, &t);
        assert_eq!(k.0, "2001:db8:7:7::/64");
    }

    #[test]
    fn client_key_is_bounded_whatever_the_header_holds() {
        let long = format!("10.0.0.1, {}", "a".repeat(10_000));
        let k = key(&[&long], [127, 0, 0, 1], &loopback());
        assert_eq!(k.len(), ClientAddr::MAX_LEN);
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff").expect("opaque value"),
        );
        let peer = SocketAddr::from(([127, 0, 0, 5], 1));
        let k = ClientAddr::from_parts(&h, Some(peer), Some("x-forwarded-for"), &loopback());
        assert_eq!(k.0, "127.0.0.5");
    }

    #[test]
    fn networks_parse_and_contain() {
        let n = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            Cidr::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "host",
            "",
        ] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }
}
