//! A text family's GGUF rules: what llama.cpp's architecture code applies without a key of the
//! file saying it (read by [`crate::ModelConfig::from_gguf`]), and how llama.cpp's converter writes
//! the family (`tessera quantize`).

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use tessera_decoder::gguf_write::MetaValue;
use tessera_decoder::{Activation, DecoderConfig};

use super::{Sliding, TextFamily};

/// What a GGUF of a text family leaves to llama.cpp's architecture code (`load_arch_hparams`,
/// the graph) rather than stating it: the family's class rules, as [`ModelConfig::from_gguf`]
/// applies them.
///
/// [`ModelConfig::from_gguf`]: crate::ModelConfig::from_gguf
#[derive(Debug, Clone, Copy)]
pub struct GgufRules {
    pub hidden_act: Activation,
    /// Gemma: the embeddings are scaled by √width (text tokens only, as llama.cpp's graph).
    pub embed_scaled: bool,
    /// Gemma 2/3's four norms per layer.
    pub sandwich_norms: bool,
    /// Gemma 2/3: queries scaled by llama.cpp's fixed rule ([`GgufRules::query_pre_attn_scalar`]),
    /// not a key of the file.
    pub scale_by_head_dim: bool,
    /// Gemma 3: with `{arch}.attention.sliding_window`, every layer but each `n`-th is local
    /// (`n` from `attention.sliding_window_pattern`, else this default).
    pub swa_pattern: Option<usize>,
    /// The local layers' RoPE base unless `{arch}.rope.freq_base_swa` states one.
    pub local_rope_theta: Option<f64>,
    /// The family's own keys beyond every text model's (Qwen3.5's linear layers).
    pub family_keys: Option<GgufKeys>,
    /// The family reads its whole config from the file itself (Gemma 4: per-layer arrays where
    /// the others have one number).
    pub own_config: Option<GgufConfig>,
}

/// Reads a family's [`ModelConfig`](crate::ModelConfig) from a GGUF's parsed header (the path
/// for errors and for tensors the config needs).
pub type GgufConfig = fn(&gguf_file::Content, &std::path::Path) -> crate::Result<crate::ModelConfig>;

/// Reads a family's own keys of GGUF metadata `md` (under `{arch}.`, `arch` given) into the
/// decoder `d` read from the common ones; the error is a reason naming the key.
pub type GgufKeys = fn(&HashMap<String, gguf_file::Value>, &str, &mut DecoderConfig) -> Result<(), String>;

impl GgufRules {
    /// llama.cpp's attention scale as `query_pre_attn_scalar` (`llama_model_gemma3::
    /// load_arch_hparams`): `head_dim`, but `width / heads` for the 27B (62 layers).
    pub fn query_pre_attn_scalar(&self, layers: usize, width: usize, heads: usize, head_dim: usize) -> Option<f64> {
        let scalar = if layers == 62 { width / heads } else { head_dim };
        self.scale_by_head_dim.then_some(scalar as f64)
    }
}

impl TextFamily {
    pub fn gguf_rules(self) -> GgufRules {
        let c = self.class();
        GgufRules {
            hidden_act: c.hidden_act,
            embed_scaled: c.gemma,
            sandwich_norms: c.sandwich_norms,
            scale_by_head_dim: c.query_pre_attn_scalar.is_some(),
            swa_pattern: match c.sliding {
                Sliding::AllButEvery(n) => Some(n),
                _ => None,
            },
            local_rope_theta: c.local_rope_theta,
            family_keys: match self {
                // llama.cpp's `qwen35` (Qwen3.5's text model, also MiniCPM-V 4.6's).
                Self::Qwen35 => Some(crate::families::qwen3_5::gguf_keys),
                _ => None,
            },
            own_config: match self {
                // llama.cpp's `gemma4`.
                Self::Gemma4 => Some(crate::families::gemma4::gguf_config),
                _ => None,
            },
        }
    }
}

/// GGUF metadata in file order.
pub type GgufKeyValues = Vec<(String, MetaValue)>;

