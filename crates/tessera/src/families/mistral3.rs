//! Mistral 3 (Mistral Small 3.1 / 3.2, `mistralai/Mistral-Small-3.1-24B-Instruct-2503`) as
//! transformers v5.23's `Mistral3ForConditionalGeneration` runs it: a Pixtral tower over the
//! image at its native resolution, Mistral 3's projector (RMSNorm, 2×2 patch merger, MLP) and a
//! Mistral text model ([`tessera_vision::pixtral`]).
//!
//! The processor (`PixtralProcessor` over `PixtralImageProcessor`) fits the image within
//! `size` (`longest_edge`) keeping its aspect and rounds each side up to a multiple of
//! `patch_size × spatial_merge_size` (the processor's own fields, not the image processor's
//! `patch_size`); the chat template writes `[IMG]` per image, which becomes one `[IMG]` per
//! merged patch, `[IMG_BREAK]` after each row of them and `[IMG_END]` in place of the last
//! break. Only the `[IMG]` positions take image tokens; the break and end tokens are text.

use candle_core::{Device, Tensor};
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{Activation, RopeStyle};
use tessera_vision::{Filter, PixtralProjector, PixtralVision, PixtralVisionConfig, PreprocessConfig, RgbImage, Size};

use super::image::{
    first_prefix, token_text, ImageFeatures, ImageLoad, ImageSide, ImageSpec, MmprojMetadata, MmprojTensor,
    ProcessorSettings,
};
use super::text::{TextFamily, TextSubConfig};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};
use crate::error::{Result, TesseraError};

#[derive(Debug, Deserialize)]
pub struct Mistral3Config {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: Option<VisionFields>,
    #[serde(default)]
    image_token_index: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    projector_hidden_act: Option<Activation>,
    #[serde(default)]
    vision_feature_layer: Option<Value>,
    #[serde(default)]
    multimodal_projector_bias: Option<bool>,
    #[serde(default)]
    spatial_merge_size: Option<usize>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

/// `PixtralVisionConfig`'s fields (`null` counts as absent).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionFields {
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_channels: Option<usize>,
    patch_size: Option<usize>,
    hidden_act: Option<Activation>,
    /// Written by transformers < 5; 5 writes `rope_parameters.rope_theta`.
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeFields>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RopeFields {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

/// `Mistral3Config`'s text model when the file has no `text_config` (its `sub_configs_defaults`:
/// Mistral Small 3.1's).
const DEFAULT_TEXT: &str = r#"{"model_type": "mistral", "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "intermediate_size": 32768, "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 40,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": null,
    "vocab_size": 131072}"#;

/// Mistral 3's image side as its config resolves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Mistral3Spec {
    pub tower: PixtralVisionConfig,
    pub merge: usize,
    pub projector_act: Activation,
    pub projector_bias: bool,
    /// The projector's RMSNorm epsilon: the text model's `rms_norm_eps`.
    pub projector_eps: f64,
    /// `[IMG]`'s id, whose positions image tokens replace.
    pub image_token_id: u32,
}

impl Mistral3Config {
    pub fn resolve(&self) -> std::result::Result<ModelConfig, String> {
        let sub = match &self.text_config {
            Some(t) => t.clone(),
            None => serde_json::from_str::<TextSubConfig>(DEFAULT_TEXT).map_err(|e| e.to_string())?,
        };
        let text = text_config(&Some(sub), TextFamily::Mistral)?;
        // No `vision_config`: `sub_configs_defaults` (Pixtral as Mistral Small 3.1 has it, GELU);
        // a stated one: `PixtralVisionConfig`'s class defaults for what it omits.
        let absent = VisionFields::default();
        let (v, patch_default) = match &self.vision_config {
            Some(v) => (v, 16),
            None => (&absent, 14),
        };
        if let Some(t) = v.rope_parameters.as_ref().and_then(|r| r.rope_type.as_deref()).filter(|t| *t != "axial") {
            return Err(format!("vision_config.rope_parameters.rope_type \"{t}\": Pixtral's RoPE is \"axial\""));
        }
        match &self.vision_feature_layer {
            None | Some(Value::Null) => {}
            Some(l) if l.as_i64() == Some(-1) => {}
            Some(l) => return Err(format!("vision_feature_layer {l}: only -1 (the last layer) is supported")),
        }
        let tower = PixtralVisionConfig {
            hidden_size: v.hidden_size.unwrap_or(1024),
            intermediate_size: v.intermediate_size.unwrap_or(4096),
            num_hidden_layers: v.num_hidden_layers.unwrap_or(24),
            num_attention_heads: v.num_attention_heads.unwrap_or(16),
            num_channels: v.num_channels.unwrap_or(3),
            patch_size: v.patch_size.unwrap_or(patch_default),
            hidden_act: v.hidden_act.unwrap_or(Activation::Gelu),
            rope_theta: v.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(v.rope_theta).unwrap_or(10_000.0),
            rope_style: RopeStyle::Half,
        };
        tower.validate().map_err(|e| format!("vision_config: {e}"))?;
        let merge = self.spatial_merge_size.unwrap_or(2);
        if merge == 0 {
            return Err("spatial_merge_size must be positive".into());
        }
        let spec = Mistral3Spec {
            tower,
            merge,
            projector_act: self.projector_hidden_act.unwrap_or(Activation::Gelu),
            projector_bias: self.multimodal_projector_bias.unwrap_or(false),
            projector_eps: text.decoder.rms_norm_eps,
            image_token_id: self.image_token_index.or(self.image_token_id).unwrap_or(10),
        };
        // Mistral3Config ties by default, but transformers does not tie an `lm_head` the
        // checkpoint holds with other values (Mistral Small's): the head is `lm_head` when present,
        // else the embeddings — what tessera's loader does untied.
        Ok(ModelConfig::vlm("mistral3", text, Some(false), self.eos_token_id.as_ref(), PromptStyle::Chat, spec))
    }
}

