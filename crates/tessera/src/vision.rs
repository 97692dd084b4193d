//! Image encoders as the assembly composes them from `tessera-vision`: the reference
//! processor's preprocessing (from `processor_config.json` / `preprocessor_config.json`, or the
//! native model's config), then the model's image tower and connector, giving image tokens in
//! the decoder's width — and, for the Hugging Face families, the placeholder text each image
//! expands to in the prompt.

use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::Value;
use tessera_decoder::Weights;
use tessera_text::Tokenizer;
use tessera_vision::{
    drop_class_token, preprocess, split_image, tiling, Connector, FeatureLayer, Filter, NativePatchEncoder, PanAndScan,
    PreprocessConfig, Qwen2VisionTower, RgbImage, Size, TilingConfig, VisionTower,
};

use crate::config::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, VisionSpec};
use crate::error::{Result, TesseraError};
use crate::families::Qwen2VlSpec;

pub(crate) enum ImageEncoder {
    Native { encoder: NativePatchEncoder, preprocess: PreprocessConfig },
    Hf(Box<HfImageEncoder>),
    Qwen2Vl(Box<Qwen2VlEncoder>),
}

/// Qwen2-VL's processor settings, tower and merger.
pub(crate) struct Qwen2VlEncoder {
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
    fn load(spec: &Qwen2VlSpec, dir: &Path, vb: &Weights, tokenizer: &Tokenizer) -> Result<Self> {
        let (image, _, origin) = processor_files(dir)?;
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
        let min_pixels = field(&["size.shortest_edge", "min_pixels"], 56 * 56) as usize;
        let max_pixels = field(&["size.longest_edge", "max_pixels"], 28 * 28 * 1280) as usize;
        if min_pixels == 0 || min_pixels > max_pixels || max_pixels > tessera_vision::preprocess::MAX_SIDE.pow(2) {
            return Err(err(format!("pixel budget {min_pixels}..={max_pixels} is empty or too large")));
        }
        let filter = Filter::from_pil(normalize.resample)
            .ok_or_else(|| err(format!("unsupported `resample` value {}", normalize.resample)))?;
        let image_token = tokenizer.id_to_token(spec.image_token_id).ok_or_else(|| TesseraError::Config {
            path: dir.join("tokenizer.json"),
            reason: format!("the tokenizer has no token for image_token_id {}", spec.image_token_id),
        })?;
        let root = first_prefix(vb, &["visual", "model.visual"], "patch_embed.proj.weight");
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

/// How a Hugging Face family's processor turns one image into pixel values.
#[derive(Debug, Clone)]
enum Views {
    /// Resize (and crop), rescale, normalize: one image in, one tower input out.
    Single(PreprocessConfig),
    /// Idefics3: tiles plus a global view, each rescaled and normalized.
    Tiled { tiling: TilingConfig, normalize: PreprocessConfig },
    /// Gemma 3 with pan-and-scan: the whole image, then its crops, each resized, rescaled and
    /// normalized.
    PanAndScan { pas: PanAndScan, preprocess: PreprocessConfig },
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
    cfg: TowerSpec,
    tower: VisionTower,
    feature: FeatureLayer,
    drop_cls: bool,
    connector: Connector,
    processor: ImageProcessor,
    texts: PlaceholderTexts,
}

/// The tokenizer's texts of a family's placeholder tokens.
pub(crate) struct PlaceholderTexts {
    /// The image token (`<image>`), repeated for each image token.
    image_token: String,
    /// Gemma 3: what the template writes for an image (`<start_of_image>`) and what closes the
    /// expansion (`<end_of_image>`).
    wrap: Option<(String, String)>,
}

impl PlaceholderTexts {
    /// What stands for an image in the rendered prompt.
    fn placeholder(&self) -> &str {
        match &self.wrap {
            Some((begin, _)) => begin,
            None => &self.image_token,
        }
    }
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
    /// `text_hidden`: the decoder's width; `tokenizer` gives the texts of the placeholder ids
    /// (Hugging Face families).
    /// `pan_and_scan`: Gemma 3's pan-and-scan on, whatever the processor settings say.
    pub fn load(
        spec: &VisionSpec,
        dir: &Path,
        vb: &Weights,
        text_hidden: usize,
        tokenizer: &Tokenizer,
        pan_and_scan: bool,
    ) -> Result<Self> {
        match spec {
            VisionSpec::Native { encoder, preprocess } => {
                let path = dir.join("preprocessor_config.json");
                let preprocess = if let Some(json) = crate::model::read_json_opt(&path)? {
                    let cfg: PreprocessConfig = serde_json::from_value(json)
                        .map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
                    cfg.validate().map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
                    let side = encoder.image_size;
                    let (h, w) = match cfg.size {
                        Some(Size::HeightWidth { height, width }) if cfg.do_resize => (height, width),
                        _ => (0, 0),
                    };
                    if (h, w) != (side, side) {
                        return Err(TesseraError::Config {
                            path,
                            reason: format!(
                                "the model takes {side}×{side} images: `size` must be {{\"height\": {side}, \"width\": \
                                 {side}}} with `do_resize`"
                            ),
                        });
                    }
                    cfg
                } else {
                    preprocess.clone()
                };
                Ok(Self::Native { encoder: NativePatchEncoder::new(*encoder, vb)?, preprocess })
            }
            VisionSpec::Tower(cfg) => {
                let token = |id: u32, what: &str| {
                    tokenizer.id_to_token(id).ok_or_else(|| TesseraError::Config {
                        path: dir.join("tokenizer.json"),
                        reason: format!("the tokenizer has no token for {what} {id}"),
                    })
                };
                let texts = PlaceholderTexts {
                    image_token: token(cfg.image_token_id, "image_token_id")?,
                    wrap: match cfg.placeholder {
                        Placeholder::ImageToken => None,
                        Placeholder::Wrapped { begin, end } => {
                            Some((token(begin, "boi_token_index")?, token(end, "eoi_token_index")?))
                        }
                    },
                };
                Ok(Self::Hf(Box::new(HfImageEncoder::load(cfg, dir, vb, text_hidden, texts, pan_and_scan)?)))
            }
            VisionSpec::Qwen2Vl(spec) => {
                if pan_and_scan {
                    return Err(TesseraError::InvalidInput("pan-and-scan is for Gemma 3; Qwen2-VL has none".into()));
                }
                Ok(Self::Qwen2Vl(Box::new(Qwen2VlEncoder::load(spec, dir, vb, tokenizer)?)))
            }
        }
    }

    /// How many images one prompt may carry.
    pub fn max_images(&self) -> usize {
        match self {
            Self::Native { .. } => 1,
            Self::Hf(_) | Self::Qwen2Vl(_) => usize::MAX,
        }
    }

    /// The grid `(rows, cols)` of `img`'s image tokens, for families whose images take M-RoPE
    /// grid positions (Qwen2-VL); `None` for the others.
    pub fn mrope_grid(&self, img: &RgbImage) -> Result<Option<(usize, usize)>> {
        match self {
            Self::Qwen2Vl(e) => e.grid(img).map(Some),
            _ => Ok(None),
        }
    }

    /// Image tokens per image when that does not depend on the image (not for Idefics3's tiles).
    pub fn fixed_tokens(&self) -> Option<usize> {
        match self {
            Self::Native { encoder, .. } => Some(encoder.config().num_patches()),
            Self::Hf(e) => e.processor.fixed_tokens(),
            Self::Qwen2Vl(_) => None,
        }
    }

    /// Image tokens `img` becomes.
    pub fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        match self {
            Self::Native { encoder, .. } => Ok(encoder.config().num_patches()),
            Self::Hf(e) => Ok(e.processor.tokens_for_size(img.height, img.width)),
            Self::Qwen2Vl(e) => e.grid(img).map(|(r, c)| r * c),
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
            Self::Qwen2Vl(e) => {
                let c = e.tower.config();
                let windows = match &c.windows {
                    Some(w) => format!(", windows of {} px except in blocks {:?}", w.size, w.full_blocks),
                    None => String::new(),
                };
                format!(
                    "Qwen2-VL tower ({} blocks, width {}, {}×{} patches over {} frames, 2-D RoPE{windows}), {}×{} \
                     patch merger; images resized to multiples of {} px within {}..={} pixels, one token per {}×{} \
                     block",
                    c.depth,
                    c.embed_dim,
                    c.patch_size,
                    c.patch_size,
                    c.temporal_patch_size,
                    c.spatial_merge_size,
                    c.spatial_merge_size,
                    c.factor(),
                    e.min_pixels,
                    e.max_pixels,
                    c.factor(),
                    c.factor()
                )
            }
        }
    }

    /// The image as the model sees it (resized, before normalization), and its patch grid —
    /// for models whose image is one grid of patch tokens.
    pub fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        match self {
            Self::Native { encoder, preprocess: cfg } => {
                let c = encoder.config();
                let g = c.image_size / c.patch_size;
                Ok((tessera_vision::preprocess::view(img, cfg)?, g, g))
            }
            Self::Hf(e) => e.model_view(img),
            Self::Qwen2Vl(e) => {
                let (h, w) = e.resized(img)?;
                let (rows, cols) = e.grid(img)?;
                Ok((tessera_vision::preprocess::resize(img, h, w, e.filter), rows, cols))
            }
        }
    }

