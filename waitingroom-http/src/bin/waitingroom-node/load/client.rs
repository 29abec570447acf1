//! The load generator's HTTP client: hyper's HTTP/1 connections, plain or TLS, kept alive in
//! one pool per base URL.
//!
//! Why not `reqwest`, which the nodes use to call each other: in a benchmark the load
//! generator runs on the cluster's machine and its CPU is part of the figure, so it should cost
//! about what a load tool costs. reqwest's layers (redirects, retries, its pool, a timer per
//! request) and its larger connections cost the load generator much more CPU per visitor (figures:
//! docs/benchmarks.md#cluster-benchmark).
//!
//! A request takes an idle connection (or opens one), sends, reads the whole answer and puts the
//! connection back: a visitor waiting between check-ins holds none, so there are about as many
//! connections as requests in flight, as with browsers' keep-alive connections.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use axum::body::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A connection's sending half; its other half runs in a task of its own.
type Sender = SendRequest<Full<Bytes>>;

/// One base URL: where to connect, and its idle connections.
struct Target {
    /// `host:port`, to connect to.
    addr: String,
    /// The `Host` header.
    host: HeaderValue,
    /// For `https://`: the name the server's certificate must carry.
    tls: Option<ServerName<'static>>,
    /// The base URL's path (empty, or `/prefix`), put before every request's path.
    prefix: String,
    idle: Mutex<Vec<Sender>>,
}

/// An answer: status, headers and the whole body.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// The pools of every base URL, the run's request timeout, and TLS when a URL needs it.
pub(super) struct Client {
    targets: Vec<Target>,
    timeout: Duration,
    tls: Option<TlsConnector>,
}

impl Client {
    /// A client for `urls` (`http://host[:port][/prefix]` or `https://…`), trusting the
    /// system's certificate authorities for the `https://` ones.
    pub(super) fn new(urls: &[String], timeout: Duration) -> anyhow::Result<Self> {
        let targets: Vec<Target> = urls.iter().map(|u| target(u)).collect::<Result<_, _>>()?;
        let tls = targets
            .iter()
            .any(|t| t.tls.is_some())
            .then(waitingroom_http::crypto::tls::public_client_config)
            .transpose()
            .context("cannot set up TLS with the system's certificate authorities")?;
        Ok(Client {
            targets,
            timeout,
            tls: tls.map(|c| TlsConnector::from(Arc::new(c))),
        })
    }

    /// The same client with `tls` for its `https://` URLs (a test trusts its own CA).
    #[cfg(test)]
    fn with_tls(self, tls: rustls::ClientConfig) -> Self {
        Client {
            tls: Some(TlsConnector::from(Arc::new(tls))),
            ..self
        }
    }

    /// How many base URLs there are.
    pub(super) fn targets(&self) -> usize {
        self.targets.len()
    }

    /// Sends one request to base URL `t` and reads the whole answer, within the timeout.
    pub(super) async fn send(
        &self,
        t: usize,
        (method, path): (Method, &str),
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let target = &self.targets[t];
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", target.prefix))
            .header(HOST, target.host.clone());
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        let body = Bytes::copy_from_slice(body.unwrap_or_default().as_bytes());
        let req = req.body(Full::new(body)).context("not a valid request")?;
        tokio::time::timeout(self.timeout, self.exchange(target, req))
            .await
            .context("timed out")?
    }

    /// Sends on an idle connection (or a new one), reads the answer, keeps the connection.
    async fn exchange(&self, target: &Target, req: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
        let (mut sender, reused) = match idle(target).await {
            Some(sender) => (sender, true),
            None => (self.connect(target).await?, false),
        };
        let resp = match sender.try_send_request(req).await {
            Ok(resp) => resp,
            Err(mut e) => match e.take_message() {
                // Not sent: the idle connection had just closed. Once more, on a new one.
                Some(req) if reused => {
                    sender = self.connect(target).await?;
                    sender.send_request(req).await?
                }
                _ => return Err(e.into_error().into()),
            },
        };
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        target
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sender);
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// A new connection to `target`.
    async fn connect(&self, target: &Target) -> anyhow::Result<Sender> {
        let tcp = TcpStream::connect(&target.addr).await?;
        tcp.set_nodelay(true)?;
        match (&target.tls, &self.tls) {
            (Some(name), Some(tls)) => handshake(tls.connect(name.clone(), tcp).await?).await,
            (Some(_), None) => bail!("no TLS configuration"),
            (None, _) => handshake(tcp).await,
        }
    }
}

/// The most recently used idle connection of `target` that is still open.
async fn idle(target: &Target) -> Option<Sender> {
    loop {
        let popped = target
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut sender = popped?;
        if sender.ready().await.is_ok() {
            return Some(sender);
        }
    }
}

/// HTTP/1 over `io`, driven by a task of its own until either side closes the connection.
async fn handshake<I>(io: I) -> anyhow::Result<Sender>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io)).await?;
    // Its error (the server closed the connection) shows in the request that was on it.
    tokio::spawn(conn);
    Ok(sender)
}

