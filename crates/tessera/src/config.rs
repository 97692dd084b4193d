//! Checkpoint configuration: `config.json` is read by the family modules ([`crate::families`]);
//! here GGUF metadata (`llama.*`, `qwen2.*`, `gemma3.*` keys) is converted into the same
//! [`ModelConfig`], and `generation_config.json` is read.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use serde::Deserialize;
use serde_json::Value;
use tessera_decoder::{DecoderConfig, LocalRope, MRope, NormStyle, RopeConfig, RopeScaling};

use crate::error::{Result, TesseraError};
pub use crate::families::{
    ConnectorConfig, ModelConfig, Placeholder, ProcessorRule, PromptStyle, TextFamily, TokenIds, TowerSpec, WeightRoots,
};

impl ModelConfig {
    /// Converts GGUF metadata (llama.cpp's `{arch}.*` keys).
    pub fn from_gguf(content: &gguf_file::Content, path: &Path) -> Result<Self> {
        let md = &content.metadata;
        let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
        let arch_name = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or_else(|| err("GGUF metadata has no `general.architecture`".into()))?
            .clone();
        let family = match arch_name.as_str() {
            "llama" => TextFamily::Llama,
            "qwen2" => TextFamily::Qwen2,
            // Qwen2-VL's and Qwen2.5-VL's text model; Qwen3-VL's.
            "qwen2vl" => TextFamily::Qwen2Vl,
            "qwen3vl" => TextFamily::Qwen3Vl,
            // Qwen3.5's hybrid text model (Gated DeltaNet and gated attention layers).
            "qwen35" => TextFamily::Qwen35,
            "gemma3" => TextFamily::Gemma3,
            "gemma4" => TextFamily::Gemma4,
            // Mistral 3's text model (Llama's tensors; older converters wrote it as `llama`).
            "mistral3" => TextFamily::Mistral,
            "clip" => {
                return Err(err(
                    "this is an mmproj file (`general.architecture` = clip: a vision tower and projector), not a \
                     model: give the text model's GGUF as the model and this file with --mmproj"
                        .into(),
                ))
            }
            other => {
                return Err(TesseraError::UnsupportedArchitecture {
                    found: other.to_string(),
                    path: path.to_path_buf(),
                    supported: crate::families::supported(),
                })
            }
        };
        if let Some(read) = family.gguf_rules().own_config {
            return read(content, path);
        }
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
        for (k, v) in [("attention.head_count", heads), ("embedding_length", hidden)] {
            if v == 0 {
                return Err(err(format!("`{}` must be positive", key(k))));
            }
        }
        let head_dim = match get_u("attention.key_length") {
            Ok(d) => d,
            Err(_) if hidden % heads != 0 => {
                return Err(err(format!(
                    "`{}` {hidden} is not a multiple of `{}` {heads}",
                    key("embedding_length"),
                    key("attention.head_count")
                )))
            }
            Err(_) => hidden / heads,
        };
        let vocab_size = match md.get("tokenizer.ggml.tokens").map(|v| v.to_vec()) {
            Some(Ok(tokens)) => tokens.len(),
            _ => content
                .tensor_infos
                .get("token_embd.weight")
                .and_then(|t| t.shape.dims().first().copied())
                .filter(|&n| n > 0)
                .ok_or_else(|| err("cannot tell the vocabulary size (no tokens, no sized token_embd)".into()))?,
        };
        let rules = family.gguf_rules();
        let layers = get_u("block_count")?;
        let mut decoder = DecoderConfig {
            hidden_size: hidden,
            intermediate_size: get_u("feed_forward_length")?,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            rope: RopeConfig {
                theta: get_f("rope.freq_base").unwrap_or(10_000.0),
                scaling: gguf_rope_scaling(md, &key("rope.scaling.type"), get_f("rope.scaling.factor")).map_err(err)?,
                style: family.gguf_rope_style(),
                mrope: gguf_mrope(md, &key("rope.dimension_sections"), family).map_err(err)?,
            },
            max_position_embeddings: get_u("context_length")?,
            qkv_bias: any_block_holds(content, "attn_q.bias"),
            hidden_act: rules.hidden_act,
            // llama.cpp's converters store Gemma's `1 + w` norm scales.
            norm_style: NormStyle::Plain,
            query_pre_attn_scalar: rules.query_pre_attn_scalar(layers, hidden, heads, head_dim),
            position_offset: 0,
            attn_logit_softcapping: None,
            sandwich_norms: rules.sandwich_norms,
            qk_norm: any_block_holds(content, "attn_q_norm.weight"),
            local_rope: None,
            rotary_dim: None,
            attn_output_gate: false,
            linear: None,
            variants: None,
        };
        // Gemma 3's local layers (`hparams.set_swa_pattern`): with a window, every layer but each
        // n-th, turning by `rope.freq_base_swa` (10000 unless stated), unscaled.
        let window = get_u("attention.sliding_window").ok().filter(|&w| w > 0);
        let local = match (window, rules.swa_pattern) {
            (Some(_), Some(n)) => {
                let pattern = gguf_swa_pattern(md, &key("attention.sliding_window_pattern"), n, layers).map_err(err)?;
                let theta = get_f("rope.freq_base_swa").or(rules.local_rope_theta).unwrap_or(10_000.0);
                let rope = RopeConfig { theta, scaling: RopeScaling::Default, ..decoder.rope };
                decoder.local_rope = Some(LocalRope { rope, layers: pattern.clone() });
                pattern
            }
            _ => vec![false; layers],
        };
        if let Some(family_keys) = rules.family_keys {
            family_keys(md, &arch_name, &mut decoder).map_err(err)?;
        }
        // The checks speak Hugging Face's field names; the file has llama.cpp's keys.
        decoder.validate().map_err(|e| {
            let mut reason = e.to_string();
            for (hf, gguf) in [
                ("num_key_value_heads", "attention.head_count_kv"),
                ("num_attention_heads", "attention.head_count"),
                ("num_hidden_layers", "block_count"),
                ("intermediate_size", "feed_forward_length"),
                ("hidden_size", "embedding_length"),
                ("head_dim", "attention.key_length"),
                ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
                ("rope_theta", "rope.freq_base"),
                ("max_position_embeddings", "context_length"),
            ] {
                reason = reason.replace(hf, &key(gguf));
            }
            err(reason)
        })?;
        // RoPE turns whole heads unless the family's keys say otherwise (Qwen3.5's partial RoPE).
        if let Ok(rot) = get_u("rope.dimension_count") {
            if rot != decoder.rotary_dim.unwrap_or(head_dim) {
                return Err(err(format!(
                    "`{}` is {rot} but the heads are {head_dim} wide (partial RoPE is not supported for `{arch_name}`)",
                    key("rope.dimension_count")
                )));
            }
        }
        // Tensors of blocks the metadata does not count would be ignored: the file disagrees
        // with itself, so it is refused rather than run with some of its layers.
        let beyond = content.tensor_infos.keys().filter_map(|name| {
            let block = name.strip_prefix("blk.")?.split('.').next()?.parse::<usize>().ok()?;
            (block >= layers).then_some((block, name))
        });
        if let Some((block, name)) = beyond.max() {
            return Err(err(format!(
                "`{}` is {layers} but the file holds tensors of block {block} (`{name}`)",
                key("block_count")
            )));
        }
        let id = |k: &str| md.get(k).and_then(gguf_usize).map(|v| v as u32);
        for k in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"] {
            if let Some(v) = id(k).filter(|&v| v as usize >= vocab_size) {
                return Err(err(format!("`{k}` is {v}, outside the vocabulary of {vocab_size} tokens")));
            }
        }
        let final_logit_softcapping = get_f("final_logit_softcapping");
        if let Some(cap) = final_logit_softcapping.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(err(format!("`{}` is {cap}, not a positive number", key("final_logit_softcapping"))));
        }
        Ok(Self {
            family: family.name(),
            text_family: family,
            prompt: PromptStyle::Chat,
            bidirectional_images: false,
            bidirectional_in_sliding_layers_only: false,
            per_layer_inputs: None,
            embed_as: Vec::new(),
            embed_scale: rules.embed_scaled.then(|| (hidden as f64).sqrt()),
            decoder,
            vocab_size,
            tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
            bos_token_id: id("tokenizer.ggml.bos_token_id"),
            eos_token_ids: id("tokenizer.ggml.eos_token_id").into_iter().collect(),
            layer_windows: local.iter().map(|&l| window.filter(|_| l)).collect(),
            final_logit_softcapping,
            vision: None,
        })
    }
}

