//! `POST /v1/responses` (OpenAI's Responses API, stateless): the request is translated into the
//! chat pipeline's terms ([`super::responses_request`]), runs through [`pipeline::start`] as a
//! chat completion does, and its deltas' segments ([`super::segments`]) become output items:
//! reasoning a `reasoning` item, content a `message` item with one `output_text` part, each
//! call a `function_call` item. A streamed response sends `response.created`,
//! `response.in_progress`, per item `response.output_item.added`, its deltas
//! (`response.reasoning_text.delta`, `response.output_text.delta` between
//! `response.content_part.added` / `.done`, `response.function_call_arguments.delta`), their
//! `.done` events and `response.output_item.done`, then `response.completed` (or
//! `response.incomplete` at `max_output_tokens`) with the whole response; each event under an
//! `event:` line with its `sequence_number`. Errors are OpenAI's.
//!
//! Wire format: <https://platform.openai.com/docs/api-reference/responses>.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tessera::{FinishReason, GenerationOutput};

use super::front;
use super::pipeline::{self, ChatRun};
use super::response::{sse, Framing};
use super::responses_request::ResponsesRequest;
use super::segments::{Kind, Segmented, Segments, Step};
use super::Shared;
use crate::error::ApiError;

pub async fn responses(State(state): Shared, body: Body) -> Result<Response, ApiError> {
    let req: ResponsesRequest = front::read(&state, body).await?;
    let job = front::job(&state, &req)?;
    let run = pipeline::start(&state, job).await?;
    let id = state.id("resp_");
    let shape = Shape {
        item_id: id.trim_start_matches("resp_").to_string(),
        base: json!({"id": id, "object": "response", "created_at": state.created, "model": state.config.model_name,
            "error": null, "incomplete_details": null, "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens, "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": req.reasoning, "store": false, "temperature": req.temperature, "top_p": req.top_p,
            "text": req.text.clone().unwrap_or_else(|| json!({"format": {"type": "text"}})),
            "tool_choice": req.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            "tools": req.tools.clone().unwrap_or_else(|| json!([])), "metadata": {}}),
    };
    if req.stream {
        let ChatRun { rx, output, .. } = run;
        let stream = Arc::new(Mutex::new(Stream { shape, answer: Segmented::new(output), sequence: 0 }));
        let first = stream.lock().map(|mut s| s.start()).unwrap_or_default();
        let piece = {
            let stream = stream.clone();
            move |t: &str, _: &[tessera::SampledToken]| stream.lock().map(|mut s| s.push(t)).unwrap_or_default()
        };
        let end = move |out: &GenerationOutput| stream.lock().map(|mut s| s.end(out)).unwrap_or_default();
        return Ok(sse(rx, Framing::Responses, first, piece, end));
    }
    let (out, deltas, called) = run.whole().await?;
    let mut segments = Segments::default();
    segments.finish(&deltas);
    Ok(Json(shape.whole(&segments, Some((&out, called)))).into_response())
}

/// What every body of one response shares.
struct Shape {
    /// The response's fields other than `status`, `output` and `usage`.
    base: Value,
    /// Item ids are `msg_…`, `rs_…`, `fc_…` with this and the item's index.
    item_id: String,
}

impl Shape {
    /// The output item of a segment with `text`; `done` sets its status.
    fn item(&self, index: usize, kind: &Kind, text: &str, done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match kind {
            Kind::Reasoning => {
                let content = if done { json!([{"type": "reasoning_text", "text": text}]) } else { json!([]) };
                json!({"type": "reasoning", "id": format!("rs_{}_{index}", self.item_id), "summary": [],
                       "content": content})
            }
            Kind::Text => {
                let content = if done { json!([text_part(text)]) } else { json!([]) };
                json!({"type": "message", "id": format!("msg_{}_{index}", self.item_id), "status": status,
                       "role": "assistant", "content": content})
            }
            Kind::Call { id, name, .. } => {
                json!({"type": "function_call", "id": format!("fc_{}_{index}", self.item_id),
                "call_id": id, "name": name, "arguments": text, "status": status})
            }
        }
    }

