//! Tiny random-weight models written by transformers (scripts/make_tiny_models.py): the
//! safetensors path, config variants (old `rope_theta` and nested `rope_parameters`, llama3
//! RoPE scaling, explicit head_dim, sharded weights), MHA/GQA/MQA, Qwen2 biases, Mistral, and
//! Gemma (GeGLU, `(1 + w)` RMSNorm, √width-scaled embeddings, head_dim 16, one KV head;
//! written by scripts/make_tiny_vlms.py).

mod common;

use anyhow::Result;
use tessera::{GenerateParams, LoadOptions, Model};

const MODELS: &[&str] = &["llama-gqa", "llama-mha", "llama-mqa-llama3rope", "qwen2-bias", "mistral", "gemma"];

fn load(name: &str) -> Result<Model> {
    let dir = common::fixtures().join("tiny").join(name);
    Ok(Model::load(dir.to_str().expect("utf-8 path"), &LoadOptions::default())?)
}

#[test]
fn logits_match_transformers_on_every_prompt_position() -> Result<()> {
    for name in MODELS {
        let model = load(name)?;
        let reference = common::read_json(&common::fixtures().join("tiny").join(name).join("reference.json"))?;
        let prompt = common::ids(&reference["prompt_ids"]);
        let expected = reference["logits"].as_array().expect("logits rows");
        let mut cache = model.new_cache();
        let logits = model.forward_all(&prompt, &mut cache)?;
        let rows: Vec<Vec<f32>> = logits.to_vec2()?;
        assert_eq!(rows.len(), expected.len(), "{name}: positions");
        let mut worst = 0f32;
        for (row, exp) in rows.iter().zip(expected) {
            for (a, b) in row.iter().zip(common::floats(exp)) {
                worst = worst.max((a - b).abs());
            }
        }
        assert!(worst < 1e-4, "{name}: max |logit − reference| = {worst}");
    }
    Ok(())
}

#[test]
fn greedy_ids_match_transformers_for_16_tokens() -> Result<()> {
    for name in MODELS {
        let model = load(name)?;
        let reference = common::read_json(&common::fixtures().join("tiny").join(name).join("reference.json"))?;
        let prompt = common::ids(&reference["prompt_ids"]);
        let expected = common::ids(&reference["greedy_ids"]);
        let params = GenerateParams { max_new_tokens: expected.len(), ignore_eos: true, ..Default::default() };
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        assert_eq!(out.generated_tokens, expected, "{name}");
    }
    Ok(())
}

#[test]
fn prefill_then_cached_decode_equals_one_full_forward() -> Result<()> {
    for name in MODELS {
        let model = load(name)?;
        let reference = common::read_json(&common::fixtures().join("tiny").join(name).join("reference.json"))?;
        let prompt = common::ids(&reference["prompt_ids"]);
        let full: Vec<Vec<f32>> = model.forward_all(&prompt, &mut model.new_cache())?.to_vec2()?;
        // Prefill half, then one token at a time.
        let split = prompt.len() / 2;
        let mut cache = model.new_cache();
        let mut rows: Vec<Vec<f32>> = model.forward_all(&prompt[..split], &mut cache)?.to_vec2()?;
        for id in &prompt[split..] {
            rows.extend(model.forward_all(&[*id], &mut cache)?.to_vec2::<f32>()?);
        }
        let worst = full.iter().flatten().zip(rows.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-4, "{name}: cached decode differs from full forward by {worst}");
    }
    Ok(())
}

#[test]
fn attention_layouts_are_read_from_config() -> Result<()> {
    let heads = |name: &str| -> Result<(usize, usize)> {
        let m = load(name)?;
        Ok((m.config().decoder.num_attention_heads, m.config().decoder.num_key_value_heads))
    };
    assert_eq!(heads("llama-mha")?, (4, 4));
    assert_eq!(heads("llama-gqa")?, (4, 2));
    assert_eq!(heads("llama-mqa-llama3rope")?, (4, 1));
    let m = load("llama-mqa-llama3rope")?;
    assert!(matches!(m.config().decoder.rope.scaling, tessera_decoder::RopeScaling::Llama3 { .. }));
    assert_eq!(m.config().decoder.head_dim, 16);
    assert_eq!(load("llama-mha")?.config().decoder.rope.theta, 50_000.0, "nested rope_parameters");
    Ok(())
}
