//! The operator's API (`/admin/...`, on the internal listener only): the live settings
//! (docs/operating.md#live-settings), scheduled events (docs/operating.md#scheduled-events) and
//! bypass passes (docs/operating.md#bypass-passes). Every request must carry `Authorization: Bearer
//! TOKEN`, the token of `--admin-token-file`, compared in constant time; anything else is 401.
//! Without a token file the admin API is off (404).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;
use waitingroom_core::lottery;
use waitingroom_core::{Pass, Settings, TicketId};
use waitingroom_distributed::{
    EventPhase, LiveSettings, ScheduledEvent, SettingsPatch, leased_if_limited,
};

use super::body::RawBody;
use crate::app::App;
use crate::clock::now_ms;
use crate::wire::errors::ApiError;

/// Lets a request through only with the admin token (see the module's doc).
pub(super) async fn require_token(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = app.cfg.admin_token.as_ref().map(|t| t.0.as_str()) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "admin_off",
            "the admin API is off: start the node with --admin-token-file",
        )
        .into_response();
    };
    if !bearer_matches(req.headers(), token) {
        app.metrics.count_admin_refused();
        let mut resp = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the admin API needs `Authorization: Bearer TOKEN` with the node's admin token",
        )
        .into_response();
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    }
    next.run(req).await
}

/// Whether the request's bearer token is `token`. The comparison takes the same time whatever
/// the guess (the lengths may differ: the token's length is no secret worth keeping).
fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    crate::wire::cookies::bearer(headers)
        .is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.as_bytes())))
}

