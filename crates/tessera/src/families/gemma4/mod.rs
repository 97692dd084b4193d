//! Gemma 4 (`google/gemma-4-E2B-it` and its siblings) as transformers v5.23's
//! `Gemma4ForConditionalGeneration` runs it.
//!
//! The text model ([`tessera_decoder::per_layer`]): sliding-window layers and full-attention
//! layers with their own head size (`global_head_dim`) and RoPE (`proportional` on the full
//! layers: only a quarter of the frequencies rotate), RMSNorms with plain weights, q/k norms and
//! a parameter-free value norm, attention scale 1, a layer scalar per layer; the last
//! `num_kv_shared_layers` layers reuse the keys and values of the last earlier layer of their
//! kind (and have double-wide MLPs with `use_double_wide_mlp`); per-layer inputs (PLE): a second
//! embedding of every token for every layer, mixed in after each MLP — image positions look up
//! the pad token's row; the full layers' values may be the key projection (`attention_k_eq_v`).
//! Logits soft-capped (`final_logit_softcapping`).
//!
//! The image side ([`tessera_vision::gemma4`]): the image resized keeping its aspect to at most
//! `max_soft_tokens` soft tokens of `k × k` patches, the tower, `k × k` pooling, `embed_vision`;
//! the template writes `<|image|>`, which the processor expands to `<|image>` + one `<|image|>`
//! per soft token + `<image|>`. With `use_bidirectional_attention: "vision"` each image's tokens
//! see each other both ways in the sliding-window layers only.
//!
//! Not run: the audio tower (the E2B / E4B checkpoints carry one; audio and video inputs are
//! refused — tessera's prompts take text and images only) and the mixture-of-experts layers
//! (26B-A4B), refused by name.

use candle_core::{Device, Tensor};
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{
    Activation, DecoderConfig, LayerShape, LayerVariants, LocalRope, NormStyle, RopeConfig, RopeScaling,
};
use tessera_vision::{gemma4 as vision, Gemma4Embedder, Gemma4Vision, Gemma4VisionConfig, RgbImage};

use super::image::{
    first_prefix, token_text, ImageFeatures, ImageLoad, ImageSide, ImageSpec, MmprojMetadata, MmprojTensor,
    ProcessorSettings,
};
use super::text::{LayerType, TextFamily, TextModel};
use super::{ModelConfig, PerLayerInputs, PromptStyle, TokenIds};
use crate::error::{Result, TesseraError};

mod export;
mod gguf;
mod mmproj;
pub(crate) use export::GGUF_WRITER;
pub(crate) use gguf::text_config as gguf_config;
pub(crate) use mmproj::from_mmproj;

#[derive(Debug, Deserialize)]
pub struct Gemma4Config {
    #[serde(default)]
    text_config: Option<TextFields>,
    #[serde(default)]
    vision_config: Option<VisionFields>,
    #[serde(default)]
    boi_token_id: Option<u32>,
    #[serde(default)]
    eoi_token_id: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    audio_token_id: Option<u32>,
    #[serde(default)]
    video_token_id: Option<u32>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

/// `Gemma4TextConfig`'s fields (`null` counts as absent unless said otherwise).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TextFields {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    global_head_dim: Option<usize>,
    num_global_key_value_heads: Option<usize>,
    /// What transformers 5.23 writes instead of the two above: each overridden layer's fields,
    /// by index.
    per_layer_config: Option<std::collections::BTreeMap<String, LayerOverride>>,
    hidden_activation: Option<Activation>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    pad_token_id: Option<u32>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<TokenIds>,
    tie_word_embeddings: Option<bool>,
    rope_parameters: Option<std::collections::BTreeMap<String, RopeEntry>>,
    attention_bias: Option<bool>,
    sliding_window: Option<usize>,
    layer_types: Option<Vec<LayerType>>,
    final_logit_softcapping: Option<f64>,
    use_bidirectional_attention: Option<String>,
    vocab_size_per_layer_input: Option<usize>,
    /// Absent: 256; `null` or 0: no per-layer inputs.
    #[serde(deserialize_with = "present")]
    hidden_size_per_layer_input: Option<Value>,
    attention_k_eq_v: Option<bool>,
    num_kv_shared_layers: Option<usize>,
    enable_moe_block: Option<bool>,
    use_double_wide_mlp: Option<bool>,
}

