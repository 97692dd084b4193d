//! Image encoders as the assembly composes them from `tessera-vision`: the reference
//! processor's preprocessing (from `processor_config.json` / `preprocessor_config.json`, or the
//! native model's config), then the model's image tower and connector, giving image tokens in
//! the decoder's width — and, for the Hugging Face families, the placeholder text each image
//! expands to in the prompt.

use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::Value;
use tessera_decoder::Weights;
use tessera_vision::{
    drop_class_token, preprocess, split_image, tiling, Connector, FeatureLayer, Filter, NativePatchEncoder,
    PreprocessConfig, RgbImage, Size, TilingConfig, VisionTower,
};

use crate::config::VisionSpec;
use crate::error::{Result, TesseraError};
use crate::vlm_config::{ConnectorConfig, HfVisionConfig, VlmFamily};

pub(crate) enum ImageEncoder {
    Native { encoder: NativePatchEncoder, preprocess: PreprocessConfig },
    Hf(Box<HfImageEncoder>),
}

/// How a Hugging Face family's processor turns one image into pixel values.
#[derive(Debug, Clone)]
enum Views {
    /// Resize (and crop), rescale, normalize: one image in, one tower input out.
    Single(PreprocessConfig),
    /// Idefics3: tiles plus a global view, each rescaled and normalized.
    Tiled { tiling: TilingConfig, normalize: PreprocessConfig },
}

/// A Hugging Face family's image processor, as its `processor_config.json` /
/// `preprocessor_config.json` configures it: pixel values for the tower, and how many image
/// tokens (and which placeholder text) an image becomes.
#[derive(Debug, Clone)]
pub struct ImageProcessor {
    views: Views,
    /// Image tokens per view (tile or image).
    tokens_per_view: usize,
    /// The tower's input side.
    image_size: usize,
}

pub(crate) struct HfImageEncoder {
    cfg: HfVisionConfig,
    tower: VisionTower,
    feature: FeatureLayer,
    drop_cls: bool,
    connector: Connector,
    processor: ImageProcessor,
    /// The placeholder token's text (`<image>`).
    image_token: String,
}

/// The image processor's settings and the processor's own fields, from either folder layout:
/// transformers 5's `processor_config.json` with a nested `image_processor`, or the older flat
/// `preprocessor_config.json` (with processor fields, if any, in a flat `processor_config.json`).
fn processor_files(dir: &Path) -> Result<(Value, Value, std::path::PathBuf)> {
    let read = crate::model::read_json_opt;
    let proc_path = dir.join("processor_config.json");
    let pre_path = dir.join("preprocessor_config.json");
    let processor = read(&proc_path)?.unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(nested) = processor.get("image_processor").filter(|v| v.is_object()) {
        return Ok((nested.clone(), processor.clone(), proc_path));
    }
    match read(&pre_path)? {
        Some(image) => Ok((image, processor, pre_path)),
        None => Err(TesseraError::Config {
            path: dir.to_path_buf(),
            reason: "no image processor settings: neither preprocessor_config.json nor an `image_processor` in \
                     processor_config.json"
                .into(),
        }),
    }
}

