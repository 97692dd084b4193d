//! Gemma 3 (the 4B-it class): a SigLIP tower (896 px, patches of 14), its 64×64 patch grid
//! average-pooled to 16×16 = 256 tokens, `mm_soft_emb_norm` and one projection, a Gemma 3 text
//! model. The chat template writes `<start_of_image>` per image, which the processor expands to
//! `\n\n<start_of_image>` + 256 image tokens + `<end_of_image>\n\n`; the tokens of each image
//! attend to each other both ways on the prompt's forward (in the sliding-window layers within
//! the window). The image token may lie outside the text vocabulary: it embeds as id 0 before its
//! features replace it, as the reference does.

use serde::Deserialize;
use tessera_vision::FeatureLayer;

use super::llava::{PROJECTOR_ROOTS, TOWER_ROOTS};
use super::text::{TextFamily, TextSubConfig};
use super::tower::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, WeightRoots};
use super::vit::{VisionClass, VisionFields};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};

#[derive(Debug, Deserialize)]
pub struct Gemma3Config {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    mm_tokens_per_image: Option<usize>,
    #[serde(default)]
    boi_token_index: Option<u32>,
    #[serde(default)]
    eoi_token_index: Option<u32>,
    #[serde(default)]
    image_token_index: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

impl Gemma3Config {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Gemma3)?;
        let class = self.vision_config.model_type.unwrap_or(VisionClass::Siglip);
        let tower = class.resolve(&self.vision_config).map_err(|e| format!("vision_config: {e}"))?;
        let tokens = self.mm_tokens_per_image.unwrap_or(256);
        let per_side = (tokens as f64).sqrt() as usize;
        let patches = tower.patches_per_side();
        if per_side == 0 || per_side * per_side != tokens || !patches.is_multiple_of(per_side) {
            return Err(format!(
                "mm_tokens_per_image {tokens} is not a square that pools the tower's {patches}×{patches} patches evenly"
            ));
        }
        let spec = TowerSpec {
            feature: FeatureLayer::PostNorm,
            drop_class_token: false,
            connector: ConnectorConfig::AvgPool { tokens_per_side: per_side },
            image_token_id: self.image_token_index.or(self.image_token_id).unwrap_or(262_144),
            placeholder: Placeholder::Wrapped {
                begin: self.boi_token_index.unwrap_or(255_999),
                end: self.eoi_token_index.unwrap_or(256_000),
            },
            processor: ProcessorRule::Single { tokens, stated_len: Some("image_seq_length"), pan_and_scan: true },
            weights: WeightRoots { tower: TOWER_ROOTS, connector: PROJECTOR_ROOTS, connector_probe: "" },
            tower,
        };
        let mut cfg = ModelConfig::vlm(
            "gemma3",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            spec,
        );
        cfg.bidirectional_images = true;
        Ok(cfg)
    }
}
