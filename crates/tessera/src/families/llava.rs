//! LLaVA (1.5, interleave, NeXT-less): a CLIP or SigLIP tower read at `vision_feature_layer`
//! (without CLIP's class token under the `default` select strategy), a two-layer projector,
//! a Llama or Qwen2 decoder; each `<image>` expands into one token per feature.

use serde::Deserialize;
use tessera_decoder::Activation;
use tessera_vision::FeatureLayer;

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
