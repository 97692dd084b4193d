//! The model families, one module each: its `config.json` as a serde type (with transformers'
//! class defaults as `Option` fields filled in code), and what it resolves to — the decoder, the
//! prompt layout and mask rule, and for the vision-language families an [`ImageSpec`]: the
//! family's own image side (processor, tower, connector, prompt placement), which the generic
//! code asks through the [`ImageSide`] trait and never matches on. [`REGISTRY`] is the one place
//! that maps a `model_type` to a family.
//!
//! Adding a family: its module here (its config, and for a VLM its `ImageSpec` and `ImageSide`,
//! or a [`TowerSpec`] when it is a ViT + connector like the others), one line in [`REGISTRY`],
//! and its tests and fixtures. A new building block (a tower, a decoder block) goes once where
//! such blocks live (`tessera-vision`, `tessera-decoder`).

mod gemma3;
mod gemma4;
mod idefics3;
pub mod image;
mod internvl;
mod llava;
mod llava_mmproj;
mod minicpm_mmproj;
mod minicpmv4_6;
mod mistral3;
mod mistral3_mmproj;
pub mod mmproj;
mod native;
mod paligemma;
mod qwen2_vl;
mod qwen3_5;
mod qwen_vl_mmproj;
pub mod text;
pub mod tower;
pub mod vit;

use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::DecoderConfig;

use crate::error::{Result, TesseraError};
pub use gemma4::{Gemma4ProcessorRule, Gemma4Spec};
pub use image::{ImageFeatures, ImageLoad, ImageSide, ImageSpec, ProcessorSettings};
pub use internvl::InternVlSpec;
pub use minicpmv4_6::{MiniCpmProcessorRule, MiniCpmTowerConfig, MiniCpmV46Spec};
pub use mistral3::{Mistral3Spec, PixtralProcessorRule};
pub use native::NativeSpec;
pub use qwen2_vl::Qwen2VlSpec;
pub use text::{TextFamily, TextFields, TextModel};
pub use tower::{ConnectorConfig, ImageProcessor, Placeholder, ProcessorRule, TowerSpec, WeightRoots};

/// How one family's `config.json` resolves (errors are reasons; the caller names the file).
type Resolve = fn(&Value) -> std::result::Result<ModelConfig, String>;

