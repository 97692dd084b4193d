//! InternVL (InternVL3 as transformers v5.23's `InternVLForConditionalGeneration` runs it,
//! e.g. `OpenGVLab/InternVL3-1B-hf`): an InternViT tower (CLS token, layer scale) over 448-px
//! tiles, its last layer without the CLS token pixel-shuffled by `downsample_ratio` 0.5
//! (Idefics3's shuffle) into LayerNorm + linear + GELU + linear, a Qwen2 text model.
//!
//! The processor (`InternVLProcessor` over `GotOcr2ImageProcessor`) tiles each image with
//! `crop_to_patches` — always on: the processor's own default, whatever the image processor's
//! saved `crop_to_patches` says — into the grid of at most `max_patches` tiles closest to its
//! aspect ratio plus a thumbnail ([`CropToPatches`]). The chat template writes `<IMG_CONTEXT>`
//! per image; the processor replaces it with `<img>` + `<IMG_CONTEXT>` × `image_seq_length` per
//! tile + `</img>`, and the image's tokens replace the `<IMG_CONTEXT>` ids. Videos (`<video>`)
//! are not taken. llama.cpp's pair (a `qwen2` text GGUF and an mmproj of projector type
//! `internvl`) loads through [`from_mmproj`].

use std::sync::Arc;

use candle_core::{Device, Tensor};
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::Activation;
use tessera_vision::{Connector, CropToPatches, Filter, InternVit, InternVitConfig, PreprocessConfig, RgbImage, Size};

use super::image::{
    first_prefix, gguf_u32, processor_stats, token_text, under_roots, ClipHeader, ImageFeatures, ImageLoad, ImageSide,
    ImageSpec, MmprojMetadata, MmprojTensor, ProcessorSettings,
};
use super::mmproj::{MmprojInput, MmprojSide};
use super::text::{TextFamily, TextSubConfig};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};
use crate::error::{Result, TesseraError};

#[derive(Debug, Deserialize)]
pub struct InternVlConfig {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    image_seq_length: Option<usize>,
    #[serde(default)]
    downsample_ratio: Option<f64>,
    #[serde(default)]
    projector_hidden_act: Option<Activation>,
    #[serde(default)]
    vision_feature_layer: Option<Value>,
    #[serde(default)]
    vision_feature_select_strategy: Option<String>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

/// `InternVLVisionConfig`'s fields (`null` counts as absent).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionFields {
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_channels: Option<usize>,
    image_size: Option<Side>,
    patch_size: Option<Side>,
    layer_norm_eps: Option<f64>,
    hidden_act: Option<Activation>,
    attention_bias: Option<bool>,
    use_qk_norm: Option<bool>,
    norm_type: Option<String>,
    use_mean_pooling: Option<bool>,
    use_absolute_position_embeddings: Option<bool>,
}

/// A side as one number or `[height, width]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Side {
    One(usize),
    Two([usize; 2]),
}

impl Side {
    fn square(&self, what: &str) -> std::result::Result<usize, String> {
        match *self {
            Self::One(s) => Ok(s),
            Self::Two([h, w]) if h == w => Ok(h),
            Self::Two([h, w]) => Err(format!("vision_config.{what} [{h}, {w}]: only square tiles are supported")),
        }
    }
}

/// Where a checkpoint keeps the tower and the projector (transformers' `-hf` layout, as loaded
/// and as saved).
const TOWER_ROOTS: [&str; 2] = ["model.vision_tower", "vision_tower"];
const PROJECTOR_ROOTS: [&str; 2] = ["model.multi_modal_projector", "multi_modal_projector"];

/// InternVL's image side as its config resolves it.
#[derive(Debug, Clone, PartialEq)]
pub struct InternVlSpec {
    pub tower: InternVitConfig,
    /// The pixel shuffle's factor, `1 / downsample_ratio`.
    pub scale: usize,
    pub projector_act: Activation,
    /// `<IMG_CONTEXT>`'s id, whose positions image tokens replace.
    pub image_token_id: u32,
    /// Image tokens per tile.
    pub tokens_per_tile: usize,
}

