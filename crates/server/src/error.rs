//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the
//! matching HTTP status.

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
        let mut res = (self.status, axum::Json(body)).into_response();
        if matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        res
    }
}
