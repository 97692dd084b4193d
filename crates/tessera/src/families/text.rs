//! The decoder-only text families (Llama, Mistral, Qwen2, Gemma, Gemma 2, Gemma 3): the fields of their
//! `config.json`, each class's defaults as transformers v5.23 writes them (what a VLM's
//! `text_config` falls back to), and each family's rules (Qwen2's q/k/v bias, Mistral's sliding
//! window, Gemma's GeGLU, `(1 + w)` norms and √width embedding scale, Gemma 2's soft-caps,
//! four norms per layer and alternating sliding/global layers, Gemma 3's q/k norms and 5 local :
//! 1 global layers with a RoPE base each).

use serde::{Deserialize, Deserializer};
use tessera_decoder::{Activation, DecoderConfig, LocalRope, MRope, NormStyle, RopeConfig, RopeScaling, RopeStyle};

use super::TokenIds;

mod gguf;
pub use gguf::{no_generated, GeneratedTensor, GgufRules, GgufText, GgufTextWriter, HfVocab, TensorChange};

/// The text families, by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum TextFamily {
    #[serde(rename = "llama", alias = "smollm", alias = "smollm2")]
    Llama,
    #[serde(rename = "mistral")]
    Mistral,
    #[serde(rename = "qwen2")]
    Qwen2,
    /// Qwen3: Qwen2 without q/k/v biases, with q/k norms.
    #[serde(rename = "qwen3")]
    Qwen3,
    /// Gemma 1: GeGLU, `(1 + w)` RMSNorm, embeddings scaled by √width.
    #[serde(rename = "gemma")]
    Gemma,
    /// Gemma 2: Gemma plus attention and final logit soft-capping, `query_pre_attn_scalar`,
    /// post-attention and pre/post-FFN norms, sliding-window layers alternating with global
    /// ones (starting with a sliding one).
    #[serde(rename = "gemma2")]
    Gemma2,
    /// Gemma 3: Gemma 2 without soft-caps, with q/k norms, five sliding-window layers to one
    /// global, and the local layers' own RoPE base.
    #[serde(rename = "gemma3_text")]
    Gemma3,
    /// Gemma 4's text model: its layers differ (families/gemma4.rs resolves it; no text-only
    /// `gemma4_text` checkpoint is read here).
    #[serde(skip)]
    Gemma4,
    /// Qwen2-VL's text model: Qwen2 with multimodal RoPE (`mrope_section`).
    #[serde(rename = "qwen2_vl_text")]
    Qwen2Vl,
    /// Qwen2.5-VL's text model (the same).
    #[serde(rename = "qwen2_5_vl_text")]
    Qwen25Vl,
    /// Qwen3-VL's text model: Qwen3 (q/k norms, no q/k/v bias) with interleaved M-RoPE.
    #[serde(rename = "qwen3_vl_text")]
    Qwen3Vl,
    /// Qwen3.5's text model: Gated DeltaNet layers beside gated attention layers; the
    /// `qwen3_5` family module adds what sets it apart (families/qwen3_5.rs).
    #[serde(rename = "qwen3_5_text")]
    Qwen35,
}

/// A text config class's defaults (the fields transformers leaves out of a `text_config`
/// that equals them) and its family's rules.
struct TextClass {
    name: &'static str,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// `None`: as many as the attention heads.
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    hidden_act: Activation,
    tie_word_embeddings: bool,
    bos_token_id: Option<u32>,
    eos_token_id: Option<u32>,
    /// Q/K/V projections always carry a bias (Qwen2), whatever `attention_bias` says.
    qkv_bias: bool,
    /// How the family reads `sliding_window`.
    sliding: Sliding,
    /// `sliding_window` when the config does not state it.
    sliding_window: Option<usize>,
    gemma: bool,
    /// Gemma 2: the four-norm layer.
    sandwich_norms: bool,
    query_pre_attn_scalar: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    final_logit_softcapping: Option<f64>,
    qk_norm: bool,
    rms_norm_eps: f64,
    rope_theta: f64,
    /// The local (sliding-window) layers' RoPE base, for families whose local layers rotate
    /// differently (Gemma 3).
    local_rope_theta: Option<f64>,
}

