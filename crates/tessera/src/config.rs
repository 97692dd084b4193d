//! Checkpoint configuration: a serde mirror of Hugging Face `config.json` (both the older
//! top-level `rope_theta`/`rope_scaling` form and transformers 5's nested `rope_parameters`),
//! and GGUF metadata (`llama.*`, `qwen2.*` keys), both converted into one [`ModelConfig`].

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{Activation, DecoderConfig, NormStyle, RopeConfig, RopeScaling, RopeStyle};
use tessera_vision::NativeVisionConfig;

use crate::error::{Result, TesseraError};
use crate::vlm_config::{class_defaults, hf_vision, with_defaults, HfVisionConfig, VlmFamily};

/// The model families this engine composes from the shared decoder (and, for the
/// vision-language ones, a vision tower and connector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
    /// Gemma 1: GeGLU, `(1 + w)` RMSNorm, embeddings scaled by √width.
    Gemma,
    /// tessera's native single-stream image + text model (ARCHITECTURE.md).
    TesseraNative,
    /// Idefics3 / SmolVLM: SigLIP tiles, pixel shuffle, a Llama decoder.
    Idefics3,
    /// LLaVA: CLIP or SigLIP tower, two-layer projector, a Llama or Qwen2 decoder.
    Llava,
    /// PaliGemma: SigLIP tower, linear projector, Gemma decoder, prefix-LM mask.
    PaliGemma,
}

impl Architecture {
    pub const SUPPORTED: &'static str = "llama, mistral, qwen2, gemma, tessera_native, idefics3, llava, paligemma \
         (config.json model_type) / llama, qwen2 (GGUF)";

    fn from_model_type(t: &str) -> Option<Self> {
        match t {
            "llama" | "smollm" | "smollm2" => Some(Self::Llama),
            "mistral" => Some(Self::Mistral),
            "qwen2" => Some(Self::Qwen2),
            "gemma" => Some(Self::Gemma),
            "tessera_native" => Some(Self::TesseraNative),
            "idefics3" => Some(Self::Idefics3),
            "llava" => Some(Self::Llava),
            "paligemma" => Some(Self::PaliGemma),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Mistral => "mistral",
            Self::Qwen2 => "qwen2",
            Self::Gemma => "gemma",
            Self::TesseraNative => "tessera_native",
            Self::Idefics3 => "idefics3",
            Self::Llava => "llava",
            Self::PaliGemma => "paligemma",
        }
    }

    /// The vision-language family, for the Hugging Face VLMs.
    pub fn vlm_family(&self) -> Option<VlmFamily> {
        match self {
            Self::Idefics3 => Some(VlmFamily::Idefics3),
            Self::Llava => Some(VlmFamily::Llava),
            Self::PaliGemma => Some(VlmFamily::PaliGemma),
            _ => None,
        }
    }

    /// A decoder-only text model (what a VLM's `text_config` may be).
    fn is_text(&self) -> bool {
        matches!(self, Self::Llama | Self::Mistral | Self::Qwen2 | Self::Gemma)
    }
}

/// Everything the assembly needs to build a model.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub architecture: Architecture,
    /// The decoder's own family (a VLM's `text_config.model_type`; else `architecture`).
    pub text_architecture: Architecture,
    pub decoder: DecoderConfig,
    /// Token embeddings are multiplied by this (Gemma: √width), image features are not.
    pub embed_scale: Option<f64>,
    pub vocab_size: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub sliding_window: Option<usize>,
    /// The image side, for models that take images.
    pub vision: Option<VisionSpec>,
}

/// How a model turns images into tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum VisionSpec {
    /// Patches projected straight into the decoder width (`tessera_native`).
    Native { encoder: NativeVisionConfig, image_mean: Vec<f32>, image_std: Vec<f32>, resample: u32 },
    /// A vision tower and connector whose features replace the prompt's image placeholders
    /// (Idefics3, LLaVA, PaliGemma).
    Hf(HfVisionConfig),
}

/// One id or a list of ids (`eos_token_id` is either in real configs).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Self::One(i) => vec![*i],
            Self::Many(v) => v.clone(),
        }
    }
}

fn default_eps() -> f64 {
    1e-6
}

