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

use candle_core::{Device, Tensor};
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::Activation;
use tessera_decoder::MRope;
use tessera_vision::qwen2_vl::{Qwen3Vision, VisionMlp, VisionNorm, Windows};
use tessera_vision::{Filter, PreprocessConfig, Qwen2VisionConfig, Qwen2VisionTower, RgbImage};

use super::image::{
    first_prefix, token_text, ImageFeatures, ImageLoad, ImageSide, ImageSpec, MmprojMetadata, MmprojTensor,
    ProcessorSettings,
};
use super::mmproj::{MmprojInput, MmprojSide};
use super::text::{TextFamily, TextFields, TextSubConfig};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};
use crate::error::{Result, TesseraError};

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
    /// Qwen3.5: Qwen3-VL's tower without DeepStack; the text model's own parts are added by
    /// the `qwen3_5` module.
    Qwen35,
}

impl Qwen2VlConfig {
    /// Qwen2-VL's or Qwen2.5-VL's config (the same fields, other defaults and vision blocks).
    pub fn resolve(&self, generation: Generation) -> std::result::Result<ModelConfig, String> {
        let (text_family, name) = match generation {
            Generation::Qwen2Vl => (TextFamily::Qwen2Vl, "qwen2_vl"),
            Generation::Qwen25Vl => (TextFamily::Qwen25Vl, "qwen2_5_vl"),
            Generation::Qwen3Vl => (TextFamily::Qwen3Vl, "qwen3_vl"),
            Generation::Qwen35 => (TextFamily::Qwen35, "qwen3_5"),
        };
        let legacy = TextSubConfig { model_type: None, fields: self.top_level_text.clone() };
        let sub = match &self.text_config {
            Some(t) => Some(t.clone()),
            None if self.top_level_text.hidden_size.is_some() => Some(legacy),
            None => None,
        };
        let mut text = text_config(&sub, text_family)?;
        if matches!(generation, Generation::Qwen3Vl | Generation::Qwen35) {
            // Qwen3-VL interleaves the three streams over the frequencies; Qwen3.5's text
            // rotary embedding defaults its sections to [11, 11, 10].
            let default =
                (generation == Generation::Qwen35).then_some(MRope { section: [11, 11, 10], interleaved: true });
            if let Some(m) = text.decoder.rope.mrope.or(default) {
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
            Generation::Qwen3Vl | Generation::Qwen35 => Qwen2VisionConfig {
                patch_size: v.patch_size.unwrap_or(16),
                depth: v.depth.unwrap_or(27),
                num_heads: v.num_heads.unwrap_or(16),
                qwen3: Some(Qwen3Vision {
                    num_position_embeddings: v.num_position_embeddings.unwrap_or(2304),
                    // Qwen3.5's vision model has no DeepStack mergers, whatever the file lists.
                    deepstack: match generation {
                        Generation::Qwen35 => Vec::new(),
                        _ => v.deepstack_visual_indexes.clone().unwrap_or_else(|| vec![8, 16, 24]),
                    },
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
        let default_image_token = if generation == Generation::Qwen35 { 248_056 } else { 151_655 };
        let spec = Qwen2VlSpec { tower, image_token_id: self.image_token_id.unwrap_or(default_image_token) };
        Ok(ModelConfig::vlm(name, text, self.tie_word_embeddings, self.eos_token_id.as_ref(), PromptStyle::Chat, spec))
    }
}

/// The image side of an `mmproj` GGUF of projector type `qwen2vl_merger`, `qwen2.5vl_merger` or
/// `qwen3vl_merger` (llama.cpp's `conversion/qwenvl.py`, `conversion/qwen3vl.py`): the family's
/// name, its spec and its processor settings in `preprocessor_config.json`'s terms. The image
/// token is the text model's `<|image_pad|>`.
///
/// Which `clip.*` key gives what:
/// - the tower: `clip.vision.{embedding_length, block_count, patch_size}`,
///   `clip.vision.attention.head_count`; the MLP's width `feed_forward_length` (Qwen2-VL's:
///   `v.blk.0.ffn_up.weight`'s rows in `tensors`, the mmproj's tensors); the merger's output `clip.vision.projection_dim` (the text
///   model's width); `clip.vision.spatial_merge_size` (2 when absent, as llama.cpp reads it);
///   Qwen2.5-VL's full-attention blocks from `clip.vision.n_wa_pattern` (every n-th block:
///   the converter only writes evenly spaced `fullatt_block_indexes`) and its window from
///   `clip.vision.window_size` (the converter does not write it: then 112 px, transformers' and
///   llama.cpp's default); Qwen3-VL's learned position table is `(image_size / patch_size)²`
///   (the converter writes `image_size` so) and its DeepStack blocks are those
///   `clip.vision.is_deepstack_layers` flags;
/// - the processor: `clip.vision.image_mean` / `image_std`; the pixel budget
///   `clip.vision.image_min_pixels` / `image_max_pixels` where the file has them (llama.cpp's
///   keys; its Qwen converter does not write them, and llama.cpp then allows 8 to 4096 tokens).
///
/// What no key gives is the family's, as transformers has it: two frames per patch (the
/// converter refuses other `temporal_patch_size`s), 3 channels, the 2-D RoPE base 10000, the
/// activations (QuickGELU, SiLU for 2.5, tanh GELU for 3; `clip.use_silu` / `clip.use_gelu`
/// are checked against them), the towers' norm epsilon 1e-6 (transformers fixes it; the
/// file's `attention.layer_norm_epsilon` is the converter's copy of the text model's), and
/// Qwen2VLImageProcessor's bicubic resize, rescale by 1/255 and, without the budget keys, its
/// default budget of 56·56 to 28·28·1280 pixels.
pub(crate) fn from_mmproj(input: &MmprojInput<'_>, projector: &str) -> std::result::Result<MmprojSide, String> {
    let (clip, tensors) = (&input.clip, input.tensors);
    // Qwen3.5's mmproj is Qwen3-VL's projector type (no DeepStack blocks flagged); the text
    // model beside it tells them apart.
    let generation = match projector {
        "qwen2vl_merger" => Generation::Qwen2Vl,
        "qwen2.5vl_merger" => Generation::Qwen25Vl,
        _ if input.text_family == TextFamily::Qwen35 => Generation::Qwen35,
        _ => Generation::Qwen3Vl,
    };
    let image_token_id = input.token(projector, "<|image_pad|>")?;
    let embed_dim = clip.usize("clip.vision.embedding_length")?;
    let ffn = clip.usize("clip.vision.feed_forward_length")?;
    let depth = clip.usize("clip.vision.block_count")?;
    let patch_size = clip.usize("clip.vision.patch_size")?;
    let act = |key: &str, act: Activation| match clip.bool(key)? {
        Some(false) => Err(format!("`{key}` is false: this tower uses {act:?}")),
        _ => Ok(act),
    };
    let (name, norm, mlp, windows, qwen3, hidden_act) = match generation {
        Generation::Qwen2Vl => {
            // The converter writes Qwen2-VL's `vision_config.hidden_size` (the merger's output)
            // as `feed_forward_length`; the MLP's width is its first matrix's.
            let width = tensors
                .get("v.blk.0.ffn_up.weight")
                .and_then(|t| t.shape.dims().first().copied())
                .ok_or("the mmproj has no `v.blk.0.ffn_up.weight` to size the tower's MLP by")?;
            if embed_dim == 0 || !width.is_multiple_of(embed_dim) {
                return Err(format!("the MLP's width {width} is not a multiple of the tower's width {embed_dim}"));
            }
            let mlp = VisionMlp::Plain { ratio: width / embed_dim };
            ("qwen2_vl", VisionNorm::Layer, mlp, None, None, Activation::QuickGelu)
        }
        Generation::Qwen25Vl => {
            let n = clip.usize("clip.vision.n_wa_pattern")?;
            if n == 0 {
                return Err("`clip.vision.n_wa_pattern` must be positive".into());
            }
            let windows = Windows {
                size: clip.usize_opt("clip.vision.window_size")?.unwrap_or(112),
                full_blocks: (0..depth).filter(|b| (b + 1) % n == 0).collect(),
            };
            let act = act("clip.use_silu", Activation::Silu)?;
            ("qwen2_5_vl", VisionNorm::Rms, VisionMlp::Gated { intermediate: ffn }, Some(windows), None, act)
        }
        Generation::Qwen3Vl | Generation::Qwen35 => {
            let side = clip.usize("clip.vision.image_size")? / patch_size.max(1);
            let flags = clip.bools("clip.vision.is_deepstack_layers")?.unwrap_or_default();
            if generation == Generation::Qwen35 && flags.contains(&true) {
                return Err(
                    "its tower has DeepStack blocks (`clip.vision.is_deepstack_layers`), which is Qwen3-VL's; \
                            a Qwen3.5 text model takes none"
                        .into(),
                );
            }
            let q = Qwen3Vision {
                num_position_embeddings: side * side,
                deepstack: flags.iter().enumerate().filter(|(_, &f)| f).map(|(b, _)| b).collect(),
            };
            let act = act("clip.use_gelu", Activation::GeluTanh)?;
            let name = if generation == Generation::Qwen35 { "qwen3_5" } else { "qwen3_vl" };
            (name, VisionNorm::Layer, VisionMlp::Linear { intermediate: ffn }, None, Some(q), act)
        }
    };
    let tower = Qwen2VisionConfig {
        depth,
        embed_dim,
        hidden_size: clip.usize("clip.vision.projection_dim")?,
        num_heads: clip.usize("clip.vision.attention.head_count")?,
        norm,
        mlp,
        windows,
        qwen3,
        in_channels: 3,
        patch_size,
        spatial_merge_size: clip.usize_opt("clip.vision.spatial_merge_size")?.unwrap_or(2),
        temporal_patch_size: 2,
        hidden_act,
        rope_theta: 10_000.0,
    };
    tower.validate().map_err(|e| e.to_string())?;
    let mut image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "resample": 3,
        "patch_size": tower.patch_size,
        "merge_size": tower.spatial_merge_size,
        "temporal_patch_size": tower.temporal_patch_size,
    }))?;
    for (key, field) in [("clip.vision.image_min_pixels", "min_pixels"), ("clip.vision.image_max_pixels", "max_pixels")]
    {
        if let Some(v) = clip.usize_opt(key)? {
            image[field] = v.into();
        }
    }
    let text: &'static [TextFamily] = match generation {
        Generation::Qwen3Vl => &[TextFamily::Qwen3Vl],
        Generation::Qwen35 => &[TextFamily::Qwen35],
        _ => &[TextFamily::Qwen2Vl, TextFamily::Qwen25Vl],
    };
    let width = tower.hidden_size;
    let spec = std::sync::Arc::new(Qwen2VlSpec { tower, image_token_id });
    let processor = serde_json::json!({});
    Ok(MmprojSide {
        family: name,
        spec,
        image,
        text,
        width,
        swapped_ffn: false,
        plain_positions: false,
        bidirectional_images: false,
        processor,
    })
}

/// Qwen2-VL's processor settings, tower and merger.
struct Qwen2VlEncoder {
    tower: Qwen2VisionTower,
    image_token_id: u32,
    image_token: String,
    min_pixels: usize,
    max_pixels: usize,
    filter: Filter,
    /// Rescale and normalize (the resize is `smart_resize`'s).
    normalize: PreprocessConfig,
}

impl Qwen2VlEncoder {
    fn load(spec: &Qwen2VlSpec, at: &ImageLoad<'_>) -> Result<Self> {
        let ProcessorSettings { image, origin, .. } = ProcessorSettings::of(at)?;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let mut normalize: PreprocessConfig =
            serde_json::from_value(image.clone()).map_err(|e| err(format!("image processor settings: {e}")))?;
        normalize.validate().map_err(|e| err(e.to_string()))?;
        normalize.do_resize = false;
        normalize.do_center_crop = false;
        let field = |keys: &[&str], default: u64| -> u64 {
            keys.iter()
                .find_map(|k| match k.split_once('.') {
                    Some((a, b)) => image.get(a).and_then(|v| v.get(b)).and_then(Value::as_u64),
                    None => image.get(*k).and_then(Value::as_u64),
                })
                .unwrap_or(default)
        };
        let t = &spec.tower;
        for (name, stated, model) in [
            ("patch_size", field(&["patch_size"], t.patch_size as u64), t.patch_size),
            ("merge_size", field(&["merge_size"], t.spatial_merge_size as u64), t.spatial_merge_size),
            (
                "temporal_patch_size",
                field(&["temporal_patch_size"], t.temporal_patch_size as u64),
                t.temporal_patch_size,
            ),
        ] {
            if stated as usize != model {
                return Err(err(format!("{name} {stated} differs from the vision tower's {model}")));
            }
        }
        let (min_pixels, max_pixels) = pixel_budget(&image);
        if min_pixels == 0 || min_pixels > max_pixels || max_pixels > tessera_vision::preprocess::MAX_SIDE.pow(2) {
            return Err(err(format!("pixel budget {min_pixels}..={max_pixels} is empty or too large")));
        }
        let filter = Filter::from_pil(normalize.resample)
            .ok_or_else(|| err(format!("unsupported `resample` value {}", normalize.resample)))?;
        let image_token = token_text(at, spec.image_token_id, "image_token_id")?;
        let root = first_prefix(at.weights, &["visual", "model.visual"], "patch_embed.proj.weight");
        Ok(Self {
            tower: Qwen2VisionTower::new(&spec.tower, &root)?,
            image_token_id: spec.image_token_id,
            image_token,
            min_pixels,
            max_pixels,
            filter,
            normalize,
        })
    }