#[derive(Clone, Copy, PartialEq)]
enum Sliding {
    Never,
    /// `sliding_window` applies when set (Mistral).
    WhenSet,
    /// Only with `use_sliding_window: true` (Qwen2).
    WhenEnabled,
    /// Every other layer, starting with the first (Gemma 2's default `layer_types`).
    Alternating,
    /// Every layer but each `n`-th (Gemma 3's `sliding_window_pattern`, 6 by default).
    AllButEvery(usize),
}

impl TextFamily {
    /// The one place that tells the text families apart.
    fn class(self) -> TextClass {
        let llama = TextClass {
            name: "llama",
            vocab_size: 32000,
            hidden_size: 4096,
            intermediate_size: 11008,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: None,
            head_dim: None,
            max_position_embeddings: 2048,
            hidden_act: Activation::Silu,
            tie_word_embeddings: false,
            bos_token_id: Some(1),
            eos_token_id: Some(2),
            qkv_bias: false,
            sliding: Sliding::Never,
            sliding_window: None,
            gemma: false,
            sandwich_norms: false,
            query_pre_attn_scalar: None,
            attn_logit_softcapping: None,
            final_logit_softcapping: None,
            qk_norm: false,
            rms_norm_eps: 1e-6,
            rope_theta: 10_000.0,
            local_rope_theta: None,
        };
        let gemma = TextClass {
            name: "gemma",
            vocab_size: 256000,
            hidden_size: 3072,
            intermediate_size: 24576,
            num_hidden_layers: 28,
            num_attention_heads: 16,
            num_key_value_heads: Some(16),
            head_dim: Some(256),
            max_position_embeddings: 8192,
            hidden_act: Activation::GeluTanh,
            tie_word_embeddings: true,
            bos_token_id: Some(2),
            eos_token_id: Some(1),
            gemma: true,
            ..llama
        };
        match self {
            Self::Llama => llama,
            Self::Mistral => TextClass {
                name: "mistral",
                intermediate_size: 14336,
                num_key_value_heads: Some(8),
                max_position_embeddings: 131072,
                sliding: Sliding::WhenSet,
                ..llama
            },
            Self::Qwen2 => TextClass {
                name: "qwen2",
                vocab_size: 151936,
                intermediate_size: 22016,
                max_position_embeddings: 32768,
                bos_token_id: None,
                eos_token_id: None,
                qkv_bias: true,
                sliding: Sliding::WhenEnabled,
                ..llama
            },
            Self::Gemma => gemma,
            Self::Gemma2 => TextClass {
                name: "gemma2",
                hidden_size: 2304,
                intermediate_size: 9216,
                num_hidden_layers: 26,
                num_attention_heads: 8,
                num_key_value_heads: Some(4),
                sliding: Sliding::Alternating,
                sliding_window: Some(4096),
                sandwich_norms: true,
                query_pre_attn_scalar: Some(256.0),
                attn_logit_softcapping: Some(50.0),
                final_logit_softcapping: Some(30.0),
                ..gemma
            },
            Self::Qwen2Vl | Self::Qwen25Vl => TextClass {
                name: if self == Self::Qwen2Vl { "qwen2_vl_text" } else { "qwen2_5_vl_text" },
                vocab_size: 152_064,
                hidden_size: 8192,
                intermediate_size: 29_568,
                num_hidden_layers: 80,
                num_attention_heads: 64,
                num_key_value_heads: Some(8),
                max_position_embeddings: 32_768,
                bos_token_id: Some(151_643),
                eos_token_id: Some(151_645),
                qkv_bias: true,
                sliding: Sliding::WhenEnabled,
                sliding_window: Some(4096),
                rms_norm_eps: 1e-5,
                ..llama
            },
            Self::Qwen3 => TextClass {
                name: "qwen3",
                vocab_size: 151_936,
                intermediate_size: 22_016,
                max_position_embeddings: 32_768,
                head_dim: Some(128),
                bos_token_id: None,
                eos_token_id: None,
                sliding: Sliding::WhenEnabled,
                sliding_window: Some(4096),
                qk_norm: true,
                ..llama
            },
            Self::Qwen3Vl => TextClass {
                name: "qwen3_vl_text",
                vocab_size: 151_936,
                hidden_size: 4096,
                intermediate_size: 22_016,
                num_hidden_layers: 32,
                num_attention_heads: 32,
                num_key_value_heads: Some(32),
                head_dim: Some(128),
                max_position_embeddings: 128_000,
                bos_token_id: None,
                eos_token_id: None,
                qk_norm: true,
                rope_theta: 5_000_000.0,
                ..llama
            },
            Self::Qwen35 => TextClass {
                name: "qwen3_5_text",
                vocab_size: 248_320,
                hidden_size: 4096,
                intermediate_size: 12_288,
                num_hidden_layers: 32,
                num_attention_heads: 16,
                num_key_value_heads: Some(4),
                head_dim: Some(256),
                max_position_embeddings: 32_768,
                bos_token_id: None,
                eos_token_id: None,
                qk_norm: true,
                ..llama
            },
            Self::Gemma3 => TextClass {
                name: "gemma3_text",
                vocab_size: 262_208,
                hidden_size: 2304,
                intermediate_size: 9216,
                num_hidden_layers: 26,
                num_attention_heads: 8,
                num_key_value_heads: Some(4),
                max_position_embeddings: 131_072,
                sliding: Sliding::AllButEvery(6),
                sliding_window: Some(4096),
                sandwich_norms: true,
                query_pre_attn_scalar: Some(256.0),
                qk_norm: true,
                rope_theta: 1_000_000.0,
                local_rope_theta: Some(10_000.0),
                ..gemma
            },
            // Gemma4TextConfig's defaults; its own rules are families/gemma4.rs's.
            Self::Gemma4 => TextClass {
                name: "gemma4_text",
                vocab_size: 262_144,
                hidden_size: 2304,
                intermediate_size: 9216,
                num_hidden_layers: 30,
                num_attention_heads: 8,
                num_key_value_heads: Some(4),
                max_position_embeddings: 131_072,
                sliding: Sliding::AllButEvery(6),
                sliding_window: Some(512),
                sandwich_norms: true,
                query_pre_attn_scalar: Some(1.0),
                qk_norm: true,
                rope_theta: 1_000_000.0,
                local_rope_theta: Some(10_000.0),
                ..gemma
            },
        }
    }

