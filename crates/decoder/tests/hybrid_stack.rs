//! The decoder stack with Gated DeltaNet layers beside attention layers (Qwen3.5's text model)
//! against transformers' `Qwen3_5TextModel` (scripts/reference_qwen3_5_text.py →
//! tests/fixtures/qwen3_5_text): three linear-attention layers and one gated, partially rotated
//! attention layer, (1+w) norms, text positions and three distinct M-RoPE streams. Then the
//! cache's per-sequence states: a prompt run whole, in chunks or a token at a time gives the same
//! outputs bit for bit (under the kernels' row-invariant matmuls), a batched decode step carries one
//! state per row and gives each row what it gets alone, the states count in the cache's bytes, and a
//! cache holding them is copied whole or not at all.

use std::path::PathBuf;

use candle_core::{DType, Device, IndexOp, Tensor};
use tessera_decoder::{
    Activation, AttentionMask, Decoder, DecoderConfig, GatedDeltaConfig, KvCache, LinearLayers, MRope, MaskPlan,
    NormStyle, RopeConfig, Trace, Weights,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3_5_text").join(name)
}

/// The reference script's model, as Qwen3.5's config maps onto the decoder.
fn config() -> DecoderConfig {
    let rope = RopeConfig {
        theta: 10_000.0,
        mrope: Some(MRope { section: [2, 1, 1], interleaved: true }),
        ..Default::default()
    };
    DecoderConfig {
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 4,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 32,
        rms_norm_eps: 1e-6,
        rope,
        max_position_embeddings: 256,
        qkv_bias: false,
        hidden_act: Activation::Silu,
        norm_style: NormStyle::OnePlusWeight,
        query_pre_attn_scalar: None,
        position_offset: 0,
        attn_logit_softcapping: None,
        sandwich_norms: false,
        qk_norm: true,
        local_rope: None,
        variants: None,
        rotary_dim: Some(8),
        attn_output_gate: true,
        linear: Some(LinearLayers {
            delta: GatedDeltaConfig {
                hidden_size: 32,
                key_heads: 2,
                value_heads: 4,
                key_head_dim: 8,
                value_head_dim: 6,
                conv_kernel: 4,
                eps: 1e-6,
                layout: Default::default(),
            },
            layers: vec![true, true, true, false],
        }),
    }
}

fn decoder(cfg: &DecoderConfig) -> Result<Decoder> {
    let vb = Weights::from_safetensors(&[fixture("weights.safetensors")], DType::F32, &Device::Cpu)?;
    Ok(Decoder::new(cfg, &vb)?)
}

fn reference() -> Result<std::collections::HashMap<String, Tensor>> {
    Ok(candle_core::safetensors::load(fixture("reference.safetensors"), &Device::Cpu)?)
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?.into_iter().map(f32::to_bits).collect())
}

/// The stack's output for `embeds` run in pieces of the given lengths over one cache, at
/// text positions.
fn in_pieces(dec: &Decoder, embeds: &Tensor, pieces: &[usize]) -> Result<(Tensor, KvCache)> {
    let mut cache = dec.new_cache();
    let (mut at, mut outs) = (0, Vec::new());
    for &n in pieces {
        outs.push(dec.forward(&embeds.i((.., at..at + n, ..))?, &mut cache, &AttentionMask::Causal)?);
        at += n;
    }
    assert_eq!(at, embeds.dim(1)?, "the pieces cover the sequence");
    Ok((Tensor::cat(&outs, 1)?, cache))
}

#[test]
fn hybrid_stack_matches_transformers_qwen3_5_text_model() -> Result<()> {
    let reference = reference()?;
    let embeds = &reference["embeds"];
    let dec = decoder(&config())?;
    let (hidden, _) = in_pieces(&dec, embeds, &[13])?;
    let d = max_diff(&hidden, &reference["hidden"])?;
    eprintln!("text positions: max |tessera − transformers| = {d:e}");
    assert!(d < 1e-4, "text positions: the hidden states differ from transformers' by {d}");

    let positions = reference["positions"].to_dtype(DType::U32)?;
    let mut cache = dec.new_cache();
    let masks = MaskPlan::uniform(AttentionMask::Causal, 4);
    let hidden = dec.forward_traced(embeds, &mut cache, &masks, &positions, &mut Trace::default())?;
    let d = max_diff(&hidden, &reference["hidden_mrope"])?;
    eprintln!("M-RoPE positions: max |tessera − transformers| = {d:e}");
    assert!(d < 1e-4, "M-RoPE positions: the hidden states differ from transformers' by {d}");
    Ok(())
}

/// The linear-attention layers alone (the reference's first three): what their states carry
/// between chunks is all that a chunk boundary changes.
fn linear_layers_only() -> Result<Decoder> {
    let mut cfg = config();
    cfg.num_hidden_layers = 3;
    if let Some(linear) = cfg.linear.as_mut() {
        linear.layers.truncate(3);
    }
    decoder(&cfg)
}