/// A field's value when the file has it, `null` included (`None`: absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct LayerOverride {
    head_dim: Option<usize>,
    num_key_value_heads: Option<usize>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct RopeEntry {
    rope_type: Option<String>,
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    factor: Option<f64>,
}

/// `Gemma4VisionConfig`'s fields.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VisionFields {
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    hidden_activation: Option<Activation>,
    rms_norm_eps: Option<f64>,
    rope_parameters: Option<RopeEntry>,
    pooling_kernel_size: Option<usize>,
    patch_size: Option<usize>,
    position_embedding_size: Option<usize>,
    use_clipped_linears: Option<bool>,
    standardize: Option<bool>,
}

/// Gemma 4's image side as its config resolves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Spec {
    pub tower: Gemma4VisionConfig,
    /// `<|image|>`, `<|image>`, `<image|>`.
    pub image_token_id: u32,
    pub boi_token_id: u32,
    pub eoi_token_id: u32,
}

/// Where the tower and `embed_vision` lie: a checkpoint's names, or an mmproj's read through
/// [`tessera_decoder::gemma4v_names`].
const TOWER_ROOTS: [&str; 3] = ["model.vision_tower", "vision_tower", "gemma4v.vision_tower"];
const EMBEDDER_ROOTS: [&str; 3] = ["model.embed_vision", "embed_vision", "gemma4v.embed_vision"];

/// The soft-token budgets `Gemma4ImageProcessor` accepts (`_SUPPORTED_SOFT_TOKENS`).
const SOFT_TOKEN_BUDGETS: [usize; 5] = [70, 140, 280, 560, 1120];

impl Gemma4Config {
    pub fn resolve(&self) -> std::result::Result<ModelConfig, String> {
        let absent = TextFields::default();
        let t = self.text_config.as_ref().unwrap_or(&absent);
        let (text, per_layer, bidirectional) = resolve_text(t).map_err(|e| format!("text_config: {e}"))?;
        let absent = VisionFields::default();
        let v = self.vision_config.as_ref().unwrap_or(&absent);
        let rope = v.rope_parameters.clone().unwrap_or_default();
        if let Some(kind) = rope.rope_type.as_deref().filter(|k| *k != "axial") {
            return Err(format!("vision_config.rope_parameters.rope_type \"{kind}\": Gemma 4's tower is \"axial\""));
        }
        let tower = Gemma4VisionConfig {
            hidden_size: v.hidden_size.unwrap_or(768),
            intermediate_size: v.intermediate_size.unwrap_or(3072),
            num_hidden_layers: v.num_hidden_layers.unwrap_or(16),
            num_attention_heads: v.num_attention_heads.unwrap_or(12),
            num_key_value_heads: v.num_key_value_heads.unwrap_or(12),
            head_dim: v.head_dim.unwrap_or(64),
            hidden_act: v.hidden_activation.unwrap_or(Activation::GeluTanh),
            rms_norm_eps: v.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: rope.rope_theta.unwrap_or(100.0),
            pooling_kernel_size: v.pooling_kernel_size.unwrap_or(3),
            patch_size: v.patch_size.unwrap_or(16),
            position_embedding_size: v.position_embedding_size.unwrap_or(10 * 1024),
            use_clipped_linears: v.use_clipped_linears.unwrap_or(false),
            standardize: v.standardize.unwrap_or(false),
        };
        tower.validate().map_err(|e| e.to_string())?;
        let spec = Gemma4Spec {
            tower,
            image_token_id: self.image_token_id.unwrap_or(258_880),
            boi_token_id: self.boi_token_id.unwrap_or(255_999),
            eoi_token_id: self.eoi_token_id.unwrap_or(258_882),
        };
        let mut cfg = ModelConfig::vlm(
            "gemma4",
            text,
            Some(self.tie_word_embeddings.unwrap_or(true)),
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            spec,
        );
        // `Gemma4Model.forward` embeds every audio and video placeholder as the pad token (and
        // looks the pad's per-layer row up), generated ones too.
        let pad = t.pad_token_id.unwrap_or(0);
        cfg.embed_as =
            vec![(self.audio_token_id.unwrap_or(258_881), pad), (self.video_token_id.unwrap_or(258_884), pad)];
        cfg.per_layer_inputs = per_layer;
        cfg.bidirectional_images = bidirectional;
        cfg.bidirectional_in_sliding_layers_only = bidirectional;
        Ok(cfg)
    }
}