impl InternVlConfig {
    pub fn resolve(&self) -> std::result::Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Qwen2)?;
        let v = &self.vision_config;
        let refuse = |what: &str, why: &str| Err(format!("vision_config.{what}: {why} is not supported"));
        if v.use_qk_norm == Some(true) {
            return refuse("use_qk_norm", "q/k norms (InternViT-6B)");
        }
        if v.norm_type.as_deref().is_some_and(|n| n != "layer_norm") {
            return refuse("norm_type", "a norm other than layer_norm (InternViT-6B's rms_norm)");
        }
        if v.use_mean_pooling == Some(false) {
            return refuse("use_mean_pooling", "false (a final layernorm)");
        }
        if v.use_absolute_position_embeddings == Some(false) {
            return refuse("use_absolute_position_embeddings", "false");
        }
        match &self.vision_feature_layer {
            None | Some(Value::Null) => {}
            Some(l) if l.as_i64() == Some(-1) => {}
            Some(l) => return Err(format!("vision_feature_layer {l}: only -1 (the last layer) is supported")),
        }
        if let Some(s) = self.vision_feature_select_strategy.as_deref().filter(|s| *s != "default") {
            return Err(format!("vision_feature_select_strategy \"{s}\": only \"default\" (CLS dropped) is supported"));
        }
        let tower = InternVitConfig {
            hidden_size: v.hidden_size.unwrap_or(1024),
            intermediate_size: v.intermediate_size.unwrap_or(4096),
            num_hidden_layers: v.num_hidden_layers.unwrap_or(24),
            num_attention_heads: v.num_attention_heads.unwrap_or(16),
            num_channels: v.num_channels.unwrap_or(3),
            image_size: v.image_size.as_ref().map_or(Ok(448), |s| s.square("image_size"))?,
            patch_size: v.patch_size.as_ref().map_or(Ok(14), |s| s.square("patch_size"))?,
            layer_norm_eps: v.layer_norm_eps.unwrap_or(1e-6),
            hidden_act: v.hidden_act.unwrap_or(Activation::Gelu),
            attention_bias: v.attention_bias.unwrap_or(false),
        };
        tower.validate().map_err(|e| format!("vision_config: {e}"))?;
        let ratio = self.downsample_ratio.unwrap_or(0.5);
        let scale = (1.0 / ratio).round() as usize;
        let side = tower.patches_per_side();
        if !(ratio > 0.0 && (scale as f64 * ratio - 1.0).abs() < 1e-9 && scale > 0 && side.is_multiple_of(scale)) {
            return Err(format!("downsample_ratio {ratio} does not shuffle {side}×{side} patches into whole blocks"));
        }
        let tokens_per_tile = tower.num_patches() / (scale * scale);
        let stated = self.image_seq_length.unwrap_or(256);
        if stated != tokens_per_tile {
            return Err(format!(
                "image_seq_length {stated} disagrees with the vision tower ({side}² patches / {scale}² = {tokens_per_tile})"
            ));
        }
        let spec = InternVlSpec {
            tower,
            scale,
            projector_act: self.projector_hidden_act.unwrap_or(Activation::Gelu),
            image_token_id: self.image_token_id.unwrap_or(151_667),
            tokens_per_tile,
        };
        // InternVLConfig ties the word embeddings unless it says otherwise.
        let tie = Some(self.tie_word_embeddings.unwrap_or(true));
        Ok(ModelConfig::vlm("internvl", text, tie, self.eos_token_id.as_ref(), PromptStyle::Chat, spec))
    }
}

