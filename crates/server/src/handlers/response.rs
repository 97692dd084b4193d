//! What a generation becomes in a chat or text completion's response: OpenAI's finish reasons,
//! log-probabilities in each endpoint's shape, and the server-sent-event stream of a streamed
//! response.

use std::convert::Infallible;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tessera::{Event, FinishReason, GenerationOutput, Model, SampledToken};
use tokio::sync::mpsc;

use crate::api::{TokenLogprobs, TopLogprob};
use crate::error::ApiError;

pub(super) fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Eos | FinishReason::StopString => "stop",
        FinishReason::Length | FinishReason::ContextFull => "length",
    }
}

/// The chat `logprobs.content` list of `tokens`.
pub(super) fn chat_logprobs(model: &Model, tokens: &[SampledToken]) -> Vec<TokenLogprobs> {
    let text = |id: u32| model.tokenizer().decode(&[id], false).unwrap_or_default();
    tokens
        .iter()
        .map(|t| {
            let token = text(t.id);
            TokenLogprobs {
                bytes: token.as_bytes().to_vec(),
                token,
                logprob: t.logprob,
                top_logprobs: t
                    .top
                    .iter()
                    .map(|t| {
                        let token = text(t.id);
                        TopLogprob { bytes: token.as_bytes().to_vec(), token, logprob: t.logprob }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The legacy completions' `logprobs` object of `tokens`.
pub(super) fn completion_logprobs(model: &Model, tokens: &[SampledToken]) -> Value {
    let content = chat_logprobs(model, tokens);
    json!({
        "tokens": content.iter().map(|t| &t.token).collect::<Vec<_>>(),
        "token_logprobs": content.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": content
            .iter()
            .map(|t| t.top_logprobs.iter().map(|x| (x.token.clone(), json!(x.logprob))).collect())
            .collect::<Vec<serde_json::Map<String, Value>>>(),
    })
}

/// How a stream's events are written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Framing {
    /// OpenAI's: `data:` lines, then `data: [DONE]`; an error as `{"error": {…}}`.
    OpenAi,
    /// Anthropic's: each event under an `event:` line naming its `type`, nothing after the last;
    /// an error as the event `error`, `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
    /// The Responses API's: named events as Anthropic's; an error as the event `error`,
    /// `{"type": "error", "code", "message", "param"}`.
    Responses,
}

impl Framing {
    fn event(self, v: &Value) -> SseEvent {
        // (Fields are written in the order set: the `event:` line first, as Anthropic's.)
        match (self, v.get("type").and_then(Value::as_str)) {
            (Framing::Anthropic | Framing::Responses, Some(name)) => {
                SseEvent::default().event(name).data(v.to_string())
            }
            _ => SseEvent::default().data(v.to_string()),
        }
    }

    fn error(self, err: ApiError) -> Value {
        match self {
            Framing::OpenAi => {
                json!({"error": {"message": err.message, "type": err.kind(), "param": null, "code": null}})
            }
            Framing::Anthropic => err.anthropic_body(),
            Framing::Responses => json!({"type": "error", "code": err.kind(), "message": err.message, "param": null}),
        }
    }
}

/// The events of one streamed response — `first`, one chunk per `piece(text, tokens)` (none or
/// several; `tokens`: the sampled tokens since the last chunk, with `logprobs`), the chunks of
/// `end(output)` — written as `framing` says (OpenAI's end with `[DONE]`). When the client
/// disconnects the stream (and with it the receiver) is dropped, which cancels the generation.
pub(super) fn sse(
    rx: mpsc::UnboundedReceiver<Event>,
    framing: Framing,
    first: Vec<Value>,
    piece: impl Fn(&str, &[SampledToken]) -> Vec<Value> + Send + Sync + 'static,
    end: impl Fn(&GenerationOutput) -> Vec<Value> + Send + Sync + 'static,
) -> Response {
    let (piece, end) = (Arc::new(piece), Arc::new(end));
    let start = (rx, first, Vec::new(), false);
    let stream = futures_util::stream::unfold(start, move |(mut rx, first, mut tokens, done)| {
        let (piece, end) = (piece.clone(), end.clone());
        async move {
            if done {
                return None;
            }
            if !first.is_empty() {
                let events = first.iter().map(|v| framing.event(v)).collect();
                return Some((events, (rx, Vec::new(), tokens, false)));
            }
            let events = |values: &[Value]| values.iter().map(|v| framing.event(v)).collect::<Vec<_>>();
            let mut lines: Vec<SseEvent> = loop {
                match rx.recv().await {
                    Some(Event::Tokens(t)) => tokens.extend(t),
                    Some(Event::Text(t)) => {
                        let chunks = events(&piece(&t, &tokens));
                        return Some((chunks, (rx, Vec::new(), Vec::new(), false)));
                    }
                    Some(Event::Done(out)) => {
                        // Tokens whose text never showed (an EOS, a stop string) still get theirs.
                        let mut rest = if tokens.is_empty() { Vec::new() } else { piece("", &tokens) };
                        rest.extend(end(&out));
                        break events(&rest);
                    }
                    Some(Event::Error(e)) => break events(&[framing.error(e.into())]),
                    None => {
                        break events(&[framing.error(ApiError {
                            status: StatusCode::INTERNAL_SERVER_ERROR,
                            message: "the engine stopped before the request ended".into(),
                            param: None,
                        })])
                    }
                }
            };
            if framing == Framing::OpenAi {
                lines.push(SseEvent::default().data("[DONE]"));
            }
            Some((lines, (rx, Vec::new(), Vec::new(), true)))
        }
    });
    let events = futures_util::StreamExt::flat_map(stream, |events| {
        futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>))
    });
    Sse::new(events).into_response()
}
