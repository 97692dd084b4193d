//! The image side the ViT families share (Idefics3 / SmolVLM, LLaVA, PaliGemma, Gemma 3): a
//! SigLIP or CLIP tower read at one layer, a connector into the decoder's width, and the
//! family's processor — one view (resize, crop, rescale, normalize), Idefics3's tiles plus a
//! global view, or Gemma 3's pan-and-scan crops — whose image tokens replace the prompt's
//! placeholder ids. Each of those family modules resolves its config into a [`TowerSpec`].

use candle_core::{Device, Tensor};
use serde_json::Value;
use tessera_decoder::{Activation, NormStyle};
use tessera_vision::{
    drop_class_token, preprocess, split_image, tiling, Connector, FeatureLayer, PanAndScan, PreprocessConfig, RgbImage,
    TilingConfig, VisionTower, VisionTowerConfig,
};

use super::image::{
    first_prefix, processor_files, token_text, ImageFeatures, ImageLoad, ImageSide, ImageSpec, MmprojMetadata,
    MmprojTensor, ProcessorSettings,
};
use crate::error::{Result, TesseraError};

/// A tower + connector family's image side, resolved from its config.
#[derive(Debug, Clone, PartialEq)]
pub struct TowerSpec {
    pub tower: VisionTowerConfig,
    /// Which tower output the connector reads.
    pub feature: FeatureLayer,
    /// Drop the class token from the features (LLaVA's `default` select strategy on CLIP).
    pub drop_class_token: bool,
    pub connector: ConnectorConfig,
    /// The placeholder id the processor expands and the model replaces with image features.
    pub image_token_id: u32,
    /// What the chat template writes for an image, and what it expands to.
    pub placeholder: Placeholder,
    pub processor: ProcessorRule,
    /// Where the tower's and the connector's weights live, by checkpoint naming generation
    /// (the first that holds `probe` is used).
    pub weights: WeightRoots,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ConnectorConfig {
    /// Pixel shuffle by `scale_factor`, then `modality_projection.proj` (Idefics3).
    PixelShuffle { scale_factor: usize },
    /// `linear_1` → activation → `linear_2` (LLaVA).
    Mlp { act: Activation, bias: bool },
    /// One linear layer (PaliGemma).
    Linear,
    /// Average pooling of the patch grid to `tokens_per_side²` tokens, RMSNorm (its scale
    /// stored as `norm`), projection (Gemma 3).
    AvgPool { tokens_per_side: usize, norm: NormStyle },
}

/// What stands for an image in the rendered prompt, and what the processor expands it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// The image token itself, expanded to the image's tokens (`<image>` × n, or Idefics3's
    /// tiles).
    ImageToken,
    /// `begin` (Gemma 3's `<start_of_image>`), expanded to
    /// `"\n\n" + begin + image token × n + end + "\n\n"`.
    Wrapped { begin: u32, end: u32 },
}

/// How the family's processor turns one image into views and tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessorRule {
    /// Resize (and crop), rescale, normalize: one view of `tokens` image tokens. When the
    /// processor's settings state the count under `stated_len`, it must agree. `pan_and_scan`:
    /// the processor can add crops of the image as further views (Gemma 3).
    Single { tokens: usize, stated_len: Option<&'static str>, pan_and_scan: bool },
    /// Idefics3: tiles and a global view of `tokens_per_view` tokens each.
    Tiled { tokens_per_view: usize },
}

#[derive(Debug, Clone, PartialEq)]
pub struct WeightRoots {
    pub tower: &'static [&'static str],
    pub connector: &'static [&'static str],
    /// The tensor under the connector root that tells which root holds it (`""`: any tensor).
    pub connector_probe: &'static str,
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

/// A ViT family's loaded image side.
pub(crate) struct TowerImages {
    cfg: TowerSpec,
    tower: VisionTower,
    feature: FeatureLayer,
    drop_cls: bool,
    connector: Connector,
    processor: ImageProcessor,
    texts: PlaceholderTexts,
}

/// The tokenizer's texts of a family's placeholder tokens.
struct PlaceholderTexts {
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

impl ImageProcessor {
    /// Reads the image processor of the checkpoint in `dir` for the image side `cfg` describes.
    /// `pan_and_scan`: turn Gemma 3's pan-and-scan on whatever the settings say.
    pub fn load(dir: &std::path::Path, cfg: &TowerSpec, pan_and_scan: bool) -> Result<Self> {
        let (image, processor, origin) = processor_files(dir)?;
        Self::from_settings(&ProcessorSettings { image, processor, origin }, cfg, pan_and_scan)
    }

