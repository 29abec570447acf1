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
//! `title`, `text`, `position` (in a pre-queue: the countdown to the start), `eta`, `status`
//! (`new`, `queued`, `prequeue`, `starting`, `closed`, `ended` or `error`), `starts_in_ms` (a
//! pre-queue's countdown, for the script; 0 otherwise),
//! `refresh_seconds`, `refresh_ms`, `reload_seconds` (the `<meta refresh>`: the refresh
//! interval, or an hour on the `new` page), `nonce` (for `<script nonce="…">` and `<style
//! nonce="…">`: the Content-Security-Policy allows only those), `background`, `foreground`,
//! `accent`, `join_action` (where the no-JavaScript button posts: `/`, with the page's
//! `return_to`), `leave_cookie` (the name of the cookie its script keeps its leave key in),
//! `retry_max_ms` (its script's longest back-off: half a ticket's life); and the page's
//! language (`crate::i18n`): `lang` (its tag, for `<html lang>`), `place`, `join_button`, `note`, and for the page's script `eta_unknown`, `eta_seconds`,
//! `eta_minute`, `eta_minutes` (`{m}` for the minutes), `eta_hours` (`{h}`, `{m}`),
//! `taking_place`, `closed`, `closed_title`.
//!
//! A room closed after its event has the status `ended`, the title `ended_title` and the
//! sentence `ended`.
//!
//! A pre-queued visitor's page (docs/operating.md#scheduled-events) has the title `prequeue_title`,
//! the heading `starts_in` over a countdown, and the `prequeue` sentence; its script counts
//! down each second and checks in at the start.

use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::config::Branding;
use crate::i18n::{Lang, Strings};
use crate::wire::VisitorAnswer;
use crate::wire::errors::{ApiError, LoggedError};

const DEFAULT_TEMPLATE: &str = include_str!("../assets/waiting.html");

/// A waiting page template with its branding.
#[derive(Debug, Clone)]
pub struct Page {
    template: String,
    branding: Branding,
    /// The name of the cookie the page's script keeps its leave key in.
    leave_cookie: String,
    /// The longest the page's script waits before asking again after a refusal: half a
    /// ticket's life, so that with its random quarter it still checks in in time.
    retry_max_ms: u64,
}

