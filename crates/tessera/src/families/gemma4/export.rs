//! Gemma 4 written as llama.cpp's converter writes it (`tessera quantize`; `conversion/gemma.py`,
//! llama.cpp 0c1e57098 as llama-cpp-python 0.3.36 vendors it):
//! - the text model as `Gemma4Model` writes the `gemma4` GGUF: norms as stored (its
//!   `norm_shift` is 0), the per-layer keys (MLP widths, sliding-window pattern, the full and
//!   sliding heads' widths and RoPE dimensions, KV-shared layers, the per-layer input width),
//!   the generated `rope_freqs` (the full layers' "proportional" RoPE), the `gemma4`
//!   vocabulary (`LlamaHfVocab`, its `visible_tokens` USER_DEFINED);
//! - the image side as `Gemma4VisionAudioModel` writes the `gemma4v` mmproj: the clip header
//!   (image size 224, "unused"), the projector type, the tower's epsilon, and
//!   `clip.vision.projector.scale_factor` — the pooling kernel, which the converter leaves out
//!   and `clip.cpp` then takes as 3 (real Gemma 4's); tessera writes it, as the pair fixture
//!   stages it. The patch embedding `(d, p·p·3)` becomes the Conv2d kernel `(d, 3, p, p)`, the
//!   clipped linears' 0-d bounds 1-d.
//!
//! Where the converter writes a per-layer array or a scalar by what the config states
//! (`head_count_kv` with `num_global_key_value_heads`, `feed_forward_length` with
//! `use_double_wide_mlp`), tessera writes the array where the layers differ, the scalar where
//! they agree.

use std::sync::Arc;

use serde_json::Value;
use tessera_decoder::gguf_write::MetaValue;
use tessera_decoder::RopeScaling;

use super::Gemma4Spec;
use crate::families::image::ProcessorSettings;
use crate::families::image::{gguf_u32, processor_stats, under_roots, ClipHeader, MmprojMetadata, MmprojTensor};
use crate::families::text::{GeneratedTensor, GgufTextWriter, HfVocab, TensorChange};
use crate::families::ModelConfig;
use tessera_decoder::DecoderConfig;

/// `Gemma4Model.set_vocab`'s `visible_tokens`: special, but written USER_DEFINED.
const VISIBLE: [&str; 7] =
    ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>"];

pub(crate) const GGUF_WRITER: GgufTextWriter = GgufTextWriter {
    keys: no_keys,
    tensor: no_change,
    layout: Some(layout_keys),
    generated: rope_freqs,
    hf_vocab: Some(HfVocab { model: "gemma4", user_defined: &VISIBLE }),
};

fn no_keys(_: &DecoderConfig, _: &str) -> Result<Vec<(String, MetaValue)>, String> {
    Ok(Vec::new())
}

fn no_change(_: &DecoderConfig, _: &str, _: &[usize]) -> Option<TensorChange> {
    None
}

/// The full layers' head width and "proportional" RoPE fraction, the sliding layers' head
/// width and rotated share; else why llama.cpp's `gemma4` does not lay the model out so.
fn heads(config: &ModelConfig) -> Result<(usize, f64, usize, f64), String> {
    let d = &config.decoder;
    let shapes = &d.variants.as_ref().ok_or("Gemma 4's decoder has no per-layer shapes")?.shapes;
    let sliding = |i: usize| config.layer_windows.get(i).is_some_and(Option::is_some);
    let full = (0..shapes.len()).find(|&i| !sliding(i)).ok_or("Gemma 4's converter needs a full-attention layer")?;
    let swa_dim = (0..shapes.len()).find(|&i| sliding(i)).map_or(d.head_dim, |i| shapes[i].head_dim);
    let fraction = match d.rope.scaling {
        RopeScaling::Proportional { fraction, factor: 1.0 } => fraction,
        other => {
            return Err(format!("the full layers' RoPE {other:?} is not llama.cpp's `gemma4` (proportional, factor 1)"))
        }
    };
    let swa_fraction = match d.local_rope.as_ref().map(|l| l.rope.scaling) {
        None | Some(RopeScaling::Default) => 1.0,
        Some(RopeScaling::Proportional { fraction, factor: 1.0 }) => fraction,
        Some(other) => return Err(format!("the sliding layers' RoPE {other:?} is not written to GGUF by tessera")),
    };
    Ok((shapes[full].head_dim, fraction, swa_dim, swa_fraction))
}