/// The text model, its per-layer inputs and whether images attend both ways (in the sliding
/// layers), from `Gemma4TextConfig`'s fields and class defaults.
fn resolve_text(t: &TextFields) -> std::result::Result<(TextModel, Option<PerLayerInputs>, bool), String> {
    if t.enable_moe_block == Some(true) {
        return Err("enable_moe_block: Gemma 4's mixture-of-experts layers (26B-A4B) are not supported yet".into());
    }
    let bidirectional = match t.use_bidirectional_attention.as_deref() {
        None => false,
        Some("vision") => true,
        Some(other) => return Err(format!("use_bidirectional_attention \"{other}\": only \"vision\" or null")),
    };
    let layers = t.num_hidden_layers.unwrap_or(30);
    let heads = t.num_attention_heads.unwrap_or(8);
    let kv_heads = t.num_key_value_heads.unwrap_or(4);
    let head_dim = t.head_dim.unwrap_or(256);
    let hidden = t.hidden_size.unwrap_or(2304);
    let intermediate = t.intermediate_size.unwrap_or(9216);
    // transformers' default `layer_types`: every 6th layer full; the last layer always full.
    let mut types: Vec<LayerType> = match &t.layer_types {
        Some(types) if types.len() != layers => {
            return Err(format!("layer_types has {} entries for {layers} layers", types.len()))
        }
        Some(types) => types.clone(),
        None => (0..layers)
            .map(|i| if (i + 1) % 6 == 0 { LayerType::FullAttention } else { LayerType::SlidingAttention })
            .collect(),
    };
    if let Some(last) = types.last_mut() {
        *last = LayerType::FullAttention;
    }
    let full: Vec<bool> = types.iter().map(|t| *t == LayerType::FullAttention).collect();
    let k_eq_v = t.attention_k_eq_v.unwrap_or(false);
    let global_kv = if k_eq_v { t.num_global_key_value_heads.unwrap_or(kv_heads) } else { kv_heads };
    let global_head_dim = t.global_head_dim.unwrap_or(512);
    // Layer `i`'s (head_dim, key/value heads): `per_layer_config`'s where the file has one, else
    // `global_head_dim` and `num_global_key_value_heads` on the full layers.
    let heads_of = |i: usize| -> std::result::Result<(usize, usize), String> {
        match &t.per_layer_config {
            Some(map) => {
                for key in map.keys() {
                    if key.parse::<usize>().map_or(true, |k| k >= layers) {
                        return Err(format!("per_layer_config names layer `{key}` of {layers}"));
                    }
                }
                let o = map.get(&i.to_string()).cloned().unwrap_or_default();
                Ok((o.head_dim.unwrap_or(head_dim), o.num_key_value_heads.unwrap_or(kv_heads)))
            }
            None if full[i] => Ok((global_head_dim, global_kv)),
            None => Ok((head_dim, kv_heads)),
        }
    };
    let shared = t.num_kv_shared_layers.unwrap_or(0);
    if shared >= layers && shared > 0 {
        return Err(format!("num_kv_shared_layers {shared} leaves none of the {layers} layers to share"));
    }
    let first_shared = layers - shared;
    let double_wide = t.use_double_wide_mlp.unwrap_or(false);
    let shapes = (0..layers)
        .map(|i| {
            let source = match i >= first_shared {
                true => Some((0..first_shared).rev().find(|&j| full[j] == full[i]).ok_or_else(|| {
                    format!("layer {i} shares keys and values, but no earlier layer of its kind produces them")
                })?),
                false => None,
            };
            let (head_dim, num_key_value_heads) = heads_of(i)?;
            Ok(LayerShape {
                head_dim,
                num_key_value_heads,
                intermediate_size: if source.is_some() && double_wide { 2 * intermediate } else { intermediate },
                k_eq_v: full[i] && k_eq_v,
                kv_source: source,
            })
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let ple = match &t.hidden_size_per_layer_input {
        None => Some(256),
        Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(0) => None,
            Some(n) => Some(n as usize),
            None => return Err(format!("hidden_size_per_layer_input {v} is not a width")),
        },
    };
    let rope_of = |kind: &str, default: RopeEntry| -> std::result::Result<RopeConfig, String> {
        let entry = match &t.rope_parameters {
            None => default,
            Some(map) => map.get(kind).cloned().ok_or_else(|| format!("rope_parameters has no `{kind}` entry"))?,
        };
        let theta = entry.rope_theta.unwrap_or(10_000.0);
        let scaling = match entry.rope_type.as_deref().unwrap_or("default") {
            "default" => RopeScaling::Default,
            "proportional" => RopeScaling::Proportional {
                fraction: entry.partial_rotary_factor.unwrap_or(1.0),
                factor: entry.factor.unwrap_or(1.0),
            },
            other => return Err(format!("rope_parameters.{kind}.rope_type \"{other}\" is not supported")),
        };
        Ok(RopeConfig { theta, scaling, ..RopeConfig::default() })
    };
    let entry = |kind: &str, theta: f64, fraction: Option<f64>| RopeEntry {
        rope_type: Some(kind.into()),
        rope_theta: Some(theta),
        partial_rotary_factor: fraction,
        factor: None,
    };
    let eps = t.rms_norm_eps.unwrap_or(1e-6);
    let decoder = DecoderConfig {
        hidden_size: hidden,
        intermediate_size: intermediate,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        rms_norm_eps: eps,
        rope: rope_of("full_attention", entry("proportional", 1e6, Some(0.25)))?,
        max_position_embeddings: t.max_position_embeddings.unwrap_or(131_072),
        qkv_bias: t.attention_bias.unwrap_or(false),
        hidden_act: t.hidden_activation.unwrap_or(Activation::GeluTanh),
        norm_style: NormStyle::Plain,
        query_pre_attn_scalar: Some(1.0),
        position_offset: 0,
        attn_logit_softcapping: None,
        sandwich_norms: true,
        qk_norm: true,
        local_rope: Some(LocalRope {
            rope: rope_of("sliding_attention", entry("default", 1e4, None))?,
            layers: full.iter().map(|f| !f).collect(),
        }),
        rotary_dim: None,
        attn_output_gate: false,
        linear: None,
        variants: Some(LayerVariants { shapes, value_norm: true, per_layer_input: ple, layer_scalar: true }),
    };
    let window = t.sliding_window.unwrap_or(512);
    if window == 0 {
        return Err("sliding_window must be positive".into());
    }
    let cap = t.final_logit_softcapping;
    if cap.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
        return Err(format!("final_logit_softcapping must be a positive number, got {cap:?}"));
    }
    let vocab = t.vocab_size.unwrap_or(262_144);
    let text = TextModel {
        family: TextFamily::Gemma4,
        decoder,
        embed_scale: Some((hidden as f64).sqrt()),
        vocab_size: vocab,
        tie_word_embeddings: t.tie_word_embeddings.unwrap_or(true),
        bos_token_id: Some(t.bos_token_id.unwrap_or(2)),
        eos_token_ids: t.eos_token_id.as_ref().map(TokenIds::to_vec).unwrap_or_else(|| vec![1]),
        layer_windows: full.iter().map(|&f| (!f).then_some(window)).collect(),
        final_logit_softcapping: cap,
    };
    let per_layer = ple.map(|dim| PerLayerInputs {
        vocab: t.vocab_size_per_layer_input.unwrap_or(262_144),
        dim,
        pad_id: t.pad_token_id.unwrap_or(0),
    });
    Ok((text, per_layer, bidirectional))
}

