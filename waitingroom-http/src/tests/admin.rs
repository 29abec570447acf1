//! The admin API (docs/operating.md#live-settings): only with the token, only on the internal
//! routes, every bad value named, and each mode doing what it says at the visitor API.

use super::harness::*;
use crate::config::{ProtocolOptions, RecordOptions};

const TOKEN: &str = "0123456789abcdef-test-token";

/// A node with the admin API on (a token file written for it) and its timer running.
fn admin_node(extra: Options) -> TestNode {
    let path = std::env::temp_dir().join(format!(
        "wr-admin-token-{}-{}",
        std::process::id(),
        now_ms()
    ));
    std::fs::write(&path, format!("{TOKEN}\n")).expect("write the token file");
    let options = Options {
        records: RecordOptions {
            admin_token_file: Some(path.clone()),
            ..extra.records
        },
        ..extra
    };
    let node = TestNode::start(options, true);
    let _ = std::fs::remove_file(path);
    node
}

fn admin(method: &str, token: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut req = Request::builder().method(method).uri("/admin/settings");
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    req.body(body).expect("request")
}

impl TestNode {
    async fn patch(&self, change: Value) -> Reply {
        self.send(admin("PATCH", Some(TOKEN), Some(change))).await
    }

    async fn join_status(&self) -> Reply {
        self.post("/api/join", json!({})).await
    }
}

#[tokio::test]
async fn the_admin_api_needs_its_token_and_is_off_without_one() {
    let off = TestNode::start(options(), false);
    off.send(admin("GET", Some(TOKEN), None))
        .await
        .assert_error(StatusCode::NOT_FOUND, "admin_off");
    let node = admin_node(options());
    for token in [None, Some("wrong"), Some("0123456789abcdef-test-tokeX")] {
        let r = node.send(admin("GET", token, None)).await;
        r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
    }
    let r = node
        .send(admin(
            "PATCH",
            Some("wrong"),
            Some(json!({"mode": "reject"})),
        ))
        .await;
    r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let metrics = node
        .send(bodiless(Request::get("/metrics"), header::ACCEPT, "*/*"))
        .await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("waitingroom_admin_requests_refused_total 4"),
        "{text}"
    );
    let r = node.send(admin("GET", Some(TOKEN), None)).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(
        (v["version"].clone(), v["mode"].clone()),
        (json!(0), json!("normal"))
    );
    assert_eq!(v["target_on_site"], 100);
    // The public listener's routes never serve it.
    let public = crate::api::public_router(node.app.clone());
    let (status, _, _) = crate::api::call(&public, admin("GET", Some(TOKEN), None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_bad_setting_is_refused_with_its_name_and_changes_nothing() {
    let node = admin_node(options());
    for (change, field) in [
        (json!({"target_on_site": 0}), "target_on_site"),
        (json!({"target_on_site": "many"}), "target_on_site"),
        (json!({"mode": "closed"}), "mode"),
        (json!({"new_users_per_minute": -5}), "new_users_per_minute"),
        (json!({"queueing_method": "lottery"}), "queueing_method"),
        (json!({"session_duration_ms": 5}), "session_duration_ms"),
        (json!({"eviction_interval_ms": 5}), "eviction_interval_ms"),
    ] {
        let r = node.patch(change.clone()).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains(field), "{change}: {message}");
    }
    let r = node
        .send(
            Request::patch("/admin/settings")
                .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
                .body(Body::from("{not json"))
                .expect("request"),
        )
        .await;
    r.assert_error(StatusCode::BAD_REQUEST, "bad_json");
    let v = node.send(admin("GET", Some(TOKEN), None)).await.json();
    assert_eq!(v["version"], 0);
}

/// docs/operating.md#live-settings: every value an operator sets has a bound (counts up to a
/// billion, durations up to 30 days, times within a year of now); one past it is refused with a
/// 400 naming the field, and changes nothing. An event at `u64::MAX` ms would otherwise put
/// joins in a pre-queue with a start time that wraps.
#[tokio::test]
async fn values_past_their_bounds_are_refused_naming_the_field() {
    let node = admin_node(options());
    let day: u64 = 24 * 3_600_000;
    for (change, field) in [
        (
            json!({"target_on_site": 1_000_000_001u64}),
            "target_on_site",
        ),
        (
            json!({"new_users_per_minute": u64::MAX}),
            "new_users_per_minute",
        ),
        (json!({"pass_expiry_ms": 31 * day}), "pass_expiry_ms"),
        (
            json!({"session_duration_ms": u64::MAX}),
            "session_duration_ms",
        ),
    ] {
        let r = node.patch(change.clone()).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.starts_with(field), "{change}: {message}");
    }
    let now = now_ms();
    for (body, field) in [
        (
            json!({"name": "far", "start_ms": u64::MAX - 1, "end_ms": u64::MAX}),
            "start_ms",
        ),
        (
            json!({"name": "far", "start_ms": now, "end_ms": now + 400 * day}),
            "end_ms",
        ),
        (
            json!({"name": "far", "start_ms": now, "end_ms": now + day,
                "settings": {"target_on_site": u64::MAX - 1}}),
            "target_on_site",
        ),
    ] {
        let r = node
            .send(event_request(
                "POST",
                "/admin/events",
                Some(TOKEN),
                Some(body.clone()),
            ))
            .await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.starts_with(field), "{body}: {message}");
    }
    let pass = json!({"label": "staff", "expires_in_ms": 31 * day});
    let r = node
        .send(event_request(
            "POST",
            "/admin/passes",
            Some(TOKEN),
            Some(pass),
        ))
        .await;
    r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
    let v = node.send(admin("GET", Some(TOKEN), None)).await.json();
    assert_eq!(
        (v["version"].clone(), v["events"].clone()),
        (json!(0), json!(0))
    );
    let r = node.join_status().await;
    assert_ne!(r.json()["status"], "prequeue", "{}", r.json());
}

