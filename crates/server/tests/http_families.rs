//! `serve` on issue 41's families over real HTTP: Qwen3.5 (Gated DeltaNet + full attention),
//! Gemma 4 (per-layer inputs, shared KV), InternVL3 (tiles, pixel shuffle), Mistral 3 (Pixtral's
//! native resolution and break tokens) and MiniCPM-V 4.6. A greedy chat with an image answers
//! what the library answers on the same chat (the library's greedy ids match transformers':
//! tessera's vlm_families and vlm tests), and /v1/embeddings returns the library's mean-pooled
//! contextual embeddings (which match transformers' hidden states: tessera's embeddings test
//! `hybrid_vlm_decoders_hidden_states_match_transformers`).

mod http_common;

use anyhow::{Context, Result};
use base64::Engine as _;
use http_common::*;
use serde_json::json;
use tessera::{GenerateParams, LoadOptions, Model, Pooling};
use tessera_server::ServerConfig;

#[test]
fn issue_41_families_serve_chats_with_images_and_embeddings_as_the_library_does() -> Result<()> {
    let image_path = root().join("tests/fixtures/vlm/images/chelsea_square_32.png");
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&image_path)?)
    );
    let question = "What is in the picture?";
    for name in ["qwen3.5-tiny", "gemma4-tiny", "internvl-tiny", "mistral3-tiny", "minicpm-v4.6-tiny"] {
        let dir = root().join("tests/fixtures/vlm").join(name);
        let server = start_with(&dir, ServerConfig { model_name: name.into(), ..Default::default() })?;
        let model = Model::load(dir.to_str().context("utf-8")?, &LoadOptions::default())?;

        let body = json!({"model": name, "messages": image_chat(&url, question), "temperature": 0, "max_tokens": 12});
        let (status, res) = post(&server, "/v1/chat/completions", &body)?;
        assert_eq!(status, 200, "{name}: {res}");
        let image = tessera::load_image(&image_path, tessera::DEFAULT_MAX_PIXELS)?;
        let prompt = model.encode_prompt(question, None, false, &[image])?;
        let params = GenerateParams { max_new_tokens: 12, ..Default::default() };
        let want = model.generate(&prompt, &params, &mut |_| {})?;
        // Qwen3.5's template opens a thinking block: the server hands what follows it (trimmed,
        // as its reasoning splitter does) to `reasoning_content`, the rest to `content`.
        let message = &res["choices"][0]["message"];
        match message["reasoning_content"].as_str() {
            Some(reasoning) => {
                assert_eq!(reasoning, want.text.trim(), "{name}: reasoning");
                assert_eq!(message["content"], "", "{name}: content");
            }
            None => assert_eq!(message["content"].as_str(), Some(want.text.as_str()), "{name}: answer"),
        }
        assert_eq!(res["usage"]["prompt_tokens"].as_u64(), Some(prompt.ids().len() as u64), "{name}: prompt tokens");
        let generated = want.generated_tokens.len() as u64;
        assert_eq!(res["usage"]["completion_tokens"].as_u64(), Some(generated), "{name}: completion tokens");

        let texts = ["The cat sat on the mat.", "A red ball"];
        let (status, res) = post(&server, "/v1/embeddings", &json!({"input": texts}))?;
        assert_eq!(status, 200, "{name}: {res}");
        for (i, text) in texts.iter().enumerate() {
            let got: Vec<f32> = serde_json::from_value(res["data"][i]["embedding"].clone())?;
            let want = model.analysis().contextual_embeddings(&[], text, None)?.pooled(&Pooling::Mean, true)?;
            let want: Vec<f32> = want.flatten_all()?.to_vec1()?;
            assert_eq!(got.len(), model.config().decoder.hidden_size, "{name}: width");
            let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(d <= 1e-6, "{name}/{text}: server and library embeddings differ by {d}");
        }
    }
    Ok(())
}