    /// The image processor `settings` describe for the image side `cfg` describes.
    pub fn from_settings(settings: &ProcessorSettings, cfg: &TowerSpec, pan_and_scan: bool) -> Result<Self> {
        let ProcessorSettings { image, processor, origin } = settings;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let pre: PreprocessConfig =
            serde_json::from_value(image.clone()).map_err(|e| err(format!("image processor settings: {e}")))?;
        pre.validate().map_err(|e| err(e.to_string()))?;
        let (views, tokens_per_view) = match &cfg.processor {
            ProcessorRule::Tiled { tokens_per_view } => {
                let (tiling, normalize) =
                    super::idefics3::tiled_processor(image, processor, pre, cfg.tower.image_size, *tokens_per_view)
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
                        return Err(err(
                            "pan-and-scan is for Gemma 3's processor as a checkpoint folder configures it; this \
                             model's image processor has none"
                                .into(),
                        ))
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

impl TowerImages {
    fn load(cfg: &TowerSpec, at: &ImageLoad<'_>) -> Result<Self> {
        let texts = PlaceholderTexts {
            image_token: token_text(at, cfg.image_token_id, "image_token_id")?,
            wrap: match cfg.placeholder {
                Placeholder::ImageToken => None,
                Placeholder::Wrapped { begin, end } => {
                    Some((token_text(at, begin, "boi_token_index")?, token_text(at, end, "eoi_token_index")?))
                }
            },
        };
        let (vb, text_hidden) = (at.weights, at.text_hidden);
        let t = &cfg.tower;
        let tower_root = first_prefix(vb, cfg.weights.tower, "embeddings.patch_embedding.weight");
        let connector_root = first_prefix(vb, cfg.weights.connector, cfg.weights.connector_probe);
        let processor = ImageProcessor::from_settings(&ProcessorSettings::of(at)?, cfg, at.pan_and_scan)?;
        let tower = VisionTower::new(t, &tower_root, cfg.feature == FeatureLayer::PostNorm)?;
        let connector = match &cfg.connector {
            ConnectorConfig::PixelShuffle { scale_factor } => {
                Connector::pixel_shuffle(t.hidden_size, text_hidden, *scale_factor, &connector_root)?
            }
            ConnectorConfig::Mlp { act, bias } => {
                Connector::mlp(t.hidden_size, text_hidden, *act, *bias, &connector_root)?
            }
            ConnectorConfig::Linear => Connector::linear(t.hidden_size, text_hidden, &connector_root)?,
            ConnectorConfig::AvgPool { tokens_per_side, norm } => Connector::avg_pool(
                (t.hidden_size, text_hidden),
                (t.patches_per_side(), *tokens_per_side),
                t.layer_norm_eps,
                *norm,
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
            ConnectorConfig::AvgPool { tokens_per_side, .. } => tokens_per_side,
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

impl ImageSpec for TowerSpec {
    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        Ok(Box::new(TowerImages::load(self, at)?))
    }

    /// The projector llama.cpp names for the connector: Idefics3's pixel shuffle, LLaVA's MLP,
    /// Gemma 3's pooling.
    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        match self.connector {
            ConnectorConfig::PixelShuffle { scale_factor } => {
                Some(super::idefics3::mmproj_metadata(&self.tower, scale_factor, settings, text_hidden))
            }
            ConnectorConfig::Mlp { .. } => Some(super::llava_mmproj::metadata(self, settings, config)),
            ConnectorConfig::AvgPool { .. } => Some(super::gemma3::mmproj_metadata(self, settings, text_hidden)),
            _ => None,
        }
    }

    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        match self.connector {
            ConnectorConfig::Mlp { .. } => super::llava_mmproj::tensors(self, stored, dims),
            ConnectorConfig::AvgPool { .. } => super::gemma3::mmproj_tensors(stored, dims),
            _ => MmprojTensor::whole(stored, dims),
        }
    }
}

impl ImageSide for TowerImages {
    fn fixed_tokens(&self) -> Option<usize> {
        self.processor.fixed_tokens()
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        Ok(self.processor.tokens_for_size(img.height, img.width))
    }

    fn placeholder(&self) -> Option<&str> {
        Some(self.texts.placeholder())
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.cfg.image_token_id)
    }

    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        let wrap = self.texts.wrap.as_ref().map(|(b, e)| (b.as_str(), e.as_str()));
        Ok(Some(self.processor.placeholder_text(img.height, img.width, &self.texts.image_token, wrap)))
    }

    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        self.processor.pixel_values(img, device)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        TowerImages::model_view(self, img)
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let tokens = self.project(&TowerImages::tower_features(self, &self.processor.pixel_values(img, device)?)?)?;
        Ok(ImageFeatures::new(tokens.unsqueeze(0)?))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        TowerImages::tower_features(self, &self.processor.pixel_values(img, device)?)
    }

    fn describe(&self) -> String {
        TowerImages::describe(self)
    }
}
