//! `POST /v1/completions`: the legacy text completions. A raw prompt (no chat template) in;
//! its continuation out, whole or streamed, with log-probabilities in the legacy shape.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tessera::{GenerationOutput, SampledToken};

use super::request::{blocking, check_model, collect, params, read_json, submit};
use super::response::{completion_logprobs, finish_reason, sse, Framing};
use super::Shared;
use crate::api::{CompletionRequest, Sampling, TextInput, Usage};
use crate::error::ApiError;

fn one_text(input: TextInput, field: &str) -> Result<String, ApiError> {
    match input {
        TextInput::One(s) => Ok(s),
        TextInput::Many(mut v) if v.len() == 1 => Ok(v.remove(0)),
        TextInput::Many(v) => {
            Err(ApiError::bad_request(format!("`{field}` must be one string here, got a list of {}", v.len()))
                .param(field))
        }
    }
}

pub async fn completions(State(state): Shared, body: Body) -> Result<Response, ApiError> {
    let (req, sampling): (CompletionRequest, Sampling) = read_json(&state, body).await?;
    check_model(&state, &req.model)?;
    let top = match req.logprobs {
        Some(k) if k > 20 => {
            return Err(ApiError::bad_request(format!("logprobs must be in 0..=20, got {k}")).param("logprobs"))
        }
        Some(k) => Some(k.max(1) as usize),
        None => None,
    };
    let params = params(&state, &sampling, top)?;
    let text = one_text(req.prompt, "prompt")?;
    let st = state.clone();
    let prompt = blocking(move || Ok(st.model().encode_prompt(&text, None, true, &[])?)).await?;
    let rx = submit(&state, prompt, params)?;
    let (id, created, model) = (state.id("cmpl-"), state.created, state.config.model_name.clone());
    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |text: &str, finish: Option<&str>| {
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]})
        }
    };
    if sampling.stream {
        let include_usage = sampling.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let piece = {
            let (chunk, st) = (chunk.clone(), state.clone());
            move |t: &str, tokens: &[SampledToken]| {
                let mut c = chunk(t, None);
                if !tokens.is_empty() {
                    c["choices"][0]["logprobs"] = completion_logprobs(st.model(), tokens);
                }
                vec![c]
            }
        };
        let end = move |out: &GenerationOutput| {
            let mut v = vec![chunk("", Some(finish_reason(out.finish_reason)))];
            if include_usage {
                let usage = Usage::new(out.prompt_positions, out.generated_tokens.len());
                v.push(json!({"id": id, "object": "text_completion", "created": created, "model": model,
                              "choices": [], "usage": usage}));
            }
            v
        };
        return Ok(sse(rx, Framing::OpenAi, Vec::new(), piece, end));
    }
    let out = collect(rx).await?;
    let logprobs = out.logprobs.is_some().then(|| completion_logprobs(state.model(), &out.sampled_tokens()));
    let mut body = chunk(&out.text, Some(finish_reason(out.finish_reason)));
    body["choices"][0]["logprobs"] = logprobs.unwrap_or(Value::Null);
    body["usage"] = json!(Usage::new(out.prompt_positions, out.generated_tokens.len()));
    Ok(Json(body).into_response())
}
