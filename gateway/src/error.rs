//! The one error type of the HTTP API. Every refusal leaves as the spec's
//! body `{code, message, details?}` with the status of its code; internal
//! detail never reaches a client.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sequencer::{ErrorCode, Reject};

/// An API error: a code from the spec's list, a message for a person, and
/// for 429 the seconds to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<String>,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
            retry_after_secs: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ExchangeUnavailable, message)
    }
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs.max(1)),
            ..Self::new(ErrorCode::RateLimited, message)
        }
    }
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "code": self.code.as_str(), "message": self.message });
        if let Some(details) = &self.details {
            body["details"] = serde_json::Value::String(details.clone());
        }
        body
    }
}

impl From<Reject> for ApiError {
    fn from(reject: Reject) -> Self {
        Self::new(reject.code, reject.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if self.code == ErrorCode::Unauthorized {
            // RFC 9110 §11.6.1 and RFC 6750 §3: a 401 names the scheme
            // that would be accepted.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"updown\""),
            );
        }
        if let Some(secs) = self.retry_after_secs {
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}
