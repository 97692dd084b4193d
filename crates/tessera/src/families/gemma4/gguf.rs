//! Gemma 4's text model from llama.cpp's GGUF (`general.architecture = gemma4`, written by
//! `Gemma4Model` in the converter's `conversion/gemma.py`): the `gemma4.*` keys become the
//! `Gemma4TextConfig` fields they were written from, and [`super::resolve_text`] — the folder's
//! own rules — does the rest, so both sources give one decoder. What the file leaves to
//! llama.cpp's `gemma4` architecture (`src/models/gemma4.cpp`) is supplied as llama.cpp does:
//! attention scale 1, tanh GELU, √width embedding scale, the value norm, the KV-sharing rule,
//! images attending both ways in the sliding layers only.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use serde_json::Value;

use super::{LayerOverride, RopeEntry, TextFields};
use crate::config::{gguf_f64, gguf_usize};
use crate::error::{Result, TesseraError};
use crate::families::text::LayerType;
use crate::families::{ModelConfig, TokenIds};

/// llama.cpp marks a frequency pair that does not turn with this factor in `rope_freqs`
/// (`generate_extra_tensors`: 1e30, a rotation of zero); a turning pair has 1.
const NO_ROTATION: f32 = 1e29;

/// [`ModelConfig`] of the `gemma4` text GGUF at `path` (`content` its parsed header).
pub(crate) fn text_config(content: &gguf_file::Content, path: &Path) -> Result<ModelConfig> {
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
    let md = &content.metadata;
    let key = |k: &str| format!("gemma4.{k}");
    let opt_u = |k: &str| -> Result<Option<usize>> {
        match md.get(&key(k)) {
            None => Ok(None),
            Some(v) => gguf_usize(v).map(Some).ok_or_else(|| err(format!("`{}` is not an integer", key(k)))),
        }
    };
    let get_u = |k: &str| opt_u(k)?.ok_or_else(|| err(format!("GGUF metadata is missing `{}`", key(k))));
    let get_f = |k: &str| md.get(&key(k)).and_then(gguf_f64);
    // An integer, or one per layer (llama.cpp's per-layer arrays).
    let per_layer = |k: &str, layers: usize| -> Result<Vec<usize>> {
        let full = key(k);
        let v = md.get(&full).ok_or_else(|| err(format!("GGUF metadata is missing `{full}`")))?;
        if let Some(n) = gguf_usize(v) {
            return Ok(vec![n; layers]);
        }
        let items = v.to_vec().map_err(|_| err(format!("`{full}` is neither an integer nor a list")))?;
        let out: Vec<usize> = items.iter().filter_map(gguf_usize).collect();
        if out.len() != layers || items.len() != layers {
            return Err(err(format!("`{full}` has {} integer entries for {layers} layers", out.len())));
        }
        Ok(out)
    };
    let layers = get_u("block_count")?;
    let hidden = get_u("embedding_length")?;
    let heads = get_u("attention.head_count")?;
    let kv_heads = per_layer("attention.head_count_kv", layers)?;
    // `sliding_window_pattern`: one flag per layer, true = sliding.
    let pattern_key = key("attention.sliding_window_pattern");
    let sliding: Vec<bool> = match md.get(&pattern_key) {
        None => return Err(err(format!("GGUF metadata is missing `{pattern_key}`"))),
        Some(v) => v
            .to_vec()
            .map_err(|_| err(format!("`{pattern_key}` is not a list of booleans")))?
            .iter()
            .map(|x| x.to_bool().map_err(|_| err(format!("`{pattern_key}` holds a value that is not a boolean"))))
            .collect::<Result<_>>()?,
    };
    if sliding.len() != layers {
        return Err(err(format!("`{pattern_key}` has {} entries for {layers} layers", sliding.len())));
    }
    let full_dim = get_u("attention.key_length")?;
    let swa_dim = get_u("attention.key_length_swa")?;
    for (k, want) in [("attention.value_length", full_dim), ("attention.value_length_swa", swa_dim)] {
        if let Some(v) = opt_u(k)?.filter(|&v| v != want) {
            return Err(err(format!("`{}` is {v} but the keys are {want} wide (Gemma 4's are equal)", key(k))));
        }
    }
    // RoPE turns the whole sliding head; the full layers' "proportional" share is `rope_freqs`.
    if let Some(d) = opt_u("rope.dimension_count_swa")?.filter(|&d| d != swa_dim) {
        return Err(err(format!(
            "`{}` is {d} but the sliding heads are {swa_dim} wide",
            key("rope.dimension_count_swa")
        )));
    }
    if let Some(d) = opt_u("rope.dimension_count")?.filter(|&d| d != full_dim) {
        return Err(err(format!("`{}` is {d} but the full heads are {full_dim} wide", key("rope.dimension_count"))));
    }
    let shared = opt_u("attention.shared_kv_layers")?.unwrap_or(0);
    if shared > 0 && shared >= layers {
        let k = key("attention.shared_kv_layers");
        return Err(err(format!("`{k}` {shared} leaves none of the {layers} layers to share keys and values from")));
    }
    let ffn = per_layer("feed_forward_length", layers)?;
    let first_shared = layers.saturating_sub(shared);
    let intermediate = ffn.first().copied().unwrap_or(0);
    // `use_double_wide_mlp`: the shared layers' MLPs twice as wide, the others all one width.
    let double_wide = first_shared < layers && ffn[first_shared..].iter().all(|&f| f == 2 * intermediate);
    let expected = |i: usize| if i >= first_shared && double_wide { 2 * intermediate } else { intermediate };
    if let Some(i) = (0..layers).find(|&i| ffn[i] != expected(i)) {
        return Err(err(format!(
            "`{}` is {ffn:?}: layer {i}'s width {} is neither the first layer's nor (a shared layer) twice it",
            key("feed_forward_length"),
            ffn[i]
        )));
    }
    let per_layer_config: BTreeMap<String, LayerOverride> = (0..layers)
        .map(|i| {
            let head_dim = if sliding[i] { swa_dim } else { full_dim };
            (i.to_string(), LayerOverride { head_dim: Some(head_dim), num_key_value_heads: Some(kv_heads[i]) })
        })
        .collect();
    let full_rope = RopeEntry {
        rope_type: Some("proportional".into()),
        rope_theta: Some(get_f("rope.freq_base").unwrap_or(1e6)),
        partial_rotary_factor: Some(rotated_fraction(content, path, full_dim)?),
        factor: None,
    };
    let sliding_rope = RopeEntry {
        rope_type: Some("default".into()),
        rope_theta: Some(get_f("rope.freq_base_swa").unwrap_or(1e4)),
        ..RopeEntry::default()
    };
    let tokens = md.get("tokenizer.ggml.tokens").and_then(|v| v.to_vec().ok());
    let vocab = match &tokens {
        Some(t) => t.len(),
        None => rows(content, "token_embd.weight").ok_or_else(|| err("cannot tell the vocabulary size".into()))?,
    };
    let token_id = |name: &str| -> Option<u32> {
        let t = tokens.as_ref()?;
        t.iter().position(|v| v.to_string().is_ok_and(|s| s == name)).map(|i| i as u32)
    };
    let id = |k: &str| md.get(k).and_then(gguf_usize).map(|v| v as u32);
    // llama.cpp ends a turn at `<turn|>` (end-of-generation by name) as well as at the EOS.
    let eos: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().chain(token_id("<turn|>")).collect();
    let ple = opt_u("embedding_length_per_layer_input")?;
    let k_eq_v =
        (0..first_shared).any(|i| !sliding[i] && !content.tensor_infos.contains_key(&format!("blk.{i}.attn_v.weight")));
    let fields = TextFields {
        vocab_size: Some(vocab),
        hidden_size: Some(hidden),
        intermediate_size: Some(intermediate),
        num_hidden_layers: Some(layers),
        num_attention_heads: Some(heads),
        num_key_value_heads: kv_heads.first().copied(),
        head_dim: Some(swa_dim),
        global_head_dim: Some(full_dim),
        per_layer_config: Some(per_layer_config),
        max_position_embeddings: Some(get_u("context_length")?),
        rms_norm_eps: Some(get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-6)),
        pad_token_id: Some(id("tokenizer.ggml.padding_token_id").unwrap_or(0)),
        bos_token_id: Some(id("tokenizer.ggml.bos_token_id").unwrap_or(2)),
        eos_token_id: Some(TokenIds::Many(eos)),
        tie_word_embeddings: Some(!content.tensor_infos.contains_key("output.weight")),
        rope_parameters: Some(BTreeMap::from([
            ("full_attention".to_string(), full_rope),
            ("sliding_attention".to_string(), sliding_rope),
        ])),
        sliding_window: opt_u("attention.sliding_window")?,
        layer_types: Some(
            sliding.iter().map(|&s| if s { LayerType::SlidingAttention } else { LayerType::FullAttention }).collect(),
        ),
        final_logit_softcapping: get_f("final_logit_softcapping"),
        // llama.cpp decodes every gemma4 image chunk both ways on the sliding layers.
        use_bidirectional_attention: Some("vision".into()),
        vocab_size_per_layer_input: rows(content, "per_layer_token_embd.weight"),
        hidden_size_per_layer_input: Some(ple.map_or(Value::Null, Value::from)),
        attention_k_eq_v: Some(k_eq_v),
        num_kv_shared_layers: Some(shared),
        use_double_wide_mlp: Some(double_wide),
        ..TextFields::default()
    };
    if sliding.last() == Some(&true) {
        return Err(err(format!("`{pattern_key}` makes the last layer sliding; Gemma 4's last layer is full")));
    }
    let (text, per_layer_inputs, bidirectional) = super::resolve_text(&fields).map_err(|e| err(gguf_words(&e)))?;
    let mut cfg = ModelConfig::text_only("gemma4", text);
    cfg.per_layer_inputs = per_layer_inputs;
    cfg.bidirectional_in_sliding_layers_only = bidirectional;
    // transformers embeds audio and video placeholders as the pad token (llama.cpp does not:
    // tessera follows transformers, the reference).
    let pad = id("tokenizer.ggml.padding_token_id").unwrap_or(0);
    cfg.embed_as = ["<|audio|>", "<|video|>"].iter().filter_map(|t| token_id(t)).map(|i| (i, pad)).collect();
    Ok(cfg)
}