    /// The size the processor resizes `img` to, `(height, width)`.
    fn resized(&self, img: &RgbImage) -> Result<(usize, usize)> {
        let f = self.tower.config().factor();
        Ok(tessera_vision::qwen2_vl::smart_resize(img.height, img.width, f, self.min_pixels, self.max_pixels)?)
    }

    /// The image tokens' grid `(rows, cols)` (patches merged).
    fn grid(&self, img: &RgbImage) -> Result<(usize, usize)> {
        let (h, w) = self.resized(img)?;
        let f = self.tower.config().factor();
        Ok((h / f, w / f))
    }

    /// Pixel values `(patches, C·T·P·P)` and the patch grid.
    fn patches(&self, img: &RgbImage, device: &Device) -> Result<(Tensor, usize, usize)> {
        let (h, w) = self.resized(img)?;
        let resized = tessera_vision::preprocess::resize(img, h, w, self.filter);
        let px = tessera_vision::preprocess::to_tensor(&resized, &self.normalize, device)?;
        let c = self.tower.config();
        Ok(tessera_vision::qwen2_vl::patchify(&px, c.patch_size, c.spatial_merge_size, c.temporal_patch_size)?)
    }

    fn features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let (px, rows, cols) = self.patches(img, device)?;
        Ok(self.tower.features(&px, rows, cols)?)
    }
}

