//! What the files in `deploy/` rely on a node to answer, checked in-process against the real
//! router of a single-node cluster.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use tower::ServiceExt as _;
use waitingroom_core::{NodeId, Pass, TicketId};

use crate::api::router;
use crate::app::App;
use crate::clock::now_ms;
use crate::config::Options;
use crate::crypto::Crypto;
use crate::peer::Transport;

fn node() -> Arc<App> {
    let options = Options {
        key_file: Some("unused: the key is given in-process".into()),
        ..Options::default()
    };
    let cfg = options.resolve().expect("valid options");
    App::single_node(cfg, Crypto::generate(), Transport::build_client()).expect("valid settings")
}

async fn status(app: &Arc<App>, req: Request<Body>) -> StatusCode {
    let resp = router(app.clone()).oneshot(req).await;
    resp.unwrap_or_else(|e| match e {}).status()
}

/// Envoy's ext_authz (deploy/envoy/envoy.yaml) checks `POST /shop/pay` as
/// `POST /api/pass/verify/shop/pay`: the node answers it as `GET /api/pass/verify`.
#[tokio::test]
async fn the_pass_check_answers_any_method_and_path_below_it() {
    let app = node();
    let now = now_ms();
    let pass = app.crypto.sign_pass(&Pass {
        id: TicketId(7),
        node: NodeId(1),
        queue_join_time: now - 5_000,
        created_at: now,
        issued_at: now,
        expires_at: now + 60_000,
        eviction_time: now - 1_000,
    });
    let check = |method: Method, path: &str, cookie: Option<&str>| {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        req.body(Body::empty()).expect("request")
    };
    let with_pass = format!("wr_pass={pass}");
    for (method, path) in [
        (Method::GET, "/api/pass/verify"),
        (Method::GET, "/api/pass/verify/shop/cart"),
        (Method::POST, "/api/pass/verify/shop/pay"),
        (Method::DELETE, "/api/pass/verify/a/b/c"),
    ] {
        let ok = status(&app, check(method.clone(), path, Some(&with_pass))).await;
        assert_eq!(ok, StatusCode::NO_CONTENT, "{method} {path}");
        let refused = status(&app, check(method.clone(), path, None)).await;
        assert_eq!(refused, StatusCode::UNAUTHORIZED, "{method} {path}");
        let forged = status(&app, check(method.clone(), path, Some("wr_pass=a.b.c"))).await;
        assert_eq!(forged, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
}
