//! DNS discovery of peers (`--peers-dns`): the nodes are the A/AAAA records of one name, as a
//! Kubernetes headless Service or a DNS server's round-robin entry lists them.
//!
//! Discovery only finds addresses; the protocol decides what to do with them
//! ([`Node::discovered`]): a joining node asks them to let it in, a member probes those not in
//! its cluster now and then, and clusters that formed apart (nodes that started at the same
//! moment and found nobody yet) merge as a healed partition does. So a lookup that fails, or
//! lists a node that is gone, costs a probe, never a visitor.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveError, TokioResolver};
use waitingroom_distributed::Node;

use crate::app::App;
use crate::config::Discovery;
use crate::metrics::ResultLabels;

/// Looks up one name and turns its records into peer URLs.
pub struct Finder {
    resolver: TokioResolver,
    spec: Discovery,
    /// This node's advertised URL: never its own peer.
    own: String,
}

impl Finder {
    /// A finder asking `spec.server`, else the system's resolvers (`/etc/resolv.conf`).
    pub fn new(spec: &Discovery, own: &str) -> Result<Finder, ResolveError> {
        let provider = TokioConnectionProvider::default();
        let mut builder = match spec.server {
            Some(addr) => {
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, vec![], servers),
                    provider,
                )
            }
            None => TokioResolver::builder(provider)?,
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        // Every lookup asks again: pods come and go faster than records' TTLs say.
        opts.cache_size = 0;
        opts.timeout = Duration::from_secs(2);
        opts.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
        Ok(Finder {
            resolver: builder.build(),
            spec: spec.clone(),
            own: own.to_owned(),
        })
    }

    /// The peers the name lists now, as sorted base URLs, this node left out.
    pub async fn lookup(&self) -> Result<Vec<String>, ResolveError> {
        let found = self.resolver.lookup_ip(self.spec.name.as_str()).await?;
        let mut urls: Vec<String> = found.iter().map(|ip| self.url(ip)).collect();
        urls.sort();
        urls.dedup();
        Ok(urls)
    }

    fn url(&self, ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(v4) => format!("{}://{v4}:{}", self.spec.scheme, self.spec.port),
            IpAddr::V6(v6) => format!("{}://[{v6}]:{}", self.spec.scheme, self.spec.port),
        }
    }

    /// The peers found, without this node.
    fn others(&self, urls: Vec<String>) -> Vec<String> {
        urls.into_iter().filter(|u| *u != self.own).collect()
    }

    /// The seeds to start with: looks for up to `patience` while the name has no other record
    /// yet (DNS may lag a pod's start). Empty (start a cluster) when nobody else is listed, or
    /// when this node has the smallest address of all listed: nodes started at the same moment
    /// then agree at once on who starts the cluster instead of all asking each other to be let
    /// in until their join timeout. (Should a cluster already run without it, the two merge.)
    pub async fn first_seeds(&self, patience: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.lookup().await {
                Ok(urls) if urls.iter().any(|u| *u != self.own) => {
                    let first = urls.iter().all(|u| *u >= self.own);
                    return if first { Vec::new() } else { self.others(urls) };
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(name = %self.spec.name, error = %e, "peers DNS lookup failed")
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Vec::new();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Looks the name up every interval and hands what it finds to the node, until the process
    /// ends.
    pub async fn run(self, app: Arc<App>) {
        let mut known: Vec<String> = Vec::new();
        loop {
            tokio::time::sleep(Duration::from_millis(self.spec.interval_ms)).await;
            let result = self.lookup().await;
            let label = ResultLabels {
                result: if result.is_ok() { "ok" } else { "error" },
            };
            app.metrics.dns_lookups.get_or_create(&label).inc();
            match result {
                Ok(urls) => {
                    app.metrics.dns_peers.set(urls.len() as i64);
                    let others = self.others(urls);
                    if others != known {
                        tracing::info!(name = %self.spec.name, peers = ?others, "peers DNS changed");
                        known = others;
                    }
                    app.driver
                        .with(|node: &mut Node, _| node.discovered(&known));
                }
                Err(e) => {
                    tracing::warn!(name = %self.spec.name, error = %e, "peers DNS lookup failed");
                }
            }
        }
    }
}
