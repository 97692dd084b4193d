//! The per-layer decoder pieces against transformers' `Gemma4TextModel`
//! (scripts/reference_gemma4_text.py → tests/fixtures/gemma4_text): a decoder whose sliding and
//! full layers differ in head size, with proportional RoPE, layers reusing earlier layers' keys
//! and values, double-wide MLPs, per-layer inputs, layer scalars and value norms (`e2b.`), and
//! one whose full layers take their values from the key projection (`k_eq_v.`). The final
//! hidden states of an 11-token sequence, whole and run a token at a time through the cache.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, IndexOp, Tensor};
use tessera_decoder::{
    Activation, AttentionMask, Decoder, DecoderConfig, LayerInputs, LayerShape, LayerVariants, LocalRope, MaskPlan,
    NormStyle, PerLayerEmbedding, RopeConfig, RopeScaling, Trace, Weights,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const WINDOW: usize = 4;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4_text").join(name)
}

fn reference() -> Result<HashMap<String, Tensor>> {
    Ok(candle_core::safetensors::load(fixture("reference.safetensors"), &Device::Cpu)?)
}

fn weights(prefix: &str) -> Result<Weights> {
    let vb = Weights::from_safetensors(&[fixture("weights.safetensors")], DType::F32, &Device::Cpu)?;
    Ok(vb.pp(prefix.trim_end_matches('.')))
}

/// One of the script's two models: `full[i]` marks the full-attention layers, `shared` how many
/// last layers reuse keys and values, `ple` the per-layer input width.
struct Tiny {
    full: Vec<bool>,
    shared: usize,
    ple: Option<usize>,
    k_eq_v: bool,
    global_kv_heads: usize,
}

impl Tiny {
    fn e2b() -> Self {
        let full = [false, false, true].repeat(2);
        Self { full, shared: 3, ple: Some(4), k_eq_v: false, global_kv_heads: 2 }
    }

    fn k_eq_v() -> Self {
        let full = [false, true].repeat(2);
        Self { full, shared: 0, ple: None, k_eq_v: true, global_kv_heads: 1 }
    }

    fn config(&self) -> DecoderConfig {
        let n = self.full.len();
        let first_shared = n - self.shared;
        let shapes = (0..n)
            .map(|i| {
                let full = self.full[i];
                // The last layer of the same kind before the shared ones.
                let source =
                    (i >= first_shared).then(|| (0..first_shared).rev().find(|&j| self.full[j] == full)).flatten();
                LayerShape {
                    head_dim: if full { 16 } else { 8 },
                    num_key_value_heads: if full { self.global_kv_heads } else { 2 },
                    intermediate_size: if source.is_some() { 96 } else { 48 },
                    k_eq_v: full && self.k_eq_v,
                    kv_source: source,
                }
            })
            .collect();
        let rope = |theta, scaling| RopeConfig { theta, scaling, ..RopeConfig::default() };
        DecoderConfig {
            hidden_size: 32,
            intermediate_size: 48,
            num_hidden_layers: n,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 8,
            rms_norm_eps: 1e-6,
            rope: rope(1e6, RopeScaling::Proportional { fraction: 0.25, factor: 1.0 }),
            max_position_embeddings: 64,
            qkv_bias: false,
            hidden_act: Activation::GeluTanh,
            norm_style: NormStyle::Plain,
            query_pre_attn_scalar: Some(1.0),
            position_offset: 0,
            attn_logit_softcapping: None,
            sandwich_norms: true,
            qk_norm: true,
            local_rope: Some(LocalRope {
                rope: rope(1e4, RopeScaling::Default),
                layers: self.full.iter().map(|f| !f).collect(),
            }),
            rotary_dim: None,
            attn_output_gate: false,
            linear: None,
            variants: Some(LayerVariants { shapes, value_norm: true, per_layer_input: self.ple, layer_scalar: true }),
        }
    }

    fn masks(&self) -> MaskPlan {
        MaskPlan::per_layer(
            self.full
                .iter()
                .map(|&f| if f { AttentionMask::Causal } else { AttentionMask::SlidingWindow { window: WINDOW } })
                .collect(),
        )
    }
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

/// The decoder's hidden states for the reference's embeddings, run in pieces of the given lengths.
fn run(tiny: &Tiny, prefix: &str, pieces: &[usize]) -> Result<Tensor> {
    let r = reference()?;
    let vb = weights(prefix)?;
    let cfg = tiny.config();
    let decoder = Decoder::new(&cfg, &vb)?;
    let embeds = &r[&format!("{prefix}embeds")];
    let per_layer = match tiny.ple {
        Some(dim) => {
            let ple = PerLayerEmbedding::load(64, 32, cfg.num_hidden_layers, dim, 1e-6, &vb)?;
            let ids = r[&format!("{prefix}ids")].to_dtype(DType::U32)?;
            let p = ple.forward(&ids, embeds)?;
            let d = max_diff(&p, &r[&format!("{prefix}per_layer_inputs")])?;
            assert!(d < 1e-5, "{prefix}: the per-layer inputs differ from transformers' by {d}");
            Some(p)
        }
        None => None,
    };
    let (mut cache, mut at, mut outs) = (decoder.new_cache(), 0, Vec::new());
    for &n in pieces {
        let positions = decoder.consecutive_positions(at, n, &Device::Cpu)?;
        let p = match &per_layer {
            Some(p) => Some(p.i((.., at..at + n))?),
            None => None,
        };
        let inputs = LayerInputs { additions: &[], per_layer: p.as_ref() };
        let x = embeds.i((.., at..at + n))?;
        outs.push(decoder.forward_with_inputs(
            &x,
            &mut cache,
            &tiny.masks(),
            &positions,
            inputs,
            &mut Trace::default(),
        )?);
        at += n;
    }
    Ok(Tensor::cat(&outs, 1)?)
}

fn check(tiny: &Tiny, prefix: &str, pieces: &[usize]) -> Result<()> {
    let expected = &reference()?[&format!("{prefix}hidden")];
    let scale = expected.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    assert!(scale > 0.1, "{prefix}: the reference hidden states are too small to test against ({scale})");
    let d = max_diff(&run(tiny, prefix, pieces)?, expected)?;
    assert!(d < 1e-4, "{prefix} in pieces {pieces:?}: the hidden states differ from transformers' by {d}");
    Ok(())
}

#[test]
fn shared_kv_per_layer_inputs_match_transformers() -> Result<()> {
    check(&Tiny::e2b(), "e2b.", &[11])
}

#[test]
fn shared_kv_per_layer_inputs_through_the_cache() -> Result<()> {
    // A prefill longer than the window, then one token at a time as decoding runs.
    check(&Tiny::e2b(), "e2b.", &[6, 1, 1, 1, 1, 1])
}

#[test]
fn values_from_the_key_projection_match_transformers() -> Result<()> {
    check(&Tiny::k_eq_v(), "k_eq_v.", &[11])?;
    check(&Tiny::k_eq_v(), "k_eq_v.", &[5, 1, 3, 1, 1])
}

#[test]
fn a_layer_cannot_reuse_a_later_or_different_layer() -> Result<()> {
    let tiny = Tiny::e2b();
    let mut cfg = tiny.config();
    let Some(v) = cfg.variants.as_mut() else { return Err("the e2b config has variants".into()) };
    v.shapes[3].kv_source = Some(2); // a sliding layer cannot reuse a full layer's 16-wide heads
    let err = Decoder::new(&cfg, &weights("e2b.")?).err().ok_or("the mismatched source is refused")?;
    assert!(err.to_string().contains("layer 3 cannot reuse"), "{err}");
    Ok(())
}