/// The processor's settings for one checkpoint.
#[derive(Debug, Clone)]
pub struct PixtralProcessorRule {
    /// The largest `(height, width)` an image is scaled into.
    pub max_size: (usize, usize),
    /// Sides become multiples of this: `patch_size × spatial_merge_size`.
    pub unit: usize,
    pub filter: Filter,
    pub normalize: PreprocessConfig,
    /// `[IMG]`, `[IMG_BREAK]`, `[IMG_END]` as the processor names them.
    pub tokens: [String; 3],
}

impl PixtralProcessorRule {
    /// The resized image's `(height, width)`.
    pub fn resized(&self, img: &RgbImage) -> (usize, usize) {
        let (mh, mw) = self.max_size;
        tessera_vision::pixtral::resized_size(img.height, img.width, mh, mw, self.unit)
    }

    /// The image's `[IMG]` grid `(rows, cols)`.
    pub fn grid(&self, img: &RgbImage) -> (usize, usize) {
        let (h, w) = self.resized(img);
        (h / self.unit, w / self.unit)
    }

    /// Every placeholder token `img` becomes (`[IMG]`s, breaks and the end).
    pub fn prompt_tokens(&self, img: &RgbImage) -> usize {
        let (rows, cols) = self.grid(img);
        rows * (cols + 1)
    }
}

impl Mistral3Spec {
    /// The processor rule `settings` give, refusing what transformers would run but the tower
    /// cannot (a token unit other than the tower's patch × merge).
    pub fn processor(&self, settings: &ProcessorSettings) -> Result<PixtralProcessorRule> {
        let ProcessorSettings { image, processor, origin } = settings;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        // `null` fields count as absent (the real files write `"do_center_crop": null`).
        let mut fields = image.as_object().cloned().unwrap_or_default();
        fields.retain(|_, v| !v.is_null());
        fields.remove("patch_size"); // The processor's own `patch_size` decides (below).
        let normalize: PreprocessConfig =
            serde_json::from_value(Value::Object(fields)).map_err(|e| err(format!("image processor settings: {e}")))?;
        normalize.validate().map_err(|e| err(e.to_string()))?;
        if !normalize.do_resize || normalize.do_center_crop {
            return Err(err("Pixtral's processor must resize (`do_resize`) and not center-crop".into()));
        }
        let max_size = match normalize.size {
            Some(Size::LongestEdge { longest_edge }) => (longest_edge, longest_edge),
            Some(Size::HeightWidth { height, width }) => (height, width),
            None => (1024, 1024),
            Some(other) => return Err(err(format!("`size` {other:?}: Pixtral takes `longest_edge`"))),
        };
        let count = |k: &str, default: usize| -> Result<usize> {
            match processor.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| err(format!("`{k}` {v} is not a count"))),
            }
        };
        // PixtralProcessor's defaults: patch 16, no merge.
        let (patch, merge) = (count("patch_size", 16)?, count("spatial_merge_size", 1)?);
        if (patch, merge) != (self.tower.patch_size, self.merge) {
            return Err(err(format!(
                "the processor's patch_size {patch} × spatial_merge_size {merge} differ from the model's {} × {}: \
                 its image tokens would not match the tower's",
                self.tower.patch_size, self.merge
            )));
        }
        let name = |k: &str, default: &str| processor.get(k).and_then(Value::as_str).unwrap_or(default).to_string();
        Ok(PixtralProcessorRule {
            max_size,
            unit: patch * merge,
            filter: normalize.filter().map_err(|e| err(e.to_string()))?,
            normalize,
            tokens: [
                name("image_token", "[IMG]"),
                name("image_break_token", "[IMG_BREAK]"),
                name("image_end_token", "[IMG_END]"),
            ],
        })
    }

    /// [`processor`](Self::processor) from the checkpoint folder `dir`'s processor files.
    pub fn processor_in(&self, dir: &std::path::Path) -> Result<PixtralProcessorRule> {
        let (image, processor, origin) = super::image::processor_files(dir)?;
        self.processor(&ProcessorSettings { image, processor, origin })
    }
}

