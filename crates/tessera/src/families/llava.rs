//! LLaVA (1.5, interleave, NeXT-less): a CLIP or SigLIP tower read at `vision_feature_layer`
//! (without CLIP's class token under the `default` select strategy), a two-layer projector,
//! a Llama or Qwen2 decoder; each `<image>` expands into one token per feature.

use std::sync::Arc;

use serde::Deserialize;
use tessera_decoder::Activation;
use tessera_vision::{FeatureLayer, TowerKind, VisionTowerConfig};

use super::mmproj::{MmprojInput, MmprojSide};
use super::text::{TextFamily, TextSubConfig};
use super::tower::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, WeightRoots};
use super::vit::{VisionClass, VisionFields};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};

#[derive(Debug, Deserialize)]
pub struct LlavaConfig {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    image_token_index: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    vision_feature_layer: Option<FeatureLayers>,
    #[serde(default)]
    vision_feature_select_strategy: Option<SelectStrategy>,
    #[serde(default)]
    projector_hidden_act: Option<Activation>,
    #[serde(default)]
    multimodal_projector_bias: Option<bool>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FeatureLayers {
    One(i64),
    Many(Vec<i64>),
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SelectStrategy {
    /// Drop the class token.
    Default,
    Full,
}

/// The tower and projector weights: transformers < 4.52 and 5's `save_pretrained` write
/// `vision_tower.vision_model` / `multi_modal_projector`; the newer layout nests them in `model`.
pub(super) const TOWER_ROOTS: &[&str] =
    &["vision_tower.vision_model", "vision_tower", "model.vision_tower.vision_model", "model.vision_tower"];
pub(super) const PROJECTOR_ROOTS: &[&str] = &["multi_modal_projector", "model.multi_modal_projector"];

impl LlavaConfig {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Llama)?;
        let class = self.vision_config.model_type.unwrap_or(VisionClass::Clip);
        let tower = class.resolve(&self.vision_config).map_err(|e| format!("vision_config: {e}"))?;
        let feature_layer = match self.vision_feature_layer {
            None => -2,
            Some(FeatureLayers::One(k)) => k,
            Some(FeatureLayers::Many(ref list)) => {
                return Err(format!(
                    "vision_feature_layer must be one integer; lists of layers ({list:?}) are not supported"
                ))
            }
        };
        let layers = tower.num_hidden_layers as i64;
        let k = if feature_layer < 0 { layers + 1 + feature_layer } else { feature_layer };
        if !(0..=layers).contains(&k) {
            return Err(format!("vision_feature_layer {feature_layer} is out of range for a {layers}-layer tower"));
        }
        let drop_class_token =
            matches!(self.vision_feature_select_strategy.unwrap_or(SelectStrategy::Default), SelectStrategy::Default);
        let spec = TowerSpec {
            feature: FeatureLayer::Hidden(k as usize),
            drop_class_token,
            connector: ConnectorConfig::Mlp {
                act: self.projector_hidden_act.unwrap_or(Activation::Gelu),
                bias: self.multimodal_projector_bias.unwrap_or(true),
            },
            image_token_id: self.image_token_index.or(self.image_token_id).unwrap_or(32000),
            placeholder: Placeholder::ImageToken,
            processor: ProcessorRule::Single {
                tokens: tower.num_positions() - usize::from(drop_class_token),
                stated_len: None,
                pan_and_scan: false,
            },
            weights: WeightRoots { tower: TOWER_ROOTS, connector: PROJECTOR_ROOTS, connector_probe: "" },
            tower,
        };
        Ok(ModelConfig::vlm(
            "llava",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            spec,
        ))
    }
}

