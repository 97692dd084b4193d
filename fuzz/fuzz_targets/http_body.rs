//! A request body for each route of `tessera serve` that takes one: the first byte picks the
//! route, the rest is the body, sent through the server's whole router (the middleware, the
//! handlers, the engine running the shipped shapes model) and its answer read to the end,
//! streams included. The server may refuse a body, with a 4xx status; it may not panic, hang
//! (libFuzzer's `-timeout`; a body must also end within 60 s), or answer a client's mistake with
//! a server error (a 5xx other than 503).
//!
//! So that each input runs in milliseconds, generation is capped: requests that give no
//! `max_tokens` get the server's default (set to 4 here), those that give more are cut to 4,
//! and `n` to 2. Everything else reaches the server as written.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tower::ServiceExt;

const ROUTES: [&str; 6] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
];
const TOKEN_FIELDS: [&str; 4] = ["max_tokens", "max_completion_tokens", "max_output_tokens", "n"];

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shapes-vlm");
        let model = tessera::Model::load(dir, &Default::default()).expect("the shipped shapes model loads");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build();
        let runtime = runtime.expect("a tokio runtime");
        // Small caches: a long run then stays far below libFuzzer's memory limit.
        let engine =
            tessera::EngineConfig { kv_cache_bytes: 64 << 20, image_cache_bytes: 16 << 20, ..Default::default() };
        let config = tessera_server::ServerConfig {
            model_name: "shapes".into(),
            default_max_tokens: 4,
            engine,
            ..Default::default()
        };
        let state = runtime.block_on(async { tessera_server::AppState::new(Arc::new(model), config) });
        let router = tessera_server::router(state.expect("the server's state"));
        Harness { runtime, router }
    })
}

/// `body` with its token counts capped (when it is a JSON object; anything else goes as is).
fn capped(body: &[u8]) -> Vec<u8> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else { return body.to_vec() };
    for key in TOKEN_FIELDS {
        let cap = if key == "n" { 2 } else { 4 };
        if fields.get(key).and_then(Value::as_u64).is_some_and(|v| v > cap) {
            fields.insert(key.into(), cap.into());
        }
    }
    serde_json::to_vec(&Value::Object(fields)).unwrap_or_else(|_| body.to_vec())
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let route = ROUTES[pick as usize % ROUTES.len()];
    let h = harness();
    let request = axum::http::Request::post(route)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(capped(body)))
        .expect("a request");
    let status = h.runtime.block_on(async {
        let response = h.router.clone().oneshot(request).await.expect("the router answers");
        let status = response.status();
        let read = tokio::time::timeout(Duration::from_secs(60), axum::body::to_bytes(response.into_body(), 64 << 20));
        assert!(read.await.is_ok(), "{route}: the answer's body did not end within 60 s");
        status
    });
    let server_error = status.is_server_error() && status != axum::http::StatusCode::SERVICE_UNAVAILABLE;
    assert!(!server_error, "{route}: a request body was answered {status}");
});
