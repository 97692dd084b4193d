//! The endpoints, one module each: chat completions, Anthropic's messages and OpenAI's
//! responses (three front-ends of one chat [`pipeline`]), text completions, embeddings, the
//! status endpoints (models, health) and the chat page. Bodies are read with the size limit and
//! parsed in [`request`] (so a bad body gets the API's error shape, naming the field); prompts
//! are built on a blocking thread (template, tokenizer, image decoding, with images fetched
//! under [`media`]'s rules) and generation goes through the engine; [`response`] turns its
//! output into OpenAI's bodies and server-sent events.

mod chat;
mod chat_output;
mod completions;
mod embeddings;
mod front;
mod media;
mod messages;
mod messages_request;
mod page;
mod pipeline;
mod request;
mod response;
mod responses;
mod responses_request;
mod segments;
mod status;
mod tools;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

pub use chat::chat_completions;
pub use completions::completions;
pub use embeddings::embeddings;
pub use messages::{count_tokens, messages};
pub use page::chat_page;
pub use responses::responses;
pub use status::{health, models};

use crate::error::ApiError;
use crate::AppState;

type Shared = State<Arc<AppState>>;

/// Any other route: 404 in OpenAI's error shape.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError { status: StatusCode::NOT_FOUND, message: format!("no route {uri}"), param: None }
}