impl ImageEncoder {
    /// `dir` may hold a `preprocessor_config.json`; otherwise the model config's fields are used.
    /// `text_hidden`: the decoder's width; `image_token`: the tokenizer's text for the
    /// placeholder id (Hugging Face families).
    pub fn load(
        spec: &VisionSpec,
        dir: &Path,
        vb: &Weights,
        text_hidden: usize,
        image_token: Option<String>,
    ) -> Result<Self> {
        match spec {
            VisionSpec::Native { encoder, image_mean, image_std, resample } => {
                let path = dir.join("preprocessor_config.json");
                let preprocess = if let Some(json) = crate::model::read_json_opt(&path)? {
                    let cfg: PreprocessConfig = serde_json::from_value(json)
                        .map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
                    cfg.validate().map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
                    cfg
                } else {
                    PreprocessConfig {
                        do_resize: true,
                        size: Some(Size::HeightWidth { height: encoder.image_size, width: encoder.image_size }),
                        resample: *resample,
                        do_center_crop: false,
                        crop_size: None,
                        do_rescale: true,
                        rescale_factor: 1.0 / 255.0,
                        do_normalize: true,
                        image_mean: Some(image_mean.clone()),
                        image_std: Some(image_std.clone()),
                    }
                };
                Ok(Self::Native { encoder: NativePatchEncoder::new(*encoder, vb)?, preprocess })
            }
            VisionSpec::Hf(cfg) => {
                let image_token = image_token.ok_or_else(|| TesseraError::Config {
                    path: dir.join("tokenizer.json"),
                    reason: format!("the tokenizer has no token for image_token_id {}", cfg.image_token_id),
                })?;
                Ok(Self::Hf(Box::new(HfImageEncoder::load(cfg, dir, vb, text_hidden, image_token)?)))
            }
        }
    }

    /// How many images one prompt may carry.
    pub fn max_images(&self) -> usize {
        match self {
            Self::Native { .. } => 1,
            Self::Hf(_) => usize::MAX,
        }
    }

    /// Image tokens per image when that does not depend on the image (not for Idefics3's tiles).
    pub fn fixed_tokens(&self) -> Option<usize> {
        match self {
            Self::Native { encoder, .. } => Some(encoder.config().num_patches()),
            Self::Hf(e) => e.processor.fixed_tokens(),
        }
    }

    /// Image tokens `img` becomes.
    pub fn tokens_for(&self, img: &RgbImage) -> usize {
        match self {
            Self::Native { encoder, .. } => encoder.config().num_patches(),
            Self::Hf(e) => e.processor.tokens_for_size(img.height, img.width),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Native { encoder, .. } => {
                let c = encoder.config();
                format!(
                    "native patch embedding ({0}×{0} image, {1}×{1} patches → {2} tokens of width {3}, learned positions)",
                    c.image_size,
                    c.patch_size,
                    c.num_patches(),
                    c.hidden_size
                )
            }
            Self::Hf(e) => e.describe(),
        }
    }

    /// The image as the model sees it (resized, before normalization), and its patch grid —
    /// for models whose image is one grid of patch tokens.
    pub fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        match self {
            Self::Native { encoder, preprocess: cfg } => {
                let c = encoder.config();
                let s = c.image_size;
                let view = if (img.width, img.height) == (s, s) {
                    img.clone()
                } else {
                    tessera_vision::preprocess::resize(img, s, s, cfg.filter()?)
                };
                let g = s / c.patch_size;
                Ok((view, g, g))
            }
            Self::Hf(e) => e.model_view(img),
        }
    }

    /// The preprocessed pixel values the tower reads: `(3, H, W)` for one-view models,
    /// `(tiles, 3, H, W)` for Idefics3.
    pub fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { preprocess: cfg, .. } => Ok(preprocess(img, cfg, device)?),
            Self::Hf(e) => e.processor.pixel_values(img, device),
        }
    }

    /// Image tokens `(1, N, hidden)`.
    pub fn encode(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { encoder, .. } => Ok(encoder.forward(&self.pixel_values(img, device)?.unsqueeze(0)?)?),
            Self::Hf(e) => Ok(e.project(&e.tower_features(&e.processor.pixel_values(img, device)?)?)?.unsqueeze(0)?),
        }
    }

    /// The vision tower's features for `img`, `(views, patches, vision_hidden)`, as the
    /// connector reads them (native models have no tower: their image tokens are returned).
    pub fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { .. } => self.encode(img, device),
            Self::Hf(e) => e.tower_features(&e.processor.pixel_values(img, device)?),
        }
    }

    /// The prompt text that stands for `img` (Hugging Face families: the placeholder
    /// expansion the reference processor writes), or `None` (native: images go first).
    pub fn placeholder_text(&self, img: &RgbImage) -> Option<String> {
        match self {
            Self::Native { .. } => None,
            Self::Hf(e) => Some(e.processor.placeholder_text(img.height, img.width, &e.image_token)),
        }
    }

    /// The placeholder token id, for the Hugging Face families.
    pub fn image_token_id(&self) -> Option<u32> {
        match self {
            Self::Native { .. } => None,
            Self::Hf(e) => Some(e.cfg.image_token_id),
        }
    }

    /// The placeholder token's text (`<image>`), for the Hugging Face families.
    pub fn image_token(&self) -> Option<&str> {
        match self {
            Self::Native { .. } => None,
            Self::Hf(e) => Some(&e.image_token),
        }
    }
}