    /// The response with the output so far; `done`: the generation and whether it made calls.
    fn whole(&self, segments: &Segments, done: Option<(&GenerationOutput, bool)>) -> Value {
        let mut v = self.base.clone();
        let output: Vec<Value> =
            segments.items().iter().enumerate().map(|(i, (kind, text))| self.item(i, kind, text, true)).collect();
        v["output"] = json!(output);
        v["status"] = json!("in_progress");
        if let Some((out, called)) = done {
            let cut = matches!(out.finish_reason, FinishReason::Length | FinishReason::ContextFull) && !called;
            v["status"] = json!(if cut { "incomplete" } else { "completed" });
            if cut {
                v["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            let (input, output) = (out.prompt_positions, out.generated_tokens.len());
            v["usage"] = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input + output});
        } else {
            v["usage"] = Value::Null;
        }
        v
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// A streamed response's state: its answer's segments and the events' sequence numbers.
struct Stream {
    shape: Shape,
    answer: Segmented,
    sequence: u64,
}

impl Stream {
    fn event(&mut self, mut v: Value) -> Value {
        v["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        v
    }

    fn start(&mut self) -> Vec<Value> {
        let response = self.shape.whole(&self.answer.segments, None);
        vec![
            self.event(json!({"type": "response.created", "response": response})),
            self.event(json!({"type": "response.in_progress", "response": response})),
        ]
    }

    fn push(&mut self, piece: &str) -> Vec<Value> {
        let steps = self.answer.push(piece);
        self.events(steps)
    }

    fn end(&mut self, out: &GenerationOutput) -> Vec<Value> {
        let (steps, called) = self.answer.finish();
        let mut events = self.events(steps);
        let response = self.shape.whole(&self.answer.segments, Some((out, called)));
        let kind = if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        events.push(self.event(json!({"type": kind, "response": response})));
        events
    }

    fn events(&mut self, steps: Vec<Step>) -> Vec<Value> {
        let mut events = Vec::new();
        for step in steps {
            let (index, kind) = match &step {
                Step::Start { index, kind } | Step::Delta { index, kind, .. } | Step::Stop { index, kind } => {
                    (*index, kind.clone())
                }
            };
            // (The steps come after the segments took them all: an item starts empty.)
            let text = match step {
                Step::Start { .. } => String::new(),
                _ => self.answer.segments.items().get(index).map(|(_, t)| t.clone()).unwrap_or_default(),
            };
            let item = self.shape.item(index, &kind, &text, matches!(step, Step::Stop { .. }));
            let at = json!({"item_id": item["id"], "output_index": index});
            let with = |mut v: Value, more: Value| {
                for (k, val) in at.as_object().into_iter().flatten().chain(more.as_object().into_iter().flatten()) {
                    v[k] = val.clone();
                }
                v
            };
            let part = json!({"content_index": 0});
            let new: Vec<Value> = match (&step, &kind) {
                (Step::Start { .. }, Kind::Text) => vec![
                    json!({"type": "response.output_item.added", "output_index": index, "item": item}),
                    with(
                        json!({"type": "response.content_part.added"}),
                        json!({"content_index": 0, "part": text_part("")}),
                    ),
                ],
                (Step::Start { .. }, _) => {
                    vec![json!({"type": "response.output_item.added", "output_index": index, "item": item})]
                }
                (Step::Delta { text, .. }, Kind::Reasoning) => {
                    vec![with(json!({"type": "response.reasoning_text.delta", "delta": text}), part.clone())]
                }
                (Step::Delta { text, .. }, Kind::Text) => vec![with(
                    json!({"type": "response.output_text.delta", "delta": text, "logprobs": []}),
                    part.clone(),
                )],
                (Step::Delta { text, .. }, Kind::Call { .. }) => {
                    vec![with(json!({"type": "response.function_call_arguments.delta", "delta": text}), json!({}))]
                }
                (Step::Stop { .. }, Kind::Reasoning) => vec![
                    with(json!({"type": "response.reasoning_text.done", "text": text}), part.clone()),
                    json!({"type": "response.output_item.done", "output_index": index, "item": item}),
                ],
                (Step::Stop { .. }, Kind::Text) => vec![
                    with(json!({"type": "response.output_text.done", "text": text, "logprobs": []}), part.clone()),
                    with(
                        json!({"type": "response.content_part.done"}),
                        json!({"content_index": 0, "part": text_part(&text)}),
                    ),
                    json!({"type": "response.output_item.done", "output_index": index, "item": item}),
                ],
                (Step::Stop { .. }, Kind::Call { name, .. }) => vec![
                    with(
                        json!({"type": "response.function_call_arguments.done", "arguments": text, "name": name}),
                        json!({}),
                    ),
                    json!({"type": "response.output_item.done", "output_index": index, "item": item}),
                ],
            };
            for e in new {
                events.push(self.event(e));
            }
        }
        events
    }
}
