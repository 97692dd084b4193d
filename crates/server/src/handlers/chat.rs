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

use tessera::{
    Conversation, GenerationOutput, ReasoningSplitter, RenderOptions, SampledToken, ThinkingMarkers, ToolFormat,
};

use super::chat_output::{assemble, Calls, ChatOutput};
use super::media::load_image;
use super::request::{blocking, check_model, collect, params, read_json, submit};
use super::response::{chat_logprobs, finish_reason, sse};
use super::tools::{calls_as_text, describe_in_system, output_format, Choice, Tools};
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
    let format = match (format, tools.forced_schema()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "tool_choice forces a call, which response_format would constrain too: give one of them",
            )
            .param("response_format"))
        }
        (None, Some(schema)) => Some(tessera::OutputFormat::JsonSchema(schema)),
        (f, None) => f,
    };
    let mut kwargs = req.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(key) = ["messages", "tools", "add_generation_prompt"].into_iter().find(|k| kwargs.contains_key(*k)) {
        return Err(
            ApiError::bad_request(format!("chat_template_kwargs may not set `{key}`")).param("chat_template_kwargs")
        );
    }
    if let Some(effort) = &req.reasoning_effort {
        kwargs.entry("reasoning_effort").or_insert_with(|| json!(effort));
    }
    let template = state.model().chat_template().map(|t| t.source().to_string()).unwrap_or_default();
    let tool_template = state.model().chat_template().is_some_and(|t| t.supports_tools());
    let native = !tools.list.is_empty() && tool_template;
    let describe = !tools.list.is_empty() && !tool_template && tools.choice != Choice::Off;
    let template_format = ToolFormat::detect(&template);
    let calls = match tools.choice {
        Choice::Off => Calls::Off,
        Choice::Auto => Calls::Auto(output_format(template_format.filter(|_| native))),
        Choice::Forced(_) => Calls::Forced,
    };
    let mut params = params(&state, &sampling, top)?;
    let forced = matches!(calls, Calls::Forced);
    let thinking = ThinkingMarkers::detect(&template);
    if !matches!(calls, Calls::Off) || thinking.is_some() {
        // The markers that are special tokens (Mistral's, Gemma 4's) stay in the text.
        let tokenizer = state.model().tokenizer();
        params.keep_tokens = tessera::tool_calls::MARKERS.iter().filter_map(|m| tokenizer.token_to_id(m)).collect();
    }
    if let Some(format) = format {
        let st = state.clone();
        params.constraint = Some(
            blocking(move || {
                let param = if forced { "tools" } else { "response_format" };
                st.model().output_constraint(&format).map_err(|e| ApiError::from(e).param(param))
            })
            .await?,
        );
    }
    let st = state.clone();
    let messages = req.messages.clone();
    let tool_list = tools.list.clone();
    let (prompt, rendered) = blocking(move || {
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
        // A template without tools sees earlier calls as their JSON text, and the tools (unless
        // `tool_choice` is `none`) described in the system message.
        let messages = match (tool_template, describe) {
            (true, _) => conv.messages,
            (false, true) => describe_in_system(&conv.messages, &tool_list),
            (false, false) => conv.messages.iter().map(calls_as_text).collect(),
        };
        let opts = RenderOptions { tools: native.then(|| json!(tool_list)), kwargs };
        Ok(st.model().encode_chat_with(&messages, &images, &opts)?)
    })
    .await?;
    let rx = submit(&state, prompt, params)?;
    let reasoning = thinking.map(|m| ReasoningSplitter::new(m, &rendered));
    let seed = sampling.seed.unwrap_or(0) ^ state.created ^ rendered.len() as u64;
    let output = Arc::new(Mutex::new(ChatOutput::new(reasoning, calls, template_format, seed)));
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
        return Ok(sse(rx, Some(first), piece, end));
    }
    let out = collect(rx).await?;
    let logprobs =
        out.logprobs.is_some().then(|| json!({ "content": chat_logprobs(state.model(), &out.sampled_tokens()) }));
    let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
    let (message, called) = match output.lock() {
        Ok(mut o) => {
            let mut deltas = o.push(&out.text);
            let (rest, called) = o.finish();
            deltas.extend(rest);
            (assemble(&deltas), called)
        }
        Err(_) => (json!({"role": "assistant", "content": out.text}), false),
    };
    let finish = if called { "tool_calls" } else { finish_reason(out.finish_reason) };
    Ok(Json(json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}],
        "usage": usage,
    }))
    .into_response())
}
