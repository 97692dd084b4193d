//! MiniCPM-V 4.6 (transformers 5.23 `minicpmv4_6`): a SigLIP-style tower (learned positions
//! looked up by nearest grid position, a window-attention merger after layer `insert_layer_id`),
//! a 2×2 merger MLP to the text width, and Qwen3.5's hybrid text model (families/qwen3_5.rs)
//! with plain 1-D positions (no M-RoPE grid). Images are sliced (tessera-vision's
//! `minicpm_slice`): a source view and up to `max_slice_nums` slices, each view's tokens written
//! `<image>…</image>` / `<slice>…</slice>`, slice rows split by newlines, the whole behind an
//! `<image_id>N</image_id>` tag counting the prompt's images from 0.
//!
//! llama.cpp's GGUF + mmproj pair of it loads through families/minicpm_mmproj.rs.

use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::Activation;
use tessera_vision::{MiniCpmSlicing, MiniCpmVisionConfig, SliceLayout, TowerKind, VisionTowerConfig};

use candle_core::{Device, Tensor};
use tessera_vision::{preprocess, Filter, MiniCpmVision, PreprocessConfig, RgbImage};

use super::image::{
    first_prefix, processor_stats, token_text, ImageFeatures, ImageLoad, ImageSide, ImageSpec, MmprojMetadata,
    MmprojTensor, ProcessorSettings,
};
use super::text::{TextFamily, TextSubConfig};
use super::{qwen3_5, text_config, ModelConfig, PromptStyle, TokenIds};
use crate::error::{Result, TesseraError};

/// A `minicpmv4_6` `config.json` (`null` counts as absent: the class default).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MiniCpmV46Config {
    text_config: Option<TextSubConfig>,
    #[serde(skip)]
    text_json: Option<Value>,
    vision_config: VisionFields,
    insert_layer_id: Option<usize>,
    drop_vision_last_layer: Option<bool>,
    image_token_id: Option<u32>,
    video_token_id: Option<u32>,
    tie_word_embeddings: Option<bool>,
    eos_token_id: Option<TokenIds>,
    downsample_mode: Option<String>,
    merge_kernel_size: Option<Vec<usize>>,
    merger_times: Option<usize>,
}

/// `MiniCPMV4_6VisionConfig`'s fields.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionFields {
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_channels: Option<usize>,
    image_size: Option<usize>,
    patch_size: Option<usize>,
    hidden_act: Option<String>,
    layer_norm_eps: Option<f64>,
    window_kernel_size: Option<Vec<usize>>,
}

/// The tower's sizes, with `MiniCPMV4_6VisionConfig`'s defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpmTowerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub layer_norm_eps: f64,
    /// The window-attention merger runs after this layer (the composite's `insert_layer_id`).
    pub insert_layer_id: usize,
    pub window_kernel: (usize, usize),
    pub drop_last_layer: bool,
}

/// MiniCPM-V 4.6's image side as its config resolves it.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpmV46Spec {
    pub tower: MiniCpmTowerConfig,
    /// Side of the merge of patches into one token: 4 under `downsample_mode` "16x", 2 under "4x".
    pub merge: usize,
    pub merge_kernel: (usize, usize),
    pub merger_times: usize,
    pub image_token_id: u32,
    /// Video frames' placeholder (video input is refused).
    pub video_token_id: Option<u32>,
}

/// The processor: the slicing and how an image's placeholder is written.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpmProcessorRule {
    pub slicing: MiniCpmSlicing,
    /// `<image_id>N</image_id>` before each image.
    pub use_image_id: bool,
}

/// The placeholder texts: `image_token` from the config's `image_token_id`, the others the
/// tokenizer's special tokens (`image_start_token` …), as the real tokenizer names them.
const IMAGE_START: &str = "<image>";
const IMAGE_END: &str = "</image>";
const SLICE_START: &str = "<slice>";
const SLICE_END: &str = "</slice>";
const ID_START: &str = "<image_id>";
const ID_END: &str = "</image_id>";