/// The image side of an `mmproj` GGUF of projector type `internvl` (written by
/// `conversion/internvl.py`'s `InternVisionModel`; read by `clip.cpp`'s InternVL graph), and its
/// processor settings in `preprocessor_config.json`'s terms. What the file states, and what is
/// fixed where it states nothing:
/// - the tower: InternViT from `clip.vision.{embedding_length, feed_forward_length, block_count,
///   image_size, patch_size, attention.head_count, attention.layer_norm_epsilon}`, GELU
///   (`clip.use_gelu`) or SiLU (`clip.use_silu`), attention biases when the file has them; its
///   CLS token, position table and layer scales are tensors;
/// - the projector: the pixel shuffle by `clip.vision.projector.scale_factor` (1 /
///   `downsample_ratio`), LayerNorm + linear + GELU + linear (`mm.model.mlp.{0,1,3}`), whose
///   last rows are the image tokens' width;
/// - the processor: GotOcr2ImageProcessor's tiles of `clip.vision.image_size`, at least
///   `clip.vision.preproc_min_tiles` and at most `preproc_max_tiles` (transformers' defaults 1 and
///   12 when absent) plus the thumbnail, bicubic, `clip.vision.image_mean` / `image_std`;
/// - the prompt: `<IMG_CONTEXT>` per image token inside `<img>…</img>`, the text model's tokens.
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> std::result::Result<MmprojSide, String> {
    const TYPE: &str = "internvl";
    let clip = &input.clip;
    let hidden_act = match (clip.bool("clip.use_gelu")? == Some(true), clip.bool("clip.use_silu")? == Some(true)) {
        (true, false) => Activation::Gelu,
        (false, true) => Activation::Silu,
        _ => {
            return Err("exactly one of `clip.use_gelu` and `clip.use_silu` must be true for an InternViT tower".into())
        }
    };
    let tower = InternVitConfig {
        hidden_size: clip.usize("clip.vision.embedding_length")?,
        intermediate_size: clip.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers: clip.usize("clip.vision.block_count")?,
        num_attention_heads: clip.usize("clip.vision.attention.head_count")?,
        num_channels: 3,
        image_size: clip.usize("clip.vision.image_size")?,
        patch_size: clip.usize("clip.vision.patch_size")?,
        layer_norm_eps: clip.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-6),
        hidden_act,
        attention_bias: input.tensors.contains_key("v.blk.0.attn_q.bias"),
    };
    tower.validate().map_err(|e| e.to_string())?;
    let scale = clip.usize_opt("clip.vision.projector.scale_factor")?.unwrap_or(2);
    let side = tower.patches_per_side();
    if scale == 0 || !side.is_multiple_of(scale) {
        return Err(format!(
            "`clip.vision.projector.scale_factor` {scale} does not shuffle {side}×{side} patches into whole blocks"
        ));
    }
    let width = match input.shape("mm.model.mlp.3.weight")? {
        [rows, _] => *rows,
        other => return Err(format!("`mm.model.mlp.3.weight` has shape {other:?}, not a matrix")),
    };
    let image_token_id = input.token(TYPE, "<IMG_CONTEXT>")?;
    for text in ["<img>", "</img>"] {
        input.token(TYPE, text)?;
    }
    let spec = InternVlSpec {
        scale,
        projector_act: Activation::Gelu,
        image_token_id,
        tokens_per_tile: tower.num_patches() / (scale * scale),
        tower,
    };
    let s = spec.tower.image_size;
    let image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "size": {"height": s, "width": s},
        "resample": 3,
        "min_patches": clip.usize_opt("clip.vision.preproc_min_tiles")?.unwrap_or(1),
        "max_patches": clip.usize_opt("clip.vision.preproc_max_tiles")?.unwrap_or(12),
    }))?;
    Ok(MmprojSide {
        family: "internvl",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Qwen2],
        width,
        swapped_ffn: false,
        bidirectional_images: false,
        processor: serde_json::json!({}),
        plain_positions: false,
    })
}

/// InternVL's loaded image side.
struct InternVlImages {
    spec: InternVlSpec,
    tower: InternVit,
    connector: Connector,
    tiling: CropToPatches,
    normalize: PreprocessConfig,
    /// `<IMG_CONTEXT>`, `<img>`, `</img>`.
    context: String,
    start: String,
    end: String,
}

impl InternVlSpec {
    /// The tiling and the normalization `settings` (the image processor's) give.
    pub fn processor(&self, settings: &ProcessorSettings) -> Result<(CropToPatches, PreprocessConfig)> {
        let ProcessorSettings { image, origin, .. } = settings;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let normalize: PreprocessConfig =
            serde_json::from_value(image.clone()).map_err(|e| err(format!("image processor settings: {e}")))?;
        normalize.validate().map_err(|e| err(e.to_string()))?;
        let s = self.tower.image_size;
        match normalize.size {
            Some(Size::HeightWidth { height, width }) if (height, width) == (s, s) => {}
            None => {}
            other => return Err(err(format!("`size` {other:?} differs from the vision tower's {s}×{s} tiles"))),
        }
        let count = |k: &str, default: usize| -> Result<usize> {
            match image.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|&n| (1..=64).contains(&n))
                    .map(|n| n as usize)
                    .ok_or_else(|| err(format!("`{k}` {v} must be a whole number of tiles between 1 and 64"))),
            }
        };
        // With `max_patches` 1 the processor does not crop: one resize, as the 1×1 grid.
        let tiling = CropToPatches {
            tile: s,
            min_patches: count("min_patches", 1)?,
            max_patches: count("max_patches", 12)?,
            filter: normalize.filter().map_err(|e| err(e.to_string()))?,
        };
        Ok((tiling, normalize))
    }

    /// [`processor`](Self::processor) from the checkpoint folder `dir`'s processor files.
    pub fn processor_in(&self, dir: &std::path::Path) -> Result<(CropToPatches, PreprocessConfig)> {
        let (image, processor, origin) = super::image::processor_files(dir)?;
        self.processor(&ProcessorSettings { image, processor, origin })
    }
}

