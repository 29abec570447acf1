//! The operator's API (`/admin/...`, on the internal listener only): the live settings
//! (README, "Live settings"). Every request must carry `Authorization: Bearer TOKEN`, the token
//! of `--admin-token-file`, compared in constant time; anything else is 401. Without a token
//! file the admin API is off (404).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;
use waitingroom_core::Settings;
use waitingroom_distributed::{LiveSettings, SettingsPatch};

use super::body::RawBody;
use crate::app::App;
use crate::errors::ApiError;

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
    crate::cookies::bearer(headers)
        .is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.as_bytes())))
}

#[utoipa::path(get, path = "/admin/settings", tag = "internal",
    summary = "The live settings (admin API, internal listener)",
    description = "The settings an operator may change while the cluster runs, with their \
        version; `confirmed`: the last round's result carried this version (so every member \
        that took it has it).",
    responses((status = 200, description = "The live settings", body = Object),
        (status = 401, description = "`unauthorized`: no or a wrong bearer token", body = crate::errors::ErrorBody)))]
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
        passthrough, reject), `queueing_method` (fifo), `pass_expiry_ms`, \
        `session_duration_ms`. In force here at once and on every member after the next \
        round; the answer waits up to three eviction intervals for a round to carry it \
        (`confirmed`) and is the whole settings object.",
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, description = "The live settings after the change", body = Object),
        (status = 400, description = "`invalid_setting`: the message names the field", body = crate::errors::ErrorBody),
        (status = 401, description = "`unauthorized`", body = crate::errors::ErrorBody)))]
pub(super) async fn patch_settings(State(app): State<Arc<App>>, body: RawBody) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return super::body::rejection(e).into_response(),
    };
    let patch = serde_json::from_slice::<Value>(&body)
        .map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))
        .and_then(|v| SettingsPatch::from_json(&v).map_err(invalid));
    let changed = patch.and_then(|p| {
        app.driver
            .with(|n, _| n.change_settings(&p))
            .map_err(invalid)
    });
    let next = match changed {
        Ok(next) => next,
        Err(e) => return e.into_response(),
    };
    tracing::info!(
        version = next.version,
        change = %String::from_utf8_lossy(&body),
        "admin: live settings changed"
    );
    let confirmed = wait_confirmed(&app, &next).await;
    let live = app.driver.read(|n| n.live_settings().clone());
    Json(view(&live, confirmed)).into_response()
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
        "queueing_method": live.queueing_method,
        "pass_expiry_ms": live.pass_expiry_ms,
        "session_duration_ms": live.session_duration_ms,
        "confirmed": confirmed,
    })
}
