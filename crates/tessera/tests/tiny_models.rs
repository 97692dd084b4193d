//! Tiny random-weight models written by transformers (scripts/make_tiny_models.py): the
//! safetensors path, config variants (old `rope_theta` and nested `rope_parameters`, llama3
//! RoPE scaling, explicit head_dim, sharded weights), MHA/GQA/MQA, Qwen2 biases, Mistral, and
//! Gemma (GeGLU, `(1 + w)` RMSNorm, √width-scaled embeddings, head_dim 16, one KV head) and
//! Gemma 2 (soft-caps, four norms per layer, sliding layers with a window of 6 under a 12-token
//! prompt) and Gemma 3 (q/k norms, 5 local : 1 global layers with a RoPE base each; all three
//! written by scripts/make_tiny_vlms.py), and Qwen3 (q/k norms, no q/k/v biases).

mod common;

use anyhow::Result;
use tessera::GenerateParams;

use common::{tiny_model as load, TINY_TEXT_MODELS as MODELS};

/// f32 logits `(t, vocab)` of every position of `ids` run after what `cache` holds.
fn all_logits(model: &tessera::Model, ids: &[u32], cache: &mut tessera::KvCache) -> tessera::Result<tessera::Tensor> {
    model.logits(&model.forward_embeds(&model.embed_ids(ids)?, &[], cache, &mut Default::default())?)
}

#[test]
fn logits_match_transformers_on_every_prompt_position() -> Result<()> {
    for name in MODELS {
        let model = load(name)?;
        let reference = common::read_json(&common::fixtures().join("tiny").join(name).join("reference.json"))?;
        let prompt = common::ids(&reference["prompt_ids"]);
        let expected = reference["logits"].as_array().expect("logits rows");
        let mut cache = model.new_cache();
        let logits = all_logits(&model, &prompt, &mut cache)?;
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
        let prompt = model.prompt(common::ids(&reference["prompt_ids"]), &[])?;
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
        let full: Vec<Vec<f32>> = all_logits(&model, &prompt, &mut model.new_cache())?.to_vec2()?;
        // Prefill half, then one token at a time.
        let split = prompt.len() / 2;
        let mut cache = model.new_cache();
        let mut rows: Vec<Vec<f32>> = all_logits(&model, &prompt[..split], &mut cache)?.to_vec2()?;
        for id in &prompt[split..] {
            rows.extend(all_logits(&model, &[*id], &mut cache)?.to_vec2::<f32>()?);
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

/// The decoder runs what it is given: a mask plan (one rule per layer) and RoPE positions as a
/// tensor. A uniform causal plan with consecutive positions is `forward(Causal)` exactly; a
/// sliding window of 1 in the last layer changes every row but the first (which sees only
/// itself either way); shifting every position by the same amount leaves the output as it was
/// (RoPE scores depend on relative positions only) up to rounding; an explicit positions tensor
/// that is not consecutive changes it; a plan of the wrong length is an error.
#[test]
fn mask_plans_and_position_tensors_drive_the_decoder() -> Result<()> {
    use tessera::{AttentionMask, MaskPlan, Trace};
    let model = load("llama-gqa")?;
    let d = model.decoder();
    let n = d.config().num_hidden_layers;
    let ids = [1u32, 17, 42, 99, 7, 3, 250, 11];
    let t = ids.len();
    let embeds = model.embed_ids(&ids)?;
    let dev = embeds.device().clone();
    let run = |masks: &MaskPlan, positions: &candle_core::Tensor| -> Result<Vec<Vec<f32>>> {
        let out = d.forward_traced(&embeds, &mut model.new_cache(), masks, positions, &mut Trace::default())?;
        Ok(out.squeeze(0)?.to_vec2()?)
    };
    let causal = MaskPlan::uniform(AttentionMask::Causal, n);
    let consecutive = d.consecutive_positions(0, t, &dev)?;
    let base: Vec<Vec<f32>> =
        d.forward(&embeds, &mut model.new_cache(), &AttentionMask::Causal)?.squeeze(0)?.to_vec2()?;
    assert_eq!(run(&causal, &consecutive)?, base);

    let max_diff = |a: &[Vec<f32>], b: &[Vec<f32>], row: usize| {
        a[row].iter().zip(&b[row]).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
    };
    let mut layers = vec![AttentionMask::Causal; n];
    layers[n - 1] = AttentionMask::SlidingWindow { window: 1 };
    let windowed = run(&MaskPlan::per_layer(layers), &consecutive)?;
    assert_eq!(max_diff(&windowed, &base, 0), 0.0);
    for row in 1..t {
        assert!(max_diff(&windowed, &base, row) > 1e-3, "row {row}: the last layer's window was ignored");
    }

    let shifted = candle_core::Tensor::arange(5u32, 5 + t as u32, &dev)?;
    let out = run(&causal, &shifted)?;
    for row in 0..t {
        assert!(max_diff(&out, &base, row) < 1e-4, "row {row}: a constant shift moved the output");
    }
    let scrambled = candle_core::Tensor::new(&[0u32, 1, 2, 3, 40, 5, 6, 7], &dev)?;
    let out = run(&causal, &scrambled)?;
    assert_eq!(max_diff(&out, &base, 3), 0.0, "rows before the changed position are unaffected");
    assert!(max_diff(&out, &base, 4) > 1e-3, "an explicit position is used");

    let short = MaskPlan::uniform(AttentionMask::Causal, n - 1);
    let err = d.forward_traced(&embeds, &mut model.new_cache(), &short, &consecutive, &mut Trace::default());
    assert!(err.unwrap_err().to_string().contains("mask plan"));
    let few = d.consecutive_positions(0, t - 1, &dev)?;
    let err = d.forward_traced(&embeds, &mut model.new_cache(), &causal, &few, &mut Trace::default());
    assert!(err.unwrap_err().to_string().contains("positions"));
    Ok(())
}