/// The share of the full layers' frequency pairs that turn: `rope_freqs.weight` holds 1 for
/// each turning pair, then llama.cpp's "no rotation" factor (1e30) for the rest; absent, all turn.
fn rotated_fraction(content: &gguf_file::Content, path: &Path, full_dim: usize) -> Result<f64> {
    const NAME: &str = "rope_freqs.weight";
    if !content.tensor_infos.contains_key(NAME) {
        return Ok(1.0);
    }
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
    let mut file = std::fs::File::open(path).map_err(|e| err(format!("reading `{NAME}`: {e}")))?;
    let factors: Vec<f32> = content
        .tensor(&mut file, NAME, &Device::Cpu)
        .and_then(|t| t.dequantize(&Device::Cpu))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .map_err(|e| err(format!("reading `{NAME}`: {e}")))?;
    if factors.len() != full_dim / 2 {
        return Err(err(format!("`{NAME}` has {} factors for {} frequency pairs", factors.len(), full_dim / 2)));
    }
    let turning = factors.iter().take_while(|&&f| f == 1.0).count();
    if let Some(f) = factors[turning..].iter().find(|&&f| f < NO_ROTATION) {
        return Err(err(format!(
            "`{NAME}` holds the factor {f} after its {turning} ones (Gemma 4's proportional RoPE: ones, then 1e30)"
        )));
    }
    Ok(turning as f64 / factors.len() as f64)
}

/// The first dimension (rows) of tensor `name`, where the file holds it.
fn rows(content: &gguf_file::Content, name: &str) -> Option<usize> {
    content.tensor_infos.get(name).and_then(|t| t.shape.dims().first().copied())
}

/// A `Gemma4TextConfig` check's reason in the GGUF's key names.
fn gguf_words(reason: &str) -> String {
    let mut out = reason.to_string();
    for (hf, gguf) in [
        ("num_kv_shared_layers", "gemma4.attention.shared_kv_layers"),
        ("sliding_window", "gemma4.attention.sliding_window"),
        ("final_logit_softcapping", "gemma4.final_logit_softcapping"),
        ("hidden_size_per_layer_input", "gemma4.embedding_length_per_layer_input"),
    ] {
        out = out.replace(hf, gguf);
    }
    out
}
