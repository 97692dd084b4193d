//! Qwen2-VL: a ViT over 14-px patches of two (duplicated) frames with 2-D RoPE, a 2×2 patch
//! merger, a Qwen2 text model with multimodal RoPE. The processor resizes each image to
//! multiples of 28 px within its pixel budget (`smart_resize`), so the number of image tokens
//! depends on the image; the template writes `<|vision_start|><|image_pad|><|vision_end|>` and
//! the processor repeats `<|image_pad|>` once per merged token. Text positions run on in one
//! stream; an image's tokens take (temporal, row, column) positions from where the text stopped,
//! and the text after it continues past the largest of them.

use serde::Deserialize;
use tessera_decoder::Activation;
use tessera_vision::Qwen2VisionConfig;

use super::text::{TextFamily, TextSubConfig};
use super::{text_config, ModelConfig, PromptStyle, TokenIds, VisionSpec};

#[derive(Debug, Deserialize)]
pub struct Qwen2VlConfig {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

/// `Qwen2VLVisionConfig`'s fields (`null` counts as absent).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionFields {
    depth: Option<usize>,
    embed_dim: Option<usize>,
    hidden_size: Option<usize>,
    hidden_act: Option<Activation>,
    mlp_ratio: Option<usize>,
    num_heads: Option<usize>,
    in_channels: Option<usize>,
    patch_size: Option<usize>,
    spatial_merge_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    rope_parameters: Option<VisionRope>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionRope {
    rope_theta: Option<f64>,
}

/// The image side of a Qwen2-VL checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2VlSpec {
    pub tower: Qwen2VisionConfig,
    pub image_token_id: u32,
}

impl Qwen2VlConfig {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Qwen2Vl)?;
        if text.decoder.rope.mrope.is_none() {
            return Err("text_config: Qwen2-VL needs rope_parameters.mrope_section".into());
        }
        let v = &self.vision_config;
        let tower = Qwen2VisionConfig {
            depth: v.depth.unwrap_or(32),
            embed_dim: v.embed_dim.unwrap_or(1280),
            hidden_size: v.hidden_size.unwrap_or(3584),
            num_heads: v.num_heads.unwrap_or(16),
            mlp_ratio: v.mlp_ratio.unwrap_or(4),
            in_channels: v.in_channels.unwrap_or(3),
            patch_size: v.patch_size.unwrap_or(14),
            spatial_merge_size: v.spatial_merge_size.unwrap_or(2),
            temporal_patch_size: v.temporal_patch_size.unwrap_or(2),
            hidden_act: v.hidden_act.unwrap_or(Activation::QuickGelu),
            rope_theta: v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0),
        };
        tower.validate().map_err(|e| format!("vision_config: {e}"))?;
        if tower.hidden_size != text.decoder.hidden_size {
            return Err(format!(
                "vision_config.hidden_size {} (the merger's output) differs from the text model's width {}",
                tower.hidden_size, text.decoder.hidden_size
            ));
        }
        let spec = Qwen2VlSpec { tower, image_token_id: self.image_token_id.unwrap_or(151_655) };
        Ok(ModelConfig::vlm(
            "qwen2_vl",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            VisionSpec::Qwen2Vl(spec),
        ))
    }
}
