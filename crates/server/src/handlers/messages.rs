//! `POST /v1/messages` (Anthropic's Messages API) and `POST /v1/messages/count_tokens`: the
//! request is translated into the chat pipeline's terms ([`super::messages_request`]), runs
//! through [`pipeline::start`] as a chat completion does, and its deltas' segments
//! ([`super::segments`]) become Anthropic's content blocks: reasoning a `thinking` block,
//! content a `text` block, each call a `tool_use` block. A streamed response sends them as
//! Anthropic's events (`message_start`, `ping`, `content_block_start` / `_delta` (`text_delta`,
//! `thinking_delta`, `input_json_delta`) / `_stop`, `message_delta` with the stop reason and
//! usage, `message_stop`); a whole one has the same segments' blocks. Errors are in
//! Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`).
//!
//! Wire format: <https://docs.anthropic.com/en/api/messages> and
//! <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tessera::{FinishReason, GenerationOutput};

use super::front::{self, FrontEnd};
use super::messages_request::MessagesRequest;
use super::pipeline::{self, ChatRun};
use super::response::{sse, Framing};
use super::segments::{Kind, Segmented, Segments, Step};
use super::Shared;
use crate::error::ApiError;
use crate::AppState;

pub async fn messages(State(state): Shared, body: Body) -> Response {
    answer(state, body).await.unwrap_or_else(ApiError::anthropic)
}

pub async fn count_tokens(State(state): Shared, body: Body) -> Response {
    let count = async {
        let req: MessagesRequest = front::read(&state, body).await?;
        let (tools, continue_final) = (front::tools(&req)?, req.continue_final());
        let (prompt, _) = pipeline::render(&state, req.chat_messages()?, &tools, req.kwargs()?, continue_final).await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.len()})).into_response())
    };
    count.await.unwrap_or_else(ApiError::anthropic)
}

async fn answer(state: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    let req: MessagesRequest = front::read(&state, body).await?;
    let job = front::job(&state, &req)?;
    let stops = job.params.stop_strings.clone();
    let run = pipeline::start(&state, job).await?;
    let (id, model) = (state.id("msg_"), state.config.model_name.clone());
    let stop = {
        let st = state.clone();
        move |out: &GenerationOutput, called: bool| stop_reason(&st, out, called, &stops)
    };
    if req.stream {
        let ChatRun { rx, output, prompt_positions } = run;
        let start = json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": prompt_positions, "output_tokens": 0}}});
        let answer = Arc::new(Mutex::new(Segmented::new(output)));
        let piece = {
            let answer = answer.clone();
            move |t: &str, _: &[tessera::SampledToken]| events(answer.lock().map(|mut a| a.push(t)).unwrap_or_default())
        };
        let end = move |out: &GenerationOutput| {
            let (steps, called) = answer.lock().map(|mut a| a.finish()).unwrap_or_default();
            let mut events = events(steps);
            let (reason, sequence) = stop(out, called);
            events.push(json!({"type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": {"input_tokens": out.prompt_positions, "output_tokens": out.generated_tokens.len()}}));
            events.push(json!({"type": "message_stop"}));
            events
        };
        return Ok(sse(rx, Framing::Anthropic, vec![start, json!({"type": "ping"})], piece, end));
    }
    let (out, deltas, called) = run.whole().await?;
    let (reason, sequence) = stop(&out, called);
    let mut segments = Segments::default();
    segments.finish(&deltas);
    Ok(Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": segments.items().iter().map(|(kind, text)| block(kind, text)).collect::<Vec<_>>(),
        "stop_reason": reason, "stop_sequence": sequence,
        "usage": {"input_tokens": out.prompt_positions, "output_tokens": out.generated_tokens.len()},
    }))
    .into_response())
}

/// Anthropic's `stop_reason`, and the `stop_sequence` that ended the answer.
fn stop_reason(
    state: &AppState,
    out: &GenerationOutput,
    called: bool,
    stops: &[String],
) -> (&'static str, Option<String>) {
    match out.finish_reason {
        _ if called => ("tool_use", None),
        FinishReason::Eos => ("end_turn", None),
        FinishReason::Length | FinishReason::ContextFull => ("max_tokens", None),
        FinishReason::StopString => {
            // The generated tokens' text goes on with the stop string the answer was cut at.
            let full = state.model().tokenizer().decode(&out.generated_tokens, false).unwrap_or_default();
            let after = full.get(out.text.len()..).unwrap_or(&full);
            let first = stops.iter().filter_map(|s| after.find(s.as_str()).map(|i| (i, s))).min_by_key(|(i, _)| *i);
            ("stop_sequence", first.map(|(_, s)| s.clone()))
        }
    }
}

/// Anthropic's events of `steps`: a segment is a content block.
fn events(steps: Vec<Step>) -> Vec<Value> {
    steps
        .into_iter()
        .map(|step| match step {
            Step::Start { index, kind } => {
                json!({"type": "content_block_start", "index": index, "content_block": block(&kind, "")})
            }
            Step::Delta { index, kind, text } => {
                let delta = match kind {
                    Kind::Reasoning => json!({"type": "thinking_delta", "thinking": text}),
                    Kind::Text => json!({"type": "text_delta", "text": text}),
                    Kind::Call { .. } => json!({"type": "input_json_delta", "partial_json": text}),
                };
                json!({"type": "content_block_delta", "index": index, "delta": delta})
            }
            Step::Stop { index, .. } => json!({"type": "content_block_stop", "index": index}),
        })
        .collect()
}

/// The content block of a segment with `text` (a call's input empty until its JSON is whole;
/// arguments cut short by `max_tokens` leave it empty).
fn block(kind: &Kind, text: &str) -> Value {
    match kind {
        Kind::Reasoning => json!({"type": "thinking", "thinking": text, "signature": ""}),
        Kind::Text => json!({"type": "text", "text": text}),
        Kind::Call { id, name, .. } => {
            let input = serde_json::from_str::<Value>(text).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
    }
}