#[tokio::test]
async fn a_change_is_confirmed_by_a_round_and_shows_in_the_metrics() {
    let node = admin_node(options());
    let r = node
        .patch(json!({"target_on_site": 7, "new_users_per_minute": 600}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let v = r.json();
    assert_eq!(v["version"], 1);
    assert_eq!(v["author"], 1);
    assert_eq!(v["target_on_site"], 7);
    assert_eq!(v["new_users_per_minute"], 600);
    assert_eq!(v["confirmed"], true, "{v}");
    let r = node.patch(json!({"target_on_site": "unlimited"})).await;
    assert_eq!(r.json()["target_on_site"], "unlimited");
    let metrics = node
        .send(bodiless(Request::get("/metrics"), header::ACCEPT, "*/*"))
        .await;
    let text = String::from_utf8_lossy(&metrics.body);
    for line in [
        "waitingroom_settings_version 2",
        "waitingroom_target_on_site inf",
        "waitingroom_new_users_per_minute 600.0",
        "waitingroom_mode{mode=\"normal\"} 1",
        "waitingroom_mode{mode=\"reject\"} 0",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

#[tokio::test]
async fn each_mode_does_what_it_says_and_switching_back_keeps_the_queue() {
    let node = admin_node(Options {
        room: RoomOptions {
            target_on_site: Some(1),
            ..options().room
        },
        ..options()
    });
    node.patch(json!({"mode": "queue_all"})).await;
    let r = node.join_status().await;
    assert_eq!(r.json()["status"], "queued", "{}", r.json());
    let ticket = r.json()["ticket"].as_str().expect("ticket").to_owned();
    // Rounds go by (20 ms each) and check-ins go on; nobody is let out.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let r = node.post("/api/checkin", json!({ "ticket": ticket })).await;
        assert_eq!(r.json()["status"], "queued", "{}", r.json());
    }
    node.patch(json!({"mode": "reject"})).await;
    let r = node.join_status().await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "rejected");
    node.patch(json!({"mode": "passthrough"})).await;
    let r = node.join_status().await;
    assert_eq!(r.json()["status"], "admitted", "{}", r.json());
    node.patch(json!({"mode": "normal"})).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = node.post("/api/checkin", json!({ "ticket": ticket })).await;
        if r.json()["status"] == "admitted" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the queued visitor kept their place: {}",
            r.json()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn event_request(
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    req.header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .expect("request")
}

/// docs/operating.md#scheduled-events: the events API takes only the token, names every bad field,
/// refuses a taken name and an overlap, and a pre-queue answers `prequeue` with the time to the
/// start; deleting the event ends it.
#[tokio::test]
async fn events_are_checked_scheduled_shown_and_deleted() {
    let node = admin_node(options());
    let post = |body: Value| event_request("POST", "/admin/events", Some(TOKEN), Some(body));
    let r = node
        .send(event_request(
            "POST",
            "/admin/events",
            None,
            Some(json!({})),
        ))
        .await;
    r.assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    let now = now_ms();
    let sale = json!({"name": "sale", "prequeue_start_ms": now, "start_ms": now + 60_000,
        "end_ms": now + 120_000, "shuffle_at_start": true});
    for (body, field) in [
        (
            json!({"name": "", "start_ms": now, "end_ms": now + 1}),
            "name",
        ),
        (
            json!({"name": "s", "start_ms": now, "end_ms": now}),
            "end_ms",
        ),
        (json!({"name": "s", "start_ms": 5, "end_ms": 9}), "end_ms"),
        (json!({"name": "s", "end_ms": 9}), "start_ms"),
        (
            json!({"name": "s", "start_ms": now, "end_ms": now + 60_000,
            "settings": {"target_on_site": 0}}),
            "target_on_site",
        ),
    ] {
        let r = node.send(post(body.clone())).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains(field), "{body}: {message}");
    }
    let r = node.send(post(sale.clone())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["events"][0]["phase"], "prequeue", "{}", r.json());
    let taken = node.send(post(sale)).await;
    taken.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
    let r = node.join_status().await;
    assert_eq!(r.json()["status"], "prequeue", "{}", r.json());
    let left = r.json()["starts_in_ms"].as_u64().expect("starts_in_ms");
    assert!(left > 50_000 && left <= 60_000, "{left}");
    let gone = node
        .send(event_request(
            "DELETE",
            "/admin/events/other",
            Some(TOKEN),
            None,
        ))
        .await;
    gone.assert_error(StatusCode::NOT_FOUND, "no_such_event");
    let r = node
        .send(event_request(
            "DELETE",
            "/admin/events/sale",
            Some(TOKEN),
            None,
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["events"], json!([]));
    let r = node.join_status().await;
    assert_ne!(r.json()["status"], "prequeue", "{}", r.json());
}

/// docs/operating.md#bypass-passes: a bypass pass needs the admin token, names its bad fields,
/// verifies as a pass, takes no place (the one place on the site still goes to a visitor), is never
/// extended, and can be revoked like any pass.
#[tokio::test]
async fn bypass_passes_take_no_place_and_are_never_extended() {
    let node = admin_node(Options {
        room: RoomOptions {
            target_on_site: Some(1),
            ..options().room
        },
        ..options()
    });
    let mint = |token: Option<&str>, body: Value| {
        event_request("POST", "/admin/passes", token, Some(body))
    };
    node.send(mint(None, json!({"label": "monitoring"})))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    for (body, field) in [
        (json!({}), "label"),
        (json!({"label": "a\"b"}), "label"),
        (json!({"label": "x", "expires_in_ms": 5}), "expires_in_ms"),
        (json!({"label": "x", "node": 3}), "body"),
    ] {
        let r = node.send(mint(Some(TOKEN), body.clone())).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains(field), "{body}: {message}");
    }
    let r = node
        .send(mint(
            Some(TOKEN),
            json!({"label": "uptime monitor", "expires_in_ms": 60_000}),
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let pass = r.json()["pass"].as_str().expect("pass").to_owned();
    assert!(r.json()["expires_at_ms"].as_u64().expect("expiry") > now_ms() + 50_000);
    assert_eq!(node.verify(&pass).await.status, StatusCode::NO_CONTENT);
    node.post("/api/pass/refresh", json!({ "pass": pass }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "bypass_pass");
    assert_eq!(node.app.driver.read(|n| n.room().on_site()), 0);
    let r = node.join_status().await;
    assert_eq!(r.json()["status"], "queued", "{}", r.json());
    let ticket = r.json()["ticket"].as_str().expect("ticket").to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    while node
        .post("/api/checkin", json!({ "ticket": ticket }))
        .await
        .json()["status"]
        != "admitted"
    {
        assert!(Instant::now() < deadline, "the place goes to the visitor");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = node
        .post("/api/pass/release", json!({ "pass": pass }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    node.verify(&pass)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "released");
}

/// docs/operating.md#scheduled-events: a room closed except during its event takes visitors while
/// the event is on, and once it has ended turns them away with `event_over` (the page says the
/// event is over).
#[tokio::test]
async fn a_room_closed_after_its_event_says_the_event_is_over() {
    let node = admin_node(options());
    node.patch(json!({"mode": "reject"})).await;
    node.join_status()
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "rejected");
    let now = now_ms();
    let sale = json!({"name": "sale", "start_ms": now, "end_ms": now + 400,
        "settings": {"mode": "normal"}});
    let r = node
        .send(event_request(
            "POST",
            "/admin/events",
            Some(TOKEN),
            Some(sale),
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let r = node.join_status().await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "open during the event: {}",
        r.json()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    node.join_status()
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "event_over");
}

/// docs/operating.md#lost-majority: the operator's way out of a lost majority needs the token and
/// an explicit confirmation, and makes the node's members the voters.
#[tokio::test]
async fn resetting_the_voters_needs_the_token_and_a_confirmation() {
    let node = admin_node(options());
    let reset = |token: Option<&str>, body: Value| {
        event_request("POST", "/admin/voters/reset", token, Some(body))
    };
    node.send(reset(None, json!({"confirm": true})))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    for body in [json!({}), json!({"confirm": "yes"})] {
        let r = node.send(reset(Some(TOKEN), body)).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap_or_default()
                .contains("confirm")
        );
    }
    let r = node
        .send(reset(Some(TOKEN), json!({"confirm": true})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["voters"], json!([1]));
    assert!(r.json()["epoch"].as_u64().expect("epoch") >= 2);
}

/// The deleteMin modes are not leased: a node running one refuses a live target or rate cap,
/// naming `admission`, and changes nothing.
#[tokio::test]
async fn an_unleased_admission_mode_refuses_a_live_limit() {
    let node = admin_node(Options {
        room: RoomOptions {
            target_on_site: Some(waitingroom_core::Settings::UNLIMITED),
            ..options().room
        },
        protocol: ProtocolOptions {
            admission: Some(waitingroom_distributed::AdmissionMode::Batched),
            ..Default::default()
        },
        ..options()
    });
    for change in [
        json!({"target_on_site": 50}),
        json!({"new_users_per_minute": 60}),
    ] {
        let r = node.patch(change).await;
        r.assert_error(StatusCode::BAD_REQUEST, "invalid_setting");
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap_or_default()
                .contains("admission")
        );
    }
    let r = node.patch(json!({"mode": "queue_all"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["target_on_site"], "unlimited");
}