fn pair(v: &Option<Vec<usize>>, default: (usize, usize), name: &str) -> std::result::Result<(usize, usize), String> {
    match v.as_deref() {
        None => Ok(default),
        Some(&[h, w]) if h > 0 && w > 0 => Ok((h, w)),
        Some(other) => Err(format!("`{name}` is {other:?}, not two positive sizes")),
    }
}

/// Side of the patch merge `downsample_mode` names.
fn merge_side(mode: Option<&str>) -> std::result::Result<usize, String> {
    match mode.unwrap_or("16x") {
        "16x" => Ok(4),
        "4x" => Ok(2),
        other => Err(format!("`downsample_mode` is `{other}`: MiniCPM-V 4.6 has \"16x\" and \"4x\"")),
    }
}

impl MiniCpmV46Config {
    /// The config as read from `json` (the text part kept for Qwen3.5's own fields).
    pub(super) fn read(json: &Value) -> std::result::Result<Self, String> {
        let mut cfg: Self = super::parse(json)?;
        cfg.text_json = json.get("text_config").cloned();
        Ok(cfg)
    }

    pub(super) fn resolve(&self) -> std::result::Result<ModelConfig, String> {
        let mut text = text_config(&self.text_config, TextFamily::Qwen35)?;
        if text.family != TextFamily::Qwen35 {
            return Err(format!("text_config: MiniCPM-V 4.6's text model is qwen3_5_text, not {}", text.family.name()));
        }
        qwen3_5::hybrid_text(self.text_json.as_ref(), &mut text.decoder)?;
        // Plain 1-D positions: no image grid, and three equal M-RoPE streams are plain RoPE.
        text.decoder.rope.mrope = None;
        let v = &self.vision_config;
        if let Some(act) = v.hidden_act.as_deref().filter(|a| *a != "gelu_pytorch_tanh") {
            return Err(format!("vision_config: `hidden_act` is `{act}`: the tower runs gelu_pytorch_tanh"));
        }
        if v.num_channels.is_some_and(|c| c != 3) {
            return Err("vision_config: `num_channels` must be 3 (RGB)".into());
        }
        let tower = MiniCpmTowerConfig {
            hidden_size: v.hidden_size.unwrap_or(768),
            intermediate_size: v.intermediate_size.unwrap_or(3072),
            num_hidden_layers: v.num_hidden_layers.unwrap_or(12),
            num_attention_heads: v.num_attention_heads.unwrap_or(12),
            image_size: v.image_size.unwrap_or(224),
            patch_size: v.patch_size.unwrap_or(16),
            layer_norm_eps: v.layer_norm_eps.unwrap_or(1e-6),
            insert_layer_id: self.insert_layer_id.unwrap_or(6),
            window_kernel: pair(&v.window_kernel_size, (2, 2), "vision_config.window_kernel_size")?,
            drop_last_layer: self.drop_vision_last_layer.unwrap_or(false),
        };
        if tower.num_attention_heads == 0 || !tower.hidden_size.is_multiple_of(tower.num_attention_heads) {
            return Err(format!(
                "vision_config: `hidden_size` {} is not a multiple of `num_attention_heads` {}",
                tower.hidden_size, tower.num_attention_heads
            ));
        }
        if tower.patch_size == 0 || tower.image_size < tower.patch_size {
            return Err(format!(
                "vision_config: `image_size` {} holds no `patch_size` {} patch",
                tower.image_size, tower.patch_size
            ));
        }
        if tower.insert_layer_id >= tower.num_hidden_layers {
            return Err(format!(
                "`insert_layer_id` {} is past the tower's {} layers",
                tower.insert_layer_id, tower.num_hidden_layers
            ));
        }
        if tower.window_kernel != (2, 2) {
            return Err(format!(
                "vision_config: `window_kernel_size` is {:?}: tessera runs MiniCPM-V's 2×2 window merger",
                tower.window_kernel
            ));
        }
        let Some(image_token_id) = self.image_token_id else {
            return Err("`image_token_id` is missing: MiniCPM-V 4.6 places images at it".into());
        };
        let spec = MiniCpmV46Spec {
            tower,
            merge: merge_side(self.downsample_mode.as_deref())?,
            merge_kernel: match pair(&self.merge_kernel_size, (2, 2), "merge_kernel_size")? {
                (2, 2) => (2, 2),
                other => return Err(format!("`merge_kernel_size` is {other:?}: tessera runs MiniCPM-V's 2×2 merger")),
            },
            merger_times: self.merger_times.unwrap_or(1),
            image_token_id,
            video_token_id: self.video_token_id,
        };
        // MiniCPMV4_6Config's tie_word_embeddings defaults to false over the text config's.
        let tie = Some(self.tie_word_embeddings.unwrap_or(false));
        Ok(ModelConfig::vlm("minicpmv4_6", text, tie, self.eos_token_id.as_ref(), PromptStyle::Chat, spec))
    }
}