    pub fn name(self) -> &'static str {
        self.class().name
    }

    /// The rotation layout of llama.cpp's GGUF files: its converter permutes Llama's (and
    /// Mistral's) q/k rows for interleaved rotation; Qwen2 is stored as is.
    pub fn gguf_rope_style(self) -> RopeStyle {
        match self {
            Self::Llama | Self::Mistral => RopeStyle::Interleaved,
            Self::Qwen2
            | Self::Qwen3
            | Self::Qwen2Vl
            | Self::Qwen25Vl
            | Self::Qwen3Vl
            | Self::Qwen35
            | Self::Gemma
            | Self::Gemma2
            | Self::Gemma3
            | Self::Gemma4 => RopeStyle::Half,
        }
    }
}

/// The fields of a text model's `config.json` (or a VLM's `text_config`); `null` counts as
/// absent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TextFields {
    pub vocab_size: Option<usize>,
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub rms_norm_eps: Option<f64>,
    pub max_position_embeddings: Option<usize>,
    pub rope_theta: Option<f64>,
    /// The older form: `rope_theta` at the top and an optional `rope_scaling` object.
    pub rope_scaling: Option<RopeFields>,
    /// transformers 5's form: everything in `rope_parameters` (one set per layer type where
    /// they differ).
    pub rope_parameters: Option<RopeParameters>,
    /// Gemma 3's older name for the local layers' RoPE base.
    pub rope_local_base_freq: Option<f64>,
    /// Gemma 3: every `n`-th layer is global (transformers writes `_sliding_window_pattern`).
    #[serde(alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
    pub tie_word_embeddings: Option<bool>,
    pub bos_token_id: Option<TokenIds>,
    pub eos_token_id: Option<TokenIds>,
    pub attention_bias: Option<bool>,
    pub hidden_act: Option<Activation>,
    /// Older Gemma configs name the activation so.
    pub hidden_activation: Option<Activation>,
    /// `null` turns the window off (where the class has one).
    #[serde(deserialize_with = "explicit")]
    pub sliding_window: Option<Option<usize>>,
    pub use_sliding_window: Option<bool>,
    /// Per layer `sliding_attention` or `full_attention` (transformers 5 writes it).
    pub layer_types: Option<Vec<LayerType>>,
    pub query_pre_attn_scalar: Option<f64>,
    /// `null` turns the cap off.
    #[serde(deserialize_with = "explicit")]
    pub attn_logit_softcapping: Option<Option<f64>>,
    #[serde(deserialize_with = "explicit")]
    pub final_logit_softcapping: Option<Option<f64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    SlidingAttention,
    FullAttention,
    /// Qwen3.5's Gated DeltaNet layers (the family module builds them).
    LinearAttention,
}