impl ImageSpec for Mistral3Spec {
    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        Some(super::mistral3_mmproj::mmproj_metadata(self, settings, config, text_hidden))
    }

    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        super::mistral3_mmproj::mmproj_tensors(self, stored, dims)
    }

    fn mmproj_embedding_rows(&self) -> &'static [(&'static str, &'static str)] {
        &[("v.token_embd.img_break", "[IMG_BREAK]")]
    }

    fn text_gguf_arch(&self) -> Option<&'static str> {
        Some(super::mistral3_mmproj::TEXT_ARCH)
    }

    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        if at.pan_and_scan {
            return Err(TesseraError::InvalidInput("pan-and-scan is for Gemma 3; Mistral 3 has none".into()));
        }
        let rule = self.processor(&ProcessorSettings::of(at)?)?;
        let tokenizer_path = at.dir.join("tokenizer.json");
        for text in &rule.tokens {
            if at.tokenizer.token_to_id(text).is_none() {
                return Err(TesseraError::Config {
                    path: tokenizer_path.clone(),
                    reason: format!("Mistral 3 needs the `{text}` token, which the tokenizer lacks"),
                });
            }
        }
        let image = token_text(at, self.image_token_id, "image_token_index")?;
        if image != rule.tokens[0] {
            return Err(TesseraError::Config {
                path: at.dir.join("config.json"),
                reason: format!(
                    "image_token_index {} is `{image}`, the processor's image token `{}`",
                    self.image_token_id, rule.tokens[0]
                ),
            });
        }
        let vb = at.weights;
        // The checkpoint's roots, else an mmproj's (`pixtral.`: llama.cpp's names).
        let tower_roots = ["model.vision_tower", "vision_tower", "pixtral.vision_tower"];
        let tower = PixtralVision::new(&self.tower, &first_prefix(vb, &tower_roots, "ln_pre.weight"))?;
        let projector = PixtralProjector::new(
            self.tower.hidden_size,
            at.text_hidden,
            self.merge,
            self.projector_eps,
            self.projector_act,
            self.projector_bias,
            &first_prefix(
                vb,
                &["model.multi_modal_projector", "multi_modal_projector", "pixtral.multi_modal_projector"],
                "norm.weight",
            ),
        )?;
        Ok(Box::new(Mistral3Images { spec: self.clone(), tower, projector, rule }))
    }
}

/// Mistral 3's loaded image side.
struct Mistral3Images {
    spec: Mistral3Spec,
    tower: PixtralVision,
    projector: PixtralProjector,
    rule: PixtralProcessorRule,
}

impl Mistral3Images {
    fn resized_image(&self, img: &RgbImage) -> RgbImage {
        let (h, w) = self.rule.resized(img);
        tessera_vision::preprocess::resize(img, h, w, self.rule.filter)
    }

    /// The tower's output `(patches, d)` and the patch grid `(rows, cols)`.
    fn features(&self, img: &RgbImage, device: &Device) -> Result<(Tensor, usize, usize)> {
        let px = self.pixel_values(img, device)?;
        let (_, _, h, w) = px.dims4()?;
        let p = self.spec.tower.patch_size;
        Ok((self.tower.forward(&px)?, h / p, w / p))
    }

    /// The most `[IMG]` tokens one image can take: a `max_size` image's grid.
    fn budget(&self) -> usize {
        let (mh, mw) = self.rule.max_size;
        let up = |x: usize| x.div_ceil(self.rule.unit);
        up(mh) * up(mw)
    }
}