impl MiniCpmV46Spec {
    /// The tower and merger's sizes, for a text model of width `text_hidden`.
    pub fn vision_config(&self, text_hidden: usize) -> MiniCpmVisionConfig {
        let t = &self.tower;
        MiniCpmVisionConfig {
            tower: VisionTowerConfig {
                kind: TowerKind::Siglip,
                hidden_size: t.hidden_size,
                intermediate_size: t.intermediate_size,
                num_hidden_layers: t.num_hidden_layers,
                num_attention_heads: t.num_attention_heads,
                num_channels: 3,
                image_size: t.image_size,
                patch_size: t.patch_size,
                layer_norm_eps: t.layer_norm_eps,
                hidden_act: Activation::GeluTanh,
            },
            // "4x" keeps 4× the tokens by skipping the window merger.
            insert_layer_id: (self.merge == 4).then_some(t.insert_layer_id),
            text_hidden,
            merger_times: self.merger_times,
        }
    }

    /// The processor rule `settings` give (`MiniCPMV4_6ImageProcessor`'s defaults for what they
    /// omit); a patch size other than the tower's is refused.
    pub fn processor(&self, settings: &ProcessorSettings) -> Result<MiniCpmProcessorRule> {
        let ProcessorSettings { image, processor, origin } = settings;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let field = |k: &str| image.get(k).filter(|v| !v.is_null());
        let count = |k: &str, default: usize| -> Result<usize> {
            match field(k) {
                None => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(err(format!("`{k}` {v} is not a positive count"))),
                },
            }
        };
        let flag = |k: &str, default: bool| -> Result<bool> {
            match field(k) {
                None => Ok(default),
                Some(v) => v.as_bool().ok_or_else(|| err(format!("`{k}` {v} is not true or false"))),
            }
        };
        let slicing = MiniCpmSlicing {
            max_slice_nums: count("max_slice_nums", 9)?,
            scale_resolution: count("scale_resolution", 448)?,
            patch_size: count("patch_size", 14)?,
            slice_mode: flag("slice_mode", true)?,
            merge: merge_side(field("downsample_mode").and_then(Value::as_str)).map_err(err)?,
        };
        if slicing.patch_size != self.tower.patch_size {
            return Err(err(format!(
                "the processor's patch_size {} differs from the tower's {}",
                slicing.patch_size, self.tower.patch_size
            )));
        }
        // The processor's own `use_image_id` wins over the image processor's.
        let stated = processor.get("use_image_id").filter(|v| !v.is_null()).or(field("use_image_id"));
        let use_image_id = match stated {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| err(format!("`use_image_id` {v} is not true or false")))?,
        };
        Ok(MiniCpmProcessorRule { slicing, use_image_id })
    }
}

impl MiniCpmProcessorRule {
    /// The views of a `height × width` image.
    pub fn layout(&self, height: usize, width: usize) -> SliceLayout {
        self.slicing.layout(height, width)
    }