    /// The preprocessed pixel values the tower reads: `(3, H, W)` for one-view models,
    /// `(tiles, 3, H, W)` for Idefics3.
    pub fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { preprocess: cfg, .. } => Ok(preprocess(img, cfg, device)?),
            Self::Hf(e) => e.processor.pixel_values(img, device),
            Self::Qwen2Vl(e) => Ok(e.patches(img, device)?.0),
        }
    }

    /// Image tokens `(1, N, hidden)`.
    pub fn encode(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { encoder, .. } => Ok(encoder.forward(&self.pixel_values(img, device)?.unsqueeze(0)?)?),
            Self::Hf(e) => Ok(e.project(&e.tower_features(&e.processor.pixel_values(img, device)?)?)?.unsqueeze(0)?),
            Self::Qwen2Vl(e) => {
                let (px, rows, cols) = e.patches(img, device)?;
                let features = e.tower.features(&px, rows, cols)?;
                Ok(e.tower.merge(&features, rows, cols)?.unsqueeze(0)?)
            }
        }
    }

    /// [`encode`](Self::encode) and, for Qwen3-VL, DeepStack's image tokens `(N, hidden)` per
    /// level (empty for the other families).
    pub fn encode_with_deepstack(&self, img: &RgbImage, device: &Device) -> Result<(Tensor, Vec<Tensor>)> {
        match self {
            Self::Qwen2Vl(e) => {
                let (px, rows, cols) = e.patches(img, device)?;
                let (features, deepstack) = e.tower.features_and_deepstack(&px, rows, cols)?;
                Ok((e.tower.merge(&features, rows, cols)?.unsqueeze(0)?, deepstack))
            }
            _ => Ok((self.encode(img, device)?, Vec::new())),
        }
    }

    /// The vision tower's features for `img`, `(views, patches, vision_hidden)`, as the
    /// connector reads them (native models have no tower: their image tokens are returned).
    pub fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { .. } => self.encode(img, device),
            Self::Hf(e) => e.tower_features(&e.processor.pixel_values(img, device)?),
            Self::Qwen2Vl(e) => Ok(e.features(img, device)?.unsqueeze(0)?),
        }
    }

    /// The prompt text that stands for `img` (Hugging Face families: the placeholder
    /// expansion the reference processor writes), or `None` (native: images go first).
    pub fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        match self {
            Self::Native { .. } => Ok(None),
            Self::Hf(e) => {
                let wrap = e.texts.wrap.as_ref().map(|(b, e)| (b.as_str(), e.as_str()));
                Ok(Some(e.processor.placeholder_text(img.height, img.width, &e.texts.image_token, wrap)))
            }
            Self::Qwen2Vl(e) => {
                let (rows, cols) = e.grid(img)?;
                Ok(Some(e.image_token.repeat(rows * cols)))
            }
        }
    }

    /// The placeholder token id, for the Hugging Face families.
    pub fn image_token_id(&self) -> Option<u32> {
        match self {
            Self::Native { .. } => None,
            Self::Hf(e) => Some(e.cfg.image_token_id),
            Self::Qwen2Vl(e) => Some(e.image_token_id),
        }
    }

    /// The placeholder token's text (`<image>`), for the Hugging Face families.
    pub fn image_token(&self) -> Option<&str> {
        match self {
            Self::Native { .. } => None,
            Self::Hf(e) => Some(e.texts.placeholder()),
            Self::Qwen2Vl(e) => Some(&e.image_token),
        }
    }
}