impl InternVlSpec {
    fn mmproj_keys(&self, settings: &ProcessorSettings, text_hidden: usize) -> MmprojMetadata {
        use tessera_decoder::gguf_write::MetaValue::{Bool, Str, F32};
        let t = &self.tower;
        let u = gguf_u32;
        let stats = |key: &str| processor_stats(settings, key, [0.5; 3]);
        let act = match t.hidden_act {
            Activation::Gelu => "clip.use_gelu",
            Activation::Silu => "clip.use_silu",
            other => return Err(format!("llama.cpp's internvl projector runs a GELU or SiLU tower, not {other:?}")),
        };
        if self.projector_act != Activation::Gelu {
            return Err(format!("llama.cpp's internvl projector uses GELU, not {:?}", self.projector_act));
        }
        let (tiling, _) = self.processor(settings).map_err(|e| e.to_string())?;
        let mut md = ClipHeader {
            projection_dim: text_hidden,
            image_size: t.image_size,
            patch_size: t.patch_size,
            width: t.hidden_size,
            feed_forward: t.intermediate_size,
            blocks: t.num_hidden_layers,
            heads: t.num_attention_heads,
            mean: stats("image_mean")?,
            std: stats("image_std")?,
        }
        .keys()?;
        md.extend([
            ("clip.projector_type".into(), Str("internvl".into())),
            ("clip.vision.attention.layer_norm_epsilon".into(), F32(t.layer_norm_eps as f32)),
            (act.into(), Bool(true)),
            ("clip.vision.projector.scale_factor".into(), u(self.scale)?),
            ("clip.vision.preproc_min_tiles".into(), u(tiling.min_patches)?),
            ("clip.vision.preproc_max_tiles".into(), u(tiling.max_patches)?),
        ]);
        Ok(md)
    }
}

impl ImageSpec for InternVlSpec {
    /// What `conversion/internvl.py` writes, in its order ([`from_mmproj`] reads it back); the
    /// tile bounds are the processor's (the converter takes them from an original config's
    /// `min_dynamic_patch` / `max_dynamic_patch`), the mean and std the processor's, else 0.5 as
    /// the folder reads them.
    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        _config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        Some(self.mmproj_keys(settings, text_hidden))
    }

    /// The checkpoint's tensors under the root `internvl.` ([`tessera_decoder::internvl_names`]).
    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        let name = if let Some(rest) = under_roots(stored, &TOWER_ROOTS) {
            format!("internvl.vision_tower.{rest}")
        } else if let Some(rest) = under_roots(stored, &PROJECTOR_ROOTS) {
            format!("internvl.multi_modal_projector.{rest}")
        } else {
            stored.to_string()
        };
        vec![MmprojTensor::named(name, dims)]
    }

    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        let (tiling, normalize) = self.processor(&ProcessorSettings::of(at)?)?;
        let tokenizer_path = at.dir.join("tokenizer.json");
        let marker = |text: &str| -> Result<String> {
            at.tokenizer.token_to_id(text).map(|_| text.to_string()).ok_or_else(|| TesseraError::Config {
                path: tokenizer_path.clone(),
                reason: format!("InternVL needs the `{text}` token, which the tokenizer lacks"),
            })
        };
        let vb = at.weights;
        // The checkpoint's roots, else an mmproj's (`internvl.`: llama.cpp's names).
        let tower_roots = ["model.vision_tower", "vision_tower", "internvl.vision_tower"];
        let tower = InternVit::new(&self.tower, &first_prefix(vb, &tower_roots, "embeddings.cls_token"))?;
        let projector_roots =
            ["model.multi_modal_projector", "multi_modal_projector", "internvl.multi_modal_projector"];
        let projector = first_prefix(vb, &projector_roots, "linear_2.weight");
        let connector = Connector::shuffle_norm_mlp(
            self.tower.hidden_size,
            at.text_hidden,
            self.scale,
            self.projector_act,
            &projector,
        )?;
        Ok(Box::new(InternVlImages {
            spec: self.clone(),
            tower,
            connector,
            tiling,
            normalize,
            context: token_text(at, self.image_token_id, "image_token_id")?,
            start: marker("<img>")?,
            end: marker("</img>")?,
        }))
    }
}

impl InternVlImages {
    /// Tower features without the CLS token, `(views, patches, vision_hidden)`.
    fn features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let x = self.tower.forward(&self.pixel_values(img, device)?)?;
        let n = x.dim(1)?;
        Ok(x.narrow(1, 1, n - 1)?)
    }
}