impl ImageProcessor {
    /// Reads the image processor of the checkpoint in `dir` for the image side `cfg` describes.
    pub fn load(dir: &Path, cfg: &HfVisionConfig) -> Result<Self> {
        let (image, processor, origin) = processor_files(dir)?;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let t = &cfg.tower;
        let mut pre: PreprocessConfig =
            serde_json::from_value(image.clone()).map_err(|e| err(format!("image processor settings: {e}")))?;
        pre.validate().map_err(|e| err(e.to_string()))?;
        let (views, tokens_per_view) = match &cfg.connector {
            ConnectorConfig::PixelShuffle { scale_factor } => {
                let edge = |k: &str| image.get(k).and_then(|v| v.get("longest_edge")).and_then(Value::as_u64);
                let tile = edge("max_image_size").unwrap_or(364) as usize;
                if tile != t.image_size {
                    return Err(err(format!(
                        "max_image_size.longest_edge {tile} differs from the vision tower's image_size {}",
                        t.image_size
                    )));
                }
                let side = t.patches_per_side();
                if *scale_factor == 0 || !side.is_multiple_of(*scale_factor) {
                    return Err(err(format!("scale_factor {scale_factor} does not divide {side} patches per side")));
                }
                let seq_len = t.num_patches() / (scale_factor * scale_factor);
                if let Some(stated) = processor.get("image_seq_len").and_then(Value::as_u64) {
                    if stated as usize != seq_len {
                        return Err(err(format!(
                            "image_seq_len {stated} disagrees with the model ({side}² patches / scale_factor² = {seq_len})"
                        )));
                    }
                }
                // Idefics3ImageProcessor's own defaults: Lanczos, longest edge 4·364.
                let resample = image.get("resample").and_then(Value::as_u64).unwrap_or(1) as u32;
                let filter = Filter::from_pil(resample)
                    .ok_or_else(|| err(format!("unsupported `resample` value {resample}")))?;
                let tiling = TilingConfig {
                    longest_edge: pre.do_resize.then(|| edge("size").unwrap_or(4 * 364) as usize),
                    tile,
                    do_image_splitting: image.get("do_image_splitting").and_then(Value::as_bool).unwrap_or(true),
                    filter,
                };
                pre.do_resize = false;
                pre.do_center_crop = false;
                (Views::Tiled { tiling, normalize: pre }, seq_len)
            }
            ConnectorConfig::LlavaMlp { drop_class_token, .. } => {
                (Views::Single(pre), t.num_positions() - usize::from(*drop_class_token))
            }
            ConnectorConfig::Linear { .. } => {
                let stated = processor.get("image_seq_length").or_else(|| image.get("image_seq_length"));
                if let Some(n) = stated.and_then(Value::as_u64) {
                    if n as usize != t.num_patches() {
                        return Err(err(format!(
                            "image_seq_length {n} disagrees with the vision tower's {} patches",
                            t.num_patches()
                        )));
                    }
                }
                (Views::Single(pre), t.num_patches())
            }
        };
        Ok(Self { views, tokens_per_view, image_size: t.image_size })
    }

    /// Image tokens per image when that does not depend on the image (not for tiling).
    pub fn fixed_tokens(&self) -> Option<usize> {
        match self.views {
            Views::Single(_) => Some(self.tokens_per_view),
            Views::Tiled { .. } => None,
        }
    }

