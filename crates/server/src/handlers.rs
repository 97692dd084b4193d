//! The endpoints. Bodies are read with the size limit and parsed here (so a bad body gets
//! OpenAI's error shape, naming the field); prompts are built on a blocking thread (template,
//! tokenizer, image decoding) and generation goes through the engine.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tessera::{
    Conversation, Event, FinishReason, GenerateParams, GenerationOutput, Model, Pooling, Prompt, RgbImage, SampledToken,
};
use tokio::sync::mpsc;

use crate::api::{
    ChatRequest, CompletionRequest, EmbeddingRequest, Sampling, TextInput, TokenLogprobs, TopLogprob, Usage,
};
use crate::error::ApiError;
use crate::AppState;

type Shared = State<Arc<AppState>>;

/// How long an oversized body is read on (and dropped, up to the size limit again) before its
/// 413 goes out: a client still sending it then reads the answer. Closing a connection with
/// unread data makes the kernel reset it, and the client's write fails with a broken pipe
/// instead (what an HTTP test saw at times with a 100 kB body against a 64 kB limit).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// The body as `T` and its sampling fields: 413 over the size limit, 400 naming the field for
/// malformed JSON or a field of the wrong type.
async fn read_json<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<(T, Sampling), ApiError> {
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
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
    Ok((field_errors(&value)?, field_errors(&value)?))
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
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("internal error: {e}"),
        param: None,
    })?
}

fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
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
fn params(state: &AppState, s: &Sampling, top_logprobs: Option<usize>) -> Result<GenerateParams, ApiError> {
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

/// The image a message part names: a `data:` URL; an `http(s)` URL only from a host under
/// `--allowed-media-domains`; a local path or `file://` URL only under `--allowed-local-media`
/// (resolved, so `..` and links cannot leave it).
fn load_image(state: &AppState, src: &str) -> Result<RgbImage, ApiError> {
    let max = state.config.max_image_pixels;
    let bad = |m: String| ApiError::bad_request(m).param("messages");
    if src.starts_with("data:") {
        return tessera::load_image_source(src, max).map_err(|e| bad(e.to_string()));
    }
    if src.starts_with("http://") || src.starts_with("https://") {
        let bytes = download(state, src).map_err(|m| bad(format!("image URL {}: {m}", short(src))))?;
        return tessera::decode_image(&bytes, Path::new(&short(src)), max).map_err(|e| bad(e.to_string()));
    }
    let Some(dir) = &state.config.allowed_local_media else {
        return Err(bad(format!(
            "image {}: local files are off (start the server with --allowed-local-media DIR); send data: URLs",
            short(src)
        )));
    };
    let path = src.strip_prefix("file://").unwrap_or(src);
    let inside = resolve_inside(dir, Path::new(path))
        .ok_or_else(|| bad(format!("image {}: not a file under the allowed media folder", short(src))))?;
    tessera::load_image(&inside, max).map_err(|e| bad(e.to_string()))
}

/// How long an image download may take, all of it.
#[cfg(feature = "downloads")]
const DOWNLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The bytes at `url`, if its host is one of `--allowed-media-domains` (or under one). No
/// redirects are followed (they could lead anywhere), and at most `--max-body-bytes` are read.
fn download(state: &AppState, url: &str) -> Result<Vec<u8>, String> {
    let allowed = &state.config.allowed_media_domains;
    if allowed.is_empty() {
        return Err("this server does not download images (start it with --allowed-media-domains HOST); \
                    send them as data: URLs"
            .into());
    }
    let host = url_host(url).ok_or("not a URL with a host")?;
    let permitted = allowed.iter().any(|d| {
        let d = d.trim_start_matches('.').to_ascii_lowercase();
        host == d || host.ends_with(&format!(".{d}"))
    });
    if !permitted {
        return Err(format!("host {host} is not in --allowed-media-domains"));
    }
    fetch(url, state.config.max_body_bytes)
}

/// The body of a GET of `url`, refused past `limit` bytes.
#[cfg(feature = "downloads")]
fn fetch(url: &str, limit: usize) -> Result<Vec<u8>, String> {
    let agent = ureq::AgentBuilder::new().redirects(0).timeout(DOWNLOAD_TIMEOUT).build();
    let response = match agent.get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => return Err(format!("the server answered HTTP {code}")),
        Err(e) => return Err(format!("download failed: {e}")),
    };
    if response.status() != 200 {
        return Err(format!("the server answered HTTP {} (redirects are not followed)", response.status()));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(response.into_reader(), limit as u64 + 1), &mut bytes)
        .map_err(|e| format!("download failed: {e}"))?;
    if bytes.len() > limit {
        return Err(format!("the image is larger than --max-body-bytes ({limit} bytes)"));
    }
    Ok(bytes)
}