/// The image processor's rule (`Gemma4ImageProcessorPil`'s settings and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemma4ProcessorRule {
    pub patch_size: usize,
    pub pooling_kernel_size: usize,
    pub max_soft_tokens: usize,
}

impl Gemma4ProcessorRule {
    /// The resized `(height, width)` of `img`.
    pub fn resized(&self, img: &RgbImage) -> Result<(usize, usize)> {
        let k = self.pooling_kernel_size;
        Ok(vision::resized_size(img.height, img.width, self.patch_size, self.max_soft_tokens * k * k, k)?)
    }

    /// The soft tokens `img` becomes.
    pub fn tokens(&self, img: &RgbImage) -> Result<usize> {
        let (h, w) = self.resized(img)?;
        let unit = self.patch_size * self.pooling_kernel_size;
        Ok((h / unit) * (w / unit))
    }
}

impl Gemma4Spec {
    /// The processor rule `settings` give; what the tower cannot run is refused by name.
    pub fn processor(&self, settings: &ProcessorSettings) -> Result<Gemma4ProcessorRule> {
        let ProcessorSettings { image, origin, .. } = settings;
        let err = |reason: String| TesseraError::Config { path: origin.clone(), reason };
        let field = |k: &str| image.get(k).filter(|v| !v.is_null());
        let count = |k: &str, default: usize| -> Result<usize> {
            match field(k) {
                None => Ok(default),
                Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| err(format!("`{k}` {v} is not a count"))),
            }
        };
        let flag = |k: &str, default: bool| field(k).and_then(Value::as_bool).unwrap_or(default);
        let rule = Gemma4ProcessorRule {
            patch_size: count("patch_size", 16)?,
            pooling_kernel_size: count("pooling_kernel_size", 3)?,
            max_soft_tokens: count("max_soft_tokens", 280)?,
        };
        if !SOFT_TOKEN_BUDGETS.contains(&rule.max_soft_tokens) {
            return Err(err(format!(
                "`max_soft_tokens` {} is not one of {SOFT_TOKEN_BUDGETS:?}",
                rule.max_soft_tokens
            )));
        }
        if (rule.patch_size, rule.pooling_kernel_size) != (self.tower.patch_size, self.tower.pooling_kernel_size) {
            return Err(err(format!(
                "the processor's patch_size {} and pooling_kernel_size {} differ from the tower's {} and {}",
                rule.patch_size, rule.pooling_kernel_size, self.tower.patch_size, self.tower.pooling_kernel_size
            )));
        }
        let rescale = field("rescale_factor").and_then(Value::as_f64).unwrap_or(1.0 / 255.0);
        let resample = count("resample", 3)?;
        if !flag("do_resize", true) || !flag("do_rescale", true) || flag("do_normalize", false) || resample != 3 {
            return Err(
                err("Gemma 4's processor is run as it ships: bicubic resize, rescale, no normalization".into()),
            );
        }
        if (rescale - 1.0 / 255.0).abs() > 1e-12 {
            return Err(err(format!("`rescale_factor` {rescale}: only 1/255 is supported")));
        }
        Ok(rule)
    }
}

