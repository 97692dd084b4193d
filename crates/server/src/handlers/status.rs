//! What the server serves and how it is doing: `GET /v1/models`, `GET /health` and
//! `GET /metrics` (the engine's counters and gauges in Prometheus' text format).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::Shared;

pub async fn models(State(state): Shared) -> Json<Value> {
    Json(json!({"object": "list", "data": [
        {"id": state.config.model_name, "object": "model", "created": state.created, "owned_by": "tessera"}
    ]}))
}

pub async fn health(State(state): Shared) -> Json<Value> {
    Json(json!({"status": "ok", "model": state.config.model_name,
                "uptime_s": state.started.elapsed().as_secs()}))
}

pub async fn metrics(State(state): Shared) -> Response {
    let s = state.engine.stats();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    let size = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed) as f64;
    let (counter, gauge) = ("counter", "gauge");
    let metrics = [
        ("requests_total", counter, "Generation requests accepted.", n(&s.requests)),
        ("requests_completed_total", counter, "Generations that ended normally.", n(&s.completed)),
        ("requests_cancelled_total", counter, "Generations whose client went away.", n(&s.cancelled)),
        ("requests_failed_total", counter, "Generations that failed.", n(&s.failed)),
        ("prompt_tokens_total", counter, "Prompt positions prefilled.", n(&s.prompt_tokens)),
        ("generated_tokens_total", counter, "Tokens generated.", n(&s.generated_tokens)),
        ("queue_depth", gauge, "Requests waiting for the batch.", size(&s.queued)),
        ("batch_size", gauge, "Sequences in the running batch.", size(&s.active)),
        ("decode_steps_total", counter, "Batched decode steps run.", n(&s.decode_steps)),
        ("decode_rows_total", counter, "Sequence-steps decoded (sum of batch sizes).", n(&s.decode_rows)),
        (
            "time_to_first_token_seconds_sum",
            counter,
            "Submission to first token, summed over requests.",
            n(&s.time_to_first_token_us) / 1e6,
        ),
        ("time_to_first_token_seconds_count", counter, "Requests that got a first token.", n(&s.first_tokens)),
        ("image_cache_hits_total", counter, "Images whose features came from the cache.", n(&s.image_cache_hits)),
        ("image_cache_misses_total", counter, "Images encoded.", n(&s.image_cache_misses)),
        ("image_cache_bytes", gauge, "Bytes of cached image features.", size(&s.image_cache_bytes)),
        (
            "prefix_cache_hits_total",
            counter,
            "Prompts that continued from a cached KV prefix.",
            n(&s.prefix_cache_hits),
        ),
        ("prefix_cache_misses_total", counter, "Prompts with no reusable cached prefix.", n(&s.prefix_cache_misses)),
        (
            "prefix_reused_positions_total",
            counter,
            "Prompt positions taken from cached prefixes instead of computed.",
            n(&s.prefix_reused_positions),
        ),
        ("prefilled_positions_total", counter, "Prompt positions computed.", n(&s.prefilled_positions)),
        ("prefix_cache_bytes", gauge, "Bytes of cached KV prefixes.", size(&s.prefix_cache_bytes)),
    ];
    let out: String = metrics
        .iter()
        .map(|(name, kind, help, value)| {
            format!("# HELP tessera_{name} {help}\n# TYPE tessera_{name} {kind}\ntessera_{name} {value}\n")
        })
        .collect();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
