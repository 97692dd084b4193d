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

/// The events of one streamed response as SSE `data:` lines — `first`, one chunk per
/// `piece(text, tokens)` (none or several; `tokens`: the sampled tokens since the last chunk, with `logprobs`),
/// the chunks of `end(output)` — then `[DONE]`. When the client disconnects the stream (and
/// with it the receiver) is dropped, which cancels the generation.
pub(super) fn sse(
    rx: mpsc::UnboundedReceiver<Event>,
    first: Option<Value>,
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
            if let Some(f) = first {
                return Some((vec![f.to_string()], (rx, None, tokens, false)));
            }
            let error = |err: ApiError| {
                vec![json!({"error": {"message": err.message, "type": err.kind(), "param": null, "code": null}})
                    .to_string()]
            };
            let mut lines: Vec<String> = loop {
                match rx.recv().await {
                    Some(Event::Tokens(t)) => tokens.extend(t),
                    Some(Event::Text(t)) => {
                        let chunks = piece(&t, &tokens).iter().map(Value::to_string).collect();
                        return Some((chunks, (rx, None, Vec::new(), false)));
                    }
                    Some(Event::Done(out)) => {
                        // Tokens whose text never showed (an EOS, a stop string) still get theirs.
                        let rest = if tokens.is_empty() { Vec::new() } else { piece("", &tokens) };
                        break rest.iter().chain(end(&out).iter()).map(Value::to_string).collect();
                    }
                    Some(Event::Error(e)) => break error(e.into()),
                    None => {
                        break error(ApiError {
                            status: StatusCode::INTERNAL_SERVER_ERROR,
                            message: "the engine stopped before the request ended".into(),
                            param: None,
                        })
                    }
                }
            };
            lines.push("[DONE]".into());
            Some((lines, (rx, None, Vec::new(), true)))
        }
    });
    let events = futures_util::StreamExt::flat_map(stream, |lines| {
        futures_util::stream::iter(lines.into_iter().map(|l| Ok::<_, Infallible>(SseEvent::default().data(l))))
    });
    Sse::new(events).into_response()
}
