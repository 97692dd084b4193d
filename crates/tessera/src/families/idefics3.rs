//! Idefics3 / SmolVLM: a SigLIP tower over 512-px (364-px) tiles plus a global view, pixel
//! shuffle by `scale_factor` and one projection, a Llama decoder; each image's placeholder
//! expands into its tiles' rows and columns (`tessera_text::idefics3_image_prompt`).

use serde::Deserialize;
use serde_json::Value;
use tessera_vision::{FeatureLayer, Filter, PreprocessConfig, TilingConfig};

use super::text::{TextFamily, TextSubConfig};
use super::tower::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, WeightRoots};
use super::vit::{VisionClass, VisionFields};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};

#[derive(Debug, Deserialize)]
pub struct Idefics3Config {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    scale_factor: Option<usize>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

impl Idefics3Config {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Llama)?;
        // Idefics3 always uses its own vision config class, whatever the dict names.
        let tower = VisionClass::Idefics3.resolve(&self.vision_config).map_err(|e| format!("vision_config: {e}"))?;
        let (side, s) = (tower.patches_per_side(), self.scale_factor.unwrap_or(2));
        if s == 0 || !side.is_multiple_of(s) {
            return Err(format!("scale_factor {s} does not divide {side} patches per side"));
        }
        let spec = TowerSpec {
            feature: FeatureLayer::PostNorm,
            drop_class_token: false,
            connector: ConnectorConfig::PixelShuffle { scale_factor: s },
            image_token_id: self.image_token_id.unwrap_or(128257),
            placeholder: Placeholder::ImageToken,
            processor: ProcessorRule::Tiled { tokens_per_view: tower.num_patches() / (s * s) },
            weights: WeightRoots {
                tower: &["model.vision_model", "vision_model"],
                connector: &["model.connector", "connector"],
                connector_probe: "modality_projection.proj.weight",
            },
            tower,
        };
        Ok(ModelConfig::vlm(
            "idefics3",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            spec,
        ))
    }
}

/// Idefics3's image processor settings: the tiling (`size.longest_edge`, the tile side
/// `max_image_size.longest_edge` that must equal the tower's input, `do_image_splitting`,
/// Lanczos by default) and the normalization of each view. `processor`: the processor's own
/// fields (`image_seq_len`, checked against `tokens_per_view`).
pub(crate) fn tiled_processor(
    image: &Value,
    processor: &Value,
    mut pre: PreprocessConfig,
    tower_image_size: usize,
    tokens_per_view: usize,
) -> Result<(TilingConfig, PreprocessConfig), String> {
    let edge = |k: &str| image.get(k).and_then(|v| v.get("longest_edge")).and_then(Value::as_u64);
    let tile = edge("max_image_size").unwrap_or(364) as usize;
    if tile != tower_image_size {
        return Err(format!(
            "max_image_size.longest_edge {tile} differs from the vision tower's image_size {tower_image_size}"
        ));
    }
    if let Some(stated) = processor.get("image_seq_len").and_then(Value::as_u64) {
        if stated as usize != tokens_per_view {
            return Err(format!(
                "image_seq_len {stated} disagrees with the model (patches / scale_factor² = {tokens_per_view})"
            ));
        }
    }
    // Idefics3ImageProcessor's own defaults: Lanczos, longest edge 4·364.
    let resample = image.get("resample").and_then(Value::as_u64).unwrap_or(1) as u32;
    let filter = Filter::from_pil(resample).ok_or_else(|| format!("unsupported `resample` value {resample}"))?;
    let tiling = TilingConfig {
        longest_edge: pre.do_resize.then(|| edge("size").unwrap_or(4 * 364) as usize),
        tile,
        do_image_splitting: image.get("do_image_splitting").and_then(Value::as_bool).unwrap_or(true),
        filter,
    };
    pre.do_resize = false;
    pre.do_center_crop = false;
    Ok((tiling, pre))
}
