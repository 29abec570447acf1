//! How a node finds the others: the members it is told to join through, and the DNS name that
//! lists them (a Kubernetes headless Service).

use std::net::SocketAddr;

use clap::Args;
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::defaulted;
use super::visitors::check_url;

layered! {
    /// How the node finds its cluster.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Peers and discovery")]
    pub struct ClusterOptions {
        /// Internal base URLs of cluster members to join through (comma-separated): https://
        /// with --internal-tls-cert, else http://. Empty: start a new cluster.
        #[arg(
            long,
            env = "WAITINGROOM_PEERS",
            value_name = "URL,...",
            value_delimiter = ','
        )]
        pub peers: Option<Vec<String>>,
        /// Find peers in DNS: every A/AAAA record of NAME (a Kubernetes headless Service) is a
        /// peer at http://ADDRESS:PORT, looked up at start and every dns_interval_ms; a node
        /// that finds nobody starts a cluster, clusters that formed apart merge once they see
        /// each other. PORT defaults to this node's peer port. Used with or instead of --peers.
        #[arg(long, env = "WAITINGROOM_PEERS_DNS", value_name = "NAME[:PORT]")]
        pub peers_dns: Option<String>,
        /// DNS server for --peers-dns instead of the system's (/etc/resolv.conf).
        #[arg(long, env = "WAITINGROOM_DNS_SERVER", value_name = "ADDR:PORT")]
        pub dns_server: Option<SocketAddr>,
        /// How often --peers-dns is looked up again, ms.
        #[arg(
            long,
            env = "WAITINGROOM_DNS_INTERVAL_MS",
            value_name = "MS",
            default_value = "5000"
        )]
        pub dns_interval_ms: Option<u64>,
    }
}

/// Where to find peers in DNS (`--peers-dns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// How peers are reached: `https` with mutual TLS, else `http`.
    pub scheme: &'static str,
    /// The name whose A/AAAA records are the peers.
    pub name: String,
    /// The peers' (internal) port.
    pub port: u16,
    /// The DNS server to ask; `None`: the system's.
    pub server: Option<SocketAddr>,
    /// How often to look again, ms.
    pub interval_ms: u64,
}

impl ClusterOptions {
    /// The members to join through, as base URLs without a trailing slash.
    pub(super) fn seeds(&self, tls: bool) -> Result<Vec<String>, SettingsError> {
        let peers: Vec<String> = self
            .peers
            .iter()
            .flatten()
            .map(|p| p.trim().trim_end_matches('/').to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        for p in &peers {
            check_peer_url("peers", p, tls)?;
        }
        Ok(peers)
    }

    /// DNS discovery: the name (no scheme, no path), the peers' port (default: this node's
    /// peer port), how often to look it up again.
    pub(super) fn discovery(
        &self,
        peer_listen: SocketAddr,
        tls: bool,
    ) -> Result<Option<Discovery>, SettingsError> {
        let Some(spec) = self.peers_dns.as_deref().map(str::trim) else {
            return Ok(None);
        };
        let bad = |why: &str| SettingsError::new("peers_dns", format!("`{spec}`: {why}"));
        let (name, port) = match spec.rsplit_once(':') {
            Some((name, port)) => (
                name,
                port.parse()
                    .map_err(|_| bad("the port after `:` must be a number 1-65535"))?,
            ),
            None => (spec, peer_listen.port()),
        };
        let host_like = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
        if name.is_empty() || !name.chars().all(host_like) || port == 0 {
            return Err(bad(
                "expected a DNS name and an optional port, e.g. peers.ns.svc:9090",
            ));
        }
        let interval_ms = defaulted(&self.dns_interval_ms);
        if interval_ms < 100 {
            return Err(SettingsError::new(
                "dns_interval_ms",
                "must be at least 100",
            ));
        }
        Ok(Some(Discovery {
            scheme: crate::crypto::tls::scheme(tls),
            name: name.to_owned(),
            port,
            server: self.dns_server,
            interval_ms,
        }))
    }
}

/// A URL peers are reached at: `https://` with mutual TLS (`tls`), `http://` without. A peer
/// of the other kind could never be reached: refused now rather than failing at run time.
pub(super) fn check_peer_url(
    field: &'static str,
    url: &str,
    tls: bool,
) -> Result<(), SettingsError> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if https && !tls {
        return Err(SettingsError::new(
            field,
            format!(
                "`{url}`: an https:// peer needs mutual TLS on the internal listener \
                 (--internal-tls-cert, --internal-tls-key, --internal-tls-ca); without it peers \
                 talk http:// on a private network"
            ),
        ));
    }
    if tls && !https {
        return Err(SettingsError::new(
            field,
            format!("`{url}`: with mutual TLS on the internal listener, peers are https://"),
        ));
    }
    check_url(field, url)
}