/// Reads a base URL.
fn target(url: &str) -> anyhow::Result<Target> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("--url {url}"))?;
    let (https, default_port) = match uri.scheme_str() {
        Some("http") => (false, 80),
        Some("https") => (true, 443),
        _ => bail!("--url {url}: an http:// or https:// URL"),
    };
    let Some(authority) = uri.authority() else {
        bail!("--url {url}: no host");
    };
    if uri.query().is_some() {
        bail!("--url {url}: a base URL has no query");
    }
    let host = authority.host();
    let tls = https
        .then(|| ServerName::try_from(host.trim_matches(['[', ']']).to_owned()))
        .transpose()
        .with_context(|| format!("--url {url}: not a server name"))?;
    Ok(Target {
        addr: format!("{host}:{}", authority.port_u16().unwrap_or(default_port)),
        host: HeaderValue::from_str(authority.as_str())?,
        tls,
        prefix: uri.path().trim_end_matches('/').to_owned(),
        idle: Mutex::new(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::extract::ConnectInfo;
    use axum::routing::post;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;

    /// A server on 127.0.0.1 answering `POST /room/echo` with the request's cookie, body and
    /// client port (one per connection), over TLS with `tls`; its base URL.
    async fn echo_server(tls: Option<ServerConfig>, header_timeout: Duration) -> String {
        let router = Router::new().route(
            "/room/echo",
            post(
                |ConnectInfo(from): ConnectInfo<std::net::SocketAddr>,
                 headers: HeaderMap,
                 body: String| async move {
                    let cookie = headers
                        .get("cookie")
                        .map(|c| c.to_str().unwrap().to_owned());
                    format!("{} {body} {}", cookie.unwrap_or_default(), from.port())
                },
            ),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let tls = tls.map(|c| TlsAcceptor::from(Arc::new(c)));
        let forever = std::future::pending::<()>();
        let serve = waitingroom_http::server::serve::serve_tls(
            listener,
            router,
            header_timeout,
            tls,
            forever,
        );
        tokio::spawn(serve);
        format!("{scheme}://{addr}/room/")
    }

    /// Two requests in turn: both answered, the second on the first's connection (its client
    /// port, returned).
    async fn round_trips(client: &Client) -> String {
        let echo = (Method::POST, "/echo");
        let mut ports = Vec::new();
        for body in ["one", "two"] {
            let answer = client
                .send(0, echo.clone(), &[("cookie", "wr_node=node2")], Some(body))
                .await
                .unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            let text = String::from_utf8(answer.body.to_vec()).unwrap();
            let (said, port) = text.rsplit_once(' ').unwrap();
            assert_eq!(said, format!("wr_node=node2 {body}"));
            ports.push(port.to_owned());
        }
        assert_eq!(ports[0], ports[1], "the connection was kept");
        ports.swap_remove(0)
    }

    #[tokio::test]
    async fn sends_and_keeps_the_connection() {
        let url = echo_server(None, Duration::from_secs(5)).await;
        round_trips(&Client::new(&[url], Duration::from_secs(5)).unwrap()).await;
    }

    #[tokio::test]
    async fn sends_over_tls() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = CertificateDer::from(cert.der().to_vec());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![der.clone()],
                PrivateKeyDer::from(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let url = echo_server(Some(server), Duration::from_secs(5)).await;
        assert!(url.starts_with("https://"));
        let mut roots = RootCertStore::empty();
        roots.add(der).unwrap();
        let trusting = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let timeout = Duration::from_secs(5);
        let client = Client::new(std::slice::from_ref(&url), timeout).unwrap();
        let client = client.with_tls(trusting);
        round_trips(&client).await;
        // Without the server's CA the handshake fails: no answer, no panic.
        let untrusting = waitingroom_http::crypto::tls::plain_peer_config();
        let client = Client::new(&[url], timeout).unwrap().with_tls(untrusting);
        assert!(
            client
                .send(0, (Method::POST, "/echo"), &[], None)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced() {
        // The server closes a connection idle for longer than its header read timeout.
        let url = echo_server(None, Duration::from_millis(100)).await;
        let client = Client::new(&[url], Duration::from_secs(5)).unwrap();
        let first = round_trips(&client).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_ne!(round_trips(&client).await, first, "a new connection");
    }

    #[test]
    fn reads_base_urls() {
        let t = target("http://127.0.0.1:18480").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.prefix.as_str()),
            ("127.0.0.1:18480", "")
        );
        assert_eq!(t.host, "127.0.0.1:18480");
        assert!(t.tls.is_none());
        let t = target("HTTPS://room.example/queue/").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.prefix.as_str()),
            ("room.example:443", "/queue")
        );
        assert_eq!(t.host, "room.example");
        assert!(t.tls.is_some());
        let t = target("http://[::1]:8080").unwrap();
        assert_eq!(t.addr, "[::1]:8080");
        for bad in ["ftp://x", "127.0.0.1:80", "http://x/?a=1", "not a url"] {
            assert!(target(bad).is_err(), "{bad}");
        }
    }
}