/// A family's own part of the text GGUF llama.cpp's converter writes (Qwen3.5's linear layers).
#[derive(Debug, Clone, Copy)]
pub struct GgufTextWriter {
    /// Its `{arch}.*` keys after the common ones, in the converter's order (`arch` given).
    pub keys: fn(&DecoderConfig, &str) -> Result<GgufKeyValues, String>,
    /// How the converter changes the checkpoint tensor `hf` (a name under `model.`, as
    /// [`gguf_name`](tessera_decoder::weights::gguf_name) reads it) of shape `dims`; `None`:
    /// stored as it is.
    pub tensor: fn(&DecoderConfig, &str, &[usize]) -> Option<TensorChange>,
    /// Where the family states its layers itself (Gemma 4's per-layer widths, sliding-window
    /// pattern, soft-capping): its keys from the whole config, written in place of the common
    /// checks of RoPE, sliding windows, scales and soft-capping and the keys they write; an
    /// error is a reason naming the field.
    pub layout: Option<GgufLayout>,
    /// Tensors the converter generates rather than reads (Gemma 4's `rope_freqs`).
    pub generated: fn(&crate::ModelConfig) -> Vec<GeneratedTensor>,
    /// The vocabulary as gguf-py's `LlamaHfVocab` writes it, where the family's class reads
    /// it so (Gemma 4); `None`: a byte-level BPE's (`get_vocab_base`).
    pub hf_vocab: Option<HfVocab>,
}

/// A family's keys from its whole config ([`GgufTextWriter::layout`]); the error a reason.
pub type GgufLayout = fn(&crate::ModelConfig) -> Result<GgufKeyValues, String>;

/// A tensor the converter generates: its GGUF name, shape and values.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedTensor {
    pub name: String,
    pub dims: Vec<usize>,
    pub values: Vec<f32>,
}

/// How a converter class writes a `LlamaHfVocab` vocabulary.
#[derive(Debug, Clone, Copy)]
pub struct HfVocab {
    /// `tokenizer.ggml.model`.
    pub model: &'static str,
    /// Added tokens written USER_DEFINED though special (Gemma 4's `visible_tokens`).
    pub user_defined: &'static [&'static str],
}

/// No generated tensors.
pub fn no_generated(_: &crate::ModelConfig) -> Vec<GeneratedTensor> {
    Vec::new()
}

/// A checkpoint tensor as the converter changes it: its stored shape and its values (row-major,
/// the whole tensor's in, the stored tensor's out).
#[derive(Clone)]
pub struct TensorChange {
    pub dims: Vec<usize>,
    pub values: Arc<dyn Fn(Vec<f32>) -> Vec<f32> + Send + Sync>,
}

impl std::fmt::Debug for TensorChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorChange").field("dims", &self.dims).finish_non_exhaustive()
    }
}

impl TensorChange {
    /// The converter's `1 + w` (Gemma's norms, which scale by `1 + w` where llama.cpp's scale by
    /// the stored weight): every value plus one, the shape `dims` kept.
    pub fn plus_one(dims: &[usize]) -> Self {
        Self {
            dims: dims.to_vec(),
            values: Arc::new(|mut x: Vec<f32>| {
                x.iter_mut().for_each(|v| *v += 1.0);
                x
            }),
        }
    }
}

/// The same shape and the same change (one closure).
impl PartialEq for TensorChange {
    fn eq(&self, other: &Self) -> bool {
        self.dims == other.dims && Arc::ptr_eq(&self.values, &other.values)
    }
}

/// How llama.cpp's converter writes a text family's GGUF (`tessera quantize`).
#[derive(Debug, Clone, Copy)]
pub struct GgufText {
    /// `general.architecture`.
    pub arch: &'static str,
    /// `LlamaModel` adds `{arch}.vocab_size`, `rope.dimension_count` and the head widths
    /// (`attention.key_length` / `value_length`); `Qwen2Model` writes none of them.
    pub llama_keys: bool,
    /// `attention.key_length` / `value_length` after the norm epsilon: `TextModel` writes them
    /// from the config's `head_dim` (which Qwen3's and Gemma 3's configs state).
    pub head_dim_keys: bool,
    /// Every RMSNorm weight (`*norm.weight`) stored as `1 + w` (Gemma 3's norms scale by
    /// `1 + w`, llama.cpp's by the stored weight).
    pub norm_plus_one: bool,
    /// The token embedding cut to the tokenizer's entries (`Gemma3Model`: the model entries and
    /// the added tokens of tokenizer.json), where the checkpoint has more rows.
    pub embedding_to_tokenizer: bool,
    /// Sliding-window layers written as llama.cpp's architecture lays them out
    /// ([`GgufRules::swa_pattern`]): `attention.sliding_window` and the local layers' RoPE base
    /// `rope.freq_base_swa`.
    pub sliding_window: bool,
    /// Linear RoPE scaling written (`rope.scaling.type` / `factor`, the global layers').
    pub linear_rope_scaling: bool,
    /// The MLP's input norm named `post_attention_norm`
    /// ([`gguf_sandwich_name`](tessera_decoder::weights::gguf_sandwich_name): Qwen3.5's).
    pub sandwich_names: bool,
    /// The family's own keys and tensor changes, if any.
    pub writer: Option<GgufTextWriter>,
    /// Checkpoint tensors the converter leaves out, by name prefix (Qwen3.5's multi-token
    /// prediction layers, `mtp.*`, which tessera does not run either).
    pub dropped: &'static [&'static str],
}

