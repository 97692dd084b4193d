//! `GET /`: the chat page, a browser client for `/v1/chat/completions`.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The chat page: one HTML file with its script and style inline, embedded in the binary.
pub async fn chat_page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], include_str!("../../assets/chat.html")).into_response()
}