impl ImageProcessor {
    /// Reads the image processor of the checkpoint in `dir` for the image side `cfg` describes.
    /// `pan_and_scan`: turn Gemma 3's pan-and-scan on whatever the settings say.
    pub fn load(dir: &Path, cfg: &TowerSpec, pan_and_scan: bool) -> Result<Self> {
        let (image, processor, origin) = processor_files(dir)?;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let pre: PreprocessConfig =
            serde_json::from_value(image.clone()).map_err(|e| err(format!("image processor settings: {e}")))?;
        pre.validate().map_err(|e| err(e.to_string()))?;
        let (views, tokens_per_view) = match &cfg.processor {
            ProcessorRule::Tiled { tokens_per_view } => {
                let (tiling, normalize) =
                    crate::families::tiled_processor(&image, &processor, pre, cfg.tower.image_size, *tokens_per_view)
                        .map_err(err)?;
                (Views::Tiled { tiling, normalize }, *tokens_per_view)
            }
            ProcessorRule::Single { tokens, stated_len, pan_and_scan: can_pan } => {
                let stated = stated_len.and_then(|k| processor.get(k).or_else(|| image.get(k)));
                if let (Some(n), Some(k)) = (stated.and_then(Value::as_u64), stated_len) {
                    if n as usize != *tokens {
                        return Err(err(format!("{k} {n} disagrees with the vision tower's {tokens} image tokens")));
                    }
                }
                let wanted = pan_and_scan || image.get("do_pan_and_scan").and_then(Value::as_bool) == Some(true);
                match (wanted, can_pan) {
                    (false, _) => (Views::Single(pre), *tokens),
                    (true, false) => {
                        return Err(err("pan-and-scan is for Gemma 3's processor; this model has none".into()))
                    }
                    (true, true) => {
                        let num = |k: &str| {
                            image.get(k).and_then(Value::as_f64).filter(|v| v.is_finite() && *v > 0.0).ok_or_else(
                                || err(format!("pan-and-scan needs a positive `{k}` in the image processor settings")),
                            )
                        };
                        let pas = PanAndScan {
                            min_crop_size: num("pan_and_scan_min_crop_size")? as usize,
                            max_num_crops: num("pan_and_scan_max_num_crops")? as usize,
                            min_ratio_to_activate: num("pan_and_scan_min_ratio_to_activate")?,
                        };
                        (Views::PanAndScan { pas, preprocess: pre }, *tokens)
                    }
                }
            }
        };
        Ok(Self { views, tokens_per_view, image_size: cfg.tower.image_size })
    }