/// A field that may be absent (`None`: the class default) or `null` (`Some(None)`: off).
fn explicit<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `rope_scaling` / `rope_parameters`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RopeFields {
    pub rope_type: Option<RopeKind>,
    /// The older name of `rope_type`.
    #[serde(rename = "type")]
    pub kind: Option<RopeKind>,
    pub rope_theta: Option<f64>,
    pub factor: Option<f64>,
    /// Multimodal RoPE: frequencies per position stream (temporal, height, width).
    pub mrope_section: Option<Vec<usize>>,
    pub low_freq_factor: Option<f64>,
    pub high_freq_factor: Option<f64>,
    pub original_max_position_embeddings: Option<usize>,
}

/// `rope_parameters`: one set, or one per layer type (Gemma 3).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RopeParameters {
    PerLayerType {
        full_attention: RopeFields,
        #[serde(default)]
        sliding_attention: Option<RopeFields>,
    },
    One(RopeFields),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeKind {
    Default,
    /// Older Qwen2-VL configs: `{"type": "mrope", "mrope_section": …}` (default frequencies).
    Mrope,
    Linear,
    Llama3,
    /// Dynamic NTK scaling (InternVL3's Qwen2.5 text models): transformers rescales the
    /// frequencies only once a sequence passes `max_position_embeddings`, which tessera's
    /// context never does, so within it they are the default ones.
    Dynamic,
}

/// A VLM's `text_config`: its `model_type` (the family's default text model when absent) and
/// fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TextSubConfig {
    pub model_type: Option<TextFamily>,
    #[serde(flatten)]
    pub fields: TextFields,
}

/// The text side of a checkpoint, resolved.
#[derive(Debug, Clone)]
pub struct TextModel {
    pub family: TextFamily,
    pub decoder: DecoderConfig,
    pub embed_scale: Option<f64>,
    pub vocab_size: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Each layer's sliding window (`None`: global attention).
    pub layer_windows: Vec<Option<usize>>,
    /// Gemma 2: logits become `cap · tanh(logits / cap)`.
    pub final_logit_softcapping: Option<f64>,
}

