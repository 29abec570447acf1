//! The gate as a [`tower::Layer`]: what runs in front of the protected routes on every request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;

use super::Gate;
use crate::clock::now_ms;

/// Puts a [`Gate`] in front of a service.
#[derive(Debug, Clone)]
pub struct GateLayer {
    pub(super) gate: Arc<Gate>,
}

impl<S> tower::Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// A service behind a [`Gate`]: requests with a valid pass reach `inner` (the
/// [`Pass`](waitingroom_core::Pass) in their extensions), the others are redirected to the room.
#[derive(Debug, Clone)]
pub struct GateService<S> {
    inner: S,
    gate: Arc<Gate>,
}

impl<S> tower::Service<Request> for GateService<S>
where
    S: tower::Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        // The service that was polled ready serves this request; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        Box::pin(async move {
            if gate.cfg.bypass.matches(&req) {
                return inner.call(req).await;
            }
            match gate.check(req.headers(), now_ms()).await {
                Ok(pass) => {
                    req.extensions_mut().insert(pass);
                    inner.call(req).await
                }
                Err(why) => {
                    tracing::debug!(%why, path = req.uri().path(), "no valid pass: to the room");
                    Ok(gate.redirect(req.method(), req.uri()))
                }
            }
        })
    }
}
