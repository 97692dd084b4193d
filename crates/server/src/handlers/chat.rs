//! `POST /v1/chat/completions`: a conversation (text and images) in; the assistant's answer out,
//! whole or streamed as server-sent events, optionally constrained to JSON (`response_format`)
//! and with log-probabilities; tool calls (`tools`, `tool_choice`: [`super::tools`]) and
//! reasoning split from the answer ([`super::chat_output`]).

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

use tessera::{GenerationOutput, SampledToken};

use super::chat_output::assemble;
use super::pipeline::{self, ChatJob, ChatRun};
use super::request::{check_model, params, read_json};
use super::response::{chat_logprobs, finish_reason, sse, Framing};
use super::tools::Tools;
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
    let tools = Tools::read(req.tools.as_ref(), req.tool_choice.as_ref())?;
    let mut kwargs = req.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(key) = ["messages", "tools", "add_generation_prompt"].into_iter().find(|k| kwargs.contains_key(*k)) {
        return Err(
            ApiError::bad_request(format!("chat_template_kwargs may not set `{key}`")).param("chat_template_kwargs")
        );
    }
    if let Some(effort) = &req.reasoning_effort {
        kwargs.entry("reasoning_effort").or_insert_with(|| json!(effort));
    }
    let params = params(&state, &sampling, top)?;
    let seed = sampling.seed.unwrap_or(0);
    let continue_final = req.continue_final_message;
    let job =
        ChatJob { messages: req.messages, tools, format, kwargs, continue_final, thinking_budget: None, params, seed };
    let run = pipeline::start(&state, job).await?;
    let (id, created, model) = (state.id("chatcmpl-"), state.created, state.config.model_name.clone());
    if sampling.stream {
        let ChatRun { rx, output, .. } = run;
        let output = Arc::new(Mutex::new(output));
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
            let (chunk, st, output) = (chunk.clone(), state.clone(), output.clone());
            move |t: &str, tokens: &[SampledToken]| {
                let deltas = output.lock().map(|mut o| o.push(t)).unwrap_or_default();
                let mut chunks: Vec<Value> = deltas.into_iter().map(|d| chunk(d, None)).collect();
                if !tokens.is_empty() {
                    if chunks.is_empty() {
                        chunks.push(chunk(json!({"content": ""}), None));
                    }
                    chunks[0]["choices"][0]["logprobs"] = json!({"content": chat_logprobs(st.model(), tokens)});
                }
                chunks
            }
        };
        let end = move |out: &GenerationOutput| {
            let (deltas, called) = output.lock().map(|mut o| o.finish()).unwrap_or_default();
            let mut v: Vec<Value> = deltas.into_iter().map(|d| chunk(d, None)).collect();
            let finish = if called { "tool_calls" } else { finish_reason(out.finish_reason) };
            v.push(chunk(json!({}), Some(finish)));
            if include_usage {
                let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
                v.push(json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                              "choices": [], "usage": usage}));
            }
            v
        };
        return Ok(sse(rx, Framing::OpenAi, vec![first], piece, end));
    }
    let (out, deltas, called) = run.whole().await?;
    let logprobs =
        out.logprobs.is_some().then(|| json!({ "content": chat_logprobs(state.model(), &out.sampled_tokens()) }));
    let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
    let finish = if called { "tool_calls" } else { finish_reason(out.finish_reason) };
    Ok(Json(json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": assemble(&deltas), "logprobs": logprobs, "finish_reason": finish}],
        "usage": usage,
    }))
    .into_response())
}