#[cfg(not(feature = "downloads"))]
fn fetch(_url: &str, _limit: usize) -> Result<Vec<u8>, String> {
    Err("this build of tessera has no downloads (built without the `hub` feature)".into())
}

/// The lowercase host of an `http(s)` URL (no user info allowed, port dropped).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') {
        return None;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// `path` (relative to `dir`, or absolute) resolved with links followed, if it lies inside `dir`.
fn resolve_inside(dir: &Path, path: &Path) -> Option<PathBuf> {
    let root = dir.canonicalize().ok()?;
    let full = if path.is_absolute() { path.to_path_buf() } else { root.join(path) };
    let real = full.canonicalize().ok()?;
    (real.starts_with(&root) && real.is_file()).then_some(real)
}

fn short(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Eos | FinishReason::StopString => "stop",
        FinishReason::Length | FinishReason::ContextFull => "length",
    }
}

/// The chat `logprobs.content` list of `tokens`.
fn chat_logprobs(model: &Model, tokens: &[SampledToken]) -> Vec<TokenLogprobs> {
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
fn completion_logprobs(model: &Model, tokens: &[SampledToken]) -> Value {
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

/// Submits a generation; its events arrive on the returned channel. Dropping the receiver
/// (the client went away) cancels it.
fn submit(
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
async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<GenerationOutput, ApiError> {
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

/// The events of one streamed response as SSE `data:` lines — `first`, one chunk per
/// `piece(text, tokens)` (`tokens`: the sampled tokens since the last chunk, with `logprobs`),
/// the chunks of `end(output)` — then `[DONE]`. When the client disconnects the stream (and
/// with it the receiver) is dropped, which cancels the generation.
fn sse(
    rx: mpsc::UnboundedReceiver<Event>,
    first: Option<Value>,
    piece: impl Fn(&str, &[SampledToken]) -> Value + Send + Sync + 'static,
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
                        let chunk = piece(&t, &tokens).to_string();
                        return Some((vec![chunk], (rx, None, Vec::new(), false)));
                    }
                    Some(Event::Done(out)) => {
                        // Tokens whose text never showed (an EOS, a stop string) still get theirs.
                        let rest = (!tokens.is_empty()).then(|| piece("", &tokens).to_string());
                        break rest.into_iter().chain(end(&out).iter().map(Value::to_string)).collect();
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
    let (id, created, model) = (state.id("cmpl"), state.created, state.config.model_name.clone());
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
                c
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
        return Ok(sse(rx, None, piece, end));
    }
    let out = collect(rx).await?;
    let logprobs = out.logprobs.is_some().then(|| completion_logprobs(state.model(), &out.sampled_tokens()));
    let mut body = chunk(&out.text, Some(finish_reason(out.finish_reason)));
    body["choices"][0]["logprobs"] = logprobs.unwrap_or(Value::Null);
    body["usage"] = json!(Usage::new(out.prompt_positions, out.generated_tokens.len()));
    Ok(Json(body).into_response())
}

pub async fn embeddings(State(state): Shared, body: Body) -> Result<Response, ApiError> {
    let (req, _): (EmbeddingRequest, Sampling) = read_json(&state, body).await?;
    check_model(&state, &req.model)?;
    // `base64`: the little-endian f32 bytes (what the openai client asks for by default).
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(f) => {
            return Err(ApiError::bad_request(format!("encoding_format `{f}` is not supported (float, base64)"))
                .param("encoding_format"))
        }
    };
    let texts = match req.input {
        TextInput::One(s) => vec![s],
        TextInput::Many(v) => v,
    };
    if texts.is_empty() || texts.iter().any(|t| t.is_empty()) {
        return Err(ApiError::bad_request("`input` must be non-empty text").param("input"));
    }
    let st = state.clone();
    let (vectors, tokens) = blocking(move || {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut tokens = 0;
        for t in &texts {
            let e = st.model().contextual_embeddings(&[], t, None)?;
            tokens += e.ids.len();
            let pooled = e.pooled(&Pooling::Mean, true)?;
            let v = pooled.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(tessera::TesseraError::from)?;
            vectors.push(v);
        }
        Ok((vectors, tokens))
    })
    .await?;
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                use base64::Engine as _;
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data, "model": state.config.model_name,
                   "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    .into_response())
}

pub async fn models(State(state): Shared) -> Json<Value> {
    Json(json!({"object": "list", "data": [
        {"id": state.config.model_name, "object": "model", "created": state.created, "owned_by": "tessera"}
    ]}))
}

pub async fn health(State(state): Shared) -> Json<Value> {
    Json(json!({"status": "ok", "model": state.config.model_name,
                "uptime_s": state.started.elapsed().as_secs()}))
}

/// The chat page: one HTML file with its script and style inline, embedded in the binary.
pub async fn chat_page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], include_str!("../assets/chat.html")).into_response()
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError { status: StatusCode::NOT_FOUND, message: format!("no route {uri}"), param: None }
}