#[utoipa::path(get, path = "/admin/settings", tag = "internal",
    summary = "The live settings (admin API, internal listener)",
    description = "The settings an operator may change while the cluster runs, with their \
        version; `confirmed`: the last round's result included this version (so every member \
        that took it has it).",
    responses((status = 200, description = "The live settings", body = Object),
        (status = 401, description = "`unauthorized`: no or a wrong bearer token", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn get_settings(State(app): State<Arc<App>>) -> Json<Value> {
    let (live, confirmed) = app.driver.read(|n| {
        (
            n.live_settings().clone(),
            n.settings_confirmed(n.live_settings()),
        )
    });
    Json(view(&live, confirmed))
}

#[utoipa::path(patch, path = "/admin/settings", tag = "internal",
    summary = "Change live settings (admin API, internal listener)",
    description = "A JSON object of the settings to change: `target_on_site` (number or \
        \"unlimited\"), `new_users_per_minute` (number or null), `mode` (normal, queue_all, \
        passthrough, reject), `queueing_method` (fifo, random), `pass_expiry_ms`, \
        `session_duration_ms`. In force here at once and on every member after the next \
        round; the answer waits up to three eviction intervals for a round's result to include \
        it (`confirmed`; a change made at another node at the same time is applied too, the \
        later last) and is the whole settings object.",
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, description = "The live settings after the change", body = Object),
        (status = 400, description = "`invalid_setting`: the message names the field", body = crate::wire::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn patch_settings(
    State(app): State<Arc<App>>,
    body: RawBody,
) -> Result<Json<Value>, ApiError> {
    let change = json_body(body)?;
    let patch = SettingsPatch::from_json(&change).map_err(invalid)?;
    let target = patch.target_on_site.unwrap_or(Settings::UNLIMITED);
    let rate_cap = patch.new_users_per_minute.flatten().is_some();
    leased_if_limited(app.cfg.protocol.admission, target, rate_cap).map_err(invalid)?;
    let next = app
        .driver
        .with(|n, now| n.change_settings(now, &patch, lottery_seed()))
        .map_err(invalid)?;
    tracing::info!(version = next.version, change = %change, "admin: live settings changed");
    let confirmed = wait_confirmed(&app, &next).await;
    let live = app.driver.read(|n| n.live_settings().clone());
    Ok(Json(view(&live, confirmed)))
}

#[utoipa::path(post, path = "/admin/voters/reset", tag = "internal",
    summary = "Declare the voters left out gone (admin API, internal listener)",
    description = "The way out of a lost majority: this node's members become the voters,         so a cluster that lost most of its nodes admits again. Sound only if every node left         out is really gone: one alive on the other side of a cut may still admit, and the site         may then go over its target. The body must be `{\"confirm\": true}`.",
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, description = "`voters` (node ids) and `epoch`", body = Object),
        (status = 400, description = "`invalid_setting`: `confirm` missing", body = crate::wire::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn reset_voters(
    State(app): State<Arc<App>>,
    body: RawBody,
) -> Result<Json<Value>, ApiError> {
    if json_body(body)?["confirm"] != true {
        let why = "must be true: the nodes left out are gone for good";
        return Err(invalid(waitingroom_core::SettingsError::new(
            "confirm", why,
        )));
    }
    let voters = app.driver.with(|n, _| n.reset_voters());
    let ids: Vec<u64> = voters.ids().map(|id| id.0).collect();
    tracing::warn!(voters = ?ids, epoch = voters.epoch, "admin: voters reset by the operator");
    Ok(Json(json!({ "voters": ids, "epoch": voters.epoch })))
}

/// Longest life of a bypass pass (the longest duration an operator may set), and its default.
const BYPASS_MAX_MS: u64 = waitingroom_distributed::MAX_DURATION_MS;
const BYPASS_DEFAULT_MS: u64 = 24 * 3_600_000;

#[utoipa::path(post, path = "/admin/passes", tag = "internal",
    summary = "Mint a bypass pass (admin API, internal listener)",
    description = "`label` (who it is for, 1 to 64 letters, digits, ` `, `.`, `-`, `_`, `@`; \
        logged with the pass's id) and `expires_in_ms` (default a day, at most 30 days). A \
        bypass pass is a pass issued by no node (`node` 0): every origin gate takes it, no node \
        counts it against the target, and none extends it. Revoke it with \
        `POST /api/pass/release` (gates that check passes offline take it until it expires).",
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, description = "`pass`, `id`, `label`, `expires_at_ms`", body = Object),
        (status = 400, description = "`invalid_setting`: the message names the field", body = crate::wire::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn post_pass(
    State(app): State<Arc<App>>,
    body: RawBody,
) -> Result<Json<Value>, ApiError> {
    let (label, ttl) = bypass_request(&json_body(body)?).map_err(invalid)?;
    let now = now_ms();
    let pass = Pass {
        id: TicketId(rand::random()),
        node: Pass::BYPASS_NODE,
        queue_join_time: 0,
        created_at: now,
        issued_at: now,
        expires_at: now.saturating_add(ttl),
        eviction_time: now,
        round: None,
        draw: None,
    };
    app.metrics.bypass_passes.inc();
    tracing::info!(label = %label, id = %pass.id, expires_at_ms = pass.expires_at,
        "admin: bypass pass minted");
    Ok(Json(json!({
        "pass": app.crypto.sign_pass(&pass),
        "id": pass.id.to_string(),
        "label": label,
        "expires_at_ms": pass.expires_at,
    })))
}

/// The label and life a bypass pass is asked for, naming the field at fault.
fn bypass_request(v: &Value) -> Result<(String, u64), waitingroom_core::SettingsError> {
    use waitingroom_core::SettingsError;
    let Value::Object(fields) = v else {
        return Err(SettingsError::new("body", "must be a JSON object"));
    };
    if let Some(name) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "label" | "expires_in_ms"))
    {
        return Err(SettingsError::new(
            "body",
            format!("unknown field `{name}`"),
        ));
    }
    let label = fields.get("label").and_then(Value::as_str).unwrap_or("");
    let fine = |c: char| c.is_ascii_alphanumeric() || " .-_@".contains(c);
    if label.trim().is_empty() || label.len() > 64 || !label.chars().all(fine) {
        return Err(SettingsError::new(
            "label",
            "must be 1 to 64 letters, digits, spaces, `.`, `-`, `_` or `@`",
        ));
    }
    let ttl = match fields.get("expires_in_ms") {
        None => BYPASS_DEFAULT_MS,
        Some(v) => v
            .as_u64()
            .filter(|t| (1_000..=BYPASS_MAX_MS).contains(t))
            .ok_or_else(|| SettingsError::new("expires_in_ms", "must be 1000 ms to 30 days"))?,
    };
    Ok((label.to_owned(), ttl))
}

/// The request's JSON body: 413 past the admin routes' limit, 400 if it is not JSON.
fn json_body(body: RawBody) -> Result<Value, ApiError> {
    let body = body.map_err(super::body::rejection)?;
    serde_json::from_slice::<Value>(&body)
        .map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))
}

