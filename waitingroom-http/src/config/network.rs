//! Where the node listens, how peers reach it, who it is and which keys it signs and checks
//! with: the settings a node cannot start without getting right.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;
use waitingroom_core::{NodeId, SettingsError};

use super::cluster::check_peer_url;
use crate::crypto::tls::{InternalTls, TlsFiles};

layered! {
    /// Addresses, mutual TLS, the node's id and the cluster's keys.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Network and identity")]
    pub struct NetworkOptions {
        /// Address of the public listener: visitors, the waiting page, passes, the JWKS, /livez
        /// and /readyz. Port 0 picks a free port (printed on stdout as `listening on
        /// http://ADDR`). Without --internal-listen it serves the internal routes too, which is
        /// allowed only on a loopback address.
        #[arg(
            long,
            env = "WAITINGROOM_LISTEN",
            value_name = "ADDR",
            default_value = "127.0.0.1:8080"
        )]
        pub listen: Option<SocketAddr>,
        /// Address of the internal listener: peer traffic (/peer/...), /metrics, /api/cluster
        /// (and /livez, /readyz); the public listener answers 404 on those. Keep it on a network
        /// only the nodes and operators reach. Port 0 picks a free port (printed as `internal
        /// listening on http://ADDR`). Required unless --listen is a loopback address; without
        /// it, one port serves everything.
        #[arg(long, env = "WAITINGROOM_INTERNAL_LISTEN", value_name = "ADDR")]
        pub internal_listen: Option<SocketAddr>,
        /// Base URL other nodes use to reach this one: its internal listener; https:// with
        /// --internal-tls-cert, else http://. Required when that listener is on 0.0.0.0 or ::.
        /// Without it: the scheme and the internal listener's address (the public one's without
        /// --internal-listen).
        #[arg(long, env = "WAITINGROOM_ADVERTISE", value_name = "URL")]
        pub advertise: Option<String>,
        /// Mutual TLS on the internal listener: this node's certificate chain (PEM). With
        /// --internal-tls-key and --internal-tls-ca, the internal listener speaks only TLS and
        /// takes only clients with a certificate from that CA, and this node calls its peers
        /// over https:// with this certificate. The certificate must name the host of
        /// --advertise (an IP SAN for an address). Without the three: plain http:// on a
        /// private network.
        #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_CERT", value_name = "PATH")]
        pub internal_tls_cert: Option<PathBuf>,
        /// Mutual TLS: this node's private key (PEM).
        #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_KEY", value_name = "PATH")]
        pub internal_tls_key: Option<PathBuf>,
        /// Mutual TLS: the CA certificate (PEM) that signs every node's certificate and those of
        /// operators' tools; the only one trusted on the internal listener.
        #[arg(long, env = "WAITINGROOM_INTERNAL_TLS_CA", value_name = "PATH")]
        pub internal_tls_ca: Option<PathBuf>,
        /// This node's id, unique in the cluster and never 0. Without it: derived from the
        /// advertised URL.
        #[arg(long, env = "WAITINGROOM_NODE_ID", value_name = "ID")]
        pub node_id: Option<u64>,
        /// File holding the cluster signing key (PKCS#8 PEM, from `waitingroom-node keygen`);
        /// every node of a cluster uses the same key. Required.
        #[arg(long, env = "WAITINGROOM_KEY_FILE", value_name = "PATH")]
        pub key_file: Option<PathBuf>,
        /// Files holding earlier cluster keys still accepted during a key rotation (repeatable,
        /// or comma-separated): tickets, passes and peer requests they made keep verifying, and
        /// the JWKS publishes their public halves; nothing new is signed with them.
        #[arg(
            long,
            env = "WAITINGROOM_EXTRA_VERIFY_KEY",
            value_name = "PATH",
            value_delimiter = ','
        )]
        pub extra_verify_key: Option<Vec<PathBuf>>,
    }
}