/// The image side of an `mmproj` GGUF of projector type `mlp`: LLaVA 1.5 (CLIP) or
/// LLaVA-interleave (SigLIP) as llama.cpp's legacy `convert_image_encoder_to_gguf.py
/// --llava-projector` writes it (after `llava_surgery_v2.py`), and its processor settings in
/// `preprocessor_config.json`'s terms. The image token is the text model's `<image>`.
///
/// What llama.cpp's `clip.cpp` (`clip_graph_llava`) makes of the file, and so tessera:
/// - the tower: CLIP when the file holds a class embedding (`v.class_embd`, with `v.pre_ln`),
///   else SigLIP; `clip.vision.block_count` layers are stored (the script drops those past the
///   feature layer); the features are `hidden_states[k]` for `clip.vision.feature_layer = [k]`
///   (what the script writes from the config's `vision_feature_layer`) and, without that key,
///   `hidden_states[block_count − 1]`; no post-norm. The class token is dropped (the
///   `default` select strategy) when there is one. `clip.use_gelu` true is the tanh GELU
///   (`ggml_gelu`), `clip.use_silu` SiLU, neither CLIP's quick GELU;
/// - the projector: `mm.0` → GELU → `mm.2` (transformers' `projector_hidden_act` "gelu", the
///   erf form, as the folder computes; llama.cpp's `ggml_gelu` is the tanh approximation), its
///   width the rows of `mm.2.weight`; the script names each block's `fc1` `ffn_down`, which the
///   reader swaps back;
/// - the processor: CLIP's (LLaVA 1.5: shortest edge to `image_size`, bicubic, centre crop) or
///   SigLIP's (LLaVA-interleave: a bicubic resize to `image_size` square), with
///   `clip.vision.image_mean` / `image_std`. llama.cpp pads LLaVA 1.5's images to a square
///   instead; tessera keeps the family's processor.
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> Result<MmprojSide, String> {
    let clip = &input.clip;
    let image_token_id = input.token("mlp", "<image>")?;
    let is_clip = input.tensors.contains_key("v.class_embd");
    let layers = clip.usize("clip.vision.block_count")?;
    let feature = match clip.ints_opt("clip.vision.feature_layer")?.as_deref() {
        None => layers.checked_sub(1).ok_or("`clip.vision.block_count` is 0")?,
        Some(&[k]) => k,
        Some(list) => {
            return Err(format!("`clip.vision.feature_layer` {list:?}: stacked feature layers are not supported"))
        }
    };
    if feature > layers {
        return Err(format!("`clip.vision.feature_layer` {feature} is past the {layers} stored layers"));
    }
    let hidden_act = match (clip.bool("clip.use_gelu")?, clip.bool("clip.use_silu")?) {
        (Some(true), Some(true)) => return Err("both `clip.use_gelu` and `clip.use_silu` are true".into()),
        (Some(true), _) => Activation::GeluTanh,
        (_, Some(true)) => Activation::Silu,
        _ => Activation::QuickGelu,
    };
    let image_size = clip.usize("clip.vision.image_size")?;
    let tower = VisionTowerConfig {
        kind: if is_clip { TowerKind::Clip } else { TowerKind::Siglip },
        hidden_size: clip.usize("clip.vision.embedding_length")?,
        intermediate_size: clip.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers: layers,
        num_attention_heads: clip.usize("clip.vision.attention.head_count")?,
        num_channels: 3,
        image_size,
        patch_size: clip.usize("clip.vision.patch_size")?,
        layer_norm_eps: clip.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-5),
        hidden_act,
    };
    tower.validate().map_err(|e| e.to_string())?;
    let width = match input.shape("mm.2.weight")? {
        [rows, _] => *rows,
        other => return Err(format!("`mm.2.weight` has shape {other:?}, not a matrix")),
    };
    let spec = TowerSpec {
        feature: FeatureLayer::Hidden(feature),
        drop_class_token: is_clip,
        connector: ConnectorConfig::Mlp { act: Activation::Gelu, bias: input.tensors.contains_key("mm.0.bias") },
        image_token_id,
        placeholder: Placeholder::ImageToken,
        processor: ProcessorRule::Single {
            tokens: tower.num_positions() - usize::from(is_clip),
            stated_len: None,
            pan_and_scan: false,
        },
        weights: WeightRoots {
            tower: &["model.vision_model"],
            connector: &["multi_modal_projector"],
            connector_probe: "",
        },
        tower,
    };
    let (size, crop) = if is_clip {
        (serde_json::json!({"shortest_edge": image_size}), true)
    } else {
        (serde_json::json!({"height": image_size, "width": image_size}), false)
    };
    let image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "size": size,
        "resample": 3,
        "do_center_crop": crop,
        "crop_size": {"height": image_size, "width": image_size},
    }))?;
    Ok(MmprojSide {
        family: "llava",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Llama, TextFamily::Mistral, TextFamily::Qwen2],
        width,
        swapped_ffn: true,
        plain_positions: false,
        bidirectional_images: false,
        processor: serde_json::json!({}),
    })
}
