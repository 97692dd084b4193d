//! What the chat pipeline's translating front-ends — Anthropic's `/v1/messages`
//! ([`super::messages_request`]) and OpenAI's `/v1/responses` ([`super::responses_request`]) —
//! share: each request type says how its fields read as the pipeline's ([`FrontEnd`]), and
//! [`read`] and [`job`] do the rest once: the body under the size limit, the model name, the
//! sampling settings, the tools checked as chat's, the [`ChatJob`].

use std::sync::Arc;

use axum::body::Body;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tessera::OutputFormat;

use super::pipeline::ChatJob;
use super::request::{check_model, params, read_body};
use super::tools::Tools;
use crate::api::Sampling;
use crate::error::ApiError;
use crate::AppState;

/// A request of another API, read as a chat request. A bad field is a 400 naming it.
pub(super) trait FrontEnd: DeserializeOwned {
    /// The `model` field.
    fn model(&self) -> &Option<String>;
    /// The sampling fields, checked as the API states them.
    fn sampling(&self) -> Result<Sampling, ApiError>;
    /// The tools and tool choice as chat's (`tools`, `tool_choice`), for [`Tools::read`].
    fn tools(&self) -> Result<(Option<Value>, Option<Value>), ApiError>;
    /// The conversation as chat's `messages`.
    fn chat_messages(&self) -> Result<Value, ApiError>;
    /// A constraint on the whole output.
    fn format(&self) -> Result<Option<OutputFormat>, ApiError>;
    /// Template variables (`enable_thinking`, `reasoning_effort`).
    fn kwargs(&self) -> Result<Map<String, Value>, ApiError>;
    /// Whether the last message is a prefill the answer continues.
    fn continue_final(&self) -> bool {
        false
    }
    /// The most tokens the reasoning may take (the answer goes on after it).
    fn thinking_budget(&self) -> Result<Option<usize>, ApiError> {
        Ok(None)
    }
}

/// The request in `body`, for the model this server serves.
pub(super) async fn read<R: FrontEnd>(state: &AppState, body: Body) -> Result<R, ApiError> {
    let req: R = read_body(state, body).await?;
    check_model(state, req.model())?;
    Ok(req)
}

/// The request's tools, checked.
pub(super) fn tools<R: FrontEnd>(req: &R) -> Result<Tools, ApiError> {
    let (tools, choice) = req.tools()?;
    Tools::read(tools.as_ref(), choice.as_ref())
}

/// The chat pipeline's job for the request.
pub(super) fn job<R: FrontEnd>(state: &Arc<AppState>, req: &R) -> Result<ChatJob, ApiError> {
    Ok(ChatJob {
        messages: req.chat_messages()?,
        tools: tools(req)?,
        format: req.format()?,
        kwargs: req.kwargs()?,
        continue_final: req.continue_final(),
        thinking_budget: req.thinking_budget()?,
        params: params(state, &req.sampling()?, None)?,
        seed: 0,
    })
}

/// A 400 naming the field `param`.
pub(super) fn bad(param: &str, message: String) -> ApiError {
    ApiError::bad_request(message).param(param)
}

/// Adds a reasoning effort (`value`, the field `param`'s `what`) to the template variables as
/// `reasoning_effort`.
pub(super) fn effort(
    value: Option<&Value>,
    param: &str,
    what: &str,
    kwargs: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(e @ Value::String(_)) => {
            kwargs.insert("reasoning_effort".into(), e.clone());
            Ok(())
        }
        Some(_) => Err(bad(param, format!("`{what}` must be a string"))),
    }
}
