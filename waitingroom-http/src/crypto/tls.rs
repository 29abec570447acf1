//! Mutual TLS on the internal listener (`--internal-tls-cert`, `--internal-tls-key`,
//! `--internal-tls-ca`): with it, the internal listener speaks only TLS and takes only clients
//! whose certificate the cluster's CA signed, and this node calls its peers over TLS with its
//! own certificate, trusting that CA alone. Peer requests stay signed with the cluster key as
//! well (`peer/auth.rs`): TLS adds confidentiality and keeps anyone without a certificate from
//! reaching the internal routes at all. Operators' tools (Prometheus, `waitingroom-node admin`)
//! then need a client certificate too.
//!
//! rustls with the *ring* provider (already in the tree; aws-lc needs cmake). A peer's
//! certificate must name the host in its advertised URL (an IP SAN for `https://10.0.0.5:9090`).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_platform_verifier::BuilderVerifierExt as _;
use waitingroom_core::SettingsError;

/// The start of every HTTP client this crate builds (peers, the gate's JWKS fetch, the load
/// generator, the admin command). reqwest is built here without a crypto provider of its own
/// (`rustls-no-provider`: its default, aws-lc, needs cmake), so its rustls back end takes the
/// process's: this installs *ring* as that, once. A service that embeds the gate and builds its
/// own client must start from here too, or install a provider itself first.
pub fn client_builder() -> reqwest::ClientBuilder {
    // A second install is refused, harmlessly: the provider is already there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// The scheme of internal URLs: `https` with mutual TLS on the internal listener, else `http`.
pub fn scheme(mutual_tls: bool) -> &'static str {
    if mutual_tls { "https" } else { "http" }
}

/// The TLS configuration of a peer client without mutual TLS: peers are then `http://` (an
/// `https://` one is refused at start), so it trusts nothing. Given to reqwest so that it does
/// not look for the system's CA certificates, which a `FROM scratch` image does not have.
pub fn plain_peer_config() -> ClientConfig {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth()
}

/// The TLS configuration of a client of public `https://` URLs (the load generator's): the
/// system's certificate authorities, found as reqwest finds them, with *ring*.
pub fn public_client_config() -> Result<ClientConfig, rustls::Error> {
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_platform_verifier()?
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Where the internal listener's certificate, key and CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain (PEM), for serving and as a client of its peers.
    pub cert: std::path::PathBuf,
    /// Its private key (PEM, PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
    /// The CA that signs every node's (and operator tool's) certificate (PEM).
    pub ca: std::path::PathBuf,
}

/// The TLS configurations of one node: the internal listener's and its peer client's.
#[derive(Debug, Clone)]
pub struct InternalTls {
    /// For the internal listener: requires a client certificate from the CA.
    pub server: Arc<ServerConfig>,
    /// For calls to peers: presents this node's certificate, trusts the CA only.
    pub client: ClientConfig,
}

impl InternalTls {
    /// Reads the files and builds both configurations; an error names the setting at fault.
    pub fn load(files: &TlsFiles) -> Result<InternalTls, SettingsError> {
        let certs = read_certs("internal_tls_cert", &files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
            SettingsError::new(
                "internal_tls_key",
                format!("{}: no private key read ({e})", files.key.display()),
            )
        })?;
        let mut roots = RootCertStore::empty();
        for ca in read_certs("internal_tls_ca", &files.ca)? {
            roots.add(ca).map_err(|e| {
                SettingsError::new("internal_tls_ca", format!("not a CA certificate: {e}"))
            })?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = server_config(&provider, roots.clone(), certs.clone(), key.clone_key())?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| SettingsError::new("internal_tls_cert", e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| SettingsError::new("internal_tls_key", e.to_string()))?;
        Ok(InternalTls {
            server: Arc::new(server),
            client,
        })
    }
}

fn server_config(
    provider: &Arc<CryptoProvider>,
    roots: Arc<RootCertStore>,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, SettingsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| SettingsError::new("internal_tls_ca", e.to_string()))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| SettingsError::new("internal_tls_cert", e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| {
            SettingsError::new(
                "internal_tls_key",
                format!("does not match internal_tls_cert: {e}"),
            )
        })?;
    // This server speaks HTTP/1.1 only (`server/serve.rs`).
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(server)
}

fn read_certs(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, SettingsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| SettingsError::new(field, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(SettingsError::new(
            field,
            format!("{}: no PEM certificate in it", path.display()),
        ));
    }
    Ok(certs)
}