    /// Image tokens a `height × width` image becomes.
    pub fn tokens(&self, height: usize, width: usize) -> usize {
        self.layout(height, width).views().into_iter().map(|v| self.slicing.view_tokens(v)).sum()
    }

    /// The prompt text the image placeholder of the prompt's `index`-th image (from 0) of
    /// `height × width` becomes, with `image_token` the text of the image token.
    pub fn placeholder_text(&self, height: usize, width: usize, index: usize, image_token: &str) -> String {
        let layout = self.layout(height, width);
        let run = |n: usize| image_token.repeat(n);
        let mut text = if self.use_image_id { format!("{ID_START}{index}{ID_END}") } else { String::new() };
        text += &format!("{IMAGE_START}{}{IMAGE_END}", run(self.slicing.view_tokens(layout.source)));
        if let (Some((rows, cols)), Some(size)) = (layout.grid, layout.slice_size()) {
            let slice = format!("{SLICE_START}{}{SLICE_END}", run(self.slicing.view_tokens(size)));
            text += &vec![slice.repeat(cols); rows].join("\n");
        }
        text
    }
}

impl ImageSpec for MiniCpmV46Spec {
    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        Some(super::minicpm_mmproj::mmproj_metadata(self, settings, config, text_hidden))
    }

    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        super::minicpm_mmproj::mmproj_tensors(self, stored, dims)
    }

    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        if at.pan_and_scan {
            return Err(TesseraError::InvalidInput("pan-and-scan is for Gemma 3; MiniCPM-V slices its images".into()));
        }
        let settings = ProcessorSettings::of(at)?;
        let rule = self.processor(&settings)?;
        let err = |reason: String| TesseraError::Config { path: settings.origin.clone(), reason };
        let resample = match settings.image.get("resample").and_then(Value::as_u64) {
            None => Filter::Bicubic,
            Some(code) => Filter::from_pil(code as u32).ok_or_else(|| err(format!("`resample` {code} is unknown")))?,
        };
        let norm = PreprocessConfig {
            do_resize: true,
            size: None,
            resample: 3,
            do_center_crop: false,
            crop_size: None,
            do_rescale: true,
            rescale_factor: settings.image.get("rescale_factor").and_then(Value::as_f64).unwrap_or(1.0 / 255.0),
            do_normalize: true,
            image_mean: Some(processor_stats(&settings, "image_mean", [0.5; 3]).map_err(err)?),
            image_std: Some(processor_stats(&settings, "image_std", [0.5; 3]).map_err(err)?),
        };
        norm.validate()?;
        let vb = at.weights;
        // The checkpoint's roots, else an mmproj's (`minicpm.`: llama.cpp's names).
        const PATCH: &str = "embeddings.patch_embedding.weight";
        let vision = MiniCpmVision::new(
            &self.vision_config(at.text_hidden),
            &first_prefix(vb, &["model.vision_tower", "vision_tower", "minicpm.vision_tower"], PATCH),
            &first_prefix(vb, &["model.merger", "merger", "minicpm.merger"], "mlp.0.linear_1.weight"),
        )?;
        let image_token = token_text(at, self.image_token_id, "image_token_id")?;
        Ok(Box::new(MiniCpmImages { spec: self.clone(), rule, vision, image_token, norm, resample }))
    }
}

/// MiniCPM-V 4.6's loaded image side.
struct MiniCpmImages {
    spec: MiniCpmV46Spec,
    rule: MiniCpmProcessorRule,
    vision: MiniCpmVision,
    image_token: String,
    norm: PreprocessConfig,
    resample: Filter,
}

