//! Decoder-only transformer building blocks, written once and composed by every model:
//! RMSNorm, rotary embeddings (and their variants), grouped-query attention, gated MLPs,
//! attention masks, the KV cache, layers that differ (per-layer shapes, shared keys and values,
//! per-layer inputs), Gated DeltaNet's linear attention with its per-sequence state,
//! and a forward over embeddings returning hidden states.
//! Also the weight sources (safetensors, GGUF) and the linear layer (dense or quantized)
//! that vision towers share, and load-time quantization's choice of types (`quant`).

pub mod activation;
pub mod attention;
mod cpu_op;
pub mod decoder;
pub mod error;
pub mod gated_delta;
pub mod gemma4v_names;
pub mod gguf_layout;
mod gguf_names;
pub mod gguf_write;
pub mod internvl_names;
pub mod kv_cache;
mod layer;
pub mod linear;
pub mod mask;
pub mod minicpm_names;
pub mod mlp;
pub mod norm;
pub mod per_layer;
pub mod pixtral_names;
pub mod quant;
pub mod qwen_vl_names;
pub mod rope;
mod weight_file;
pub mod weights;

pub use activation::Activation;
pub use attention::{
    flash_attention_enabled, scaled_dot_product_attention, Attention, AttentionConfig, AttentionInput,
};
pub use cpu_op::kernels_run_on;
pub use decoder::{Decoder, DecoderConfig, LayerInputs, LinearLayers, LocalRope, Trace};
pub use error::{DecoderError, Result};
pub use gated_delta::{DeltaLayout, DeltaState, GatedDeltaConfig, GatedDeltaNet};
pub use kv_cache::KvCache;
pub use linear::Linear;
pub use mask::{AttentionMask, Blocks, MaskBiases, MaskPlan};
pub use mlp::{GatedMlp, Mlp};
pub use norm::{LayerNorm, NormStyle, RmsNorm};
pub use per_layer::{LayerShape, LayerVariants, PerLayerEmbedding, PerLayerGate};
pub use quant::{QuantMix, QuantPlan};
pub use rope::{MRope, RopeAngles, RopeConfig, RopeScaling, RopeStyle, RotaryEmbedding};
pub use tessera_kernels::row_invariant;
pub use weights::{GgufMode, MatrixWeight, Weights};