impl Page {
    /// The configured template, or the built-in one; its script keeps its leave key in the
    /// cookie `leave_cookie` (`crate::wire::cookies`) and backs off at most half of
    /// `ticket_expiry_ms`.
    pub fn new(branding: &Branding, leave_cookie: &str, ticket_expiry_ms: u64) -> Self {
        Page {
            template: branding
                .template
                .clone()
                .unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned()),
            branding: branding.clone(),
            leave_cookie: leave_cookie.to_owned(),
            retry_max_ms: (ticket_expiry_ms / 2).max(1_000),
        }
    }

    /// The language to answer `headers` in: the configured one, else the request's choice.
    pub fn lang(&self, headers: &HeaderMap) -> Lang {
        self.branding
            .language
            .unwrap_or_else(|| Lang::negotiate(headers))
    }

    /// Renders the page. A page in the `new` state does not reload itself (its `reload_seconds`
    /// is an hour): it waits for the visitor's button, or its script joins. `nonce` marks the
    /// page's own script and style for the Content-Security-Policy.
    pub fn render(&self, view: &View<'_>, nonce: &str) -> String {
        let refresh_ms = view.refresh_ms.max(500);
        let refresh_seconds = refresh_ms.div_ceil(1000).to_string();
        let reload_seconds = if view.status == "new" {
            3_600
        } else {
            refresh_ms.div_ceil(1000)
        };
        let b = &self.branding;
        let s = view.lang.strings();
        // A closed room's page is not a queue's, whatever the operator calls the queue; nor is
        // a pre-queue's.
        let title = match (view.status, b.title.as_deref()) {
            ("closed", _) => s.closed_title,
            ("ended", _) => s.ended_title,
            ("prequeue", _) => s.prequeue_title,
            (_, Some(title)) => title,
            (_, None) => s.title,
        };
        let place = if view.status == "prequeue" {
            s.starts_in
        } else {
            s.place
        };
        let mut values: HashMap<&str, String> = HashMap::from([
            ("title", title.to_owned()),
            ("text", b.text.as_deref().unwrap_or(s.text).to_owned()),
            ("background", b.background.clone()),
            ("foreground", b.foreground.clone()),
            ("accent", b.accent.clone()),
            ("position", view.position.to_owned()),
            ("eta", view.eta.to_owned()),
            ("status", view.status.to_owned()),
            ("refresh_ms", refresh_ms.to_string()),
            ("reload_seconds", reload_seconds.to_string()),
            ("nonce", nonce.to_owned()),
            ("leave_cookie", self.leave_cookie.clone()),
            ("retry_max_ms", self.retry_max_ms.to_string()),
            ("join_action", view.join_action.to_owned()),
            ("lang", view.lang.tag().to_owned()),
            ("place", place.to_owned()),
            ("starts_in_ms", view.starts_in_ms.unwrap_or(0).to_string()),
            ("note", s.note.replace("{s}", &refresh_seconds)),
            ("refresh_seconds", refresh_seconds),
        ]);
        for (name, text) in [
            ("join_button", s.join_button),
            ("eta_unknown", s.eta_unknown),
            ("eta_seconds", s.eta_seconds),
            ("eta_minute", s.eta_minute),
            ("eta_minutes", s.eta_minutes),
            ("eta_hours", s.eta_hours),
            ("taking_place", s.taking_place),
            ("closed", s.closed),
            ("closed_title", s.closed_title),
            ("prequeue_title", s.prequeue_title),
            ("starts_in", s.starts_in),
            ("prequeue", s.prequeue),
            ("ended", s.ended),
            ("ended_title", s.ended_title),
        ] {
            values.insert(name, text.to_owned());
        }
        substitute(&self.template, &values)
    }

    /// The page as an answer with `status` and `cookies`, and the headers that keep it from
    /// being framed (clickjacking: `frame-ancestors 'none'`, `X-Frame-Options: DENY`) and its
    /// scripts and styles to its own. A template that marks them with `nonce="{{nonce}}"` (the
    /// built-in one does) gets a policy that allows nothing else: no other script, style,
    /// connection, image or form target than the page's and the room's own; one that does not
    /// keeps inline code and the room's own resources working without a nonce.
    fn respond(&self, status: StatusCode, cookies: Vec<HeaderValue>, view: &View<'_>) -> Response {
        let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let html = self.render(view, &nonce);
        let csp = if self.template.contains("{{nonce}}") {
            format!(
                "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
                 connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; \
                 frame-ancestors 'none'"
            )
        } else {
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' \
             'unsafe-inline'; img-src 'self' data:; form-action 'self'; base-uri 'none'; \
             frame-ancestors 'none'"
                .to_owned()
        };
        let mut resp = html_response(status, cookies, html);
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_LANGUAGE,
            HeaderValue::from_static(view.lang.tag()),
        );
        h.insert(header::VARY, HeaderValue::from_static("accept-language"));
        if let Ok(v) = HeaderValue::from_str(&csp) {
            resp.headers_mut()
                .insert(header::CONTENT_SECURITY_POLICY, v);
        }
        resp
    }

    /// The page of a visitor waiting in line; sets `ticket_cookie` (their refreshed ticket).
    pub fn queued(
        &self,
        headers: &HeaderMap,
        a: &VisitorAnswer,
        ticket_cookie: HeaderValue,
    ) -> Response {
        let lang = self.lang(headers);
        let s = lang.strings();
        let view = match a.starts_in_ms {
            Some(ms) => View {
                position: &countdown(ms),
                eta: s.prequeue,
                status: "prequeue",
                refresh_ms: a.refresh_after_ms,
                lang,
                join_action: "/",
                starts_in_ms: Some(ms),
            },
            None => View {
                position: &a.position.to_string(),
                eta: &s.eta(a.eta_seconds),
                status: "queued",
                refresh_ms: a.refresh_after_ms,
                lang,
                join_action: "/",
                starts_in_ms: None,
            },
        };
        self.respond(StatusCode::OK, vec![ticket_cookie], &view)
    }

    /// The page of a visitor who has no place yet (no ticket, or one that can no longer be
    /// used): the page takes one with its own POST — at once with JavaScript, with its button
    /// without — then checks in every `refresh_ms`.
    ///
    /// `back` (the signed way back: `return_to`, `return_sig` and `return_exp`) goes with the
    /// button's POST, so the visitor still lands on the page they asked for.
    pub fn fresh(&self, headers: &HeaderMap, refresh_ms: u64, back: Option<&str>) -> Response {
        let lang = self.lang(headers);
        let join_action = room_page(back);
        let view = View {
            position: "…",
            eta: lang.strings().take_place,
            status: "new",
            refresh_ms,
            lang,
            join_action: &join_action,
            starts_in_ms: None,
        };
        self.respond(StatusCode::OK, Vec::new(), &view)
    }

    /// The page of a visitor who could not be served: why, with `e`'s status; the page retries
    /// by itself. The response carries `e` for the request log.
    pub fn error(&self, headers: &HeaderMap, e: &ApiError) -> Response {
        let lang = self.lang(headers);
        let (status, text) = error_text(lang.strings(), e);
        let view = View {
            position: "…",
            eta: &text,
            status,
            refresh_ms: 2_000,
            lang,
            join_action: "/",
            starts_in_ms: None,
        };
        let mut resp = self.respond(e.status, Vec::new(), &view);
        resp.extensions_mut().insert(LoggedError {
            code: e.code.to_string(),
            message: e.message.clone(),
        });
        resp
    }
}