impl ImageSpec for Gemma4Spec {
    fn int8_refusal(&self) -> Option<&'static str> {
        Some(
            "its tower's scale-1 attention over q/k-normed heads carries the 8-bit rounding past the 3% the other \
             towers stay within (3.1% on the tiny checkpoint's two-image case)",
        )
    }

    fn mmproj_metadata(
        &self,
        settings: &ProcessorSettings,
        config: &Value,
        text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        Some(export::mmproj_metadata(self, settings, config, text_hidden))
    }

    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        export::mmproj_tensors(stored, dims)
    }

    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        if at.pan_and_scan {
            return Err(TesseraError::InvalidInput("pan-and-scan is for Gemma 3; Gemma 4 has none".into()));
        }
        let rule = self.processor(&ProcessorSettings::of(at)?)?;
        let tokens = [
            token_text(at, self.image_token_id, "image_token_id")?,
            token_text(at, self.boi_token_id, "boi_token_id")?,
            token_text(at, self.eoi_token_id, "eoi_token_id")?,
        ];
        let vb = at.weights;
        let tower =
            Gemma4Vision::new(&self.tower, &first_prefix(vb, &TOWER_ROOTS, "encoder.layers.0.input_layernorm.weight"))?;
        let embedder = Gemma4Embedder::new(
            self.tower.hidden_size,
            at.text_hidden,
            self.tower.rms_norm_eps,
            &first_prefix(vb, &EMBEDDER_ROOTS, "embedding_projection.weight"),
        )?;
        Ok(Box::new(Gemma4Images { spec: self.clone(), rule, tower, embedder, tokens }))
    }
}

