//! `POST /v1/messages` (Anthropic's Messages API) and `POST /v1/messages/count_tokens`: the
//! request is translated into the chat pipeline's terms ([`super::messages_request`]), runs
//! through [`pipeline::start`] as a chat completion does, and its deltas become Anthropic's
//! content blocks ([`Blocks`]): reasoning a `thinking` block, content a `text` block, each call
//! a `tool_use` block. A streamed response sends them as Anthropic's events (`message_start`,
//! `ping`, `content_block_start` / `_delta` (`text_delta`, `thinking_delta`, `input_json_delta`)
//! / `_stop`, `message_delta` with the stop reason and usage, `message_stop`); a whole one
//! joins the same events ([`content`]), so both give the same blocks. Errors are in
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

use super::messages_request::MessagesRequest;
use super::pipeline::{self, ChatJob, ChatRun};
use super::request::{check_model, params, read_body};
use super::response::{sse, Framing};
use super::tools::Tools;
use super::Shared;
use crate::error::ApiError;
use crate::AppState;

pub async fn messages(State(state): Shared, body: Body) -> Response {
    answer(state, body).await.unwrap_or_else(ApiError::anthropic)
}

pub async fn count_tokens(State(state): Shared, body: Body) -> Response {
    let count = async {
        let req: MessagesRequest = read_body(&state, body).await?;
        check_model(&state, &req.model)?;
        let (tools, choice) = req.tools()?;
        let tools = Tools::read(tools.as_ref(), choice.as_ref())?;
        let (prompt, _) = pipeline::render(&state, req.chat_messages()?, &tools, req.kwargs()?).await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.len()})).into_response())
    };
    count.await.unwrap_or_else(ApiError::anthropic)
}

async fn answer(state: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    let req: MessagesRequest = read_body(&state, body).await?;
    check_model(&state, &req.model)?;
    let sampling = req.sampling()?;
    let (tools, choice) = req.tools()?;
    let tools = Tools::read(tools.as_ref(), choice.as_ref())?;
    let params = params(&state, &sampling, None)?;
    let stops = params.stop_strings.clone();
    let job = ChatJob { messages: req.chat_messages()?, tools, format: None, kwargs: req.kwargs()?, params, seed: 0 };
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
        let blocks = Arc::new(Mutex::new(Blocks::default()));
        let piece = {
            let (output, blocks) = (output.clone(), blocks.clone());
            move |t: &str, _: &[tessera::SampledToken]| {
                let deltas = output.lock().map(|mut o| o.push(t)).unwrap_or_default();
                blocks.lock().map(|mut b| b.push(&deltas)).unwrap_or_default()
            }
        };
        let end = move |out: &GenerationOutput| {
            let (deltas, called) = output.lock().map(|mut o| o.finish()).unwrap_or_default();
            let mut events = blocks.lock().map(|mut b| b.end(&deltas)).unwrap_or_default();
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
    Ok(Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content(&Blocks::default().end(&deltas)),
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

/// The block under way.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    Thinking,
    Text,
    /// A call, by its index among the answer's calls.
    Tool(u64),
}

/// Anthropic's content-block events from the chat output's deltas (OpenAI's: `reasoning_content`,
/// `content`, `tool_calls`): a delta of another kind than the open block's closes it and opens
/// the next.
#[derive(Debug, Default)]
pub(super) struct Blocks {
    open: Option<Open>,
    /// The open block's index, or the next one's.
    index: usize,
}

impl Blocks {
    /// The events `deltas` bring.
    pub fn push(&mut self, deltas: &[Value]) -> Vec<Value> {
        let mut events = Vec::new();
        for d in deltas {
            if let Some(t) = d.get("reasoning_content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.open(Open::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}), &mut events);
                events.push(self.delta(json!({"type": "thinking_delta", "thinking": t})));
            }
            if let Some(t) = d.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.open(Open::Text, json!({"type": "text", "text": ""}), &mut events);
                events.push(self.delta(json!({"type": "text_delta", "text": t})));
            }
            for call in d.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
                    let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    self.open(Open::Tool(index), block, &mut events);
                }
                let fragment = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
                if !fragment.is_empty() && self.open == Some(Open::Tool(index)) {
                    events.push(self.delta(json!({"type": "input_json_delta", "partial_json": fragment})));
                }
            }
        }
        events
    }

    /// The events of the last `deltas`, and the open block's end.
    pub fn end(&mut self, deltas: &[Value]) -> Vec<Value> {
        let mut events = self.push(deltas);
        self.close(&mut events);
        events
    }

    fn open(&mut self, kind: Open, block: Value, events: &mut Vec<Value>) {
        if self.open == Some(kind) {
            return;
        }
        self.close(events);
        events.push(json!({"type": "content_block_start", "index": self.index, "content_block": block}));
        self.open = Some(kind);
    }

    fn close(&mut self, events: &mut Vec<Value>) {
        if self.open.take().is_some() {
            events.push(json!({"type": "content_block_stop", "index": self.index}));
            self.index += 1;
        }
    }

    fn delta(&self, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": self.index, "delta": delta})
    }
}

/// The content blocks `events` add up to, as a client joining the stream gets them: text and
/// thinking deltas appended, a call's `partial_json` fragments joined and read as its `input`.
pub(super) fn content(events: &[Value]) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_text = String::new();
    for e in events {
        match e["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(e["content_block"].clone());
                json_text.clear();
            }
            Some("content_block_delta") => {
                let Some(block) = blocks.last_mut() else { continue };
                let d = &e["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => append(&mut block["text"], &d["text"]),
                    Some("thinking_delta") => append(&mut block["thinking"], &d["thinking"]),
                    Some("input_json_delta") => json_text.push_str(d["partial_json"].as_str().unwrap_or("")),
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let Some(block) = blocks.last_mut().filter(|b| b["type"] == "tool_use" && !json_text.is_empty()) {
                    // (Arguments cut short by `max_tokens` are no JSON: the input stays empty.)
                    block["input"] = serde_json::from_str(&json_text).unwrap_or_else(|_| json!({}));
                }
            }
            _ => {}
        }
    }
    blocks
}

fn append(field: &mut Value, more: &Value) {
    let joined = format!("{}{}", field.as_str().unwrap_or(""), more.as_str().unwrap_or(""));
    *field = Value::String(joined);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_become_blocks_in_order() {
        let mut b = Blocks::default();
        let mut events = b.push(&[json!({"reasoning_content": "Hm"}), json!({"reasoning_content": "m."})]);
        events.extend(b.push(&[json!({"content": "Sure."})]));
        events.extend(b.end(&[
            json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\": "}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}),
        ]));
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            kinds[..4],
            ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"]
        );
        assert_eq!(events.last().map(|e| e["index"].clone()), Some(json!(3)));
        assert_eq!(
            content(&events),
            [
                json!({"type": "thinking", "thinking": "Hmm.", "signature": ""}),
                json!({"type": "text", "text": "Sure."}),
                json!({"type": "tool_use", "id": "c0", "name": "f", "input": {"a": 1}}),
                json!({"type": "tool_use", "id": "c1", "name": "g", "input": {}}),
            ]
        );
        assert!(content(&Blocks::default().end(&[])).is_empty());
    }
}
