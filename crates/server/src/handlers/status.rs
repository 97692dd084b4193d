//! What the server serves and whether it is up: `GET /v1/models` and `GET /health` (`GET
//! /metrics` is `crate::metrics`).

use axum::extract::State;
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
