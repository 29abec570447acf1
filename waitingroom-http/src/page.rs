//! The waiting page: what a browser gets from `GET /` (and any unknown page it asks for).
//! This module only renders; the handler that joins, checks in and leaves for the browser is
//! in [`crate::api`].
//!
//! The server does the work so the page needs no JavaScript. A load without a ticket shows the
//! page in its `new` state: it takes the visitor's place with its own POST (the script's
//! `/api/join` at once, or without JavaScript its button, a form posting to `/`): a GET never
//! takes a place. A load with a ticket checks in, and the page reloads itself with a `<meta
//! refresh>` at the interval the room asks for. When the visitor is admitted the same request
//! exchanges the ticket for a pass, sets the pass cookie and redirects to the origin. With
//! JavaScript the page instead polls `/api/checkin` and updates the position in place, backing
//! off on 503 and 429.
//!
//! Templates use `{{placeholder}}` substitution; every value is HTML-escaped. Placeholders:
//! `title`, `text`, `position`, `eta`, `status` (`new`, `queued`, `starting` or `error`),
//! `refresh_seconds`, `refresh_ms`, `reload_seconds` (the `<meta refresh>`: the refresh
//! interval, or an hour on the `new` page), `background`, `foreground`, `accent`.

use std::collections::HashMap;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::config::Branding;
use crate::errors::{ApiError, LoggedError};
use crate::wire::VisitorAnswer;

const DEFAULT_TEMPLATE: &str = include_str!("../assets/waiting.html");

/// A waiting page template with its branding.
#[derive(Debug, Clone)]
pub struct Page {
    template: String,
    branding: Branding,
}

impl Page {
    /// The configured template, or the built-in one.
    pub fn new(branding: &Branding) -> Self {
        Page {
            template: branding
                .template
                .clone()
                .unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned()),
            branding: branding.clone(),
        }
    }

    /// Renders the page. A page in the `new` state does not reload itself (its `reload_seconds`
    /// is an hour): it waits for the visitor's button, or its script joins.
    pub fn render(&self, position: &str, eta: &str, status: &str, refresh_ms: u64) -> String {
        let refresh_ms = refresh_ms.max(500);
        let reload_seconds = if status == "new" {
            3_600
        } else {
            refresh_ms.div_ceil(1000)
        };
        let b = &self.branding;
        let values: HashMap<&str, String> = HashMap::from([
            ("title", b.title.clone()),
            ("text", b.text.clone()),
            ("background", b.background.clone()),
            ("foreground", b.foreground.clone()),
            ("accent", b.accent.clone()),
            ("position", position.to_owned()),
            ("eta", eta.to_owned()),
            ("status", status.to_owned()),
            ("refresh_ms", refresh_ms.to_string()),
            ("refresh_seconds", refresh_ms.div_ceil(1000).to_string()),
            ("reload_seconds", reload_seconds.to_string()),
        ]);
        substitute(&self.template, &values)
    }

    /// The page of a visitor waiting in line; sets `ticket_cookie` (their refreshed ticket).
    pub fn queued(&self, a: &VisitorAnswer, ticket_cookie: HeaderValue) -> Response {
        let html = self.render(
            &a.position.to_string(),
            &eta_text(a.eta_seconds),
            "queued",
            a.refresh_after_ms,
        );
        html_response(StatusCode::OK, vec![ticket_cookie], html)
    }

    /// The page of a visitor who has no place yet (no ticket, or one that can no longer be
    /// used): the page takes one with its own POST — at once with JavaScript, with its button
    /// without — then checks in every `refresh_ms`.
    pub fn fresh(&self, refresh_ms: u64) -> Response {
        let html = self.render(
            "…",
            "Take your place in line with the button below.",
            "new",
            refresh_ms,
        );
        html_response(StatusCode::OK, Vec::new(), html)
    }

    /// The page of a visitor who could not be served: why, with `e`'s status; the page retries
    /// by itself. The response carries `e` for the request log.
    pub fn error(&self, e: &ApiError) -> Response {
        let (status, text) = if e.code == "owner_unavailable" || e.code == "overloaded" {
            (
                "starting",
                "The waiting room is busy. You keep your place; this page retries by itself."
                    .to_owned(),
            )
        } else if e.status == StatusCode::SERVICE_UNAVAILABLE {
            (
                "starting",
                "The waiting room is getting ready. This page retries by itself.".to_owned(),
            )
        } else if e.code == "cross_site" {
            (
                "error",
                "This page was opened from another site. Open the waiting room directly."
                    .to_owned(),
            )
        } else if e.status == StatusCode::TOO_MANY_REQUESTS {
            (
                "error",
                "Too many visits from your address; this page retries by itself.".to_owned(),
            )
        } else {
            (
                "error",
                format!(
                    "Something went wrong ({}); this page retries by itself.",
                    e.message
                ),
            )
        };
        let html = self.render("…", &text, status, 2_000);
        let mut resp = html_response(e.status, Vec::new(), html);
        resp.extensions_mut().insert(LoggedError {
            code: e.code.to_string(),
            message: e.message.clone(),
        });
        resp
    }
}