/// The `rows × cols` equal pieces of `img`, row by row (transformers' `divide_to_patches`).
fn cut(img: &RgbImage, rows: usize, cols: usize) -> Vec<RgbImage> {
    let (h, w) = (img.height / rows, img.width / cols);
    let mut pieces = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            let mut data = Vec::with_capacity(h * w * 3);
            for y in r * h..(r + 1) * h {
                let start = (y * img.width + c * w) * 3;
                data.extend_from_slice(&img.data[start..start + w * 3]);
            }
            pieces.push(RgbImage::new(w, h, data));
        }
    }
    pieces
}

impl MiniCpmImages {
    /// The views as the model reads them (resized, cut; before normalization).
    fn views(&self, img: &RgbImage) -> Vec<RgbImage> {
        let layout = self.rule.layout(img.height, img.width);
        let (sh, sw) = layout.source;
        let mut views = vec![preprocess::resize(img, sh, sw, self.resample)];
        if let (Some((rows, cols)), Some((rh, rw))) = (layout.grid, layout.refine) {
            views.extend(cut(&preprocess::resize(img, rh, rw, self.resample), rows, cols));
        }
        views
    }

    /// Each view's normalized pixels `(1, 3, H, W)`.
    fn view_tensors(&self, img: &RgbImage, device: &Device) -> Result<Vec<Tensor>> {
        self.views(img).iter().map(|v| Ok(preprocess::to_tensor(v, &self.norm, device)?.unsqueeze(0)?)).collect()
    }
}

impl ImageSide for MiniCpmImages {
    fn fixed_tokens(&self) -> Option<usize> {
        None
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        Ok(self.rule.tokens(img.height, img.width))
    }

