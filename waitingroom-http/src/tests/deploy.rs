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
use crate::config::{NetworkOptions, Options, RoomOptions};
use crate::crypto::Crypto;
use crate::peer::Transport;

use super::harness::post;

fn node() -> Arc<App> {
    let options = Options {
        network: NetworkOptions {
            key_file: Some("unused: the key is given in-process".into()),
            ..Default::default()
        },
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
        round: None,
        draw: None,
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

/// The metric names a text uses: every `waitingroom_...` word.
fn metric_names(text: &str) -> std::collections::BTreeSet<&str> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices("waitingroom_")
        .filter(|(i, _)| !text[..*i].ends_with(is_name))
        .map(|(i, _)| {
            let rest = &text[i..];
            &rest[..rest.find(|c| !is_name(c)).unwrap_or(rest.len())]
        })
        .collect()
}

/// What a node exposes at `/metrics` after one visitor joined and checked in (so the
/// per-result counters have their first series): the text, and its metric family and series
/// names.
async fn exposed_series(app: &Arc<App>) -> (String, std::collections::BTreeSet<String>) {
    let ask = |req| router(app.clone()).oneshot(req);
    let read = |resp: axum::response::Response| async {
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await;
        String::from_utf8(body.expect("body").to_vec()).expect("utf-8")
    };
    let joined = ask(post("/api/join", serde_json::json!({}))).await;
    let joined: serde_json::Value =
        serde_json::from_str(&read(joined.unwrap_or_else(|e| match e {})).await).expect("json");
    let checkin = post(
        "/api/checkin",
        serde_json::json!({ "ticket": joined["ticket"] }),
    );
    assert_eq!(status(app, checkin).await, StatusCode::OK);
    let metrics = ask(Request::get("/metrics")
        .body(Body::empty())
        .expect("request"))
    .await;
    let text = read(metrics.unwrap_or_else(|e| match e {})).await;
    let families = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next());
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next());
    let names = families.chain(series).map(str::to_owned).collect();
    (text, names)
}

/// Every metric the Grafana dashboard and the Prometheus alert rules in `deploy/` name is one
/// a running node exposes (and the dashboard is valid JSON).
#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_use_exists() {
    let app = node();
    let (text, exposed) = exposed_series(&app).await;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/");
    for file in ["grafana/waitingroom.json", "prometheus/alerts.yml"] {
        let content = std::fs::read_to_string(format!("{root}{file}")).expect(file);
        if file.ends_with(".json") {
            serde_json::from_str::<serde_json::Value>(&content).expect("dashboard is JSON");
        }
        let used = metric_names(&content);
        assert!(used.len() >= 5, "{file} names only {used:?}");
        let missing: Vec<_> = used.iter().filter(|n| !exposed.contains(**n)).collect();
        assert!(
            missing.is_empty(),
            "{file} uses {missing:?}, not in:\n{text}"
        );
    }
}

/// The live settings are exposed as the node applies them; "unlimited" is +Inf.
#[tokio::test]
async fn the_live_limits_and_the_build_are_exposed() {
    let (_, limited) = exposed_series(&node()).await;
    for name in [
        "waitingroom_target_on_site",
        "waitingroom_pass_expiry_seconds",
        "waitingroom_eviction_interval_seconds",
        "waitingroom_build_info",
        "waitingroom_wait_seconds_bucket",
        "waitingroom_last_round_timestamp_seconds",
    ] {
        assert!(limited.contains(name), "{name}");
    }
    let options = Options {
        network: NetworkOptions {
            key_file: Some("unused".into()),
            ..Default::default()
        },
        room: RoomOptions {
            target_on_site: Some(waitingroom_core::Settings::UNLIMITED),
            pass_expiry_ms: Some(90_000),
            ..Default::default()
        },
        ..Options::default()
    };
    let cfg = options.resolve().expect("valid options");
    let app = App::single_node(cfg, Crypto::generate(), Transport::build_client()).expect("ok");
    let (text, _) = exposed_series(&app).await;
    let lines: Vec<_> = text.lines().collect();
    assert!(lines.contains(&"waitingroom_target_on_site inf"), "{text}");
    assert!(
        lines.contains(&"waitingroom_pass_expiry_seconds 90.0"),
        "{text}"
    );
    let build = format!(
        "waitingroom_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(lines.contains(&build.as_str()), "{text}");
}