    /// Image tokens an image of `height × width` becomes.
    pub fn tokens_for_size(&self, height: usize, width: usize) -> usize {
        match &self.views {
            Views::Single(_) => self.tokens_per_view,
            Views::Tiled { tiling, .. } => {
                let (rows, cols) = tiling::grid(height, width, tiling);
                (rows * cols + 1) * self.tokens_per_view
            }
        }
    }

    /// The prompt text an image of `height × width` stands for, with `image_token` as the
    /// placeholder token (what the reference processor writes in its place).
    pub fn placeholder_text(&self, height: usize, width: usize, image_token: &str) -> String {
        match &self.views {
            Views::Single(_) => image_token.repeat(self.tokens_per_view),
            Views::Tiled { tiling, .. } => {
                let (rows, cols) = tiling::grid(height, width, tiling);
                tessera_text::idefics3_image_prompt(rows, cols, &image_token.repeat(self.tokens_per_view))
            }
        }
    }

    /// Pixel values `(views, 3, S, S)` for the tower.
    pub fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let s = self.image_size;
        match &self.views {
            Views::Single(cfg) => {
                let px = preprocess(img, cfg, device)?;
                let (_, h, w) = px.dims3()?;
                if (h, w) != (s, s) {
                    return Err(TesseraError::Config {
                        path: "processor_config.json".into(),
                        reason: format!("the image processor makes {h}×{w} images but the vision tower reads {s}×{s}"),
                    });
                }
                Ok(px.unsqueeze(0)?)
            }
            Views::Tiled { tiling, normalize } => {
                let views = split_image(img, tiling)
                    .images
                    .iter()
                    .map(|t| tessera_vision::preprocess::to_tensor(t, normalize, device))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(Tensor::stack(&views, 0)?)
            }
        }
    }

    fn describe(&self) -> String {
        match &self.views {
            Views::Single(_) => format!("{} image tokens per image", self.tokens_per_view),
            Views::Tiled { tiling, .. } => format!(
                "{} image tokens per {1}×{1} view; {2}, plus a global view",
                self.tokens_per_view,
                tiling.tile,
                match (tiling.do_image_splitting, tiling.longest_edge) {
                    (true, Some(e)) => format!("longest edge resized to {e}, then split into tiles"),
                    (true, None) => "split into tiles".to_string(),
                    (false, _) => "not split".to_string(),
                }
            ),
        }
    }
}

impl HfImageEncoder {
    fn load(cfg: &HfVisionConfig, dir: &Path, vb: &Weights, text_hidden: usize, image_token: String) -> Result<Self> {
        let t = &cfg.tower;
        let (tower_root, connector_root) = match cfg.family {
            VlmFamily::Idefics3 => (
                first_prefix(vb, &["model.vision_model", "vision_model"], "embeddings.patch_embedding.weight"),
                first_prefix(vb, &["model.connector", "connector"], "modality_projection.proj.weight"),
            ),
            VlmFamily::Llava | VlmFamily::PaliGemma => (
                first_prefix(
                    vb,
                    &[
                        "vision_tower.vision_model",
                        "vision_tower",
                        "model.vision_tower.vision_model",
                        "model.vision_tower",
                    ],
                    "embeddings.patch_embedding.weight",
                ),
                first_prefix(vb, &["multi_modal_projector", "model.multi_modal_projector"], ""),
            ),
        };
        let config_err = |reason: String| TesseraError::Config { path: dir.join("config.json"), reason };
        let (feature, drop_cls, with_post_norm) = match &cfg.connector {
            ConnectorConfig::LlavaMlp { feature_layer, drop_class_token, .. } => {
                let layers = t.num_hidden_layers as i64;
                let k = if *feature_layer < 0 { layers + 1 + feature_layer } else { *feature_layer };
                if !(0..=layers).contains(&k) {
                    return Err(config_err(format!(
                        "vision_feature_layer {feature_layer} is out of range for a {layers}-layer tower"
                    )));
                }
                (FeatureLayer::Hidden(k as usize), *drop_class_token, false)
            }
            _ => (FeatureLayer::PostNorm, false, true),
        };
        let processor = ImageProcessor::load(dir, cfg)?;
        let tower = VisionTower::new(t, &tower_root, with_post_norm)?;
        let connector = match &cfg.connector {
            ConnectorConfig::PixelShuffle { scale_factor } => {
                Connector::pixel_shuffle(t.hidden_size, text_hidden, *scale_factor, &connector_root)?
            }
            ConnectorConfig::LlavaMlp { act, bias, .. } => {
                Connector::mlp(t.hidden_size, text_hidden, *act, *bias, &connector_root)?
            }
            ConnectorConfig::Linear { projection_dim } => {
                if *projection_dim != text_hidden {
                    return Err(config_err(format!(
                        "projection_dim {projection_dim} differs from the text model's width {text_hidden}"
                    )));
                }
                Connector::linear(t.hidden_size, *projection_dim, &connector_root)?
            }
        };
        Ok(Self { cfg: cfg.clone(), tower, feature, drop_cls, connector, processor, image_token })
    }