    fn placeholder(&self) -> Option<&str> {
        Some(&self.image_token)
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.spec.image_token_id)
    }

    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        self.placeholder_text_at(img, 0)
    }

    fn placeholder_text_at(&self, img: &RgbImage, index: usize) -> Result<Option<String>> {
        Ok(Some(self.rule.placeholder_text(img.height, img.width, index, &self.image_token)))
    }

    /// transformers' layout: `(1, 3, patch, Σ patches·patch)`, each view's patches row-major,
    /// a patch's rows stacked along the second axis.
    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let p = self.rule.slicing.patch_size;
        let flat = self
            .view_tensors(img, device)?
            .iter()
            .map(|v| {
                let (_, c, h, w) = v.dims4()?;
                v.reshape((c, h / p, p, w / p, p))?.permute((0, 2, 1, 3, 4))?.reshape((c, p, ()))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Tensor::cat(&flat, 2)?.unsqueeze(0)?)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let source = self.views(img).swap_remove(0);
        let unit = self.rule.slicing.patch_size * self.rule.slicing.merge;
        let (rows, cols) = (source.height / unit, source.width / unit);
        Ok((source, rows, cols))
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let tokens = self
            .view_tensors(img, device)?
            .iter()
            .map(|v| self.vision.forward(v))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(ImageFeatures::new(Tensor::cat(&tokens, 0)?.unsqueeze(0)?))
    }

    /// The tower's output (after the window merger and `post_layernorm`), every view's in
    /// order, `(1, n, vision_hidden)`.
    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let outputs = self
            .view_tensors(img, device)?
            .iter()
            .map(|v| Ok(self.vision.tower_forward(v)?.0))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&outputs, 0)?.unsqueeze(0)?)
    }

    fn describe(&self) -> String {
        let t = &self.spec.tower;
        let s = &self.rule.slicing;
        let unit = s.patch_size * s.merge;
        let per_view = (s.scale_resolution / unit).pow(2);
        format!(
            "MiniCPM-V 4.6 tower (SigLIP, {} layers, width {}, {}×{} patches, nearest learned positions{}), a 2×2 \
             merger; images sliced into a source view of about {}² px and up to {} slices (sides multiples of {unit} \
             px, one token per {unit}×{unit} px): about {per_view} image tokens per view, at most about {} per \
             image; <image_id>N</image_id><image>…</image> then rows of <slice>…</slice>; no video inputs",
            t.num_hidden_layers,
            t.hidden_size,
            t.patch_size,
            t.patch_size,
            match self.vision.config().insert_layer_id {
                Some(k) => format!(", a 2×2 window-attention merger after layer {k}"),
                None => String::new(),
            },
            s.scale_resolution,
            if s.slice_mode { s.max_slice_nums } else { 0 },
            per_view * (1 + if s.slice_mode { s.max_slice_nums } else { 0 }),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn tiny() -> Value {
        json!({
            "model_type": "minicpmv4_6", "image_token_id": 9, "insert_layer_id": 1,
            "text_config": {"model_type": "qwen3_5_text", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
            "vision_config": {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 3}
        })
    }

    fn resolve(json: Value) -> std::result::Result<ModelConfig, String> {
        ModelConfig::from_config_json(&json, Path::new("config.json")).map_err(|e| e.to_string())
    }

    #[test]
    fn class_defaults_fill_what_the_file_omits() -> std::result::Result<(), String> {
        let cfg = resolve(tiny())?;
        let Some(spec) = cfg.vision_spec::<MiniCpmV46Spec>() else { return Err("no MiniCPM image side".into()) };
        // MiniCPMV4_6VisionConfig: patch 16, image 224, window 2×2.
        assert_eq!((spec.tower.patch_size, spec.tower.image_size, spec.tower.window_kernel), (16, 224, (2, 2)));
        assert_eq!((spec.merge, cfg.tie_word_embeddings, cfg.decoder.rope.mrope), (4, false, None));
        let linear = cfg.decoder.linear.as_ref().map(|l| l.layers.clone());
        assert_eq!(linear, Some(vec![true, true, true, false]));
        Ok(())
    }

    #[test]
    fn what_the_model_cannot_be_is_named() {
        let err = |edit: &dyn Fn(&mut Value)| {
            let mut j = tiny();
            edit(&mut j);
            resolve(j).err().unwrap_or_default()
        };
        assert!(err(&|j| j["downsample_mode"] = "8x".into()).contains("`downsample_mode` is `8x`"));
        assert!(err(&|j| j["image_token_id"] = Value::Null).contains("`image_token_id` is missing"));
        // insert_layer_id defaults to 6, past a 3-layer tower.
        let e = err(&|j| j.as_object_mut().map_or((), |o| drop(o.remove("insert_layer_id"))));
        assert!(e.contains("`insert_layer_id` 6 is past the tower's 3 layers"), "{e}");
        let e = err(&|j| j["text_config"]["model_type"] = "qwen3".into());
        assert!(e.contains("qwen3_5_text"), "{e}");
        let e = err(&|j| j["vision_config"]["window_kernel_size"] = json!([2]));
        assert!(e.contains("window_kernel_size"), "{e}");
    }

    #[test]
    fn the_processor_reads_its_settings_and_the_image_index() -> Result<()> {
        let cfg = resolve(tiny()).map_err(TesseraError::InvalidInput)?;
        let Some(spec) = cfg.vision_spec::<MiniCpmV46Spec>() else { panic!("no MiniCPM image side") };
        let settings = |image: Value, processor: Value| ProcessorSettings { image, processor, origin: "p.json".into() };
        let rule = spec.processor(&settings(json!({"patch_size": 16, "downsample_mode": "4x"}), json!({})))?;
        // 100×100 → one 448×448 view of 28×28 patches, merged 2×2: 196 tokens.
        assert_eq!((rule.slicing.merge, rule.tokens(100, 100)), (2, 196));
        assert!(rule.placeholder_text(100, 100, 3, "x").starts_with("<image_id>3</image_id><image>xx"));
        let off = spec.processor(&settings(json!({"patch_size": 16}), json!({"use_image_id": false})))?;
        assert!(off.placeholder_text(100, 100, 3, "x").starts_with("<image>x"));
        let e = spec.processor(&settings(json!({}), json!({}))).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("patch_size 14 differs from the tower's 16") && e.contains("p.json"), "{e}");
        Ok(())
    }
}
