//! The `config.json` of Hugging Face vision-language checkpoints (Idefics3 / SmolVLM, LLaVA,
//! PaliGemma): a `text_config` and a `vision_config` nested in the top-level object, each
//! written by transformers without the fields that equal their class defaults. The defaults
//! below are those of transformers v5.23's config classes (`LlamaConfig`, `Qwen2Config`,
//! `MistralConfig`, `GemmaConfig`, `SiglipVisionConfig`, `CLIPVisionConfig`,
//! `Idefics3VisionConfig`), applied as transformers applies them: a sub-config given as a dict
//! takes its own class's defaults, nothing from the composite.

use std::path::Path;

use serde_json::{json, Value};
use tessera_decoder::Activation;
use tessera_vision::{TowerKind, VisionTowerConfig};

use crate::error::{Result, TesseraError};

/// The defaults of a sub-config class, by `model_type`.
pub fn class_defaults(model_type: &str) -> Option<Value> {
    Some(match model_type {
        "llama" => json!({
            "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "tie_word_embeddings": false, "rope_theta": 10000.0,
            "bos_token_id": 1, "eos_token_id": 2
        }),
        "mistral" => json!({
            "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false, "sliding_window": 4096,
            "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2
        }),
        "qwen2" => json!({
            "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false,
            "use_sliding_window": false, "rope_theta": 10000.0
        }),
        "gemma" => json!({
            "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
            "tie_word_embeddings": true, "rope_theta": 10000.0, "bos_token_id": 2, "eos_token_id": 1
        }),
        "siglip_vision_model" => json!({
            "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
            "hidden_act": "gelu_pytorch_tanh", "image_size": 224, "patch_size": 16, "layer_norm_eps": 1e-6,
            "num_channels": 3
        }),
        "clip_vision_model" => json!({
            "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
            "hidden_act": "quick_gelu", "image_size": 224, "patch_size": 32, "layer_norm_eps": 1e-5,
            "num_channels": 3
        }),
        "idefics3_vision" => json!({
            "hidden_size": 1152, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 16,
            "hidden_act": "gelu_pytorch_tanh", "image_size": 224, "patch_size": 32, "layer_norm_eps": 1e-6,
            "num_channels": 3
        }),
        _ => return None,
    })
}

/// `sub` with every field it lacks taken from `defaults` (`null` counts as absent).
pub fn with_defaults(sub: &Value, defaults: Value) -> Value {
    let mut out = defaults;
    if let (Some(o), Some(s)) = (out.as_object_mut(), sub.as_object()) {
        for (k, v) in s {
            if !v.is_null() || !o.contains_key(k) {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// The vision-language families and the fields their top level carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlmFamily {
    Idefics3,
    Llava,
    PaliGemma,
}

impl VlmFamily {
    /// The text model a family's `text_config` defaults to when it names none.
    pub fn default_text_type(&self) -> &'static str {
        match self {
            Self::Idefics3 | Self::Llava => "llama",
            Self::PaliGemma => "gemma",
        }
    }

    /// The vision config class a family uses when `vision_config.model_type` is absent (Idefics3
    /// always uses its own class, whatever the dict says).
    fn vision_type<'a>(&self, sub: &'a Value) -> &'a str {
        match self {
            Self::Idefics3 => "idefics3_vision",
            Self::Llava => sub.get("model_type").and_then(Value::as_str).unwrap_or("clip_vision_model"),
            Self::PaliGemma => sub.get("model_type").and_then(Value::as_str).unwrap_or("siglip_vision_model"),
        }
    }
}

