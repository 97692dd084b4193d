//! PaliGemma: a SigLIP tower, one linear projection, a Gemma decoder. No chat template: the
//! processor writes `<image>…<bos>prompt\n`, which attends both ways (prefix-LM); RoPE
//! positions count from 1.

use serde::Deserialize;
use tessera_vision::FeatureLayer;

use super::llava::{PROJECTOR_ROOTS, TOWER_ROOTS};
use super::text::{TextFamily, TextSubConfig};
use super::tower::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, WeightRoots};
use super::vit::{VisionClass, VisionFields};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};

#[derive(Debug, Deserialize)]
pub struct PaliGemmaConfig {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    image_token_index: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    projection_dim: Option<usize>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

impl PaliGemmaConfig {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let mut text = text_config(&self.text_config, TextFamily::Gemma)?;
        // transformers' PaliGemmaModel.forward counts positions from 1.
        text.decoder.position_offset = 1;
        let class = self.vision_config.model_type.unwrap_or(VisionClass::Siglip);
        let tower = class.resolve(&self.vision_config).map_err(|e| format!("vision_config: {e}"))?;
        let projection_dim = self.projection_dim.unwrap_or(2048);
        if projection_dim != text.decoder.hidden_size {
            return Err(format!(
                "projection_dim {projection_dim} differs from the text model's width {}",
                text.decoder.hidden_size
            ));
        }
        let spec = TowerSpec {
            feature: FeatureLayer::PostNorm,
            drop_class_token: false,
            connector: ConnectorConfig::Linear,
            image_token_id: self.image_token_index.or(self.image_token_id).unwrap_or(256000),
            placeholder: Placeholder::ImageToken,
            processor: ProcessorRule::Single {
                tokens: tower.num_patches(),
                stated_len: Some("image_seq_length"),
                pan_and_scan: false,
            },
            weights: WeightRoots { tower: TOWER_ROOTS, connector: PROJECTOR_ROOTS, connector_probe: "" },
            tower,
        };
        Ok(ModelConfig::vlm(
            "paligemma",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::PrefixLm,
            spec,
        ))
    }
}