impl TextFamily {
    /// Resolves `f`. `class_defaults`: fill what `f` lacks from the class's defaults (a VLM's
    /// `text_config`, as transformers does); otherwise the size fields are required. Errors
    /// name the field.
    pub fn resolve(self, f: &TextFields, class_defaults: bool) -> Result<TextModel, String> {
        let c = self.class();
        let need = |v: Option<usize>, default: usize, name: &str| -> Result<usize, String> {
            match (v, class_defaults) {
                (Some(v), _) => Ok(v),
                (None, true) => Ok(default),
                (None, false) => Err(format!("missing field `{name}`")),
            }
        };
        let hidden_size = need(f.hidden_size, c.hidden_size, "hidden_size")?;
        let heads = need(f.num_attention_heads, c.num_attention_heads, "num_attention_heads")?;
        if heads == 0 {
            return Err("num_attention_heads must be positive".into());
        }
        // A top-level config states its shape; a sub-config falls back to its class's.
        let fallback = |v: Option<usize>| v.filter(|_| class_defaults);
        let hidden_act = match (f.hidden_activation.or(f.hidden_act), c.gemma) {
            // GemmaConfig turns the legacy `gelu` into the tanh approximation it always meant.
            (Some(Activation::Gelu), true) | (None, true) => Activation::GeluTanh,
            (act, _) => act.unwrap_or(c.hidden_act),
        };
        let decoder = DecoderConfig {
            hidden_size,
            intermediate_size: need(f.intermediate_size, c.intermediate_size, "intermediate_size")?,
            num_hidden_layers: need(f.num_hidden_layers, c.num_hidden_layers, "num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: f.num_key_value_heads.or(fallback(c.num_key_value_heads)).unwrap_or(heads),
            head_dim: f.head_dim.or(fallback(c.head_dim)).unwrap_or(hidden_size / heads),
            rms_norm_eps: f.rms_norm_eps.unwrap_or(c.rms_norm_eps),
            rope: rope(f, c.rope_theta)?,
            max_position_embeddings: need(
                f.max_position_embeddings,
                c.max_position_embeddings,
                "max_position_embeddings",
            )?,
            qkv_bias: c.qkv_bias || f.attention_bias.unwrap_or(false),
            hidden_act,
            norm_style: if c.gemma { NormStyle::OnePlusWeight } else { NormStyle::Plain },
            query_pre_attn_scalar: f.query_pre_attn_scalar.or(c.query_pre_attn_scalar),
            position_offset: 0,
            attn_logit_softcapping: f.attn_logit_softcapping.unwrap_or(c.attn_logit_softcapping),
            sandwich_norms: c.sandwich_norms,
            qk_norm: c.qk_norm,
            local_rope: None,
            rotary_dim: None,
            attn_output_gate: false,
            linear: None,
            variants: None,
        };
        let layers = decoder.num_hidden_layers;
        let window = f.sliding_window.unwrap_or(c.sliding_window);
        // Which layers are sliding-window ("local") layers.
        let local: Vec<bool> = match (&f.layer_types, c.sliding) {
            (Some(types), _) if types.len() != layers => {
                return Err(format!("layer_types has {} entries for {layers} layers", types.len()))
            }
            (Some(types), _) => types.iter().map(|t| *t == LayerType::SlidingAttention).collect(),
            (None, Sliding::Never) => vec![false; layers],
            (None, Sliding::WhenSet) => vec![true; layers],
            (None, Sliding::WhenEnabled) => vec![f.use_sliding_window == Some(true); layers],
            (None, Sliding::Alternating) => (0..layers).map(|i| i % 2 == 0).collect(),
            (None, Sliding::AllButEvery(default)) => {
                let n = f.sliding_window_pattern.unwrap_or(default);
                if n == 0 {
                    return Err("sliding_window_pattern must be positive".into());
                }
                (0..layers).map(|i| (i + 1) % n != 0).collect()
            }
        };
        let layer_windows: Vec<Option<usize>> = local.iter().map(|&l| window.filter(|_| l)).collect();
        let mut decoder = decoder;
        if let Some(theta) = c.local_rope_theta {
            decoder.local_rope = Some(LocalRope { rope: local_rope(f, theta)?, layers: local });
        }
        if let Some(w) = layer_windows.iter().flatten().find(|&&w| w == 0) {
            return Err(format!("sliding_window {w} must be positive"));
        }
        // The decoder's own numbers are checked by `DecoderConfig::validate`; this one is the
        // model's.
        let cap = f.final_logit_softcapping.unwrap_or(c.final_logit_softcapping);
        if cap.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            return Err(format!("final_logit_softcapping must be a positive number, got {cap:?}"));
        }
        let defaults = |v: Option<u32>| v.filter(|_| class_defaults).map(TokenIds::One);
        Ok(TextModel {
            family: self,
            decoder,
            embed_scale: c.gemma.then(|| (hidden_size as f64).sqrt()),
            vocab_size: need(f.vocab_size, c.vocab_size, "vocab_size")?,
            tie_word_embeddings: f.tie_word_embeddings.unwrap_or(c.tie_word_embeddings),
            bos_token_id: f.bos_token_id.clone().or(defaults(c.bos_token_id)).and_then(|b| b.to_vec().first().copied()),
            eos_token_ids: f.eos_token_id.clone().or(defaults(c.eos_token_id)).map(|e| e.to_vec()).unwrap_or_default(),
            layer_windows,
            final_logit_softcapping: f.final_logit_softcapping.unwrap_or(c.final_logit_softcapping),
        })
    }
}

