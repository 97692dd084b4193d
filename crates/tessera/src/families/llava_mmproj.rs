//! LLaVA's image side (1.5: CLIP; interleave: SigLIP) as llama.cpp writes it into an mmproj
//! (`tessera quantize`): its documented route, `llava_surgery_v2.py` then
//! `tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py --llava-projector` (llama.cpp
//! 0c1e57098; `convert_hf_to_gguf.py --mmproj` converts only Pixtral under LLaVA). What
//! [`from_mmproj`](super::llava::from_mmproj) reads back. The script:
//! - keeps the tower's layers below the feature layer `k` (`clip.vision.block_count = k`,
//!   `clip.vision.feature_layer = [k]`) and drops `post_layernorm`;
//! - names each layer's `fc1` `ffn_down` and `fc2` `ffn_up` (llama.cpp's `clip.cpp` swaps them
//!   back), so llama-quantize's rules see them under those names too;
//! - writes `clip.use_gelu` for a GELU tower: tessera writes it for the tanh form too (SigLIP's
//!   `gelu_pytorch_tanh`, which the script, comparing with `"gelu"`, would leave as quick GELU).

use serde_json::Value;
use tessera_decoder::gguf_write::MetaValue::{Bool, F32s, I32s, Str, F32};
use tessera_decoder::Activation;
use tessera_vision::{FeatureLayer, TowerKind};

use super::image::{
    gguf_u32, processor_stats, under_roots, MmprojMetadata, MmprojTensor, ProcessorSettings, CLIP_MEAN, CLIP_STD,
};
use super::llava::{PROJECTOR_ROOTS, TOWER_ROOTS};
use super::tower::TowerSpec;

/// The `clip.*` metadata in the script's order. `config`: the folder's config.json (the
/// CLIP tower's `projection_dim`, whether `vision_feature_layer` is stated).
pub(super) fn metadata(spec: &TowerSpec, settings: &ProcessorSettings, config: &Value) -> MmprojMetadata {
    let t = &spec.tower;
    let u = gguf_u32;
    let FeatureLayer::Hidden(k) = spec.feature else {
        return Err("llama.cpp's LLaVA projector reads a hidden layer of the tower, not its post-norm".into());
    };
    let projection_dim = match t.kind {
        // The script writes 0 for SigLIP, which has no projection; CLIPVisionConfig's default 512.
        TowerKind::Siglip => 0,
        TowerKind::Clip => config["vision_config"]["projection_dim"].as_u64().unwrap_or(512) as usize,
    };
    let use_gelu = match t.hidden_act {
        Activation::Gelu | Activation::GeluTanh => true,
        Activation::QuickGelu => false,
        other => return Err(format!("llama.cpp's LLaVA tower runs GELU or quick GELU, not {other:?}")),
    };
    let mut md = vec![
        ("general.architecture".to_string(), Str("clip".into())),
        ("clip.has_text_encoder".into(), Bool(false)),
        ("clip.has_vision_encoder".into(), Bool(true)),
        ("clip.has_llava_projector".into(), Bool(true)),
        ("general.description".into(), Str("image encoder for LLaVA".into())),
        ("clip.projector_type".into(), Str("mlp".into())),
        ("clip.vision.image_size".into(), u(t.image_size)?),
        ("clip.vision.patch_size".into(), u(t.patch_size)?),
        ("clip.vision.embedding_length".into(), u(t.hidden_size)?),
        ("clip.vision.feed_forward_length".into(), u(t.intermediate_size)?),
        ("clip.vision.projection_dim".into(), u(projection_dim)?),
        ("clip.vision.attention.head_count".into(), u(t.num_attention_heads)?),
        ("clip.vision.attention.layer_norm_epsilon".into(), F32(t.layer_norm_eps as f32)),
        ("clip.vision.block_count".into(), u(k)?),
    ];
    if !config["vision_feature_layer"].is_null() {
        let k = i32::try_from(k).map_err(|_| format!("feature layer {k} does not fit a GGUF i32"))?;
        md.push(("clip.vision.feature_layer".into(), I32s(vec![k])));
    }
    md.push(("clip.vision.image_mean".into(), F32s(processor_stats(settings, "image_mean", CLIP_MEAN)?)));
    md.push(("clip.vision.image_std".into(), F32s(processor_stats(settings, "image_std", CLIP_STD)?)));
    md.push(("clip.use_gelu".into(), Bool(use_gelu)));
    Ok(md)
}

/// The mmproj tensor of the checkpoint tensor `stored`, named as
/// [`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name) reads it (the tower under
/// `model.vision_model.`, `fc1`/`fc2` swapped); none for what the script drops.
pub(super) fn tensors(spec: &TowerSpec, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    let one = |name: String| vec![MmprojTensor::named(name, dims)];
    if let Some(rest) = under_roots(stored, PROJECTOR_ROOTS) {
        return one(format!("multi_modal_projector.{rest}"));
    }
    let Some(rest) = under_roots(stored, TOWER_ROOTS) else { return one(stored.to_string()) };
    let layer = rest.strip_prefix("encoder.layers.").and_then(|r| r.split('.').next()?.parse::<usize>().ok());
    let kept = match spec.feature {
        FeatureLayer::Hidden(k) => layer.is_none_or(|l| l < k),
        FeatureLayer::PostNorm => true,
    };
    if !kept || rest.starts_with("post_layernorm.") {
        return Vec::new();
    }
    let swapped = if rest.contains(".mlp.fc1.") {
        rest.replace(".mlp.fc1.", ".mlp.fc2.")
    } else {
        rest.replace(".mlp.fc2.", ".mlp.fc1.")
    };
    one(format!("model.vision_model.{swapped}"))
}
