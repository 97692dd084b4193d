//! `POST /v1/embeddings`: one vector per input text, the mean of its last hidden states scaled
//! to unit length, as floats or base64 little-endian f32.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tessera::Pooling;

use super::request::{blocking, check_model, read_json};
use super::Shared;
use crate::api::{EmbeddingRequest, Sampling, TextInput};
use crate::error::ApiError;

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
            let e = st.model().analysis().contextual_embeddings(&[], t, None)?;
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