impl InternVlImages {
    /// The most image tokens one image can take: the largest grid and its thumbnail.
    fn budget(&self) -> usize {
        let views = if self.tiling.max_patches > 1 { self.tiling.max_patches + 1 } else { 1 };
        views * self.spec.tokens_per_tile
    }
}

impl ImageSide for InternVlImages {
    fn fixed_tokens(&self) -> Option<usize> {
        (self.tiling.max_patches == 1).then_some(self.spec.tokens_per_tile)
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        Ok(self.tiling.views(img.height, img.width) * self.spec.tokens_per_tile)
    }

    fn placeholder(&self) -> Option<&str> {
        Some(&self.context)
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.spec.image_token_id)
    }

    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        Ok(Some(format!("{}{}{}", self.start, self.context.repeat(self.tokens_for(img)?), self.end)))
    }

    /// `(views, 3, S, S)`: the tiles, then the thumbnail.
    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let views = self.tiling.split(img);
        let s = self.tiling.tile;
        let mut values = vec![0f32; views.len() * 3 * s * s];
        for (view, out) in views.iter().zip(values.chunks_exact_mut(3 * s * s)) {
            tessera_vision::preprocess::normalize_into(view, &self.normalize, out)?;
        }
        Ok(Tensor::from_vec(values, (views.len(), 3, s, s), device)?)
    }

    fn model_view(&self, _img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        Err(TesseraError::InvalidInput(
            "InternVL's image tokens are tiles of pixel-shuffled patches, not one grid of patches; attention \
             pictures are not available for it"
                .into(),
        ))
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let y = self.connector.forward(&self.features(img, device)?)?; // (views, tokens_per_tile, hidden)
        let (v, n, d) = y.dims3()?;
        Ok(ImageFeatures::new(y.reshape((1, v * n, d))?))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        self.features(img, device)
    }

    fn describe(&self) -> String {
        let (t, c) = (&self.spec.tower, &self.tiling);
        format!(
            "InternViT tower ({} layers, width {}, {}×{} tiles, {}×{} patches, CLS dropped, layer scale), \
             connector: {}; {} image tokens per tile; up to {} tiles in the grid closest to the image's aspect \
             ratio plus a thumbnail ({} resizes), each image within <img>…</img>: at most {} image tokens an image; \
             no video inputs",
            t.num_hidden_layers,
            t.hidden_size,
            t.image_size,
            t.image_size,
            t.patch_size,
            t.patch_size,
            self.connector.describe(),
            self.spec.tokens_per_tile,
            c.max_patches,
            match c.filter {
                Filter::Bicubic => "bicubic",
                Filter::Bilinear => "bilinear",
                Filter::Lanczos => "Lanczos",
                Filter::Nearest => "nearest",
            },
            self.budget(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use crate::families::ModelConfig;

    fn resolve(vision: serde_json::Value, top: serde_json::Value) -> String {
        let mut config = json!({
            "model_type": "internvl",
            "text_config": {"model_type": "qwen2", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                            "num_hidden_layers": 1, "num_attention_heads": 4},
            "vision_config": vision,
        });
        if let (Some(c), Some(t)) = (config.as_object_mut(), top.as_object()) {
            c.extend(t.clone());
        }
        match ModelConfig::from_config_json(&config, Path::new("config.json")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn what_internvl3_1b_does_not_use_is_refused_by_name() {
        let tiny = json!({"hidden_size": 32, "num_attention_heads": 4, "image_size": [28, 28], "patch_size": [7, 7]});
        assert_eq!(resolve(tiny.clone(), json!({"image_seq_length": 4})), "");
        let e = resolve(tiny.clone(), json!({}));
        assert!(e.contains("image_seq_length 256") && e.contains("= 4"), "{e}");
        for (field, value) in [("use_qk_norm", json!(true)), ("norm_type", json!("rms_norm"))] {
            let mut v = tiny.clone();
            v[field] = value;
            let e = resolve(v, json!({"image_seq_length": 4}));
            assert!(e.contains(field) && e.contains("not supported"), "{e}");
        }
        let e = resolve(tiny.clone(), json!({"image_seq_length": 4, "vision_feature_layer": -2}));
        assert!(e.contains("vision_feature_layer -2"), "{e}");
        let mut v = tiny;
        v["image_size"] = json!([28, 56]);
        assert!(resolve(v, json!({})).contains("only square tiles"));
    }
}
