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
//! its prompts' starts in the prefix cache only whole (a recurrent state cannot be cut to a
//! shorter prefix; `engine/caches.rs`).
//!
//! llama.cpp's `qwen35` text GGUF is read by [`gguf_keys`] (its `ssm.*` keys, in llama.cpp's
//! weight layout); its mmproj is Qwen3-VL's `qwen3vl_merger` (`qwen2_vl::from_mmproj`).

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{DecoderConfig, DeltaLayout, GatedDeltaConfig, LinearLayers, NormStyle};

use super::qwen2_vl::{Generation, Qwen2VlConfig};
use super::text::{GgufTextWriter, TensorChange};
use super::{parse, ModelConfig};
use crate::config::gguf_usize;
use tessera_decoder::gguf_write::MetaValue;

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
    let delta = GatedDeltaConfig {
        hidden_size: d.hidden_size,
        key_heads: f.linear_num_key_heads.unwrap_or(16),
        value_heads: f.linear_num_value_heads.unwrap_or(32),
        key_head_dim: f.linear_key_head_dim.unwrap_or(128),
        value_head_dim: f.linear_value_head_dim.unwrap_or(128),
        conv_kernel: f.linear_conv_kernel_dim.unwrap_or(4),
        eps: d.rms_norm_eps,
        layout: DeltaLayout::Checkpoint,
    };
    // transformers: int(head_dim * factor).
    let rotary_dim = (d.head_dim as f64 * factor) as usize;
    apply(d, LinearLayers { delta, layers }, rotary_dim);
    Ok(())
}

/// Makes `d` Qwen3.5's text model with these linear layers and rotary width: the output gate,
/// and `1 + w` norms where the checkpoint stores `w` (llama.cpp's converter stores `1 + w`).
fn apply(d: &mut DecoderConfig, linear: LinearLayers, rotary_dim: usize) {
    d.rotary_dim = Some(rotary_dim);
    d.attn_output_gate = true;
    if linear.delta.layout == DeltaLayout::Checkpoint {
        d.norm_style = NormStyle::OnePlusWeight;
    }
    d.linear = Some(linear);
}

/// llama.cpp's `qwen35` GGUF keys (`conversion/qwen.py`'s `Qwen3NextModel.set_gguf_parameters`,
/// llama.cpp 0c1e57098) for the decoder `d` read from the common ones: `ssm.conv_kernel`,
/// `ssm.state_size` (the key heads' width), `ssm.group_count` (key heads),
/// `ssm.time_step_rank` (value heads), `ssm.inner_size` (value heads × their width),
/// `attention.recurrent_layers` (one flag per layer; else every `full_attention_interval`-th
/// layer is full attention) and `rope.dimension_count` (the rotary width). The weights are in
/// [`DeltaLayout::LlamaCpp`], every norm but the DeltaNet's stored as `1 + w`. Serves any
/// `qwen35` text model (MiniCPM-V 4.6's too).
pub(crate) fn gguf_keys(
    md: &HashMap<String, gguf_file::Value>,
    arch: &str,
    d: &mut DecoderConfig,
) -> Result<(), String> {
    let key = |k: &str| format!("{arch}.{k}");
    let get = |k: &str| -> Result<Option<usize>, String> {
        md.get(&key(k)).map(|v| gguf_usize(v).ok_or_else(|| format!("`{}` is not an integer", key(k)))).transpose()
    };
    let need = |k: &str| get(k)?.ok_or_else(|| format!("GGUF metadata is missing `{}`", key(k)));
    let (key_heads, value_heads) = (need("ssm.group_count")?, need("ssm.time_step_rank")?);
    let inner = need("ssm.inner_size")?;
    if key_heads == 0
        || value_heads == 0
        || !value_heads.is_multiple_of(key_heads)
        || !inner.is_multiple_of(value_heads)
    {
        return Err(format!(
            "`{}` {value_heads} must be a positive multiple of `{}` {key_heads}, and `{}` {inner} of it",
            key("ssm.time_step_rank"),
            key("ssm.group_count"),
            key("ssm.inner_size")
        ));
    }
    let n = d.num_hidden_layers;
    let layers = match md.get(&key("attention.recurrent_layers")) {
        Some(v) => {
            let bad = || format!("`{}` is not a list of booleans", key("attention.recurrent_layers"));
            let flags = v.to_vec().map_err(|_| bad())?;
            let flags = flags.iter().map(|f| f.to_bool().map_err(|_| bad())).collect::<Result<Vec<bool>, _>>()?;
            if flags.len() != n {
                return Err(format!(
                    "`{}` has {} flags for {n} layers",
                    key("attention.recurrent_layers"),
                    flags.len()
                ));
            }
            flags
        }
        None => match get("full_attention_interval")?.unwrap_or(4) {
            0 => return Err(format!("`{}` must be positive", key("full_attention_interval"))),
            every => (0..n).map(|i| (i + 1) % every != 0).collect(),
        },
    };
    let delta = GatedDeltaConfig {
        hidden_size: d.hidden_size,
        key_heads,
        value_heads,
        key_head_dim: need("ssm.state_size")?,
        value_head_dim: inner / value_heads,
        conv_kernel: need("ssm.conv_kernel")?,
        eps: d.rms_norm_eps,
        layout: DeltaLayout::LlamaCpp,
    };
    apply(d, LinearLayers { delta, layers }, need("rope.dimension_count")?);
    Ok(())
}