    /// Image tokens per image when that does not depend on the image (not for tiling).
    pub fn fixed_tokens(&self) -> Option<usize> {
        match self.views {
            Views::Single(_) => Some(self.tokens_per_view),
            Views::Tiled { .. } | Views::PanAndScan { .. } => None,
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
            Views::PanAndScan { pas, .. } => (1 + pas.crops(height, width).len()) * self.tokens_per_view,
        }
    }

    /// The prompt text an image of `height × width` stands for, with `image_token` as the
    /// placeholder token (what the reference processor writes in its place); `wrap`: Gemma 3's
    /// markers around each view's tokens (`\n\n<start_of_image>` … `<end_of_image>\n\n`).
    pub fn placeholder_text(
        &self,
        height: usize,
        width: usize,
        image_token: &str,
        wrap: Option<(&str, &str)>,
    ) -> String {
        let tokens = image_token.repeat(self.tokens_per_view);
        let view = match wrap {
            Some((begin, end)) => format!("\n\n{begin}{tokens}{end}\n\n"),
            None => tokens,
        };
        match &self.views {
            Views::Single(_) => view,
            Views::Tiled { tiling, .. } => {
                let (rows, cols) = tiling::grid(height, width, tiling);
                tessera_text::idefics3_image_prompt(rows, cols, &view)
            }
            Views::PanAndScan { pas, .. } => match pas.crops(height, width).len() {
                0 => view,
                n => format!(
                    "Here is the original image {view} and here are some crops to help you see better {}",
                    vec![view.as_str(); n].join(" ")
                ),
            },
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
                // Every view is one tile's size (an image of one tile or less is its own
                // view): their values go straight into one buffer, `(views, 3, h, w)`.
                let views = split_image(img, tiling).images;
                let (h, w) = views.first().map_or((0, 0), |v| (v.height, v.width));
                if views.iter().any(|v| (v.height, v.width) != (h, w)) {
                    return Err(TesseraError::Config {
                        path: "preprocessor_config.json".into(),
                        reason: format!("the tiled views of a {}×{} image differ in size", img.width, img.height),
                    });
                }
                let mut values = vec![0f32; views.len() * 3 * h * w];
                for (view, out) in views.iter().zip(values.chunks_exact_mut((3 * h * w).max(1))) {
                    tessera_vision::preprocess::normalize_into(view, normalize, out)?;
                }
                Ok(Tensor::from_vec(values, (views.len(), 3, h, w), device)?)
            }
            Views::PanAndScan { pas, preprocess: cfg } => {
                let crops = pas.crops(img.height, img.width);
                let mut views = vec![preprocess(img, cfg, device)?];
                for rect in crops {
                    views.push(preprocess(&tessera_vision::pan_and_scan::crop(img, rect), cfg, device)?);
                }
                Ok(Tensor::stack(&views, 0)?)
            }
        }
    }

    fn describe(&self) -> String {
        match &self.views {
            Views::Single(_) => format!("{} image tokens per image", self.tokens_per_view),
            Views::PanAndScan { pas, .. } => format!(
                "{} image tokens per view; pan-and-scan: the image, plus up to {} crops when its sides differ by {}× \
                 or more",
                self.tokens_per_view, pas.max_num_crops, pas.min_ratio_to_activate
            ),
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
    fn load(
        cfg: &TowerSpec,
        dir: &Path,
        vb: &Weights,
        text_hidden: usize,
        texts: PlaceholderTexts,
        pan_and_scan: bool,
    ) -> Result<Self> {
        let t = &cfg.tower;
        let tower_root = first_prefix(vb, cfg.weights.tower, "embeddings.patch_embedding.weight");
        let connector_root = first_prefix(vb, cfg.weights.connector, cfg.weights.connector_probe);
        let processor = ImageProcessor::load(dir, cfg, pan_and_scan)?;
        let tower = VisionTower::new(t, &tower_root, cfg.feature == FeatureLayer::PostNorm)?;
        let connector = match &cfg.connector {
            ConnectorConfig::PixelShuffle { scale_factor } => {
                Connector::pixel_shuffle(t.hidden_size, text_hidden, *scale_factor, &connector_root)?
            }
            ConnectorConfig::Mlp { act, bias } => {
                Connector::mlp(t.hidden_size, text_hidden, *act, *bias, &connector_root)?
            }
            ConnectorConfig::Linear => Connector::linear(t.hidden_size, text_hidden, &connector_root)?,
            ConnectorConfig::AvgPool { tokens_per_side } => Connector::avg_pool(
                t.hidden_size,
                text_hidden,
                t.patches_per_side(),
                *tokens_per_side,
                t.layer_norm_eps,
                &connector_root,
            )?,
        };
        Ok(Self {
            cfg: cfg.clone(),
            tower,
            feature: cfg.feature,
            drop_cls: cfg.drop_class_token,
            connector,
            processor,
            texts,
        })
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
        // The image tokens' grid: the patches, or Gemma 3's pooled blocks of them.
        let g = match self.cfg.connector {
            ConnectorConfig::AvgPool { tokens_per_side } => tokens_per_side,
            _ => self.tower.config().patches_per_side(),
        };
        match &self.processor.views {
            Views::Single(cfg) if self.processor.tokens_per_view == g * g => {
                Ok((tessera_vision::preprocess::view(img, cfg)?, g, g))
            }
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

/// The first of `candidates` under which `probe` exists (the checkpoint's naming generation);
/// the first candidate when none matches, so that errors name the expected tensor.
fn first_prefix(vb: &Weights, candidates: &[&str], probe: &str) -> Weights {
    candidates
        .iter()
        .map(|p| vb.pp(p))
        .find(|w| if probe.is_empty() { w.has_any() } else { w.contains(probe) })
        .unwrap_or_else(|| vb.pp(candidates[0]))
}

/// The image side of a [`Model`]: how many tokens an image takes, its placeholder text, pixel
/// values and encodings.
impl crate::model::Model {
    /// Refuses more images than the model takes, naming the model.
    pub(crate) fn check_image_count(&self, n: usize) -> Result<()> {
        let max = self.max_images();
        if max == 0 {
            self.vision()?;
        }
        if n > max {
            return Err(TesseraError::InvalidInput(format!(
                "{n} images given but model `{}` accepts at most {max}",
                self.info.source.path().display()
            )));
        }
        Ok(())
    }

    /// Image tokens per image, for models where that does not depend on the image (`None` for
    /// text models and for Idefics3, whose tile count depends on the image's size).
    pub fn image_tokens_per_image(&self) -> Option<usize> {
        self.image_encoder.as_ref()?.fixed_tokens()
    }

    /// Image tokens `image` becomes in the sequence.
    pub fn image_tokens(&self, image: &RgbImage) -> Result<usize> {
        self.vision()?.tokens_for(image)
    }

    /// What a raw prompt writes for each image, before the processor's expansion (`<image>`;
    /// Gemma 3's `<start_of_image>`); `None` for text models and the native model.
    pub fn image_placeholder(&self) -> Option<&str> {
        self.image_encoder.as_ref()?.image_token()
    }

    /// The prompt text that stands for `image` (Hugging Face families; `None` for the native
    /// model, whose image tokens go before the text).
    pub fn image_placeholder_text(&self, image: &RgbImage) -> Result<Option<String>> {
        self.vision()?.placeholder_text(image)
    }

    /// Refuses an image that would take more than `max_tokens` image tokens.
    pub fn check_image_budget(&self, image: &RgbImage, max_tokens: usize, name: &str) -> Result<()> {
        let n = self.image_tokens(image)?;
        if n > max_tokens {
            return Err(TesseraError::InvalidInput(format!(
                "image {name} ({}×{}) takes {n} image tokens, over the budget of {max_tokens} per image",
                image.width, image.height
            )));
        }
        Ok(())
    }

    /// The most images one prompt may carry (0 for text-only models).
    pub fn max_images(&self) -> usize {
        self.image_encoder.as_ref().map(|e| e.max_images()).unwrap_or(0)
    }

    /// A description of the image side for `tessera info`.
    pub fn vision_description(&self) -> Option<String> {
        self.image_encoder.as_ref().map(|e| e.describe())
    }

    /// The preprocessed pixel values the model sees for `image`: `(3, H, W)` for the native
    /// model, `(views, 3, H, W)` for the Hugging Face families (Idefics3: tiles + global view).
    pub fn pixel_values(&self, image: &RgbImage) -> Result<Tensor> {
        self.vision_for(image)?.pixel_values(image, &self.device)
    }

    /// The image as the model sees it (resized, not normalized) and its patch grid `(rows, cols)`.
    pub fn model_view(&self, image: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        self.vision_for(image)?.model_view(image)
    }

    /// Image tokens `(1, N, hidden)` for `image`, in the decoder's width.
    pub fn encode_image(&self, image: &RgbImage) -> Result<Tensor> {
        self.vision_for(image)?.encode(image, &self.device)
    }

    /// The image encoder, once `image` is known to fit the model's context: an image's views
    /// are counted from its size alone, so one that could never be in a prompt (a thin strip
    /// that pan-and-scan cuts into thousands of crops, say) is refused before any pixel work.
    pub(crate) fn vision_for(&self, image: &RgbImage) -> Result<&ImageEncoder> {
        let vision = self.vision()?;
        let tokens = vision.tokens_for(image)?;
        if tokens > self.max_positions() {
            return Err(TesseraError::InvalidInput(format!(
                "the {}×{} image takes {tokens} image tokens, more than the model's context of {} tokens",
                image.width,
                image.height,
                self.max_positions()
            )));
        }
        Ok(vision)
    }

    pub(crate) fn vision(&self) -> Result<&ImageEncoder> {
        self.image_encoder.as_ref().ok_or_else(|| {
            TesseraError::InvalidInput(format!(
                "model `{}` ({}) takes no images",
                self.info.source.path().display(),
                self.config.family
            ))
        })
    }
}
