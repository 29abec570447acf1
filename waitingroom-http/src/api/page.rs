//! The waiting page's handler: each load joins (no ticket cookie) or checks in (ticket
//! cookie); an admitted visitor's ticket is exchanged for a pass in the same request and the
//! browser sent on to the origin. What the page looks like is [`crate::page`]'s business.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

use crate::app::App;
use crate::client_addr::ClientAddr;
use crate::cookies;
use crate::errors::ApiError;
use crate::page;

/// Whether a request is a browser asking for a page.
pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// `GET /`: join or check in, then show the position or send the visitor on.
pub(super) async fn waiting_page(
    State(app): State<Arc<App>>,
    method: Method,
    client: ClientAddr,
    headers: HeaderMap,
) -> Response {
    if method == Method::HEAD {
        // A monitor's HEAD must not make a visitor.
        return page::html_response(StatusCode::OK, Vec::new(), String::new());
    }
    if let Some(pass) = cookies::get(&headers, cookies::PASS)
        && app.verify_pass(pass).is_ok()
    {
        return page::redirect(&app.cfg.origin_url, Vec::new());
    }
    let answer = match cookies::get(&headers, cookies::TICKET) {
        Some(ticket) => match app.check_in(ticket).await {
            // A ticket that can no longer be used (expired, forged, already exchanged for a
            // pass that has since expired): start a new visit.
            Err(e) if e.status == StatusCode::UNAUTHORIZED || e.code == "already_left" => {
                app.join(&client)
            }
            other => other,
        },
        None => app.join(&client),
    };
    match answer {
        Ok(a) if a.is_admitted() => match app.leave(&a.ticket, None).await {
            Ok(p) => page::redirect(&app.cfg.origin_url, cookies::after_leave(&app.cfg, &p.pass)),
            Err(e) => error_page(&app, &e),
        },
        Ok(a) => app
            .page
            .queued(&a, cookies::for_ticket(&app.cfg, &a.ticket)),
        Err(e) => error_page(&app, &e),
    }
}

fn error_page(app: &App, e: &ApiError) -> Response {
    tracing::info!(code = %e.code, error = %e.message, "waiting page could not serve the visitor");
    app.page.error(e)
}