/// How `conversion/qwen.py` writes Qwen3.5's text model (`tessera quantize`).
pub(crate) const GGUF_WRITER: GgufTextWriter = GgufTextWriter {
    keys: gguf_write_keys,
    tensor: gguf_tensor,
    layout: None,
    generated: super::text::no_generated,
    hf_vocab: None,
};

/// `Qwen3NextModel.set_gguf_parameters`' keys after the head widths, in its order ([`gguf_keys`]
/// reads them back), and the M-RoPE sections where the common keys have none; `full_attention_interval` is the layers' period (the first attention layer's
/// position), which `attention.recurrent_layers` makes redundant for llama.cpp.
fn gguf_write_keys(d: &DecoderConfig, arch: &str) -> Result<Vec<(String, MetaValue)>, String> {
    let linear = d.linear.as_ref().ok_or("the decoder has no linear-attention layers")?;
    let c = &linear.delta;
    let u = super::image::gguf_u32;
    let interval = linear.layers.iter().position(|recurrent| !recurrent).map_or(4, |i| i + 1);
    let rotary = d.rotary_dim.unwrap_or(d.head_dim);
    let mut md = vec![
        (format!("{arch}.ssm.conv_kernel"), u(c.conv_kernel)?),
        (format!("{arch}.ssm.state_size"), u(c.key_head_dim)?),
        (format!("{arch}.ssm.group_count"), u(c.key_heads)?),
        (format!("{arch}.ssm.time_step_rank"), u(c.value_heads)?),
        (format!("{arch}.ssm.inner_size"), u(c.value_heads * c.value_head_dim)?),
        (format!("{arch}.attention.recurrent_layers"), MetaValue::Bools(linear.layers.clone())),
        (format!("{arch}.full_attention_interval"), u(interval)?),
        (format!("{arch}.rope.dimension_count"), u(rotary)?),
    ];
    if d.rope.mrope.is_none() {
        // `_Qwen35MRopeMixin`: the default sections where the config states none (MiniCPM-V
        // 4.6's text model, which runs plain positions).
        md.push((format!("{arch}.rope.dimension_sections"), MetaValue::I32s(vec![11, 11, 10, 0])));
    }
    Ok(md)
}