    fn describe(&self) -> String {
        let t = self.tower.config();
        format!(
            "{:?} tower ({} layers, width {}, {}×{} image, {}×{} patches, features {}), connector: {}; {}",
            t.kind,
            t.num_hidden_layers,
            t.hidden_size,
            t.image_size,
            t.image_size,
            t.patch_size,
            t.patch_size,
            match self.feature {
                FeatureLayer::PostNorm => "after post_layernorm".to_string(),
                FeatureLayer::Hidden(k) =>
                    format!("hidden_states[{k}]{}", if self.drop_cls { " without CLS" } else { "" }),
            },
            self.connector.describe(),
            self.processor.describe()
        )
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let g = self.tower.config().patches_per_side();
        match &self.processor.views {
            Views::Single(cfg) if self.processor.tokens_per_view == g * g => Ok((processed_image(img, cfg)?, g, g)),
            _ => Err(TesseraError::InvalidInput(
                "this model's image tokens are not one grid of patches (tiles, pixel shuffle or a class token); \
                 attention pictures are not available for it"
                    .into(),
            )),
        }
    }

    /// `(views, 3, S, S)` → `(views, patches, vision_hidden)` as the connector reads them.
    fn tower_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let x = self.tower.forward(pixels, self.feature)?;
        Ok(if self.drop_cls { drop_class_token(&x)? } else { x })
    }

    /// Tower features → image tokens `(views · tokens_per_view, text_hidden)`.
    fn project(&self, features: &Tensor) -> Result<Tensor> {
        let y = self.connector.forward(features)?;
        let (v, n, d) = y.dims3()?;
        Ok(y.reshape((v * n, d))?)
    }
}

/// The image as the processor resizes (and crops) it, before rescaling.
fn processed_image(img: &RgbImage, cfg: &PreprocessConfig) -> Result<RgbImage> {
    let mut out = img.clone();
    if cfg.do_resize {
        let size =
            cfg.size.ok_or_else(|| TesseraError::InvalidInput("do_resize is set but `size` is missing".into()))?;
        let (h, w) = tessera_vision::preprocess::output_size(img.height, img.width, size);
        out = tessera_vision::preprocess::resize(&out, h, w, cfg.filter()?);
    }
    if cfg.do_center_crop {
        if let Some(Size::HeightWidth { height, width }) = cfg.crop_size {
            out = tessera_vision::preprocess::center_crop(&out, height, width);
        }
    }
    Ok(out)
}

/// The first of `candidates` under which `probe` exists (the checkpoint's naming generation);
/// the first candidate when none matches, so that errors name the expected tensor.
fn first_prefix(vb: &Weights, candidates: &[&str], probe: &str) -> Weights {
    candidates
        .iter()
        .map(|p| vb.pp(p))
        .find(|w| if probe.is_empty() { w.has_any() } else { w.contains(probe) })
        .unwrap_or_else(|| vb.pp(candidates[0]))
}
