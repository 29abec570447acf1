//! `GET /openapi.json`: the description of every route of a node, public and internal,
//! generated from the handlers' `#[utoipa::path]` annotations and the JSON bodies' types, so
//! that it cannot drift from the code (a test checks every route is in it).

use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;

use super::{admin, ops, page, peer, visitor};
use crate::wire::errors::ErrorBody;
use crate::wire::{JoinBody, PassAnswer, PassBody, TicketBody, VisitorAnswer};

/// The API description (OpenAPI 3.1).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "waitingroom-node",
        description = "A fair, distributed virtual waiting room. Routes tagged `internal` are \
            served on the internal listener only (`--internal-listen`); the others on the public \
            one. Errors are JSON `{\"error\": message, \"code\": stable_code}`."
    ),
    paths(
        page::waiting_page,
        page::join_form,
        visitor::join,
        visitor::checkin,
        visitor::leave,
        visitor::refresh_pass,
        visitor::release_pass,
        visitor::verify_pass,
        visitor::verify_pass_any,
        ops::jwks,
        ops::rounds,
        ops::lotteries,
        ops::livez,
        ops::readyz,
        document,
        ops::metrics,
        ops::cluster,
        admin::get_settings,
        admin::patch_settings,
        admin::get_events,
        admin::post_event,
        admin::delete_event,
        admin::post_pass,
        admin::reset_voters,
        peer::messages,
        peer::forwarded_batch,
        peer::forwarded_checkin,
        peer::forwarded_leave,
    ),
    components(schemas(VisitorAnswer, PassAnswer, TicketBody, PassBody, JoinBody, ErrorBody)),
    tags(
        (name = "visitor", description = "What the waiting page (or any client) calls"),
        (name = "page", description = "The waiting page itself (HTML)"),
        (name = "pass", description = "Passes, for origins and their gates"),
        (name = "operations", description = "Probes and this description, on both listeners"),
        (name = "internal", description = "Internal listener only: peers and operators"),
    )
)]
pub struct ApiDoc;

/// The description as JSON, made once.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| ApiDoc::openapi().to_pretty_json().unwrap_or_default())
}

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    summary = "This description (OpenAPI 3.1)",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub(super) async fn document() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        json(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    /// The description's paths, with axum's `{*rest}` written as OpenAPI's `{rest}`.
    fn described() -> BTreeSet<String> {
        let doc: Value = serde_json::from_str(json()).expect("valid JSON");
        doc["paths"]
            .as_object()
            .expect("paths")
            .keys()
            .cloned()
            .collect()
    }

    /// Every route the node serves is described, and nothing else is.
    #[test]
    fn every_route_is_described() {
        let served: BTreeSet<String> = super::super::all_paths()
            .into_iter()
            .map(|p| p.replace("{*", "{"))
            .collect();
        assert_eq!(described(), served);
    }

    /// The bodies the visitor API answers with are described, with their fields.
    #[test]
    fn bodies_are_described() {
        let doc: Value = serde_json::from_str(json()).expect("valid JSON");
        let answer = &doc["components"]["schemas"]["VisitorAnswer"]["properties"];
        for field in [
            "status",
            "ticket",
            "position",
            "eta_seconds",
            "refresh_after_ms",
        ] {
            assert!(answer.get(field).is_some(), "VisitorAnswer.{field}");
        }
        assert!(doc["components"]["schemas"]["ErrorBody"]["properties"]["code"].is_object());
    }
}
