//! `GET /metrics`: the engine's counters and gauges, and the log lines dropped, in Prometheus'
//! text format (version 0.0.4).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// Every metric, one `# HELP`, `# TYPE` and value each.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let s = state.engine.stats();
    let c = &state.connections;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    let size = |a: &AtomicUsize| a.load(Ordering::Relaxed) as f64;
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
        ("connections_open", gauge, "Connections being served.", size(&c.open)),
        ("connections_accepted_total", counter, "Connections served.", n(&c.accepted)),
        (
            "connections_refused_total",
            counter,
            "Connections answered 503 or closed: past --max-connections, or shutting down.",
            n(&c.refused),
        ),
        (
            "header_timeouts_total",
            counter,
            "Connections closed for not sending a request head within --header-timeout.",
            n(&c.header_timeouts),
        ),
        (
            "log_lines_dropped_total",
            counter,
            "Log lines dropped because stderr did not keep up (logging never blocks a request).",
            crate::logging::dropped_lines() as f64,
        ),
    ];
    let out: String = metrics
        .iter()
        .map(|(name, kind, help, value)| {
            format!("# HELP tessera_{name} {help}\n# TYPE tessera_{name} {kind}\ntessera_{name} {value}\n")
        })
        .collect();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