/// Gemma 4's loaded image side.
struct Gemma4Images {
    spec: Gemma4Spec,
    rule: Gemma4ProcessorRule,
    tower: Gemma4Vision,
    embedder: Gemma4Embedder,
    /// The texts of the image, begin and end tokens.
    tokens: [String; 3],
}

impl Gemma4Images {
    fn resized_image(&self, img: &RgbImage) -> Result<RgbImage> {
        let k = self.rule.pooling_kernel_size;
        Ok(vision::resized(img, self.rule.patch_size, self.rule.max_soft_tokens * k * k, k)?)
    }

    /// The pooled soft tokens `(tokens, vision_hidden)`.
    fn soft_tokens(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let (patches, rows, cols) = vision::patches(&self.resized_image(img)?, self.rule.patch_size, device)?;
        let encoded = self.tower.encode(&patches, rows, cols)?;
        Ok(self.tower.pool(&encoded, rows, cols)?)
    }
}

impl ImageSide for Gemma4Images {
    fn fixed_tokens(&self) -> Option<usize> {
        None
    }

    fn tokens_for(&self, img: &RgbImage) -> Result<usize> {
        self.rule.tokens(img)
    }

    fn placeholder(&self) -> Option<&str> {
        Some(&self.tokens[0])
    }

    fn image_token_id(&self) -> Option<u32> {
        Some(self.spec.image_token_id)
    }

    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>> {
        let [image, begin, end] = &self.tokens;
        Ok(Some(format!("{begin}{}{end}", image.repeat(self.rule.tokens(img)?))))
    }

    /// `(1, patches, 3·patch²)`: the resized image's patches, without the processor's padding.
    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let (patches, _, _) = vision::patches(&self.resized_image(img)?, self.rule.patch_size, device)?;
        Ok(patches.unsqueeze(0)?)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let resized = self.resized_image(img)?;
        let unit = self.rule.patch_size * self.rule.pooling_kernel_size;
        let (rows, cols) = (resized.height / unit, resized.width / unit);
        Ok((resized, rows, cols))
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        let soft = self.soft_tokens(img, device)?;
        Ok(ImageFeatures::new(self.embedder.forward(&soft)?.unsqueeze(0)?))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(self.soft_tokens(img, device)?.unsqueeze(0)?)
    }

    fn describe(&self) -> String {
        let t = &self.spec.tower;
        let k = t.pooling_kernel_size;
        format!(
            "Gemma 4 tower ({} layers, width {}, {}×{} patches, 2-D RoPE, learned 2-D positions{}), {k}×{k} pooling, \
             embed_vision; images resized keeping their aspect to at most {} soft tokens (multiples of {} px), \
             each <|image> + its tokens + <image|>; no audio or video inputs",
            t.num_hidden_layers,
            t.hidden_size,
            t.patch_size,
            t.patch_size,
            if t.use_clipped_linears { ", clipped linears" } else { "" },
            self.rule.max_soft_tokens,
            t.patch_size * k,
        )
    }
}

#[cfg(test)]
mod tests;