impl ImageSide for Mistral3Images {
    fn fixed_tokens(&self) -> Option<usize> {
        None
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        let (rows, cols) = self.rule.grid(img);
        Ok(rows * cols)
    }

    fn placeholder(&self) -> Option<&str> {
        Some(&self.rule.tokens[0])
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.spec.image_token_id)
    }

    /// `[IMG]` × cols + `[IMG_BREAK]` per row, the last break `[IMG_END]`.
    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        let (rows, cols) = self.rule.grid(img);
        let [image, brk, end] = &self.rule.tokens;
        let row = image.repeat(cols);
        let mut text = String::with_capacity(rows * (row.len() + brk.len()));
        for r in 0..rows {
            text.push_str(&row);
            text.push_str(if r + 1 == rows { end } else { brk });
        }
        Ok(Some(text))
    }

    /// `(1, 3, H, W)`, sides multiples of `patch × merge`.
    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let resized = self.resized_image(img);
        let px = tessera_vision::preprocess::to_tensor(&resized, &self.rule.normalize, device)?;
        Ok(px.unsqueeze(0)?)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let (rows, cols) = self.rule.grid(img);
        Ok((self.resized_image(img), rows, cols))
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let (features, rows, cols) = self.features(img, device)?;
        Ok(ImageFeatures::new(self.projector.forward(&features, rows, cols)?.unsqueeze(0)?))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(self.features(img, device)?.0.unsqueeze(0)?)
    }

    fn describe(&self) -> String {
        let t = &self.spec.tower;
        let (mh, mw) = self.rule.max_size;
        format!(
            "Pixtral tower ({} layers, width {}, {}×{} patches, 2-D RoPE, native resolution), projector: {}; images \
             fitted within {mh}×{mw} px and rounded up to multiples of {} px, one [IMG] per {}×{} block, \
             [IMG_BREAK] after each row, [IMG_END] last: at most {} image tokens an image",
            t.num_hidden_layers,
            t.hidden_size,
            t.patch_size,
            t.patch_size,
            self.projector.describe(),
            self.rule.unit,
            self.rule.unit,
            self.rule.unit,
            self.budget(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;
    use tessera_vision::RgbImage;

    use super::Mistral3Spec;
    use crate::families::{ModelConfig, ProcessorSettings};

    fn resolve(top: serde_json::Value) -> Result<ModelConfig, String> {
        let mut config = json!({
            "model_type": "mistral3",
            "text_config": {"model_type": "mistral", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32},
            "vision_config": {"hidden_size": 32, "num_attention_heads": 4, "patch_size": 7},
        });
        if let (Some(c), Some(t)) = (config.as_object_mut(), top.as_object()) {
            c.extend(t.clone());
        }
        ModelConfig::from_config_json(&config, Path::new("config.json")).map_err(|e| e.to_string())
    }

    #[test]
    fn what_pixtral_does_not_run_is_refused_by_name() -> Result<(), String> {
        let cfg = resolve(json!({}))?;
        let spec = cfg.vision_spec::<Mistral3Spec>().ok_or("a Mistral 3 image side")?;
        // transformers' defaults: GELU vision MLP, θ 1e4, merge 2, [IMG] = 10; head_dim as stated.
        assert_eq!((spec.tower.rope_theta, spec.merge, spec.image_token_id, cfg.decoder.head_dim), (1e4, 2, 10, 32));
        let e = resolve(json!({"vision_feature_layer": [-1, -2]})).unwrap_err();
        assert!(e.contains("vision_feature_layer"), "{e}");
        let e = resolve(json!({"vision_config": {"hidden_size": 24, "num_attention_heads": 4}})).unwrap_err();
        assert!(e.contains("multiple of 4"), "{e}");
        // The processor's token unit must be the tower's patch × merge.
        let settings = |processor: serde_json::Value| ProcessorSettings {
            image: json!({"size": {"longest_edge": 112}, "do_center_crop": null}),
            processor,
            origin: "processor_config.json".into(),
        };
        let rule =
            spec.processor(&settings(json!({"patch_size": 7, "spatial_merge_size": 2}))).map_err(|e| e.to_string())?;
        let img = RgbImage::new(451, 300, vec![0; 451 * 300 * 3]);
        assert_eq!((rule.resized(&img), rule.grid(&img), rule.prompt_tokens(&img)), ((84, 112), (6, 8), 54));
        let e = spec.processor(&settings(json!({"patch_size": 7}))).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("spatial_merge_size 1") && e.contains("processor_config.json"), "{e}");
        Ok(())
    }
}