impl GgufText {
    /// `arch` with the base converter's keys only.
    const fn new(arch: &'static str) -> Self {
        Self {
            arch,
            llama_keys: false,
            head_dim_keys: false,
            norm_plus_one: false,
            embedding_to_tokenizer: false,
            sliding_window: false,
            linear_rope_scaling: false,
            sandwich_names: false,
            writer: None,
            dropped: &[],
        }
    }
}

impl TextFamily {
    /// The GGUF architecture llama.cpp's converter writes this family's text model as, where
    /// tessera writes it too (`None`: not yet). The q/k row order follows
    /// [`gguf_rope_style`](Self::gguf_rope_style).
    pub fn gguf_text(self) -> Option<GgufText> {
        match self {
            // The converter writes Mistral as a Llama (`MistralForCausalLM` is a `LlamaModel`).
            Self::Llama | Self::Mistral => Some(GgufText { llama_keys: true, ..GgufText::new("llama") }),
            Self::Qwen2 => Some(GgufText::new("qwen2")),
            // Qwen2VLModel: Qwen2's keys and `rope.dimension_sections` (the M-RoPE sections).
            Self::Qwen2Vl | Self::Qwen25Vl => Some(GgufText::new("qwen2vl")),
            // Qwen3VLTextModel: Qwen3's keys, the M-RoPE sections (interleaved by llama.cpp's
            // architecture, [`gguf_mrope_interleaved`](Self::gguf_mrope_interleaved)); the
            // image side adds `n_deepstack_layers`.
            Self::Qwen3Vl => Some(GgufText { head_dim_keys: true, ..GgufText::new("qwen3vl") }),
            // Gemma3Model (conversion/gemma.py).
            Self::Gemma3 => Some(GgufText {
                head_dim_keys: true,
                norm_plus_one: true,
                embedding_to_tokenizer: true,
                sliding_window: true,
                linear_rope_scaling: true,
                ..GgufText::new("gemma3")
            }),
            // Qwen3_5TextModel (conversion/qwen.py): Qwen2's keys, the head widths, the M-RoPE
            // sections; the family's `ssm.*` keys and its tensors' layout changes.
            Self::Qwen35 => Some(GgufText {
                head_dim_keys: true,
                sandwich_names: true,
                writer: Some(crate::families::qwen3_5::GGUF_WRITER),
                dropped: &["mtp."],
                ..GgufText::new("qwen35")
            }),
            // Gemma4Model (conversion/gemma.py): norms as stored (its norm_shift is 0), its
            // per-layer keys, `rope_freqs`, the `gemma4` vocabulary.
            Self::Gemma4 => {
                Some(GgufText { writer: Some(crate::families::gemma4::GGUF_WRITER), ..GgufText::new("gemma4") })
            }
            _ => None,
        }
    }

    /// Whether llama.cpp's GGUF of this family lays the multimodal RoPE streams out
    /// interleaved over the frequencies (Qwen3-VL and Qwen3.5, llama.cpp's `LLAMA_ROPE_TYPE_IMROPE`) rather
    /// than in consecutive sections (Qwen2-VL, `LLAMA_ROPE_TYPE_MROPE`).
    pub fn gguf_mrope_interleaved(self) -> bool {
        matches!(self, Self::Qwen3Vl | Self::Qwen35)
    }
}
