//! The waiting page's handlers. A GET never takes a place: without a ticket cookie it shows the
//! page, whose own POST takes the visitor's place — the script's `POST /api/join`, or without
//! JavaScript the page's button (`POST /`, [`join_form`]). So a crawler, a prefetcher or
//! another site's `<img>` creates no visitor. With a ticket cookie a load checks in; an admitted
//! visitor's ticket is exchanged for a pass in the same request and the browser sent on to the
//! origin. What the page looks like is [`crate::html`]'s business.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;

use super::body::RawBody;
use super::visitor::same_site;
use crate::app::App;
use crate::app::leaves;
use crate::crypto::return_path;
use crate::html;
use crate::wire::client_addr::ClientAddr;
use crate::wire::cookies;
use crate::wire::errors::ApiError;

/// Whether a request is a browser asking for a page.
pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// `GET /` (and any page a browser asks for): check in, then show the position or send the
/// visitor on; without a usable ticket, the page that takes a place.
#[utoipa::path(get, path = "/", tag = "page",
    summary = "The waiting page",
    description = "HTML. With a ticket cookie: the position, or a redirect to the origin once \
        admitted (with the pass cookie). Without one: the page whose button (or script) takes a \
        place; a GET never takes one. Any unknown path asked for as `text/html` shows it too.",
    responses(
        (status = 200, description = "The page", content_type = "text/html"),
        (status = 303, description = "Admitted: on to the origin"),
    ))]
pub(super) async fn waiting_page(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method == Method::HEAD {
        // A monitor's HEAD must not make a visitor.
        return html::html_response(StatusCode::OK, Vec::new(), String::new());
    }
    let path = return_to(&app, &uri, &headers);
    let onward = onward(&app.cfg.origin_url, path.as_deref());
    // The way back goes on with the page's own links, signed again (with the current key).
    let back = path.map(|p| app.crypto.return_query(&p));
    let names = &app.cfg.cookies;
    if let Some(pass) = cookies::get(&headers, &names.pass)
        && app.verify_pass(pass).is_ok()
    {
        return html::redirect(&onward, Vec::new());
    }
    let Some(ticket) = cookies::get(&headers, &names.ticket) else {
        return app.page.fresh(
            &headers,
            app.cfg.settings.refresh_interval_ms,
            back.as_deref(),
        );
    };
    let key = leave_key(&headers, &names.leave_key);
    match app.check_in(ticket).await {
        // Exchanged already: the same pass again if this is the page asking after its answer
        // was lost (same leave key, within the minute passes are kept); else a new visit.
        Err(e) if e.code == "already_left" => match app.leave(ticket, Some(key)).await {
            Ok(p) => html::redirect(&onward, app.cfg.cookies.after_leave(&p)),
            Err(_) => app.page.fresh(
                &headers,
                app.cfg.settings.refresh_interval_ms,
                back.as_deref(),
            ),
        },
        // A ticket that can no longer be used (expired, forged): a new visit, which the page's
        // own POST starts.
        Err(e) if e.status == StatusCode::UNAUTHORIZED => app.page.fresh(
            &headers,
            app.cfg.settings.refresh_interval_ms,
            back.as_deref(),
        ),
        Ok(a) if a.is_admitted() => match app.leave(&a.ticket, Some(key)).await {
            Ok(p) => html::redirect(&onward, app.cfg.cookies.after_leave(&p)),
            Err(e) => error_page(&app, &headers, &e),
        },
        Ok(a) => app
            .page
            .queued(&headers, &a, app.cfg.cookies.for_ticket(&a.ticket)),
        Err(e) => error_page(&app, &headers, &e),
    }
}

/// `POST /`: the waiting page's button (no JavaScript) takes the visitor's place, then sends the
/// browser back to the page (303), which shows the position from the ticket cookie. From
/// another site (`Sec-Fetch-Site: cross-site`, a foreign `Origin`) it is refused with 403.
#[utoipa::path(post, path = "/", tag = "page",
    summary = "The waiting page's button: take a place (no JavaScript)",
    responses(
        (status = 303, description = "Joined: back to the page, with the ticket cookie"),
        (status = 403, description = "From another site: the page says so", content_type = "text/html"),
    ))]
pub(super) async fn join_form(
    State(app): State<Arc<App>>,
    client: ClientAddr,
    uri: Uri,
    headers: HeaderMap,
    _form: RawBody,
) -> Response {
    let joined = same_site(&app, &headers).and_then(|()| app.join(&client));
    // Back to the page, keeping where the visitor is to go once let in: signed again for the
    // ticket they now hold, theirs alone.
    let path = return_to(&app, &uri, &headers);
    let ticket = joined.as_ref().ok().and_then(|a| {
        app.crypto
            .verify_ticket(&a.ticket, crate::clock::now_ms())
            .ok()
    });
    let back = path.map(|p| match &ticket {
        Some(t) => app.crypto.return_query_for(&p, t.id),
        None => app.crypto.return_query(&p),
    });
    let back = html::room_page(back.as_deref());
    match joined {
        Ok(a) => html::redirect(&back, vec![app.cfg.cookies.for_ticket(&a.ticket)]),
        Err(e) => error_page(&app, &headers, &e),
    }
}

/// The page the visitor asked for, from the `return_to` query parameter the origin's gate adds,
/// if it is a safe path on the origin signed by the gate or the room (`crypto/return_path.rs`:
/// one leading `/`, no `\\`, visible ASCII only, at most 2 KiB, a valid `return_sig` for anyone
/// or for the ticket of this visitor's ticket or pass cookie, and `return_exp` not past).
/// Anything else is ignored, logged with the reason and counted: the visitor goes to
/// `origin_url`.
pub(super) fn return_to(app: &App, uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let query = uri.query()?;
    let now = crate::clock::now_ms();
    let names = &app.cfg.cookies;
    let visitor = || {
        let ticket = cookies::get(headers, &names.ticket)
            .and_then(|t| app.crypto.verify_ticket(t, now).ok())
            .map(|t| t.id);
        ticket.or_else(|| {
            cookies::get(headers, &names.pass)
                .and_then(|p| app.crypto.verify_pass(p, now).ok())
                .map(|p| p.id)
        })
    };
    let visitor = query.contains("return_to=").then(visitor).flatten();
    match return_path::checked(query, app.crypto.return_keys(), now, visitor) {
        Ok(path) => path,
        Err(e) => {
            tracing::info!(reason = e.reason(), error = %e, "return_to not followed");
            app.metrics.return_paths_refused.inc();
            None
        }
    }
}

/// Where an admitted visitor goes: `path` on the origin of `origin_url` (or on this host when
/// `origin_url` is a bare `/`), else `origin_url` itself.
pub(super) fn onward(origin_url: &str, path: Option<&str>) -> String {
    let Some(path) = path else {
        return origin_url.to_owned();
    };
    match crate::config::web_origin(origin_url) {
        Some(origin) => format!("{origin}{path}"),
        None => path.to_owned(),
    }
}

/// The key the page's leave carries: the one its script chose (cookie), else one for pages
/// without script. Either way a repeated page load gets the pass the first one got.
fn leave_key<'a>(headers: &'a HeaderMap, cookie: &str) -> &'a str {
    cookies::get(headers, cookie)
        .filter(|k| leaves::valid_key(k))
        .unwrap_or("waiting-page")
}

fn error_page(app: &App, headers: &HeaderMap, e: &ApiError) -> Response {
    tracing::info!(code = %e.code, error = %e.message, "waiting page could not serve the visitor");
    app.page.error(headers, e)
}