/// The (global) RoPE settings from either config form; `default_theta`: the class's base.
/// Errors name the offending field.
fn rope(f: &TextFields, default_theta: f64) -> Result<RopeConfig, String> {
    let nested = match &f.rope_parameters {
        Some(RopeParameters::One(p)) | Some(RopeParameters::PerLayerType { full_attention: p, .. }) => Some(p),
        None => None,
    };
    let theta = nested.and_then(|p| p.rope_theta).or(f.rope_theta).unwrap_or(default_theta);
    rope_config(nested.or(f.rope_scaling.as_ref()), theta)
}

/// Gemma 3's local layers: `rope_parameters.sliding_attention`, or the older
/// `rope_local_base_freq` (no scaling).
fn local_rope(f: &TextFields, default_theta: f64) -> Result<RopeConfig, String> {
    let nested = match &f.rope_parameters {
        Some(RopeParameters::PerLayerType { sliding_attention, .. }) => sliding_attention.as_ref(),
        _ => None,
    };
    let theta = nested.and_then(|p| p.rope_theta).or(f.rope_local_base_freq).unwrap_or(default_theta);
    rope_config(nested, theta)
}

/// Errors name a missing field; the numbers' domains are `DecoderConfig::validate`'s to check.
fn rope_config(params: Option<&RopeFields>, theta: f64) -> Result<RopeConfig, String> {
    let scaling = match params {
        None => RopeScaling::Default,
        Some(p) => {
            let kind = p.rope_type.or(p.kind).unwrap_or(RopeKind::Default);
            let num = |v: Option<f64>, k: &str| v.ok_or_else(|| format!("rope scaling `{kind:?}` needs `{k}`"));
            match kind {
                RopeKind::Default | RopeKind::Mrope | RopeKind::Dynamic => RopeScaling::Default,
                RopeKind::Linear => RopeScaling::Linear { factor: num(p.factor, "factor")? },
                RopeKind::Llama3 => RopeScaling::Llama3 {
                    factor: num(p.factor, "factor")?,
                    low_freq_factor: num(p.low_freq_factor, "low_freq_factor")?,
                    high_freq_factor: num(p.high_freq_factor, "high_freq_factor")?,
                    original_max_position_embeddings: p
                        .original_max_position_embeddings
                        .ok_or("rope scaling `Llama3` needs `original_max_position_embeddings`")?,
                },
            }
        }
    };
    let mrope = match params.and_then(|p| p.mrope_section.as_ref()) {
        Some(s) if s.len() == 3 => Some(MRope { section: [s[0], s[1], s[2]], interleaved: false }),
        Some(s) => return Err(format!("mrope_section {s:?} must have 3 entries (temporal, height, width)")),
        None => None,
    };
    Ok(RopeConfig { theta, scaling, style: RopeStyle::Half, mrope })
}
