//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the
//! matching HTTP status; on Anthropic's endpoints in its shape, `{"type": "error", "error":
//! {"type", "message"}}` ([`ApiError::anthropic`]).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tessera::TesseraError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// `param`: the request field at fault, when one is.
    pub param: Option<String>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), param: None }
    }

    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_exceeded",
            StatusCode::NOT_FOUND => "not_found_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl ApiError {
    /// Anthropic's error `type` for the status.
    fn anthropic_kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            s if s.is_server_error() => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The error in Anthropic's shape (also a stream's `error` event).
    pub fn anthropic_body(&self) -> serde_json::Value {
        serde_json::json!({"type": "error", "error": {"type": self.anthropic_kind(), "message": self.message}})
    }

    /// The response in Anthropic's shape, with the same status.
    pub fn anthropic(self) -> Response {
        let body = self.anthropic_body();
        respond(self.status, body)
    }
}

impl From<TesseraError> for ApiError {
    fn from(e: TesseraError) -> Self {
        let status = match &e {
            TesseraError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            TesseraError::InvalidInput(_) | TesseraError::Text(_) | TesseraError::Vision(_) => StatusCode::BAD_REQUEST,
            // The model's own files or the compute failed: not the client's fault.
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self { status, message: e.to_string(), param: None }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"message": self.message, "type": self.kind(), "param": self.param, "code": null}
        });
        respond(self.status, body)
    }
}

/// `body` with `status`; a client told to come back (429, 503) is told when.
fn respond(status: StatusCode, body: serde_json::Value) -> Response {
    let mut res = (status, axum::Json(body)).into_response();
    if matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
        res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    res
}