/// Whether some layer's tensors include `blk.N.{suffix}` (layer 0 may be one without attention).
fn any_block_holds(content: &gguf_file::Content, suffix: &str) -> bool {
    content.tensor_infos.keys().any(|n| {
        n.starts_with("blk.")
            && n.split_once('.').is_some_and(|(_, r)| r.split_once('.').is_some_and(|(_, t)| t == suffix))
    })
}

/// Multimodal RoPE from `{arch}.rope.dimension_sections` (`key`): llama.cpp writes four
/// sections (temporal, height, width, and a fourth for other models, 0 here); the layout of the
/// three streams over the frequencies is the family's ([`TextFamily::gguf_mrope_interleaved`]).
fn gguf_mrope(
    md: &HashMap<String, gguf_file::Value>,
    key: &str,
    family: TextFamily,
) -> std::result::Result<Option<MRope>, String> {
    let Some(v) = md.get(key) else { return Ok(None) };
    let items = v.to_vec().map_err(|_| format!("`{key}` is not a list"))?;
    let s: Vec<usize> = items
        .iter()
        .map(|x| gguf_usize(x).ok_or_else(|| format!("`{key}` holds a value that is not a non-negative integer")))
        .collect::<std::result::Result<_, _>>()?;
    match s.as_slice() {
        [t, h, w] | [t, h, w, 0] => {
            Ok(Some(MRope { section: [*t, *h, *w], interleaved: family.gguf_mrope_interleaved() }))
        }
        _ => Err(format!("`{key}` is {s:?}: M-RoPE takes three sections (temporal, height, width)")),
    }
}