/// `config.json` as written by transformers for Llama-family text models.
#[derive(Debug, Clone, Deserialize)]
pub struct HfTextConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<Value>,
    pub rope_parameters: Option<Value>,
    pub tie_word_embeddings: Option<bool>,
    pub bos_token_id: Option<TokenIds>,
    pub eos_token_id: Option<TokenIds>,
    pub attention_bias: Option<bool>,
    pub hidden_act: Option<Activation>,
    /// Older Gemma configs name the activation so.
    pub hidden_activation: Option<Activation>,
    pub sliding_window: Option<usize>,
    pub use_sliding_window: Option<bool>,
}

impl ModelConfig {
    /// Reads and converts `config.json`.
    pub fn from_config_file(path: &Path) -> Result<Self> {
        Self::from_config_json(&crate::model::read_json(path)?, path)
    }

    /// Converts a parsed `config.json`; `path` is used in error messages.
    pub fn from_config_json(json: &Value, path: &Path) -> Result<Self> {
        let model_type = json.get("model_type").and_then(Value::as_str).unwrap_or("<missing model_type>");
        let architecture =
            Architecture::from_model_type(model_type).ok_or_else(|| TesseraError::UnsupportedArchitecture {
                found: model_type.to_string(),
                path: path.to_path_buf(),
                supported: Architecture::SUPPORTED.to_string(),
            })?;
        let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
        // The decoder's fields: the file itself, or a VLM's `text_config` with its class defaults.
        let (text_json, text_architecture) = match architecture.vlm_family() {
            None => (json.clone(), architecture),
            Some(family) => {
                let sub = json.get("text_config").cloned().unwrap_or_else(|| serde_json::json!({}));
                let text_type = sub.get("model_type").and_then(Value::as_str).unwrap_or(family.default_text_type());
                let text_arch =
                    Architecture::from_model_type(text_type).filter(Architecture::is_text).ok_or_else(|| {
                        err(format!("unsupported text_config.model_type `{text_type}` (llama, mistral, qwen2, gemma)"))
                    })?;
                let defaults = class_defaults(text_type).unwrap_or_else(|| serde_json::json!({}));
                let mut merged = with_defaults(&sub, defaults);
                merged["model_type"] = text_type.into();
                (merged, text_arch)
            }
        };
        let cfg: HfTextConfig = serde_json::from_value(text_json)
            .map_err(|e| TesseraError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
        if cfg.num_attention_heads == 0 {
            return Err(err("num_attention_heads must be positive".into()));
        }
        let rope = rope_from_hf(&cfg).map_err(err)?;
        let head_dim = cfg.head_dim.unwrap_or(cfg.hidden_size / cfg.num_attention_heads);
        let qkv_bias = match text_architecture {
            Architecture::Qwen2 => true,
            _ => cfg.attention_bias.unwrap_or(false),
        };
        let sliding_window = match text_architecture {
            Architecture::Mistral => cfg.sliding_window,
            Architecture::Qwen2 if cfg.use_sliding_window == Some(true) => cfg.sliding_window,
            _ => None,
        };
        let gemma = text_architecture == Architecture::Gemma;
        let hidden_act = match (cfg.hidden_activation.or(cfg.hidden_act), gemma) {
            // GemmaConfig turns the legacy `gelu` into the tanh approximation it always meant.
            (Some(Activation::Gelu), true) | (None, true) => Activation::GeluTanh,
            (act, _) => act.unwrap_or(Activation::Silu),
        };
        let decoder = DecoderConfig {
            hidden_size: cfg.hidden_size,
            intermediate_size: cfg.intermediate_size,
            num_hidden_layers: cfg.num_hidden_layers,
            num_attention_heads: cfg.num_attention_heads,
            num_key_value_heads: cfg.num_key_value_heads.unwrap_or(cfg.num_attention_heads),
            head_dim,
            rms_norm_eps: cfg.rms_norm_eps,
            rope,
            max_position_embeddings: cfg.max_position_embeddings,
            qkv_bias,
            hidden_act,
            norm_style: if gemma { NormStyle::OnePlusWeight } else { NormStyle::Plain },
            query_pre_attn_scalar: None,
            position_offset: usize::from(architecture == Architecture::PaliGemma),
        };
        decoder.validate().map_err(|e| err(e.to_string()))?;
        let vision = match architecture {
            Architecture::TesseraNative => Some(native_vision(json, cfg.hidden_size).map_err(err)?),
            a => match a.vlm_family() {
                Some(family) => Some(VisionSpec::Hf(hf_vision(json, family, path)?)),
                None => None,
            },
        };
        // A VLM states tying at its top level (falling back to its text model's).
        let tie =
            json.get("tie_word_embeddings").and_then(Value::as_bool).filter(|_| architecture.vlm_family().is_some());
        let eos = cfg
            .eos_token_id
            .or_else(|| json.get("eos_token_id").and_then(|v| serde_json::from_value::<TokenIds>(v.clone()).ok()));
        Ok(Self {
            vision,
            architecture,
            text_architecture,
            embed_scale: gemma.then(|| (cfg.hidden_size as f64).sqrt()),
            decoder,
            vocab_size: cfg.vocab_size,
            tie_word_embeddings: tie.or(cfg.tie_word_embeddings).unwrap_or(false),
            bos_token_id: cfg.bos_token_id.and_then(|b| b.to_vec().first().copied()),
            eos_token_ids: eos.map(|e| e.to_vec()).unwrap_or_default(),
            sliding_window,
        })
    }

    /// Converts GGUF metadata (llama.cpp's `{arch}.*` keys).
    pub fn from_gguf(content: &gguf_file::Content, path: &Path) -> Result<Self> {
        let md = &content.metadata;
        let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
        let arch_name = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or_else(|| err("GGUF metadata has no `general.architecture`".into()))?
            .clone();
        let architecture = match arch_name.as_str() {
            "llama" => Architecture::Llama,
            "qwen2" => Architecture::Qwen2,
            other => {
                return Err(TesseraError::UnsupportedArchitecture {
                    found: other.to_string(),
                    path: path.to_path_buf(),
                    supported: Architecture::SUPPORTED.to_string(),
                })
            }
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let get_u = |k: &str| -> Result<usize> {
            let full = key(k);
            let v = md.get(&full).ok_or_else(|| err(format!("GGUF metadata is missing `{full}`")))?;
            gguf_usize(v).ok_or_else(|| err(format!("GGUF metadata `{full}` is not an integer")))
        };
        let get_f = |k: &str| -> Option<f64> { md.get(&key(k)).and_then(gguf_f64) };
        let hidden = get_u("embedding_length")?;
        let heads = get_u("attention.head_count")?;
        let kv_heads = get_u("attention.head_count_kv").unwrap_or(heads);
        if heads == 0 {
            return Err(err(format!("`{}` must be positive", key("attention.head_count"))));
        }
        let head_dim = get_u("rope.dimension_count").unwrap_or(hidden / heads);
        let vocab_size = match md.get("tokenizer.ggml.tokens").map(|v| v.to_vec()) {
            Some(Ok(tokens)) => tokens.len(),
            _ => content
                .tensor_infos
                .get("token_embd.weight")
                .map(|t| t.shape.dims()[0])
                .ok_or_else(|| err("cannot tell the vocabulary size (no tokens, no token_embd)".into()))?,
        };
        let decoder = DecoderConfig {
            hidden_size: hidden,
            intermediate_size: get_u("feed_forward_length")?,
            num_hidden_layers: get_u("block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            rope: RopeConfig {
                theta: get_f("rope.freq_base").unwrap_or(10_000.0),
                scaling: RopeScaling::Default,
                // llama.cpp permutes Llama's q/k rows for interleaved rotation; Qwen2 is stored as is.
                style: match architecture {
                    Architecture::Llama | Architecture::Mistral => RopeStyle::Interleaved,
                    _ => RopeStyle::Half,
                },
            },
            max_position_embeddings: get_u("context_length")?,
            qkv_bias: content.tensor_infos.contains_key("blk.0.attn_q.bias"),
            hidden_act: Activation::Silu,
            norm_style: NormStyle::Plain,
            query_pre_attn_scalar: None,
            position_offset: 0,
        };
        decoder.validate().map_err(|e| err(e.to_string()))?;
        let id = |k: &str| md.get(k).and_then(gguf_usize).map(|v| v as u32);
        Ok(Self {
            architecture,
            text_architecture: architecture,
            embed_scale: None,
            decoder,
            vocab_size,
            tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
            bos_token_id: id("tokenizer.ggml.bos_token_id"),
            eos_token_ids: id("tokenizer.ggml.eos_token_id").into_iter().collect(),
            sliding_window: None,
            vision: None,
        })
    }
}

/// The image fields of a `tessera_native` config.json.
fn native_vision(json: &Value, hidden_size: usize) -> std::result::Result<VisionSpec, String> {
    let size = |k: &str| -> std::result::Result<usize, String> {
        json.get(k).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(|| format!("missing field `{k}`"))
    };
    let floats = |k: &str| -> std::result::Result<Vec<f32>, String> {
        let v = json.get(k).and_then(Value::as_array).ok_or_else(|| format!("missing field `{k}`"))?;
        v.iter().map(|x| x.as_f64().map(|f| f as f32).ok_or_else(|| format!("`{k}` must hold numbers"))).collect()
    };
    let resample = match json.get("resample") {
        None => 3,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(3) as u32,
        Some(Value::String(s)) => match s.as_str() {
            "nearest" => 0,
            "lanczos" => 1,
            "bilinear" => 2,
            "bicubic" => 3,
            other => return Err(format!("unknown `resample` value `{other}`")),
        },
        Some(_) => return Err("`resample` must be a name or a PIL code".into()),
    };
    Ok(VisionSpec::Native {
        encoder: NativeVisionConfig {
            image_size: size("image_size")?,
            patch_size: size("patch_size")?,
            num_channels: json.get("num_channels").and_then(Value::as_u64).unwrap_or(3) as usize,
            hidden_size,
        },
        image_mean: floats("image_mean")?,
        image_std: floats("image_std")?,
        resample,
    })
}

fn gguf_usize(v: &gguf_file::Value) -> Option<usize> {
    use gguf_file::Value as V;
    match v {
        V::U8(x) => Some(*x as usize),
        V::U16(x) => Some(*x as usize),
        V::U32(x) => Some(*x as usize),
        V::U64(x) => Some(*x as usize),
        V::I8(x) => usize::try_from(*x).ok(),
        V::I16(x) => usize::try_from(*x).ok(),
        V::I32(x) => usize::try_from(*x).ok(),
        V::I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}

fn gguf_f64(v: &gguf_file::Value) -> Option<f64> {
    use gguf_file::Value as V;
    match v {
        V::F32(x) => Some(*x as f64),
        V::F64(x) => Some(*x),
        _ => gguf_usize(v).map(|x| x as f64),
    }
}

/// RoPE settings from either config form. Errors name the offending field.
fn rope_from_hf(cfg: &HfTextConfig) -> std::result::Result<RopeConfig, String> {
    // transformers 5 nests everything in `rope_parameters`; older files use `rope_theta` and
    // an optional `rope_scaling` object.
    let (theta, params) = match &cfg.rope_parameters {
        Some(p) => {
            let theta = p.get("rope_theta").and_then(Value::as_f64).or(cfg.rope_theta);
            (theta, Some(p.clone()))
        }
        None => (cfg.rope_theta, cfg.rope_scaling.clone()),
    };
    let theta = theta.unwrap_or(10_000.0);
    let scaling = match params.as_ref().filter(|p| !p.is_null()) {
        None => RopeScaling::Default,
        Some(p) => {
            let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
            let num = |k: &str| -> std::result::Result<f64, String> {
                p.get(k).and_then(Value::as_f64).ok_or_else(|| format!("rope scaling `{kind}` needs `{k}`"))
            };
            match kind {
                "default" => RopeScaling::Default,
                "linear" => RopeScaling::Linear { factor: num("factor")? },
                "llama3" => RopeScaling::Llama3 {
                    factor: num("factor")?,
                    low_freq_factor: num("low_freq_factor")?,
                    high_freq_factor: num("high_freq_factor")?,
                    original_max_position_embeddings: num("original_max_position_embeddings")? as usize,
                },
                other => return Err(format!("unsupported rope_type `{other}` (supported: default, linear, llama3)")),
            }
        }
    };
    Ok(RopeConfig { theta, scaling, style: RopeStyle::Half })
}

/// `generation_config.json`: the checkpoint's sampling defaults and extra EOS ids.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GenerationConfig {
    pub do_sample: Option<bool>,
    pub temperature: Option<f64>,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub max_new_tokens: Option<usize>,
    pub bos_token_id: Option<TokenIds>,
    pub eos_token_id: Option<TokenIds>,
    #[serde(flatten)]
    pub other: HashMap<String, Value>,
}

impl GenerationConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        serde_json::from_value(crate::model::read_json(path)?)
            .map_err(|e| TesseraError::Config { path: path.to_path_buf(), reason: e.to_string() })
    }
}