/// What the converter does to the checkpoint tensor `hf` (`Qwen3NextModel.modify_tensors` and
/// `_LinearAttentionVReorderBase`): every RMSNorm but the DeltaNet's gated one stored as `1 + w`,
/// `A_log` as `A = −exp(A_log)`, the conv kernel squeezed to `(channels, kernel)`, and where value
/// heads outnumber key heads every per-value-head row or column tiled over the key heads
/// ([`DeltaLayout::LlamaCpp`]).
fn gguf_tensor(d: &DecoderConfig, hf: &str, dims: &[usize]) -> Option<TensorChange> {
    let change =
        |dims: Vec<usize>, f: Arc<dyn Fn(Vec<f32>) -> Vec<f32> + Send + Sync>| TensorChange { dims, values: f };
    if hf.ends_with("norm.weight") && !hf.ends_with("linear_attn.norm.weight") {
        return Some(change(dims.to_vec(), Arc::new(|x| x.into_iter().map(|v| v + 1.0).collect())));
    }
    let c = &d.linear.as_ref()?.delta;
    let (k, per) = (c.key_heads, c.value_heads / c.key_heads.max(1));
    // Rows (or columns) `start..` of `len` in heads of `width`, as `(key head, its value heads)`,
    // retiled as `(value head, key head)` — the converter's `_reorder_v_heads`.
    let tile = move |outer: usize, len: usize, inner: usize, start: usize, width: usize| {
        move |x: Vec<f32>| {
            let mut out = x.clone();
            for o in 0..outer {
                for (j, key) in (0..per).flat_map(|j| (0..k).map(move |key| (j, key))) {
                    let (to, from) = (start + (j * k + key) * width, start + (key * per + j) * width);
                    let (to, from) = ((o * len + to) * inner, (o * len + from) * inner);
                    out[to..to + width * inner].copy_from_slice(&x[from..from + width * inner]);
                }
            }
            out
        }
    };
    let module = hf.strip_suffix(".weight").unwrap_or(hf);
    let kd = c.key_heads * c.key_head_dim;
    let (rows, cols) = (dims.first().copied().unwrap_or(0), dims[1..].iter().product::<usize>());
    let f: Arc<dyn Fn(Vec<f32>) -> Vec<f32> + Send + Sync> = match module.rsplit_once("linear_attn.")?.1 {
        "A_log" => {
            let t = tile(1, rows, 1, 0, 1);
            Arc::new(move |x: Vec<f32>| t(x.into_iter().map(|a| -a.exp()).collect()))
        }
        "dt_bias" | "in_proj_a" | "in_proj_b" => Arc::new(tile(1, rows, cols, 0, 1)),
        "in_proj_z" => Arc::new(tile(1, rows, cols, 0, c.value_head_dim)),
        "in_proj_qkv" => Arc::new(tile(1, rows, cols, 2 * kd, c.value_head_dim)),
        "conv1d" => {
            let kernel = *dims.last()?;
            return Some(change(vec![rows, kernel], Arc::new(tile(1, rows, kernel, 2 * kd, c.value_head_dim))));
        }
        "out_proj" => Arc::new(tile(rows, cols, 1, 0, c.value_head_dim)),
        _ => return None,
    };
    Some(change(dims.to_vec(), f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf_file::Value as V;

    fn decoder(layers: usize) -> DecoderConfig {
        let json = serde_json::json!({"model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": layers,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
            "vocab_size": 100});
        let sub: super::super::text::TextSubConfig = serde_json::from_value(json).expect("a text config");
        super::super::text_config(&Some(sub), super::super::TextFamily::Qwen35).expect("resolved").decoder
    }

    fn keys(extra: &[(&str, V)]) -> HashMap<String, V> {
        let mut md: HashMap<String, V> = [
            ("ssm.conv_kernel", V::U32(4)),
            ("ssm.state_size", V::U32(16)),
            ("ssm.group_count", V::U32(2)),
            ("ssm.time_step_rank", V::U32(4)),
            ("ssm.inner_size", V::U32(64)),
            ("rope.dimension_count", V::U32(8)),
        ]
        .into_iter()
        .map(|(k, v)| (format!("qwen35.{k}"), v))
        .collect();
        md.extend(extra.iter().map(|(k, v)| (format!("qwen35.{k}"), v.clone())));
        md
    }

    #[test]
    fn qwen35_keys_give_the_linear_layers_in_llama_cpps_layout() {
        let mut d = decoder(8);
        gguf_keys(&keys(&[("full_attention_interval", V::U32(4))]), "qwen35", &mut d).expect("keys");
        let linear = d.linear.expect("linear layers");
        assert_eq!(linear.layers, [true, true, true, false, true, true, true, false]);
        let c = &linear.delta;
        assert_eq!((c.key_heads, c.value_heads, c.key_head_dim, c.value_head_dim, c.conv_kernel), (2, 4, 16, 16, 4));
        assert_eq!((c.layout, d.rotary_dim, d.norm_style), (DeltaLayout::LlamaCpp, Some(8), NormStyle::Plain));
    }

    #[test]
    fn bad_qwen35_keys_are_named() {
        let flags = V::Array(vec![V::Bool(true), V::Bool(false)]);
        for (md, named) in [
            (keys(&[("attention.recurrent_layers", flags)]), "`qwen35.attention.recurrent_layers` has 2 flags for 4"),
            (keys(&[("ssm.time_step_rank", V::U32(3))]), "`qwen35.ssm.time_step_rank` 3"),
            (keys(&[("full_attention_interval", V::U32(0))]), "`qwen35.full_attention_interval` must be positive"),
        ] {
            let err = gguf_keys(&md, "qwen35", &mut decoder(4)).expect_err("refused");
            assert!(err.contains(named), "{err}");
        }
        let mut md = keys(&[]);
        md.remove("qwen35.ssm.state_size");
        let err = gguf_keys(&md, "qwen35", &mut decoder(4)).expect_err("refused");
        assert!(err.contains("missing `qwen35.ssm.state_size`"), "{err}");
    }
}