/// `Gemma4Model.set_gguf_parameters`' keys beyond the common ones (and those it overwrites).
fn layout_keys(config: &ModelConfig) -> Result<Vec<(String, MetaValue)>, String> {
    let d = &config.decoder;
    let v = d.variants.as_ref().ok_or("Gemma 4's decoder has no per-layer shapes")?;
    let (full_dim, _, swa_dim, swa_fraction) = heads(config)?;
    let key = |k: &str| format!("gemma4.{k}");
    let i32s = |xs: Vec<usize>| -> Result<MetaValue, String> {
        xs.into_iter()
            .map(|x| i32::try_from(x).map_err(|_| format!("{x} does not fit a GGUF i32")))
            .collect::<Result<Vec<i32>, String>>()
            .map(MetaValue::I32s)
    };
    let per_layer = |f: fn(&tessera_decoder::LayerShape) -> usize| -> Result<MetaValue, String> {
        let xs: Vec<usize> = v.shapes.iter().map(f).collect();
        match xs.windows(2).all(|w| w[0] == w[1]) {
            true => gguf_u32(xs.first().copied().unwrap_or(0)),
            false => i32s(xs),
        }
    };
    let window = config.layer_windows.iter().flatten().next().copied();
    let mut md = vec![
        (key("feed_forward_length"), per_layer(|s| s.intermediate_size)?),
        (key("attention.head_count_kv"), per_layer(|s| s.num_key_value_heads)?),
        (key("attention.key_length"), gguf_u32(full_dim)?),
        (key("attention.value_length"), gguf_u32(full_dim)?),
    ];
    if let Some(local) = &d.local_rope {
        md.push((key("rope.freq_base_swa"), MetaValue::F32(local.rope.theta as f32)));
    }
    if let Some(cap) = config.final_logit_softcapping {
        md.push((key("final_logit_softcapping"), MetaValue::F32(cap as f32)));
    }
    if let Some(w) = window {
        md.push((key("attention.sliding_window"), gguf_u32(w)?));
    }
    let shared = v.shapes.iter().filter(|s| s.kv_source.is_some()).count();
    md.extend([
        (key("attention.shared_kv_layers"), gguf_u32(shared)?),
        (key("embedding_length_per_layer_input"), gguf_u32(v.per_layer_input.unwrap_or(0))?),
        (
            key("attention.sliding_window_pattern"),
            MetaValue::Bools(config.layer_windows.iter().map(Option::is_some).collect()),
        ),
        (key("attention.key_length_swa"), gguf_u32(swa_dim)?),
        (key("attention.value_length_swa"), gguf_u32(swa_dim)?),
        (key("rope.dimension_count"), gguf_u32(full_dim)?),
        (key("rope.dimension_count_swa"), gguf_u32((swa_dim as f64 * swa_fraction) as usize)?),
    ]);
    Ok(md)
}

/// `Gemma4Model.generate_extra_tensors`: `rope_freqs` over the full head's frequency pairs, 1
/// for the rotated share and 1e30 (no rotation) for the rest.
fn rope_freqs(config: &ModelConfig) -> Vec<GeneratedTensor> {
    let Ok((full_dim, fraction, _, _)) = heads(config) else { return Vec::new() };
    let rotated = (full_dim as f64 * fraction / 2.0) as usize;
    let pairs = full_dim / 2;
    let values = (0..pairs).map(|i| if i < rotated { 1.0 } else { 1e30 }).collect();
    vec![GeneratedTensor { name: "rope_freqs.weight".into(), dims: vec![pairs], values }]
}

/// What `Gemma4VisionAudioModel.set_gguf_parameters` writes (see the module docs).
pub(super) fn mmproj_metadata(
    spec: &Gemma4Spec,
    settings: &ProcessorSettings,
    config: &Value,
    text_hidden: usize,
) -> MmprojMetadata {
    let t = &spec.tower;
    let eps = config["vision_config"]["layer_norm_eps"].as_f64().unwrap_or(1e-6);
    let mut md = ClipHeader {
        projection_dim: text_hidden,
        image_size: 224,
        patch_size: t.patch_size,
        width: t.hidden_size,
        feed_forward: t.intermediate_size,
        blocks: t.num_hidden_layers,
        heads: t.num_attention_heads,
        mean: processor_stats(settings, "image_mean", [0.0; 3])?,
        std: processor_stats(settings, "image_std", [1.0; 3])?,
    }
    .keys()?;
    md.extend([
        ("clip.vision.projector_type".into(), MetaValue::Str("gemma4v".into())),
        ("clip.vision.attention.layer_norm_epsilon".into(), MetaValue::F32(eps as f32)),
        ("clip.vision.projector.scale_factor".into(), gguf_u32(t.pooling_kernel_size)?),
    ]);
    Ok(md)
}

/// The checkpoint's image tensors under the root `gemma4v.`
/// ([`tessera_decoder::gemma4v_names`]): the patch embedding as the Conv2d kernel, 0-d bounds
/// as 1-d.
pub(super) fn mmproj_tensors(stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    let rest = under_roots(stored, &["model"]).unwrap_or(stored);
    let mut piece = MmprojTensor::named(format!("gemma4v.{rest}"), dims);
    match dims {
        [] => piece.dims = vec![1],
        [d, k] if rest == "vision_tower.patch_embedder.input_proj.weight" && k % 3 == 0 => {
            let p = ((k / 3) as f64).sqrt().round() as usize;
            if p * p * 3 == *k {
                let (d, p) = (*d, p);
                piece.name = "gemma4v.vision_tower.patch_embedder.conv.weight".into();
                piece.dims = vec![d, 3, p, p];
                // (d, p, p, 3) → (d, 3, p, p).
                let values = Arc::new(move |x: Vec<f32>| {
                    let mut out = vec![0.0; x.len()];
                    for o in 0..d {
                        for y in 0..p {
                            for xx in 0..p {
                                for c in 0..3 {
                                    out[((o * 3 + c) * p + y) * p + xx] = x[((o * p + y) * p + xx) * 3 + c];
                                }
                            }
                        }
                    }
                    out
                });
                piece.change = Some(TensorChange { dims: piece.dims.clone(), values });
            }
        }
        _ => {}
    }
    vec![piece]
}
