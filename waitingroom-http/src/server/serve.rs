//! Serving a router on a TCP listener, with the limits `axum::serve` cannot set.
//!
//! `axum::serve` gives hyper no timer, so hyper's header read timeout never fires: a client that
//! sends half a request head holds a connection (and its buffers) for as long as it likes. This
//! loop serves each connection with hyper's HTTP/1.1 server (as axum does with this crate's
//! features: no HTTP/2) with a timer, so a request head must arrive whole within
//! `header_read_timeout_ms` of the connection asking for one — also between the requests of a
//! kept-alive connection, so an idle connection is closed after that long too. Each request
//! carries the TCP peer's address (`ConnectInfo<SocketAddr>`) for the join limit.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// How long to wait for open connections once the server stops: peers and balancers keep idle
/// keep-alive connections open, and nobody should wait for those.
const DRAIN: Duration = Duration::from_millis(300);

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets requests
/// in progress finish (for at most `DRAIN`) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    serve_tls(listener, router, header_read_timeout, None, shutdown).await;
}

/// As [`serve`]; with `tls`, every connection is a TLS one (`crypto/tls.rs`), whose handshake must
/// complete within the header read timeout too.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = router
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(remote));
                req
            });
        let service = TowerToHyperService::new(service);
        let Some(tls) = &tls else {
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                // A connection's errors (a client that went away, a head that came too slowly)
                // are the client's business.
                let _ = conn.await;
            });
            continue;
        };
        let (tls, builder, watcher) = (tls.clone(), builder.clone(), graceful.watcher());
        tokio::spawn(async move {
            // A client without a certificate from the cluster's CA, or too slow to present
            // one, is refused here (logged at debug: scanners are routine).
            let stream = match tokio::time::timeout(header_read_timeout, tls.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(%remote, error = %e, "TLS handshake refused"),
                Err(_) => return tracing::debug!(%remote, "TLS handshake too slow"),
            };
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let _ = watcher.watch(conn).await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}

/// After a failed `accept`: a connection that failed before it was accepted is nobody's
/// problem; anything else (out of file descriptors) is logged, and accepting paused a moment so
/// it does not spin.
async fn accept_failed(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Binds `addr`; returns the listener and the address it got (the port, when 0 was asked for).
pub async fn bind(addr: SocketAddr) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