/// Every family tessera reads, by the `model_type` its `config.json` names.
pub const REGISTRY: &[(&str, Resolve)] = &[
    ("llama", |j| text_model(TextFamily::Llama, j)),
    ("smollm", |j| text_model(TextFamily::Llama, j)),
    ("smollm2", |j| text_model(TextFamily::Llama, j)),
    ("mistral", |j| text_model(TextFamily::Mistral, j)),
    ("qwen2", |j| text_model(TextFamily::Qwen2, j)),
    ("qwen3", |j| text_model(TextFamily::Qwen3, j)),
    ("gemma", |j| text_model(TextFamily::Gemma, j)),
    ("gemma2", |j| text_model(TextFamily::Gemma2, j)),
    ("gemma3_text", |j| text_model(TextFamily::Gemma3, j)),
    // tessera's native single-stream image + text model (ARCHITECTURE.md).
    ("tessera_native", |j| parse::<native::NativeConfig>(j)?.resolve()),
    // Idefics3 / SmolVLM: SigLIP tiles, pixel shuffle, a Llama decoder.
    ("idefics3", |j| parse::<idefics3::Idefics3Config>(j)?.resolve()),
    // LLaVA: CLIP or SigLIP tower, two-layer projector, a Llama or Qwen2 decoder.
    ("llava", |j| parse::<llava::LlavaConfig>(j)?.resolve()),
    // PaliGemma: SigLIP tower, linear projector, Gemma decoder, prefix-LM mask.
    ("paligemma", |j| parse::<paligemma::PaliGemmaConfig>(j)?.resolve()),
    // Gemma 3: SigLIP tower, average pooling + norm + projection, images attending both ways.
    ("gemma3", |j| parse::<gemma3::Gemma3Config>(j)?.resolve()),
    // Qwen2-VL: its own ViT (2-D RoPE, patch merger), a Qwen2 decoder with M-RoPE.
    ("qwen2_vl", |j| parse::<qwen2_vl::Qwen2VlConfig>(j)?.resolve(qwen2_vl::Generation::Qwen2Vl)),
    // Qwen2.5-VL: RMSNorm + gated-MLP vision blocks and windowed attention.
    ("qwen2_5_vl", |j| parse::<qwen2_vl::Qwen2VlConfig>(j)?.resolve(qwen2_vl::Generation::Qwen25Vl)),
    // Qwen3-VL: learned vision positions, DeepStack, interleaved M-RoPE, a Qwen3 decoder.
    ("qwen3_vl", |j| parse::<qwen2_vl::Qwen2VlConfig>(j)?.resolve(qwen2_vl::Generation::Qwen3Vl)),
    // InternVL3: InternViT tiles (CLS, layer scale), pixel shuffle + LayerNorm/MLP, a Qwen2 decoder.
    ("internvl", |j| parse::<internvl::InternVlConfig>(j)?.resolve()),
    // Mistral 3: a Pixtral tower (native resolution, 2-D RoPE), patch merger + MLP, a Mistral decoder.
    ("mistral3", |j| parse::<mistral3::Mistral3Config>(j)?.resolve()),
    // Qwen3.5: Qwen3-VL's tower (no DeepStack), a hybrid Gated DeltaNet + gated-attention text model.
    ("qwen3_5", qwen3_5::resolve),
    // Gemma 4: its own tower (2-D RoPE, k×k pooling), a text model whose layers differ (PLE,
    // shared keys and values, two head sizes).
    ("gemma4", |j| parse::<gemma4::Gemma4Config>(j)?.resolve()),
    // MiniCPM-V 4.6: a SigLIP-style tower with a window-attention merger, sliced images, a
    // 2×2 merger MLP, Qwen3.5's hybrid text model.
    ("minicpmv4_6", |j| minicpmv4_6::MiniCpmV46Config::read(j)?.resolve()),
];

/// What `tessera` reads, for error messages: the registry's `model_type`s and the GGUF
/// architectures.
pub fn supported() -> String {
    let names: Vec<&str> = REGISTRY.iter().map(|(name, _)| *name).collect();
    format!(
        "{} (config.json model_type) / llama, qwen2, qwen2vl, qwen3vl, qwen35, gemma3, gemma4, mistral3 (GGUF)",
        names.join(", ")
    )
}

/// A text model's config.
fn text_model(family: TextFamily, json: &Value) -> std::result::Result<ModelConfig, String> {
    Ok(ModelConfig::text_only(family.name(), family.resolve(&parse::<TextFields>(json)?, false)?))
}

/// A family's config type from the JSON, errors naming the field where serde can tell.
fn parse<T: DeserializeOwned>(json: &Value) -> std::result::Result<T, String> {
    serde_json::from_value(json.clone()).map_err(|e| field_error(json, e))
}

/// Everything the assembly needs to build a model.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The checkpoint's `model_type`.
    pub family: &'static str,
    /// The decoder's family (a VLM's `text_config.model_type`).
    pub text_family: TextFamily,
    pub decoder: DecoderConfig,
    /// Token embeddings are multiplied by this (Gemma: √width), image features are not.
    pub embed_scale: Option<f64>,
    pub vocab_size: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Each decoder layer's sliding window (`None`: global attention).
    pub layer_windows: Vec<Option<usize>>,
    /// Logits become `cap · tanh(logits / cap)` (Gemma 2).
    pub final_logit_softcapping: Option<f64>,
    pub prompt: PromptStyle,
    /// The tokens of each image attend to each other both ways on the prompt's forward (Gemma 3).
    pub bidirectional_images: bool,
    /// With `bidirectional_images`, only in the sliding-window layers: the global layers stay
    /// causal (Gemma 4's `use_bidirectional_attention: "vision"`).
    pub bidirectional_in_sliding_layers_only: bool,
    /// The decoder takes per-layer inputs ([`tessera_decoder::PerLayerEmbedding`], Gemma 4's PLE).
    pub per_layer_inputs: Option<PerLayerInputs>,
    /// `(id, as)`: token `id` is embedded (and looked up in the per-layer table) as `as` (Gemma 4
    /// embeds its audio and video placeholders, wherever they appear, as the pad token).
    pub embed_as: Vec<(u32, u32)>,
    /// The family's image side, for models that take images.
    pub vision: Option<Arc<dyn ImageSpec>>,
}