/// Replaces `{{name}}` by the escaped value of `name`; unknown placeholders stay as they are.
pub fn substitute(template: &str, values: &HashMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = after[..end].trim();
                match values.get(name) {
                    Some(v) => escape_into(&mut out, v),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn escape_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// The wait as a sentence (the page script says the same).
pub fn eta_text(eta_seconds: Option<u64>) -> String {
    match eta_seconds {
        None => "Estimated wait: being measured".to_owned(),
        Some(s) if s < 60 => "Estimated wait: less than a minute".to_owned(),
        Some(s) => {
            let m = (s + 30) / 60;
            if m < 60 {
                format!(
                    "Estimated wait: about {m} minute{}",
                    if m == 1 { "" } else { "s" }
                )
            } else {
                format!("Estimated wait: about {} h {} min", m / 60, m % 60)
            }
        }
    }
}

/// An HTML answer that no cache keeps, with `cookies` set.
pub fn html_response(status: StatusCode, cookies: Vec<HeaderValue>, html: String) -> Response {
    let mut resp = (status, Html(html)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: with it a browser sends `Origin: null` with the page's own form POST,
    // which the join's same-site check must refuse. `same-origin` still tells other sites
    // nothing.
    h.insert(
        header::HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("same-origin"),
    );
    for c in cookies {
        h.append(header::SET_COOKIE, c);
    }
    resp
}

/// A 303 to `to` (the origin, for an admitted visitor), with `cookies` set.
pub fn redirect(to: &str, cookies: Vec<HeaderValue>) -> Response {
    let mut resp = html_response(StatusCode::SEE_OTHER, cookies, String::new());
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_and_escapes() {
        let v = HashMap::from([("a", "<b>&\"".to_owned())]);
        assert_eq!(
            substitute("x{{a}}y{{ a }}{{b}}{{", &v),
            "x&lt;b&gt;&amp;&quot;y&lt;b&gt;&amp;&quot;{{b}}{{"
        );
    }

    #[test]
    fn default_page_has_no_leftover_placeholders() {
        let b = Branding {
            title: "T <1>".into(),
            text: "x".into(),
            background: "#fff".into(),
            foreground: "#000".into(),
            accent: "navy".into(),
            template: None,
        };
        let html = Page::new(&b).render("7", &eta_text(Some(125)), "queued", 2000);
        assert!(!html.contains("{{"), "{html}");
        assert!(html.contains("<html lang=\"en\">"));
        assert!(html.contains("aria-live=\"polite\""));
        assert!(html.contains("T &lt;1&gt;"));
        assert!(html.contains(">7</p>"));
        assert!(html.contains("about 2 minutes"));
        assert!(html.contains("content=\"2\""));
    }

    #[test]
    fn eta_sentences() {
        assert!(eta_text(None).contains("measured"));
        assert!(eta_text(Some(5)).contains("less than a minute"));
        assert!(eta_text(Some(60)).contains("about 1 minute"));
        assert!(eta_text(Some(7300)).contains("2 h 2 min"));
    }
}