impl NetworkOptions {
    /// The internal listener. Secure by default: without one, the internal routes (peer
    /// traffic, metrics, the cluster's members) would be on the public port, which is allowed
    /// only when that port is on loopback (a demo, tests, a script on one machine).
    pub(super) fn internal_listen(
        &self,
        listen: SocketAddr,
    ) -> Result<Option<SocketAddr>, SettingsError> {
        match self.internal_listen {
            Some(internal) if internal == listen && internal.port() != 0 => Err(
                SettingsError::new("internal_listen", "must differ from listen"),
            ),
            Some(internal) => Ok(Some(internal)),
            None if listen.ip().is_loopback() => Ok(None),
            None => Err(SettingsError::new(
                "internal_listen",
                format!(
                    "is required when listen ({listen}) is not a loopback address: peer \
                     routes, /metrics and /api/cluster must not be served on the public port; \
                     give --internal-listen ADDR on a network only the nodes reach"
                ),
            )),
        }
    }

    /// Mutual TLS on the internal listener: all three files, or none; only with an internal
    /// listener (the public one serves visitors' browsers, which have no such certificate).
    pub(super) fn internal_tls(
        &self,
        internal: Option<SocketAddr>,
    ) -> Result<Option<TlsFiles>, SettingsError> {
        let (cert, key, ca) = (
            &self.internal_tls_cert,
            &self.internal_tls_key,
            &self.internal_tls_ca,
        );
        if cert.is_none() && key.is_none() && ca.is_none() {
            return Ok(None);
        }
        let missing = |field: &'static str| {
            SettingsError::new(
                field,
                "is required with the other internal_tls settings (cert, key and ca together)",
            )
        };
        let files = TlsFiles {
            cert: cert.clone().ok_or_else(|| missing("internal_tls_cert"))?,
            key: key.clone().ok_or_else(|| missing("internal_tls_key"))?,
            ca: ca.clone().ok_or_else(|| missing("internal_tls_ca"))?,
        };
        if internal.is_none() {
            return Err(SettingsError::new(
                "internal_tls_cert",
                "needs --internal-listen: TLS applies to the internal listener only",
            ));
        }
        // Read now: a bad file stops the node at start, naming it.
        InternalTls::load(&files)?;
        Ok(Some(files))
    }

    /// The advertised URL, if given: peers must be able to reach it, so it is required when
    /// the listener peers use (`peer_listen`: the internal one, else the public one) is an
    /// unspecified address.
    pub(super) fn advertise(
        &self,
        peer_listen: SocketAddr,
        tls: bool,
    ) -> Result<Option<String>, SettingsError> {
        match &self.advertise {
            Some(adv) => {
                check_peer_url("advertise", adv, tls)?;
                Ok(Some(adv.trim_end_matches('/').to_owned()))
            }
            None if peer_listen.ip().is_unspecified() => Err(SettingsError::new(
                "advertise",
                "must be set when the listener peers use is on an unspecified address (0.0.0.0 \
                 or ::): peers need an address they can reach",
            )),
            None => Ok(None),
        }
    }

    /// The node id, if given (0 is no id).
    pub(super) fn node_id(&self) -> Result<Option<NodeId>, SettingsError> {
        match self.node_id {
            Some(0) => Err(SettingsError::new("node_id", "must not be 0")),
            id => Ok(id.map(NodeId)),
        }
    }

    /// The cluster key file (required: a node without the cluster's key can do nothing).
    pub(super) fn key_file(&self) -> Result<PathBuf, SettingsError> {
        self.key_file.clone().ok_or_else(|| {
            SettingsError::new(
                "key_file",
                "is required: create one with `waitingroom-node keygen --out FILE`",
            )
        })
    }
}

/// The default node id: a hash of the advertised URL, so a node keeps its id across restarts
/// without configuration. Kept below 2^53 so JavaScript reads it exactly, and never 0.
pub fn derive_node_id(advertise: &str) -> NodeId {
    // FNV-1a: stable across Rust versions and platforms (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in advertise.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let id = h & ((1 << 53) - 1);
    NodeId(id.max(1))
}