/// The per-layer input table of a decoder that takes them: `vocab` rows of `dim` per layer;
/// image positions look up `pad_id`'s row (transformers' `llm_input_ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerLayerInputs {
    pub vocab: usize,
    pub dim: usize,
    pub pad_id: u32,
}

/// How a user turn becomes a prompt, and how the prompt attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptStyle {
    /// The model's chat template renders the turns; the sequence is causal (within the
    /// decoder's sliding window, if any).
    Chat,
    /// PaliGemma: no template; the processor writes `<image>…<bos>prompt\n`, and that prompt
    /// (image and text) attends both ways on its first forward, the generated text causally.
    PrefixLm,
}

/// Every size field of a config (at any depth: `text_config`, `vision_config`) within
/// [`size_limit`](tessera_decoder::decoder::size_limit), before anything is sized from it.
fn check_sizes(json: &Value, at: &str) -> std::result::Result<(), String> {
    let Some(object) = json.as_object() else { return Ok(()) };
    for (key, value) in object {
        let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
        if value.is_object() {
            check_sizes(value, &path)?;
        } else if let Some(max) = tessera_decoder::decoder::size_limit(key) {
            match value.as_f64() {
                Some(v) if v > max as f64 => {
                    return Err(format!("`{path}` is {value}, beyond the {max} tessera supports"))
                }
                Some(v) if v < 0.0 => return Err(format!("`{path}` is {value}, a size cannot be negative")),
                _ => {}
            }
        }
    }
    Ok(())
}

/// A config's deserialization error with the field it is about: serde loses the path inside
/// the `model_type`-tagged enum, so the text fields (top level, or `text_config`) are read
/// again on their own to find it.
fn field_error(json: &Value, e: serde_json::Error) -> String {
    for (prefix, part) in [("", Some(json)), ("text_config.", json.get("text_config"))] {
        if let Some(Err(found)) = part.map(|p| serde_path_to_error::deserialize::<_, text::TextFields>(p.clone())) {
            if found.path().iter().next().is_some() {
                return format!("`{prefix}{}`: {}", found.path(), found.inner());
            }
        }
    }
    e.to_string()
}

impl ModelConfig {
    /// Reads and converts `config.json`.
    pub fn from_config_file(path: &Path) -> Result<Self> {
        Self::from_config_json(&crate::model::read_json(path)?, path)
    }