impl ImageSpec for Qwen2VlSpec {
    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        if at.pan_and_scan {
            return Err(TesseraError::InvalidInput("pan-and-scan is for Gemma 3; Qwen2-VL has none".into()));
        }
        Ok(Box::new(Qwen2VlEncoder::load(self, at)?))
    }

    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        super::qwen_vl_mmproj::metadata(self, settings, config, text_hidden)
    }

    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        super::qwen_vl_mmproj::tensors(self.tower.qwen3.as_ref().map(|q| q.deepstack.as_slice()), stored, dims)
    }

    fn text_gguf_metadata(&self, arch: &str) -> Vec<(String, tessera_decoder::gguf_write::MetaValue)> {
        super::qwen_vl_mmproj::text_metadata(self, arch)
    }
}

/// The processor's pixel budget `(min, max)`: `size.shortest_edge` / `longest_edge` (older
/// processors: `min_pixels` / `max_pixels`), else Qwen2VLImageProcessor's defaults.
pub(super) fn pixel_budget(image: &Value) -> (usize, usize) {
    let field = |keys: [&str; 2], default: u64| -> usize {
        let [a, b] = keys;
        let (outer, inner) = a.split_once('.').unwrap_or((a, ""));
        let v = image.get(outer).and_then(|v| v.get(inner)).and_then(Value::as_u64);
        v.or_else(|| image.get(b).and_then(Value::as_u64)).unwrap_or(default) as usize
    };
    (field(["size.shortest_edge", "min_pixels"], 56 * 56), field(["size.longest_edge", "max_pixels"], 28 * 28 * 1280))
}