/// What a checkpoint's `vision_config` and top-level fields say about its image side.
#[derive(Debug, Clone, PartialEq)]
pub struct HfVisionConfig {
    pub family: VlmFamily,
    pub tower: VisionTowerConfig,
    /// The placeholder id the processor expands and the model replaces with image features.
    pub image_token_id: u32,
    pub connector: ConnectorConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ConnectorConfig {
    /// Idefics3: pixel shuffle by `scale_factor`, then `modality_projection.proj`.
    PixelShuffle { scale_factor: usize },
    /// LLaVA: `vision_feature_layer` (negative counts from the end of `hidden_states`), the
    /// select strategy (`default` drops CLIP's class token), the projector's activation and bias.
    LlavaMlp { feature_layer: i64, drop_class_token: bool, act: Activation, bias: bool },
    /// PaliGemma: one linear layer to `projection_dim`.
    Linear { projection_dim: usize },
}

fn field_err(path: &Path, reason: String) -> TesseraError {
    TesseraError::Config { path: path.to_path_buf(), reason }
}

/// Parses the image side of a VLM `config.json`.
pub fn hf_vision(json: &Value, family: VlmFamily, path: &Path) -> Result<HfVisionConfig> {
    let err = |r: String| field_err(path, r);
    let sub = json.get("vision_config").cloned().unwrap_or_else(|| json!({}));
    let vtype = family.vision_type(&sub);
    let defaults = class_defaults(vtype).ok_or_else(|| {
        err(format!(
            "unsupported vision_config.model_type `{vtype}` (supported: siglip_vision_model, clip_vision_model)"
        ))
    })?;
    let v = with_defaults(&sub, defaults);
    let num = |k: &str| -> Result<usize> {
        v.get(k)
            .and_then(Value::as_u64)
            .map(|x| x as usize)
            .ok_or_else(|| err(format!("vision_config.{k} must be a non-negative integer")))
    };
    let hidden_act: Activation =
        serde_json::from_value(v["hidden_act"].clone()).map_err(|e| err(format!("vision_config.hidden_act: {e}")))?;
    let tower = VisionTowerConfig {
        kind: if vtype == "clip_vision_model" { TowerKind::Clip } else { TowerKind::Siglip },
        hidden_size: num("hidden_size")?,
        intermediate_size: num("intermediate_size")?,
        num_hidden_layers: num("num_hidden_layers")?,
        num_attention_heads: num("num_attention_heads")?,
        num_channels: num("num_channels")?,
        image_size: num("image_size")?,
        patch_size: num("patch_size")?,
        layer_norm_eps: v["layer_norm_eps"]
            .as_f64()
            .ok_or_else(|| err("vision_config.layer_norm_eps must be a number".into()))?,
        hidden_act,
    };
    tower.validate().map_err(|e| err(e.to_string()))?;
    let top_u = |keys: &[&str], default: u64| -> Result<u64> {
        for k in keys {
            if let Some(v) = json.get(*k).filter(|v| !v.is_null()) {
                return v.as_u64().ok_or_else(|| err(format!("`{k}` must be a non-negative integer")));
            }
        }
        Ok(default)
    };
    let (image_token_id, connector) = match family {
        VlmFamily::Idefics3 => (
            top_u(&["image_token_id"], 128257)?,
            ConnectorConfig::PixelShuffle { scale_factor: top_u(&["scale_factor"], 2)? as usize },
        ),
        VlmFamily::Llava => {
            let feature_layer = match json.get("vision_feature_layer") {
                None | Some(Value::Null) => -2,
                Some(v) => v.as_i64().ok_or_else(|| {
                    err("vision_feature_layer must be one integer (lists of layers are not supported)".into())
                })?,
            };
            let strategy = json.get("vision_feature_select_strategy").and_then(Value::as_str).unwrap_or("default");
            let drop_class_token = match strategy {
                "default" => true,
                "full" => false,
                other => return Err(err(format!("unknown vision_feature_select_strategy `{other}` (default, full)"))),
            };
            let act_name = json.get("projector_hidden_act").cloned().unwrap_or_else(|| json!("gelu"));
            let act: Activation =
                serde_json::from_value(act_name).map_err(|e| err(format!("projector_hidden_act: {e}")))?;
            let bias = json.get("multimodal_projector_bias").and_then(Value::as_bool).unwrap_or(true);
            (
                top_u(&["image_token_index", "image_token_id"], 32000)?,
                ConnectorConfig::LlavaMlp { feature_layer, drop_class_token, act, bias },
            )
        }
        VlmFamily::PaliGemma => (
            top_u(&["image_token_index", "image_token_id"], 256000)?,
            ConnectorConfig::Linear { projection_dim: top_u(&["projection_dim"], 2048)? as usize },
        ),
    };
    Ok(HfVisionConfig { family, tower, image_token_id: image_token_id as u32, connector })
}