    /// Converts a parsed `config.json`; `path` is used in error messages.
    pub fn from_config_json(json: &Value, path: &Path) -> Result<Self> {
        check_sizes(json, "").map_err(|reason| TesseraError::Config { path: path.to_path_buf(), reason })?;
        let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
        let model_type = match json.get("model_type") {
            Some(Value::String(name)) => name.as_str(),
            Some(other) => return Err(err(format!("`model_type` must be a string, not {other}"))),
            None if json.is_object() => return Err(err("missing field `model_type`".into())),
            None => return Err(err(format!("a config must be a JSON object, not {json}"))),
        };
        let Some((_, resolve)) = REGISTRY.iter().find(|(name, _)| *name == model_type) else {
            return Err(TesseraError::UnsupportedArchitecture {
                found: model_type.to_string(),
                path: path.to_path_buf(),
                supported: supported(),
            });
        };
        let cfg = resolve(json).map_err(err)?;
        if cfg.vocab_size == 0 {
            return Err(TesseraError::Config {
                path: path.to_path_buf(),
                reason: "`vocab_size` must be positive".into(),
            });
        }
        cfg.decoder.validate().map_err(|e| TesseraError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
        Ok(cfg)
    }

    /// The family's image spec as its own type (`TowerSpec`, `Qwen2VlSpec`, `NativeSpec`),
    /// for inspection; `None` for text models and other families.
    pub fn vision_spec<T: ImageSpec>(&self) -> Option<&T> {
        let spec: &dyn std::any::Any = self.vision.as_deref()?;
        spec.downcast_ref()
    }

    /// A decoder-only text model.
    pub(crate) fn text_only(family: &'static str, t: TextModel) -> Self {
        Self {
            family,
            text_family: t.family,
            decoder: t.decoder,
            embed_scale: t.embed_scale,
            vocab_size: t.vocab_size,
            tie_word_embeddings: t.tie_word_embeddings,
            bos_token_id: t.bos_token_id,
            eos_token_ids: t.eos_token_ids,
            layer_windows: t.layer_windows,
            final_logit_softcapping: t.final_logit_softcapping,
            prompt: PromptStyle::Chat,
            bidirectional_images: false,
            bidirectional_in_sliding_layers_only: false,
            per_layer_inputs: None,
            embed_as: Vec::new(),
            vision: None,
        }
    }

    /// A vision-language model: text side `t` under the VLM's top-level tying and EOS, when it
    /// states them.
    fn vlm(
        family: &'static str,
        t: TextModel,
        tie: Option<bool>,
        eos: Option<&TokenIds>,
        prompt: PromptStyle,
        vision: impl ImageSpec,
    ) -> Self {
        let mut cfg = Self::text_only(family, t);
        if let Some(tie) = tie {
            cfg.tie_word_embeddings = tie;
        }
        // The composite's own eos_token_id, where the file states one, over the text class's default.
        if let Some(eos) = eos {
            cfg.eos_token_ids = eos.to_vec();
        }
        cfg.prompt = prompt;
        cfg.vision = Some(Arc::new(vision));
        cfg
    }
}

/// A VLM's `text_config`, under `default` when it names no `model_type` (transformers gives a
/// sub-config dict its own class's defaults, nothing from the composite).
fn text_config(sub: &Option<text::TextSubConfig>, default: TextFamily) -> std::result::Result<TextModel, String> {
    let sub = sub.clone().unwrap_or_default();
    sub.model_type.unwrap_or(default).resolve(&sub.fields, true).map_err(|e| format!("text_config: {e}"))
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tessera_decoder::Activation;
    use tessera_vision::FeatureLayer;

    use super::*;

    fn resolve(json: Value) -> Result<ModelConfig> {
        ModelConfig::from_config_json(&json, Path::new("config.json"))
    }

    fn tiny_text(model_type: &str) -> Value {
        json!({
            "model_type": model_type, "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256
        })
    }

    #[test]
    fn each_text_family_applies_its_rules() -> Result<()> {
        let llama = resolve(tiny_text("llama"))?;
        assert_eq!((llama.family, llama.decoder.qkv_bias, llama.embed_scale), ("llama", false, None));
        let qwen = resolve(tiny_text("qwen2"))?;
        assert!(qwen.decoder.qkv_bias, "Qwen2 always has q/k/v biases");
        let mut sliding = tiny_text("qwen2");
        sliding["sliding_window"] = 16.into();
        assert_eq!(resolve(sliding.clone())?.layer_windows, [None, None], "Qwen2 needs use_sliding_window");
        sliding["use_sliding_window"] = true.into();
        assert_eq!(resolve(sliding)?.layer_windows, [Some(16), Some(16)]);
        let mut mistral = tiny_text("mistral");
        mistral["sliding_window"] = 16.into();
        assert_eq!(resolve(mistral)?.layer_windows, [Some(16), Some(16)]);
        let gemma = resolve(tiny_text("gemma"))?;
        assert_eq!((gemma.decoder.hidden_act, gemma.embed_scale), (Activation::GeluTanh, Some(8.0)));
        assert!(!gemma.decoder.sandwich_norms && gemma.final_logit_softcapping.is_none());
        // Gemma 2: the class's soft-caps, window and scalar; sliding layers first, alternating.
        let mut g2 = tiny_text("gemma2");
        g2["num_hidden_layers"] = 3.into();
        let gemma2 = resolve(g2.clone())?;
        assert_eq!(gemma2.layer_windows, [Some(4096), None, Some(4096)]);
        assert_eq!((gemma2.decoder.attn_logit_softcapping, gemma2.final_logit_softcapping), (Some(50.0), Some(30.0)));
        assert_eq!((gemma2.decoder.query_pre_attn_scalar, gemma2.decoder.sandwich_norms), (Some(256.0), true));
        // `null` turns a cap or the window off; layer_types overrides the pattern.
        g2["final_logit_softcapping"] = Value::Null;
        g2["sliding_window"] = 8.into();
        g2["layer_types"] = json!(["full_attention", "sliding_attention", "sliding_attention"]);
        let gemma2 = resolve(g2.clone())?;
        assert_eq!(
            (gemma2.final_logit_softcapping, gemma2.layer_windows.clone()),
            (None, vec![None, Some(8), Some(8)])
        );
        g2["sliding_window"] = Value::Null;
        assert_eq!(resolve(g2)?.layer_windows, [None, None, None]);
        Ok(())
    }

    #[test]
    fn a_top_level_text_config_needs_its_sizes() {
        let mut c = tiny_text("llama");
        c.as_object_mut().map(|o| o.remove("intermediate_size"));
        let err = resolve(c).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("intermediate_size") && err.contains("config.json"), "{err}");
    }