#[test]
fn chunked_prefill_and_token_by_token_decode_carry_the_states_bit_for_bit() -> Result<()> {
    let reference = reference()?;
    let embeds = &reference["embeds"];
    let (hybrid, linear) = (decoder(&config())?, linear_layers_only()?);
    let (whole, cache) = tessera_decoder::row_invariant(|| in_pieces(&linear, embeds, &[13]))?;
    let (hybrid_whole, _) = tessera_decoder::row_invariant(|| in_pieces(&hybrid, embeds, &[13]))?;
    assert_eq!(cache.len(), 13);
    for pieces in [vec![6, 7], vec![4, 1, 8], vec![1; 13]] {
        let (y, c) = tessera_decoder::row_invariant(|| in_pieces(&linear, embeds, &pieces))?;
        assert_eq!(bits(&y)?, bits(&whole)?, "{pieces:?}");
        assert_eq!((c.len(), c.bytes()), (cache.len(), cache.bytes()), "{pieces:?}");
        // With the attention layer on top: its softmax over a different number of queries at a
        // time rounds differently (as in every family's chunked prefill), within f32 rounding.
        let (y, _) = tessera_decoder::row_invariant(|| in_pieces(&hybrid, embeds, &pieces))?;
        let d = max_diff(&y, &hybrid_whole)?;
        assert!(d < 1e-5, "{pieces:?}: the hybrid stack in pieces differs from the whole by {d}");
    }
    Ok(())
}

#[test]
fn a_batched_decode_step_carries_one_state_per_row() -> Result<()> {
    let reference = reference()?;
    let embeds = &reference["embeds"];
    let dec = decoder(&config())?;
    // Two sequences of different lengths (5 and 9 positions), each continued by its next row.
    let step = |lens: [usize; 2]| -> Result<(Vec<Tensor>, Tensor)> {
        let mut caches = Vec::new();
        let mut alone = Vec::new();
        for len in lens {
            let (_, mut cache) = in_pieces(&dec, &embeds.i((.., ..len, ..))?, &[len])?;
            caches.push(cache.clone());
            alone.push(dec.forward(&embeds.i((.., len..len + 1, ..))?, &mut cache, &AttentionMask::Causal)?);
        }
        let rows = Tensor::cat(&[embeds.i((.., 5..6, ..))?, embeds.i((.., 9..10, ..))?], 1)?;
        let positions = dec.row_positions(&[5, 9], &Device::Cpu)?;
        let positions = Tensor::stack(&[&positions, &positions, &positions], 0)?;
        let masks = MaskPlan::uniform(AttentionMask::Causal, 4);
        let batched = dec.forward_rows(&rows, &mut caches, &masks, &positions)?;
        Ok((alone, batched))
    };
    let (alone, batched) = tessera_decoder::row_invariant(|| step([5, 9]))?;
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(bits(&batched.i((.., i..i + 1, ..))?)?, bits(a)?, "row {i}");
    }
    // The rows' states differ: swapping them changes the outputs.
    let d = max_diff(&alone[0], &alone[1])?;
    assert!(d > 1e-3, "the two sequences' next outputs do not differ ({d})");
    Ok(())
}

#[test]
fn a_cache_with_linear_states_counts_them_and_is_copied_only_whole() -> Result<()> {
    let reference = reference()?;
    let embeds = &reference["embeds"];
    let dec = decoder(&config())?;
    let (_, cache) = in_pieces(&dec, &embeds.i((.., ..8, ..))?, &[8])?;
    assert!(cache.is_recurrent());
    // Three linear layers' states (conv 56×3 and 4 heads of 8×6, f32) beside the attention layer's keys.
    let states = 3 * (56 * 3 + 4 * 8 * 6) * 4;
    let keys = 2 * 2 * 256 * 32 * 4; // k and v, 2 heads, the initial 256 positions, 32 dims
    assert_eq!(cache.bytes(), states + keys);
    let err = cache.copy_prefix(7).err().ok_or("a recurrent cache was cut at 7 of 8 positions")?;
    assert!(err.to_string().contains("cannot be cut"), "{err}");
    // Copied whole, it continues exactly as the original.
    let mut copy = cache.resume_from(8)?;
    let mut original = cache.clone();
    let next = embeds.i((.., 8..9, ..))?;
    let a = dec.forward(&next, &mut original, &AttentionMask::Causal)?;
    let b = dec.forward(&next, &mut copy, &AttentionMask::Causal)?;
    assert_eq!(bits(&a)?, bits(&b)?);
    // A cleared cache starts a new sequence from zero states.
    let mut cleared = cache.clone();
    cleared.clear();
    assert!(!cleared.is_recurrent());
    let (fresh, _) = in_pieces(&dec, &next, &[1])?;
    assert_eq!(bits(&dec.forward(&next, &mut cleared, &AttentionMask::Causal)?)?, bits(&fresh)?);
    Ok(())
}
