//! `POST /v1/chat/completions`: a conversation (text and images) in; the assistant's answer out,
//! whole or streamed as server-sent events, optionally constrained to JSON (`response_format`)
//! and with log-probabilities.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tessera::{Conversation, GenerationOutput, SampledToken};

use super::media::load_image;
use super::request::{blocking, check_model, collect, params, read_json, submit};
use super::response::{chat_logprobs, finish_reason, sse};
use super::Shared;
use crate::api::{ChatRequest, Sampling, Usage};
use crate::error::ApiError;

pub async fn chat_completions(State(state): Shared, body: Body) -> Result<Response, ApiError> {
    let (req, sampling): (ChatRequest, Sampling) = read_json(&state, body).await?;
    check_model(&state, &req.model)?;
    let format = match &req.response_format {
        None => None,
        Some(f) => match (f.kind.as_str(), &f.json_schema) {
            ("text", _) => None,
            ("json_object", _) => Some(tessera::OutputFormat::JsonObject),
            ("json_schema", Some(js)) => match &js.schema {
                Some(schema) => Some(tessera::OutputFormat::JsonSchema(schema.clone())),
                None => {
                    return Err(
                        ApiError::bad_request("response_format.json_schema needs a `schema`").param("response_format")
                    )
                }
            },
            ("json_schema", None) => {
                return Err(ApiError::bad_request("response_format `json_schema` needs a `json_schema` object")
                    .param("response_format"))
            }
            (other, _) => {
                return Err(ApiError::bad_request(format!(
                    "response_format `{other}` is not one of text, json_object, json_schema"
                ))
                .param("response_format"))
            }
        },
    };
    let top = match (req.logprobs, req.top_logprobs) {
        (false, _) => None,
        (true, Some(k)) if k > 20 => {
            return Err(ApiError::bad_request(format!("top_logprobs must be in 0..=20, got {k}")).param("top_logprobs"))
        }
        (true, k) => Some(k.unwrap_or(0).max(1) as usize),
    };
    let mut params = params(&state, &sampling, top)?;
    if let Some(format) = format {
        let st = state.clone();
        params.constraint = Some(
            blocking(move || {
                st.model().output_constraint(&format).map_err(|e| ApiError::from(e).param("response_format"))
            })
            .await?,
        );
    }
    let st = state.clone();
    let messages = req.messages.clone();
    let prompt = blocking(move || {
        let conv =
            Conversation::from_json(&messages).map_err(|e| ApiError::bad_request(e.to_string()).param("messages"))?;
        if conv.images.len() > st.config.max_images {
            return Err(ApiError::bad_request(format!(
                "{} images in the request; the server takes at most {}",
                conv.images.len(),
                st.config.max_images
            ))
            .param("messages"));
        }
        let images = conv.images.iter().map(|s| load_image(&st, s)).collect::<Result<Vec<_>, _>>()?;
        Ok(st.model().encode_chat(&conv.messages, &images)?)
    })
    .await?;
    let rx = submit(&state, prompt, params)?;
    let (id, created, model) = (state.id("chatcmpl"), state.created, state.config.model_name.clone());
    if sampling.stream {
        let include_usage = sampling.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let chunk = {
            let (id, model) = (id.clone(), model.clone());
            move |delta: Value, finish: Option<&str>| {
                json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
            }
        };
        let first = chunk(json!({"role": "assistant", "content": ""}), None);
        let piece = {
            let (chunk, st) = (chunk.clone(), state.clone());
            move |t: &str, tokens: &[SampledToken]| {
                let mut c = chunk(json!({"content": t}), None);
                if !tokens.is_empty() {
                    c["choices"][0]["logprobs"] = json!({"content": chat_logprobs(st.model(), tokens)});
                }
                c
            }
        };
        let end = move |out: &GenerationOutput| {
            let mut v = vec![chunk(json!({}), Some(finish_reason(out.finish_reason)))];
            if include_usage {
                let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
                v.push(json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                              "choices": [], "usage": usage}));
            }
            v
        };
        return Ok(sse(rx, Some(first), piece, end));
    }
    let out = collect(rx).await?;
    let logprobs =
        out.logprobs.is_some().then(|| json!({ "content": chat_logprobs(state.model(), &out.sampled_tokens()) }));
    let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
    Ok(Json(json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text},
                     "logprobs": logprobs, "finish_reason": finish_reason(out.finish_reason)}],
        "usage": usage,
    }))
    .into_response())
}
