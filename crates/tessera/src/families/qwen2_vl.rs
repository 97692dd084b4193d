//! Qwen2-VL: a ViT over 14-px patches of two (duplicated) frames with 2-D RoPE, a 2×2 patch
//! merger, a Qwen2 text model with multimodal RoPE. The processor resizes each image to
//! multiples of 28 px within its pixel budget (`smart_resize`), so the number of image tokens
//! depends on the image; the template writes `<|vision_start|><|image_pad|><|vision_end|>` and
//! the processor repeats `<|image_pad|>` once per merged token. Text positions run on in one
//! stream; an image's tokens take (temporal, row, column) positions from where the text stopped,
//! and the text after it continues past the largest of them.
//!
//! Qwen2.5-VL is the same model with another vision block (RMSNorm, gated MLP) and windowed
//! attention in all but its `fullatt_block_indexes`. Qwen3-VL: 16-px patches with a biased
//! embedding and learned, interpolated positions, DeepStack features added to the first decoder
//! layers, interleaved M-RoPE, and a Qwen3 text model (q/k norms).

use serde::Deserialize;
use tessera_decoder::Activation;
use tessera_decoder::MRope;
use tessera_vision::qwen2_vl::{Qwen3Vision, VisionMlp, VisionNorm, Windows};
use tessera_vision::Qwen2VisionConfig;

use super::text::{TextFamily, TextFields, TextSubConfig};
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
    /// Older checkpoints (transformers < 4.5x) keep the text model's fields at the top level.
    #[serde(flatten)]
    top_level_text: TextFields,
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
    #[serde(alias = "in_chans")]
    in_channels: Option<usize>,
    patch_size: Option<usize>,
    spatial_merge_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    rope_parameters: Option<VisionRope>,
    // Qwen2.5-VL
    intermediate_size: Option<usize>,
    out_hidden_size: Option<usize>,
    window_size: Option<usize>,
    fullatt_block_indexes: Option<Vec<usize>>,
    // Qwen3-VL
    num_position_embeddings: Option<usize>,
    deepstack_visual_indexes: Option<Vec<usize>>,
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

/// Which of the two generations a config is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // the model names end so
pub enum Generation {
    Qwen2Vl,
    Qwen25Vl,
    Qwen3Vl,
}

impl Qwen2VlConfig {
    /// Qwen2-VL's or Qwen2.5-VL's config (the same fields, other defaults and vision blocks).
    pub fn resolve(&self, generation: Generation) -> Result<ModelConfig, String> {
        let (text_family, name) = match generation {
            Generation::Qwen2Vl => (TextFamily::Qwen2Vl, "qwen2_vl"),
            Generation::Qwen25Vl => (TextFamily::Qwen25Vl, "qwen2_5_vl"),
            Generation::Qwen3Vl => (TextFamily::Qwen3Vl, "qwen3_vl"),
        };
        let legacy = TextSubConfig { model_type: None, fields: self.top_level_text.clone() };
        let sub = match &self.text_config {
            Some(t) => Some(t.clone()),
            None if self.top_level_text.hidden_size.is_some() => Some(legacy),
            None => None,
        };
        let mut text = text_config(&sub, text_family)?;
        if generation == Generation::Qwen3Vl {
            // Qwen3-VL interleaves the three streams over the frequencies.
            if let Some(m) = text.decoder.rope.mrope {
                text.decoder.rope.mrope = Some(MRope { interleaved: true, ..m });
            }
        }
        if text.decoder.rope.mrope.is_none() {
            return Err("text_config: Qwen2-VL needs rope_parameters.mrope_section".into());
        }
        let v = &self.vision_config;
        let rope_theta = v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0);
        let common = |embed_dim, hidden_size, norm, mlp, windows, act| Qwen2VisionConfig {
            qwen3: None,
            depth: v.depth.unwrap_or(32),
            embed_dim,
            hidden_size,
            num_heads: v.num_heads.unwrap_or(16),
            norm,
            mlp,
            windows,
            in_channels: v.in_channels.unwrap_or(3),
            patch_size: v.patch_size.unwrap_or(14),
            spatial_merge_size: v.spatial_merge_size.unwrap_or(2),
            temporal_patch_size: v.temporal_patch_size.unwrap_or(2),
            hidden_act: v.hidden_act.unwrap_or(act),
            rope_theta,
        };
        let tower = match generation {
            Generation::Qwen2Vl => common(
                v.embed_dim.unwrap_or(1280),
                v.hidden_size.unwrap_or(3584),
                VisionNorm::Layer,
                VisionMlp::Plain { ratio: v.mlp_ratio.unwrap_or(4) },
                None,
                Activation::QuickGelu,
            ),
            // Qwen2.5-VL names the tower's width hidden_size and the merger's out_hidden_size.
            Generation::Qwen25Vl => common(
                v.hidden_size.unwrap_or(3584),
                v.out_hidden_size.unwrap_or(3584),
                VisionNorm::Rms,
                VisionMlp::Gated { intermediate: v.intermediate_size.unwrap_or(3420) },
                Some(Windows {
                    size: v.window_size.unwrap_or(112),
                    full_blocks: v.fullatt_block_indexes.clone().unwrap_or_else(|| vec![7, 15, 23, 31]),
                }),
                Activation::Silu,
            ),
            Generation::Qwen3Vl => Qwen2VisionConfig {
                patch_size: v.patch_size.unwrap_or(16),
                depth: v.depth.unwrap_or(27),
                num_heads: v.num_heads.unwrap_or(16),
                qwen3: Some(Qwen3Vision {
                    num_position_embeddings: v.num_position_embeddings.unwrap_or(2304),
                    deepstack: v.deepstack_visual_indexes.clone().unwrap_or_else(|| vec![8, 16, 24]),
                }),
                ..common(
                    v.hidden_size.unwrap_or(1152),
                    v.out_hidden_size.unwrap_or(3584),
                    VisionNorm::Layer,
                    VisionMlp::Linear { intermediate: v.intermediate_size.unwrap_or(4304) },
                    None,
                    Activation::GeluTanh,
                )
            },
        };
        if let Some(q) = &tower.qwen3 {
            if q.deepstack.len() > text.decoder.num_hidden_layers {
                return Err(format!(
                    "{} DeepStack levels for a {}-layer text model",
                    q.deepstack.len(),
                    text.decoder.num_hidden_layers
                ));
            }
        }
        tower.validate().map_err(|e| format!("vision_config: {e}"))?;
        if tower.hidden_size != text.decoder.hidden_size {
            return Err(format!(
                "vision_config.hidden_size {} (the merger's output) differs from the text model's width {}",
                tower.hidden_size, text.decoder.hidden_size
            ));
        }
        let spec = Qwen2VlSpec { tower, image_token_id: self.image_token_id.unwrap_or(151_655) };
        Ok(ModelConfig::vlm(
            name,
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            VisionSpec::Qwen2Vl(spec),
        ))
    }
}