    #[test]
    fn null_fields_take_the_class_defaults_in_a_sub_config() -> Result<()> {
        let cfg = resolve(json!({
            "model_type": "llava",
            "text_config": {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": null,
                            "num_hidden_layers": 1, "num_attention_heads": 4},
            "vision_config": {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2, "image_size": 28,
                              "patch_size": 14, "intermediate_size": 64},
            "image_token_index": null
        }))?;
        assert_eq!((cfg.decoder.intermediate_size, cfg.decoder.max_position_embeddings), (11008, 2048));
        let Some(v) = cfg.vision_spec::<TowerSpec>() else { panic!("a LLaVA has a tower") };
        // CLIP by default: 2×2 patches + CLS, CLS dropped; −2 of 2 layers → hidden_states[1].
        assert_eq!(
            (v.image_token_id, v.feature, &v.processor),
            (
                32000,
                FeatureLayer::Hidden(1),
                &ProcessorRule::Single { tokens: 4, stated_len: None, pan_and_scan: false }
            )
        );
        Ok(())
    }

    #[test]
    fn unknown_or_unsupported_values_are_named() {
        let err = |json: Value| resolve(json).err().map(|e| e.to_string()).unwrap_or_default();
        let e = err(tiny_text("mamba"));
        assert!(e.contains("`mamba`") && e.contains("supported"), "{e}");
        let e = err(json!({"model_type": "llava", "text_config": {"model_type": "mamba"}}));
        assert!(e.contains("mamba") && e.contains("llama"), "{e}");
        let e = err(json!({"model_type": "llava", "vision_feature_layer": [-2, -5]}));
        assert!(e.contains("vision_feature_layer") && e.contains("[-2, -5]"), "{e}");
        let mut rope = tiny_text("llama");
        rope["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0});
        let e = err(rope);
        assert!(e.contains("yarn") && e.contains("llama3"), "{e}");
        let e = err(json!({"model_type": "paligemma", "projection_dim": 5}));
        assert!(e.contains("projection_dim 5"), "{e}");
    }
}