impl ImageSide for Qwen2VlEncoder {
    fn fixed_tokens(&self) -> Option<usize> {
        None
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        self.grid(img).map(|(r, c)| r * c)
    }

    fn placeholder(&self) -> Option<&str> {
        Some(&self.image_token)
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.image_token_id)
    }

    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        let (rows, cols) = self.grid(img)?;
        Ok(Some(self.image_token.repeat(rows * cols)))
    }

    fn position_grid(&self, img: &RgbImage) -> Result<Option<(usize, usize)>> {
        self.grid(img).map(Some)
    }

    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(self.patches(img, device)?.0)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let (h, w) = self.resized(img)?;
        let (rows, cols) = self.grid(img)?;
        Ok((tessera_vision::preprocess::resize(img, h, w, self.filter), rows, cols))
    }

    /// The merged image tokens and, for Qwen3-VL, DeepStack's features `(n, hidden)` per level,
    /// added to the first decoder layers' outputs at the image's positions.
    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let (px, rows, cols) = self.patches(img, device)?;
        let (features, deepstack) = self.tower.features_and_deepstack(&px, rows, cols)?;
        let tokens = self.tower.merge(&features, rows, cols)?.unsqueeze(0)?;
        Ok(ImageFeatures::with_layer_additions(tokens, deepstack))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(self.features(img, device)?.unsqueeze(0)?)
    }

    fn describe(&self) -> String {
        let c = self.tower.config();
        let windows = match &c.windows {
            Some(w) => format!(", windows of {} px except in blocks {:?}", w.size, w.full_blocks),
            None => String::new(),
        };
        format!(
            "Qwen2-VL tower ({} blocks, width {}, {}×{} patches over {} frames, 2-D RoPE{windows}), {}×{} patch \
             merger; images resized to multiples of {} px within {}..={} pixels, one token per {}×{} block; no video \
             inputs",
            c.depth,
            c.embed_dim,
            c.patch_size,
            c.patch_size,
            c.temporal_patch_size,
            c.spatial_merge_size,
            c.spatial_merge_size,
            c.factor(),
            self.min_pixels,
            self.max_pixels,
            c.factor(),
            c.factor()
        )
    }
}
