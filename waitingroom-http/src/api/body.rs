//! Reading request bodies: a body past the route's size limit is 413 `body_too_large`, a
//! visitor body must be JSON of exactly the expected shape.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::wire::errors::ApiError;

/// A body as handlers take it: read whole, or why it could not be.
pub(super) type RawBody = Result<Bytes, BytesRejection>;

/// A body that could not be read: 413 `body_too_large` past the route's limit (visitor or peer),
/// else 400 `bad_body`.
pub(super) fn rejection(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "request body is larger than allowed",
        )
    } else {
        ApiError::new(e.status(), "bad_body", e.body_text())
    }
}

/// Reads an optional JSON body: empty is the default value; anything else must be
/// `application/json` and match `T` exactly (unknown fields are refused).
pub(super) fn json<T: DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: RawBody,
) -> Result<T, ApiError> {
    let body = body.map_err(rejection)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be application/json",
        ));
    }
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))
}