#[utoipa::path(get, path = "/admin/events", tag = "internal",
    summary = "Scheduled events (admin API, internal listener)",
    description = "Every event scheduled, in start order, with its `phase` now (`scheduled`, \
        `prequeue`, `running`, `ended`).",
    responses((status = 200, description = "The events", body = Object),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn get_events(State(app): State<Arc<App>>) -> Json<Value> {
    let (live, now) = app
        .driver
        .read(|n| (n.live_settings().clone(), n.reference_time(now_ms())));
    Json(events_view(&live, now))
}

#[utoipa::path(post, path = "/admin/events", tag = "internal",
    summary = "Schedule an event (admin API, internal listener)",
    description = "`name`, `prequeue_start_ms` (default: `start_ms`), `start_ms`, `end_ms` \
        (ms since the epoch), `shuffle_at_start` (default false) and `settings` (any of \
        `target_on_site`, `new_users_per_minute`, `mode`, `queueing_method`, applied from the \
        pre-queue to the end). Before the start visitors who join are pre-queued; at the start \
        they are let out, in a random order with `shuffle_at_start`, ahead of anyone who joins \
        later. Travels like a settings change; the answer waits for a round to carry it.",
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, description = "The events after the change", body = Object),
        (status = 400, description = "`invalid_setting`: the message names the field (a taken \
            name, an overlap, a time past)", body = crate::wire::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn post_event(
    State(app): State<Arc<App>>,
    body: RawBody,
) -> Result<Json<Value>, ApiError> {
    let event = ScheduledEvent::from_json(&json_body(body)?).map_err(invalid)?;
    let s = &event.settings;
    let target = s.target_on_site.unwrap_or(Settings::UNLIMITED);
    let rate_cap = s.new_users_per_minute.is_some();
    leased_if_limited(app.cfg.protocol.admission, target, rate_cap).map_err(invalid)?;
    let name = event.name.clone();
    let next = app
        .driver
        .with(|n, now| n.add_event(now, event, lottery_seed()))
        .map_err(invalid)?;
    tracing::info!(version = next.version, event = %name, "admin: event scheduled");
    Ok(events_answer(&app, &next).await)
}

#[utoipa::path(delete, path = "/admin/events/{name}", tag = "internal",
    summary = "Delete a scheduled event (admin API, internal listener)",
    params(("name" = String, Path, description = "The event's name")),
    responses((status = 200, description = "The events after the change", body = Object),
        (status = 404, description = "`no_such_event`", body = crate::wire::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::wire::errors::ErrorBody)))]
pub(super) async fn delete_event(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Some(next) = app.driver.with(|n, now| n.remove_event(now, &name)) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_event",
            format!("no event is named `{name}`"),
        ));
    };
    tracing::info!(version = next.version, event = %name, "admin: event deleted");
    Ok(events_answer(&app, &next).await)
}

/// The events after a change, once a round carried it (or three intervals went by).
async fn events_answer(app: &App, next: &LiveSettings) -> Json<Value> {
    let confirmed = wait_confirmed(app, next).await;
    let (live, now) = app
        .driver
        .read(|n| (n.live_settings().clone(), n.reference_time(now_ms())));
    let mut view = events_view(&live, now);
    view["confirmed"] = json!(confirmed);
    Json(view)
}

/// The events as the admin API shows them, with each one's phase at `now` (reference clock).
fn events_view(live: &LiveSettings, now: u64) -> Value {
    let events: Vec<Value> = live
        .events
        .iter()
        .map(|e| {
            let phase = match e.phase_at(now) {
                Some(EventPhase::Prequeue(_)) => "prequeue",
                Some(EventPhase::Running(_)) => "running",
                None if now < e.prequeue_start_ms => "scheduled",
                None => "ended",
            };
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["phase"] = json!(phase);
            // The seed stays unpublished until the event's start (`GET /api/lotteries`); the
            // commitment to it is public already.
            if let Some(fields) = v.as_object_mut() {
                fields.remove("seed");
            }
            if let Some(seed) = &e.seed {
                v["lottery_commit"] = json!(lottery::commitment(seed));
            }
            v
        })
        .collect();
    json!({"version": live.version, "now_ms": now, "events": events})
}

/// Waits until a round carried `next` (or a newer version), for at most three eviction
/// intervals (and within the request timeout).
async fn wait_confirmed(app: &App, next: &LiveSettings) -> bool {
    let interval = app.cfg.settings.eviction_interval_ms;
    let limit = (3 * interval).min(app.cfg.limits.request_timeout_ms / 2);
    let deadline = Instant::now() + Duration::from_millis(limit);
    loop {
        if app.driver.read(|n| n.settings_confirmed(next)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn invalid(e: waitingroom_core::SettingsError) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_setting",
        format!("{}: {}", e.field, e.reason),
    )
}

/// The settings as the admin API shows them.
fn view(live: &LiveSettings, confirmed: bool) -> Value {
    json!({
        "version": live.version,
        "author": live.author.0,
        "target_on_site": if live.target_on_site == Settings::UNLIMITED {
            json!("unlimited")
        } else {
            json!(live.target_on_site)
        },
        "new_users_per_minute": live.new_users_per_minute,
        "mode": live.mode.name(),
        "queueing_method": live.queueing_method.name(),
        "lottery_since_ms": live.lottery_since,
        "lottery_commit": live.lottery_seed.as_ref().map(lottery::commitment),
        "events": live.events.len(),
        "pass_expiry_ms": live.pass_expiry_ms,
        "session_duration_ms": live.session_duration_ms,
        "confirmed": confirmed,
    })
}

/// A fresh seed for a lottery a change may open (docs/operating.md#random-queueing): from the
/// thread's generator, which the OS seeds, so that nobody can know it before it is committed.
fn lottery_seed() -> [u8; 32] {
    rand::random()
}