/// RoPE scaling from `{arch}.rope.scaling.type` (`type_key`) and `.factor`: linear (Gemma 3's
/// global layers: llama.cpp's `freq_scale = 1 / factor`); none, or a factor of 1, is none.
fn gguf_rope_scaling(
    md: &HashMap<String, gguf_file::Value>,
    type_key: &str,
    factor: Option<f64>,
) -> std::result::Result<RopeScaling, String> {
    let kind = match md.get(type_key) {
        None => None,
        Some(v) => Some(v.to_string().map_err(|_| format!("`{type_key}` is not a string"))?.as_str()),
    };
    match (kind, factor) {
        (Some("none"), _) | (_, None) => Ok(RopeScaling::Default),
        (_, Some(f)) if f == 1.0 || f == 0.0 => Ok(RopeScaling::Default),
        (Some("linear") | None, Some(factor)) => Ok(RopeScaling::Linear { factor }),
        (Some(other), _) => Err(format!("`{type_key}` `{other}` is not supported (linear is)")),
    }
}

/// Which of `layers` layers are local: `key` (`{arch}.attention.sliding_window_pattern`) as a
/// period `n` or one flag per layer, else `default`; with period `n` layer `i` is local unless
/// `i % n == n − 1` (llama.cpp's `set_swa_pattern`, transformers' `sliding_window_pattern`).
fn gguf_swa_pattern(
    md: &HashMap<String, gguf_file::Value>,
    key: &str,
    default: usize,
    layers: usize,
) -> std::result::Result<Vec<bool>, String> {
    let n = match md.get(key) {
        None => default,
        Some(v) => match (gguf_usize(v), v.to_vec()) {
            (Some(n), _) => n,
            (None, Ok(items)) => {
                let flags: Vec<bool> = items
                    .iter()
                    .map(|x| x.to_bool().map_err(|_| format!("`{key}` holds a value that is not a boolean")))
                    .collect::<std::result::Result<_, _>>()?;
                if flags.len() != layers {
                    return Err(format!("`{key}` has {} entries for {layers} layers", flags.len()));
                }
                return Ok(flags);
            }
            (None, Err(_)) => return Err(format!("`{key}` is neither an integer nor a list of booleans")),
        },
    };
    Ok((0..layers).map(|i| n == 0 || i % n < n - 1).collect())
}

pub(crate) fn gguf_usize(v: &gguf_file::Value) -> Option<usize> {
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

pub(crate) fn gguf_f64(v: &gguf_file::Value) -> Option<f64> {
    use gguf_file::Value as V;
    match v {
        V::F32(x) => Some(*x as f64),
        V::F64(x) => Some(*x),
        _ => gguf_usize(v).map(|x| x as f64),
    }
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
