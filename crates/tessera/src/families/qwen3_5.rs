//! Qwen3.5 (transformers 5.23 `qwen3_5`): Qwen3-VL's vision tower without DeepStack (16-px
//! patches, learned interpolated positions, 2-D RoPE, a 2×2 merger) and the same processor,
//! prompt layout and interleaved M-RoPE positions — so its image side is [`Qwen2VlSpec`], read
//! by `qwen2_vl`'s config with [`Generation::Qwen35`] — and a hybrid text model that this module
//! adds to the decoder:
//!
//! - `layer_types`: Gated DeltaNet layers (`linear_attention`, sizes `linear_*`) between
//!   attention layers (`full_attention`), 3 : 1 by default (`full_attention_interval` 4);
//! - the attention layers' sigmoid output gate (q_proj gives each head its queries and a gate),
//!   q/k norms, and RoPE over the first `partial_rotary_factor` (0.25) of each head;
//! - every RMSNorm scales by `1 + w`, except the DeltaNet's gated norm (plain `w`).
//!
//! Real checkpoints also hold multi-token-prediction layers (`mtp.*`, `mtp_num_hidden_layers`):
//! tessera does not run them and leaves their tensors unread. A model with linear layers keeps
//! no prefix cache (a recurrent state cannot be cut to a shorter prefix; `engine/caches.rs`).

use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{DecoderConfig, GatedDeltaConfig, LinearLayers, NormStyle};

use super::qwen2_vl::{Generation, Qwen2VlConfig};
use super::{parse, ModelConfig};

/// `Qwen3_5TextConfig`'s fields beyond the ones every text model has (`null` counts as absent).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HybridFields {
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_conv_kernel_dim: Option<usize>,
    layer_types: Option<Vec<String>>,
    full_attention_interval: Option<usize>,
    partial_rotary_factor: Option<f64>,
    rope_parameters: Option<RotaryFields>,
    attn_output_gate: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RotaryFields {
    partial_rotary_factor: Option<f64>,
}

/// A `qwen3_5` `config.json`.
pub(super) fn resolve(json: &Value) -> Result<ModelConfig, String> {
    let mut cfg = parse::<Qwen2VlConfig>(json)?.resolve(Generation::Qwen35)?;
    hybrid_text(json.get("text_config"), &mut cfg.decoder)?;
    Ok(cfg)
}

/// Makes `d`, resolved from a `qwen3_5_text` `text_config` (`text`), Qwen3.5's hybrid text model
/// (also MiniCPM-V 4.6's); errors name `text_config`.
pub(super) fn hybrid_text(text: Option<&Value>, d: &mut DecoderConfig) -> Result<(), String> {
    let fields: HybridFields = match text {
        Some(text) if !text.is_null() => parse(text).map_err(|e| format!("text_config: {e}"))?,
        _ => HybridFields::default(),
    };
    hybrid(&fields, d).map_err(|e| format!("text_config: {e}"))
}

/// Makes the Qwen3-style decoder `d` Qwen3.5's: its linear layers, gate, partial rotary, norms.
fn hybrid(f: &HybridFields, d: &mut DecoderConfig) -> Result<(), String> {
    if f.attn_output_gate == Some(false) {
        return Err("`attn_output_gate` is false: transformers' Qwen3.5 attention always gates its output".into());
    }
    let n = d.num_hidden_layers;
    let layers = match &f.layer_types {
        Some(types) if types.len() != n => {
            return Err(format!("`layer_types` has {} entries for {n} layers", types.len()));
        }
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "linear_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(format!("`layer_types` names `{other}`: Qwen3.5 has linear_attention and full_attention")),
            })
            .collect::<Result<Vec<bool>, String>>()?,
        None => {
            let every = f.full_attention_interval.unwrap_or(4);
            if every == 0 {
                return Err("`full_attention_interval` must be positive".into());
            }
            (0..n).map(|i| (i + 1) % every != 0).collect()
        }
    };
    let factor = f.rope_parameters.as_ref().and_then(|r| r.partial_rotary_factor).or(f.partial_rotary_factor);
    let factor = factor.unwrap_or(0.25);
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(format!("`partial_rotary_factor` must be in (0, 1], got {factor}"));
    }
    // transformers: int(head_dim * factor).
    d.rotary_dim = Some((d.head_dim as f64 * factor) as usize);
    d.attn_output_gate = true;
    d.norm_style = NormStyle::OnePlusWeight;
    let delta = GatedDeltaConfig {
        hidden_size: d.hidden_size,
        key_heads: f.linear_num_key_heads.unwrap_or(16),
        value_heads: f.linear_num_value_heads.unwrap_or(32),
        key_head_dim: f.linear_key_head_dim.unwrap_or(128),
        value_head_dim: f.linear_value_head_dim.unwrap_or(128),
        conv_kernel: f.linear_conv_kernel_dim.unwrap_or(4),
        eps: d.rms_norm_eps,
    };
    d.linear = Some(LinearLayers { delta, layers });
    Ok(())
}