/// What a page shows: the position, a sentence under it, the state (`new`, `queued`,
/// `starting`, `error`) and how often it refreshes.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The position, or `…`.
    pub position: &'a str,
    /// The sentence under it.
    pub eta: &'a str,
    /// The state.
    pub status: &'a str,
    /// Refresh interval, ms.
    pub refresh_ms: u64,
    /// The language.
    pub lang: Lang,
    /// Where the no-JavaScript button posts (`/`, with the `return_to` the page came with).
    pub join_action: &'a str,
    /// In a pre-queue: how long until the start.
    pub starts_in_ms: Option<u64>,
}

/// A countdown as the page shows it: `m:ss`, or `h:mm:ss` from an hour (the page's script
/// counts the same way).
fn countdown(ms: u64) -> String {
    let left = ms.div_ceil(1000);
    let (h, m, s) = (left / 3600, left % 3600 / 60, left % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The state and the sentence of an error page, in the language of `s`.
fn error_text(s: &Strings, e: &ApiError) -> (&'static str, String) {
    let (status, text) = if e.code == "rejected" {
        ("closed", s.closed)
    } else if e.code == "event_over" {
        ("ended", s.ended)
    } else if e.code == "owner_unavailable" || e.code == "overloaded" {
        ("starting", s.busy)
    } else if e.status == StatusCode::SERVICE_UNAVAILABLE {
        ("starting", s.starting)
    } else if e.code == "cross_site" {
        ("error", s.cross_site)
    } else if e.status == StatusCode::TOO_MANY_REQUESTS {
        ("error", s.too_many)
    } else {
        return ("error", s.failed.replace("{e}", &e.message));
    };
    (status, text.to_owned())
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
    // Whatever else an answer is, it is not to be framed (the page adds its full policy).
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; base-uri 'none'; frame-ancestors 'none'"),
    );
    for c in cookies {
        h.append(header::SET_COOKIE, c);
    }
    resp
}

/// The waiting page's own URL, keeping the signed way back it came with (`back`: the
/// `return_to` and `return_sig` query, `crypto/return_path.rs`).
pub fn room_page(back: Option<&str>) -> String {
    back.map_or_else(|| "/".to_owned(), |q| format!("/?{q}"))
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
    use crate::wire::cookies::LEAVE_KEY;

    #[test]
    fn substitutes_and_escapes() {
        let v = HashMap::from([("a", "<b>&\"".to_owned())]);
        assert_eq!(
            substitute("x{{a}}y{{ a }}{{b}}{{", &v),
            "x&lt;b&gt;&amp;&quot;y&lt;b&gt;&amp;&quot;{{b}}{{"
        );
    }

    /// The built-in page's branding, with `title`.
    fn branding(title: Option<&str>) -> Branding {
        Branding {
            title: title.map(str::to_owned),
            text: None,
            language: None,
            background: "#fff".into(),
            foreground: "#000".into(),
            accent: "navy".into(),
            template: None,
        }
    }

    #[test]
    fn default_page_has_no_leftover_placeholders() {
        let b = branding(Some("T <1>"));
        for lang in Lang::ALL {
            let eta = lang.strings().eta(Some(125));
            let view = View {
                position: "7",
                eta: &eta,
                status: "queued",
                refresh_ms: 2000,
                lang,
                join_action: "/",
                starts_in_ms: None,
            };
            let html = Page::new(&b, LEAVE_KEY, 30_000).render(&view, "n0nce");
            assert!(!html.contains("{{"), "{html}");
            assert!(html.contains(&format!("<html lang=\"{}\">", lang.tag())));
            assert!(html.contains("aria-live=\"polite\""));
            assert!(html.contains("T &lt;1&gt;"));
            assert!(html.contains(">7</p>"));
            assert!(html.contains("content=\"2\""));
            assert!(html.contains(&escaped(lang.strings().text)), "{lang:?}");
            assert!(
                html.contains("<script nonce=\"n0nce\">")
                    && html.contains("<style nonce=\"n0nce\">")
            );
        }
    }

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, text);
        out
    }

    #[test]
    fn the_page_speaks_the_visitors_language() {
        let b = branding(None);
        let page = Page::new(&b, LEAVE_KEY, 30_000);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_LANGUAGE,
            HeaderValue::from_static("de-CH, de;q=0.9, en;q=0.5"),
        );
        let resp = page.fresh(&headers, 2_000, None);
        assert_eq!(resp.headers()[header::CONTENT_LANGUAGE], "de");
        let fixed = Page::new(
            &Branding {
                language: Some(Lang::Fr),
                ..b
            },
            LEAVE_KEY,
            30_000,
        );
        assert_eq!(fixed.lang(&headers), Lang::Fr);
        assert_eq!(page.lang(&HeaderMap::new()), Lang::En);
    }

    #[test]
    fn a_prequeue_counts_down_to_the_start() {
        assert_eq!(countdown(0), "0:00");
        assert_eq!(countdown(59_001), "1:00");
        assert_eq!(countdown(3_723_000), "1:02:03");
        let b = branding(None);
        let view = View {
            position: &countdown(90_000),
            eta: Lang::De.strings().prequeue,
            status: "prequeue",
            refresh_ms: 2000,
            lang: Lang::De,
            join_action: "/",
            starts_in_ms: Some(90_000),
        };
        let html = Page::new(&b, LEAVE_KEY, 30_000).render(&view, "n");
        assert!(html.contains(">1:30</p>"), "{html}");
        assert!(html.contains(&escaped(Lang::De.strings().prequeue_title)));
        assert!(html.contains(&escaped(Lang::De.strings().starts_in)));
        assert!(html.contains("data-starts-in-ms=\"90000\""));
    }

    #[test]
    fn a_closed_room_says_so() {
        let e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "rejected", "closed");
        let (status, text) = error_text(Lang::Es.strings(), &e);
        assert_eq!(status, "closed");
        assert!(text.contains("no admite"));
        let over = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "event_over", "over");
        let (status, text) = error_text(Lang::De.strings(), &over);
        assert_eq!(status, "ended");
        assert!(text.contains("beendet"));
    }
}
