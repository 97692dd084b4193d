//! Idefics3 / SmolVLM: a SigLIP tower over 512-px (364-px) tiles plus a global view, pixel
//! shuffle by `scale_factor` and one projection, a Llama decoder; each image's placeholder
//! expands into its tiles' rows and columns (`tessera_text::idefics3_image_prompt`).

use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::Activation;
use tessera_vision::{FeatureLayer, Filter, PreprocessConfig, TilingConfig, VisionTowerConfig};

use super::mmproj::{MmprojInput, MmprojSide};
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
        let spec = tower_spec(tower, self.scale_factor.unwrap_or(2), self.image_token_id.unwrap_or(128257))?;
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

/// The image side of an Idefics3 tower `tower`, pixel shuffle by `scale_factor`, image tokens
/// replacing `image_token_id`.
fn tower_spec(tower: VisionTowerConfig, scale_factor: usize, image_token_id: u32) -> Result<TowerSpec, String> {
    let (side, s) = (tower.patches_per_side(), scale_factor);
    if s == 0 || !side.is_multiple_of(s) {
        return Err(format!("scale_factor {s} does not divide {side} patches per side"));
    }
    Ok(TowerSpec {
        feature: FeatureLayer::PostNorm,
        drop_class_token: false,
        connector: ConnectorConfig::PixelShuffle { scale_factor: s },
        image_token_id,
        placeholder: Placeholder::ImageToken,
        processor: ProcessorRule::Tiled { tokens_per_view: tower.num_patches() / (s * s) },
        weights: WeightRoots {
            tower: &["model.vision_model", "vision_model"],
            connector: &["model.connector", "connector"],
            connector_probe: "modality_projection.proj.weight",
        },
        tower,
    })
}

/// The image side of an `mmproj` GGUF of projector type `idefics3` (llama.cpp's
/// `conversion/smolvlm.py`), and its processor settings in `preprocessor_config.json`'s terms.
/// The image token is the text model's `<image>`.
///
/// Which `clip.*` key gives what:
/// - the tower: `clip.vision.{embedding_length, feed_forward_length, block_count, image_size,
///   patch_size}`, `clip.vision.attention.{head_count, layer_norm_epsilon}` (the converter writes
///   `vision_config.layer_norm_eps`, 1e-5 when absent); `clip.use_gelu` (true: the tanh GELU of
///   `gelu_pytorch_tanh`, what llama.cpp's `ggml_gelu` computes);
/// - the connector: `clip.vision.projector.scale_factor` (the config's `scale_factor`, 2 when
///   absent), the projection's width `clip.vision.projection_dim` (the text model's, which the
///   caller checks);
/// - the processor: `clip.vision.image_mean` / `image_std`; the tile side is the tower's
///   `image_size` (`max_image_size.longest_edge`); the longest edge images are resized to is
///   `clip.vision.preproc_image_size` (`size.longest_edge`; the converter writes `image_size`
///   when the processor states none). Older mmproj files lack the key (llama.cpp then slices
///   by its generic rule); here an image is then one tile-sized view. What no key gives is
///   Idefics3ImageProcessor's (and llama.cpp's `mtmd` for this projector): Lanczos (`resample`
///   1), image splitting on, rescale by 1/255, the tiles' rows and columns and a global view.
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> Result<MmprojSide, String> {
    let clip = &input.clip;
    let image_token_id = input.token("idefics3", "<image>")?;
    let tower = clip.siglip_tower("Idefics3")?;
    let image_size = tower.image_size;
    let scale_factor = clip.usize_opt("clip.vision.projector.scale_factor")?.unwrap_or(2);
    let spec = tower_spec(tower, scale_factor, image_token_id)?;
    let longest_edge = clip.usize_opt("clip.vision.preproc_image_size")?.unwrap_or(image_size);
    let image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "size": {"longest_edge": longest_edge},
        "max_image_size": {"longest_edge": image_size},
        "resample": 1,
        "do_image_splitting": true,
    }))?;
    Ok(MmprojSide {
        family: "idefics3",
        spec: std::sync::Arc::new(spec),
        image,
        text: &[TextFamily::Llama],
        width: clip.usize("clip.vision.projection_dim")?,
        swapped_ffn: false,
        plain_positions: false,
        bidirectional_images: false,
        processor: serde_json::json!({}),
    })
}

/// The `clip.*` metadata of the mmproj llama.cpp's converter writes for an Idefics3 checkpoint
/// (`conversion/smolvlm.py` over `MmprojModel`), in its order: what [`from_mmproj`] reads back.
/// Two values follow the model rather than the converter's fallbacks: the layer-norm epsilon is
/// the tower's (the converter writes 1e-5 when the config omits it, where transformers' class
/// default is 1e-6), and the mean/std are the processor's or Idefics3ImageProcessor's 0.5.
pub(crate) fn mmproj_metadata(
    tower: &VisionTowerConfig,
    scale_factor: usize,
    settings: &super::image::ProcessorSettings,
    text_hidden: usize,
) -> super::image::MmprojMetadata {
    use super::image::{gguf_u32 as u, ClipHeader};
    use tessera_decoder::gguf_write::MetaValue::{Bool, Str, F32};
    let stats = |key: &str| super::image::processor_stats(settings, key, [0.5; 3]);
    if tower.hidden_act != Activation::GeluTanh {
        return Err(format!("llama.cpp's idefics3 projector runs a tanh-GELU tower, not {:?}", tower.hidden_act));
    }
    let longest_edge =
        settings.image.get("size").and_then(|s| s.get("longest_edge")).and_then(Value::as_u64).map(|v| v as usize);
    let mut md = ClipHeader::of_tower(tower, text_hidden, stats("image_mean")?, stats("image_std")?).keys()?;
    md.extend([
        ("clip.projector_type".into(), Str("idefics3".into())),
        ("clip.vision.attention.layer_norm_epsilon".into(), F32(tower.layer_norm_eps as f32)),
        ("clip.vision.projector.scale_factor".into(), u(scale_factor)?),
        ("clip.use_gelu".into(), Bool(true)),
        ("clip.vision.preproc_image_size".into(), u(longest_edge.unwrap_or(tower.image_size))?),
    ]);
    Ok(md)
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
