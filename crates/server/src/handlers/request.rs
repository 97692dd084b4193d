//! What the endpoints share in handling a request: reading the body under the size limit,
//! checking the model name, generation settings from the sampling fields, running work on a
//! blocking thread, and submitting a generation to the engine and waiting for its output.

use axum::body::Body;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tessera::{Event, GenerateParams, GenerationOutput, Prompt};
use tokio::sync::mpsc;

use crate::api::Sampling;
use crate::error::ApiError;
use crate::AppState;

/// How long an oversized body is read on (and dropped, up to the size limit again) before its
/// 413 goes out: a client still sending it then reads the answer. Closing a connection with
/// unread data makes the kernel reset it, and the client's write fails with a broken pipe
/// instead (what an HTTP test saw at times with a 100 kB body against a 64 kB limit).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// The body as `T` and its sampling fields: 413 over the size limit, 400 naming the field for
/// malformed JSON or a field of the wrong type.
pub(super) async fn read_json<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<(T, Sampling), ApiError> {
    let value = read_value(state, body).await?;
    Ok((field_errors(&value)?, field_errors(&value)?))
}

/// The body as `T` (an API with its own sampling fields), with [`read_json`]'s errors.
pub(super) async fn read_body<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<T, ApiError> {
    field_errors(&read_value(state, body).await?)
}

async fn read_value(state: &AppState, body: Body) -> Result<Value, ApiError> {
    use futures_util::StreamExt;
    let limit = state.config.max_body_bytes;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("could not read the request body: {e}")))?;
        if bytes.len() + chunk.len() > limit {
            let mut dropped = chunk.len();
            let drain = async {
                while let Some(Ok(chunk)) = stream.next().await {
                    dropped += chunk.len();
                    if dropped > limit {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!("the request body is over the server's limit of {limit} bytes (--max-body-bytes)"),
                param: None,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// `value` as `T`; a field of the wrong type is named in the error.
fn field_errors<T: DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let err = ApiError::bad_request(format!("invalid request body: `{path}`: {}", e.inner()));
        if path == "." {
            err
        } else {
            err.param(&path)
        }
    })
}

/// Runs `f` on a blocking thread (tokenizing, templating, decoding images, embeddings).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("internal error: {e}"),
        param: None,
    })?
}

pub(super) fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if !m.is_empty() && *m != state.config.model_name => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model `{m}` does not exist: this server serves `{}`", state.config.model_name),
            param: Some("model".into()),
        }),
        _ => Ok(()),
    }
}

/// Generation settings from the request's sampling fields.
pub(super) fn params(state: &AppState, s: &Sampling, top_logprobs: Option<usize>) -> Result<GenerateParams, ApiError> {
    if s.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("only n = 1 is supported").param("n"));
    }
    let max = s.max_completion_tokens.or(s.max_tokens).map(|m| m as usize).unwrap_or(state.config.default_max_tokens);
    if max == 0 {
        return Err(ApiError::bad_request("max_tokens must be at least 1").param("max_tokens"));
    }
    let stop = s.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > 4 {
        return Err(ApiError::bad_request(format!("at most 4 stop sequences, got {}", stop.len())).param("stop"));
    }
    let temperature = s.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::bad_request(format!("temperature must be in [0, 2], got {temperature}")).param("temperature")
        );
    }
    let sampling = tessera::SamplingParams {
        temperature,
        top_p: s.top_p,
        top_k: s.top_k.map(|k| k as usize),
        frequency_penalty: s.frequency_penalty.unwrap_or(0.0),
        presence_penalty: s.presence_penalty.unwrap_or(0.0),
        seed: s.seed.unwrap_or_else(rand_seed),
        ..Default::default()
    };
    sampling.validate().map_err(ApiError::from)?;
    Ok(GenerateParams {
        max_new_tokens: max,
        sampling,
        stop_strings: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        logprobs: top_logprobs,
        ..Default::default()
    })
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

/// Submits a generation; its events arrive on the returned channel. Dropping the receiver
/// (the client went away) cancels it.
pub(super) fn submit(
    state: &AppState,
    prompt: Prompt,
    params: GenerateParams,
) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    // Checked here too, so a streamed request is refused with a 400, not inside its stream.
    let context = state.model().max_positions();
    if prompt.len() >= context {
        return Err(ApiError::bad_request(format!(
            "the prompt takes {} positions but the model's context is {context} tokens",
            prompt.len()
        ))
        .param("messages"));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    state.engine.submit(prompt, params, Box::new(move |e| tx.send(e).is_ok()))?;
    Ok(rx)
}

/// Waits for the whole output.
pub(super) async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<GenerationOutput, ApiError> {
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(_) | Event::Tokens(_) => {}
            Event::Done(out) => return Ok(*out),
            Event::Error(e) => return Err(e.into()),
        }
    }
    Err(ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: "the engine stopped before the request ended".into(),
        param: None,
    })
}
