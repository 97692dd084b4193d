//! The decoder stack: pre-norm blocks of grouped-query attention and a gated MLP, then a
//! final RMSNorm — the Llama layout (Touvron et al. 2023) shared by SmolLM2, Mistral,
//! Qwen2 and Gemma. It runs over **embeddings**, so callers may splice image features into
//! the sequence; the LM head is applied by the caller.
//!
//! Follows transformers' `modeling_llama.py` (v4.57 / v5): `x + attn(norm(x))`, then
//! `x + mlp(norm(x))`.

use candle_core::Tensor;

use crate::activation::Activation;
use crate::attention::{AttentionConfig, AttentionInput, ProjectedKv};
use crate::error::{DecoderError, Result};
use crate::gated_delta::GatedDeltaConfig;
use crate::kv_cache::KvCache;
use crate::layer::{DecoderLayer, LayerCall};
use crate::mask::{AttentionMask, MaskBiases, MaskPlan};
use crate::norm::{NormStyle, RmsNorm};
use crate::per_layer::{LayerShape, LayerVariants};
use crate::rope::{RopeConfig, RopeScaling, RotaryEmbedding};
use crate::weights::Weights;

/// The largest `queries × keys` bias a forward builds once and shares across layers (64 MiB of f32).
const MAX_SHARED_BIAS: usize = 16 << 20;

/// The runtime blueprint of a decoder; model configs (`config.json`, GGUF metadata) convert into it.
#[derive(Debug, Clone)]
pub struct DecoderConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope: RopeConfig,
    pub max_position_embeddings: usize,
    pub qkv_bias: bool,
    pub hidden_act: Activation,
    pub norm_style: NormStyle,
    /// Gemma 2 scales queries by `query_pre_attn_scalar^-½` instead of `head_dim^-½`.
    pub query_pre_attn_scalar: Option<f64>,
    /// The RoPE position of the first token: 0, or 1 for PaliGemma (whose positions are
    /// 1-indexed in transformers' `PaliGemmaModel.forward`).
    pub position_offset: usize,
    /// Gemma 2's attention logit soft-cap: scores become `cap · tanh(scores / cap)`.
    pub attn_logit_softcapping: Option<f64>,
    /// Gemma 2 / 3's four norms per layer: the attention output and the MLP output are normed
    /// before their residual adds (`post_attention_layernorm`, `post_feedforward_layernorm`),
    /// and the MLP input by `pre_feedforward_layernorm`. Otherwise (Llama) two norms:
    /// `input_layernorm` and the pre-MLP `post_attention_layernorm`.
    pub sandwich_norms: bool,
    /// RMSNorms over each head's queries and keys before RoPE (Gemma 3, Qwen3).
    pub qk_norm: bool,
    /// A second rotary embedding for some layers (Gemma 3's local, sliding-window layers).
    pub local_rope: Option<LocalRope>,
    /// Layers that are not all alike (Gemma 4); `None`: every layer has the fields above.
    pub variants: Option<LayerVariants>,
    /// The dimensions of each head that RoPE rotates, the first ones (`partial_rotary_factor ×
    /// head_dim`: Qwen3.5 rotates a quarter); `None`: all of them.
    pub rotary_dim: Option<usize>,
    /// Qwen3.5's sigmoid output gate on the attention layers (see [`AttentionConfig::output_gate`]).
    pub attn_output_gate: bool,
    /// Linear-attention layers in place of attention (Qwen3.5's `layer_types`).
    pub linear: Option<LinearLayers>,
}

/// The Gated DeltaNet layers of a hybrid stack: their sizes, and which layers they are (the
/// others attend).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearLayers {
    pub delta: GatedDeltaConfig,
    pub layers: Vec<bool>,
}

/// The rotary embedding of the layers marked in `layers` (the others use [`DecoderConfig::rope`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LocalRope {
    pub rope: RopeConfig,
    pub layers: Vec<bool>,
}

/// The RoPE scaling numbers that must be positive, by their config names.
fn rope_factors(rope: &RopeConfig) -> Vec<(&'static str, Option<f64>)> {
    match rope.scaling {
        RopeScaling::Default => Vec::new(),
        RopeScaling::Linear { factor } => vec![("rope_scaling.factor", Some(factor))],
        RopeScaling::Proportional { fraction, factor } => {
            vec![("partial_rotary_factor", Some(fraction)), ("rope_parameters.factor", Some(factor))]
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => vec![
            ("rope_scaling.factor", Some(factor)),
            ("rope_scaling.low_freq_factor", Some(low_freq_factor)),
            ("rope_scaling.high_freq_factor", Some(high_freq_factor)),
            ("rope_scaling.original_max_position_embeddings", Some(original_max_position_embeddings as f64)),
        ],
    }
}

impl DecoderConfig {
    /// Refuses settings outside their domain, naming the field: zero sizes, heads that do not
    /// group, and non-positive or non-finite epsilons, RoPE bases and scaling factors.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(DecoderError::Config(m));
        for (name, n) in [
            ("num_hidden_layers", self.num_hidden_layers),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if let Some(max) = size_limit(name).filter(|&max| n as u64 > max) {
                return bad(format!("`{name}` is {n}, beyond the {max} tessera supports"));
            }
        }
        if self.num_hidden_layers == 0 {
            return bad("num_hidden_layers must be positive".into());
        }
        if self.num_key_value_heads == 0 || !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return bad(format!(
                "num_key_value_heads ({}) must divide num_attention_heads ({})",
                self.num_key_value_heads, self.num_attention_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim ({}) must be positive and even", self.head_dim));
        }
        for (name, n) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if n == 0 {
                return bad(format!("`{name}` must be positive, got 0"));
            }
        }
        // Numbers the arithmetic divides by, takes roots or logarithms of: positive and finite.
        let mut positive = vec![("rms_norm_eps", Some(self.rms_norm_eps)), ("rope_theta", Some(self.rope.theta))];
        positive.push(("query_pre_attn_scalar", self.query_pre_attn_scalar));
        positive.push(("attn_logit_softcapping", self.attn_logit_softcapping));
        positive.extend(rope_factors(&self.rope));
        if let Some(local) = &self.local_rope {
            positive.push(("rope_local_base_freq", Some(local.rope.theta)));
            positive.extend(rope_factors(&local.rope));
        }
        for (name, value) in positive {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return bad(format!("`{name}` must be a positive finite number, got {v}"));
            }
        }
        if let RopeScaling::Llama3 { low_freq_factor, high_freq_factor, .. } = self.rope.scaling {
            if high_freq_factor <= low_freq_factor {
                return bad(format!(
                    "`rope_scaling.high_freq_factor` ({high_freq_factor}) must exceed `low_freq_factor` \
                     ({low_freq_factor})"
                ));
            }
        }
        if let Some(rd) = self.rotary_dim.filter(|&rd| rd == 0 || !rd.is_multiple_of(2) || rd > self.head_dim) {
            return bad(format!("the rotary dimension ({rd}) must be even, positive and at most head_dim"));
        }
        if let Some(linear) = self.linear.as_ref().filter(|l| l.layers.len() != self.num_hidden_layers) {
            return bad(format!(
                "`layer_types` names {} layers, the decoder has {}",
                linear.layers.len(),
                self.num_hidden_layers
            ));
        }
        if let Some(v) = &self.variants {
            v.validate(self.num_hidden_layers, self.num_attention_heads)?;
        }
        if let Some(local) = &self.local_rope {
            if local.layers.len() != self.num_hidden_layers {
                return bad(format!(
                    "the local RoPE names {} layers, the decoder has {}",
                    local.layers.len(),
                    self.num_hidden_layers
                ));
            }
        }
        Ok(())
    }

    /// Layer `i`'s shape: its entry in [`variants`](Self::variants), else the decoder's fields.
    pub fn shape(&self, i: usize) -> LayerShape {
        match self.variants.as_ref().and_then(|v| v.shapes.get(i)) {
            Some(s) => *s,
            None => LayerShape {
                head_dim: self.head_dim,
                num_key_value_heads: self.num_key_value_heads,
                intermediate_size: self.intermediate_size,
                k_eq_v: false,
                kv_source: None,
            },
        }
    }

    /// Layer `i`'s attention.
    pub fn attention_of(&self, i: usize) -> AttentionConfig {
        let s = self.shape(i);
        AttentionConfig {
            head_dim: s.head_dim,
            num_kv_heads: s.num_key_value_heads,
            k_eq_v: s.k_eq_v,
            v_norm: self.variants.as_ref().is_some_and(|v| v.value_norm),
            ..self.attention()
        }
    }

    pub fn attention(&self) -> AttentionConfig {
        let scale = match self.query_pre_attn_scalar {
            Some(s) => 1.0 / s.sqrt(),
            None => 1.0 / (self.head_dim as f64).sqrt(),
        };
        AttentionConfig {
            hidden_size: self.hidden_size,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            qkv_bias: self.qkv_bias,
            out_bias: false,
            scale,
            out_name: "o_proj",
            softcap: self.attn_logit_softcapping,
            qk_norm: self.qk_norm.then_some((self.rms_norm_eps, self.norm_style)),
            output_gate: self.attn_output_gate,
            k_eq_v: false,
            v_norm: false,
        }
    }

    /// Layer `index`'s Gated DeltaNet sizes when it is a linear-attention layer.
    pub fn linear_layer(&self, index: usize) -> Option<&GatedDeltaConfig> {
        self.linear.as_ref().filter(|l| l.layers.get(index).copied().unwrap_or(false)).map(|l| &l.delta)
    }
}

/// What to record during a forward pass (for the embedding and attention APIs).
#[derive(Debug, Default)]
pub struct Trace {
    /// Record the input embeddings and every layer's output.
    pub capture_hidden: bool,
    /// Layers whose attention weights are recorded.
    pub attention_layers: Vec<usize>,
    /// `[embeddings, layer 0 output, …, layer N−1 output]`, each `(b, t, hidden)`.
    pub hidden_states: Vec<Tensor>,
    /// `(layer, weights (b, heads, tq, tk))` for each requested layer.
    pub attentions: Vec<(usize, Tensor)>,
}

#[derive(Clone, Debug)]
pub struct Decoder {
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    rope: RotaryEmbedding,
    /// The local layers' rotary embedding and which layers use it.
    local_rope: Option<(RotaryEmbedding, Vec<bool>)>,
    cfg: DecoderConfig,
}

impl Decoder {
    /// Loads `layers.{i}.*` and `norm.weight` from `vb` (the LM's root, e.g. `model`).
    pub fn new(cfg: &DecoderConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let layer = DecoderLayer::new(cfg, i, &layers, &vb.pp("layers").pp(i))?;
            layers.push(layer);
        }
        let norm = RmsNorm::load(cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_style, &vb.pp("norm"))?;
        // Each rotary embedding spans the head size of the layers that use it.
        let local_of = |i: usize| cfg.local_rope.as_ref().is_some_and(|l| l.layers.get(i).copied().unwrap_or(false));
        let head_dim_of = |local: bool| -> Result<usize> {
            let dims: Vec<usize> =
                (0..cfg.num_hidden_layers).filter(|&i| local_of(i) == local).map(|i| cfg.shape(i).head_dim).collect();
            match dims.first() {
                Some(&d) if dims.iter().any(|&e| e != d) => Err(DecoderError::Config(format!(
                    "the layers sharing a rotary embedding have head sizes {dims:?}; one size is needed"
                ))),
                Some(&d) => Ok(d),
                None => Ok(cfg.head_dim),
            }
        };
        let rotary = |hd: usize| cfg.rotary_dim.unwrap_or(hd);
        let hd = head_dim_of(false)?;
        let rope = RotaryEmbedding::partial(&cfg.rope, hd, rotary(hd), vb.dtype(), vb.device())?;
        let local_rope = match &cfg.local_rope {
            Some(l) => {
                let hd = head_dim_of(true)?;
                Some((RotaryEmbedding::partial(&l.rope, hd, rotary(hd), vb.dtype(), vb.device())?, l.layers.clone()))
            }
            None => None,
        };
        Ok(Self { layers, norm, rope, local_rope, cfg: cfg.clone() })
    }

    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// A fresh cache sized for this decoder's context.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.layers.len(), self.cfg.max_position_embeddings)
    }

    /// `embeds`: `(b, t, hidden)` following the `cache.len()` cached positions →
    /// final-normed hidden states `(b, t, hidden)`. The cache is extended by `t`. Every layer
    /// uses `mask`; the rows sit at consecutive positions after the cache (see
    /// [`consecutive_positions`](Self::consecutive_positions)).
    pub fn forward(&self, embeds: &Tensor, cache: &mut KvCache, mask: &AttentionMask) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        let positions = self.consecutive_positions(cache.len(), t, embeds.device())?;
        let masks = MaskPlan::uniform(mask.clone(), self.layers.len());
        self.forward_traced(embeds, cache, &masks, &positions, &mut Trace::default())
    }

    /// The RoPE positions of `t` rows after `cached` ones in one stream: `cached + i`, shifted
    /// by the config's `position_offset` (PaliGemma counts from 1).
    pub fn consecutive_positions(&self, cached: usize, t: usize, device: &candle_core::Device) -> Result<Tensor> {
        let start = cached + self.cfg.position_offset;
        let end = u32::try_from(start.saturating_add(t)).map_err(|_| DecoderError::ContextOverflow {
            requested: start.saturating_add(t),
            max: u32::MAX as usize,
        })?;
        Ok(Tensor::arange(start as u32, end, device)?)
    }

    /// The RoPE positions `(n,)` of rows that each continue their own sequence at `starts[i]`
    /// (a batched decode step), shifted like [`consecutive_positions`](Self::consecutive_positions).
    pub fn row_positions(&self, starts: &[usize], device: &candle_core::Device) -> Result<Tensor> {
        let positions = starts
            .iter()
            .map(|&s| {
                let p = s.saturating_add(self.cfg.position_offset);
                u32::try_from(p).map_err(|_| DecoderError::ContextOverflow { requested: p, max: u32::MAX as usize })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(Tensor::new(positions, device)?)
    }

    /// [`forward`](Self::forward) with each layer's rule from `masks` and the rows' RoPE
    /// `positions` `(t,)` given, recording what `trace` asks for. The rotation angles are
    /// computed once here and shared by every layer.
    pub fn forward_traced(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        masks: &MaskPlan,
        positions: &Tensor,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        self.forward_with_additions(embeds, cache, masks, positions, &[], trace)
    }

    /// [`forward_traced`](Self::forward_traced) with `additions[i]` `(b, t, hidden)` added to the
    /// output of layer `i` (Qwen3-VL's DeepStack: image features joining the first layers).
    pub fn forward_with_additions(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        masks: &MaskPlan,
        positions: &Tensor,
        additions: &[Tensor],
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let inputs = LayerInputs { additions, per_layer: None };
        self.run(embeds, std::slice::from_mut(cache), masks, positions, inputs, trace)
    }

    /// [`forward_traced`](Self::forward_traced) with the layers' extra `inputs`.
    pub fn forward_with_inputs(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        masks: &MaskPlan,
        positions: &Tensor,
        inputs: LayerInputs<'_>,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        self.run(embeds, std::slice::from_mut(cache), masks, positions, inputs, trace)
    }

    /// One decode step of several sequences at once: `embeds` `(1, n, hidden)` holds the next
    /// token of each of `n` sequences, row `i` continuing `caches[i]` at RoPE position
    /// `positions[i]` (`(n,)`, or `(3, n)` for M-RoPE). The matmuls run over all `n` rows
    /// together (each weight read once for the batch) with the kernels' row-invariant
    /// arithmetic, so every row's result is the one it gets alone; attention runs per row over
    /// its own cache under `masks` (a decode step's rule, the same for every sequence).
    pub fn forward_rows(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        masks: &MaskPlan,
        positions: &Tensor,
    ) -> Result<Tensor> {
        self.forward_rows_with_inputs(embeds, caches, masks, positions, None)
    }

    /// [`forward_rows`](Self::forward_rows) with the rows' per-layer inputs `(1, n, layers, dim)`.
    pub fn forward_rows_with_inputs(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        masks: &MaskPlan,
        positions: &Tensor,
        per_layer: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, n, _) = embeds.dims3()?;
        if b != 1 || n != caches.len() || n == 0 {
            return Err(DecoderError::Config(format!(
                "a batched step takes (1, n, hidden) rows for n caches: got ({b}, {n}) for {}",
                caches.len()
            )));
        }
        let inputs = LayerInputs { additions: &[], per_layer };
        tessera_kernels::row_invariant(|| self.run(embeds, caches, masks, positions, inputs, &mut Trace::default()))
    }

    fn run(
        &self,
        embeds: &Tensor,
        caches: &mut [KvCache],
        masks: &MaskPlan,
        positions: &Tensor,
        inputs: LayerInputs<'_>,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let LayerInputs { additions, per_layer } = inputs;
        if additions.len() > self.layers.len() {
            return Err(DecoderError::Config(format!(
                "{} layer additions for {} layers",
                additions.len(),
                self.layers.len()
            )));
        }
        let t = embeds.dim(1)?;
        // One cache: the rows follow its positions; several: one new row each.
        let (offset, new) = match caches {
            [cache] => (cache.len(), t),
            _ => (caches.iter().map(KvCache::len).max().unwrap_or(0), 1),
        };
        if offset + new > self.cfg.max_position_embeddings {
            return Err(DecoderError::ContextOverflow {
                requested: offset + new,
                max: self.cfg.max_position_embeddings,
            });
        }
        if masks.len() != self.layers.len() {
            return Err(DecoderError::Config(format!(
                "the mask plan has {} layers, the decoder {}",
                masks.len(),
                self.layers.len()
            )));
        }
        let rope = self.rope.at(positions)?;
        if rope.len() != t {
            return Err(DecoderError::Config(format!("{} positions for {t} rows", rope.len())));
        }
        let local = match &self.local_rope {
            Some((r, layers)) => Some((r.at(positions)?, layers)),
            None => None,
        };
        // The paths that add a bias (not the fused CPU kernels) share one per distinct rule,
        // built here once rather than in every layer (up to 64 MiB; longer prompts build each
        // query chunk's rows as they go).
        let kv_len = offset + t;
        let fused = crate::cpu_op::kernels_take(embeds);
        let shared = caches.len() == 1 && (!fused || !trace.attention_layers.is_empty());
        let biases = if shared && t * kv_len <= MAX_SHARED_BIAS {
            masks.biases(t, kv_len, embeds.dtype(), embeds.device())?
        } else {
            MaskBiases::default()
        };
        let mut x = embeds.clone();
        if trace.capture_hidden {
            trace.hidden_states.push(x.clone());
        }
        // The keys and values each layer projected, kept for the layers that reuse them.
        let mut projected: Vec<Option<ProjectedKv>> = vec![None; self.layers.len()];
        for (i, layer) in self.layers.iter().enumerate() {
            let capture = trace.attention_layers.contains(&i);
            let input = AttentionInput {
                rope: Some(match &local {
                    Some((angles, layers)) if layers.get(i).copied().unwrap_or(false) => angles,
                    _ => &rope,
                }),
                mask: masks.layer(i)?,
                bias: biases.bias_of(masks.layer(i)?),
                cache: Some((&mut *caches, i)),
                capture,
                residual: None,
            };
            let reused = match layer.kv_source {
                Some(j) => Some(projected.get(j).cloned().flatten().ok_or_else(|| {
                    DecoderError::Config(format!(
                        "layer {i} reuses the keys and values of layer {j}, not run before it"
                    ))
                })?),
                None => None,
            };
            let call = LayerCall { attention: input, reused, per_layer: per_layer.map(|p| (p, i)) };
            let (y, weights, kv) = layer.forward(&x, call)?;
            if self.layers.iter().any(|l| l.kv_source == Some(i)) {
                projected[i] = kv;
            }
            x = match additions.get(i) {
                Some(a) => (y + a)?,
                None => y,
            };
            if let Some(w) = weights {
                trace.attentions.push((i, w));
            }
            if trace.capture_hidden {
                trace.hidden_states.push(x.clone());
            }
        }
        self.norm.forward(&x)
    }
}

/// What a forward adds to its layers besides the embeddings.
#[derive(Debug, Default, Clone, Copy)]
pub struct LayerInputs<'a> {
    /// `additions[i]` `(b, t, hidden)` is added to layer `i`'s output (Qwen3-VL's DeepStack).
    pub additions: &'a [Tensor],
    /// The per-layer inputs `(b, t, layers, dim)` ([`crate::per_layer::PerLayerEmbedding`]).
    pub per_layer: Option<&'a Tensor>,
}

/// The largest value a size field of a checkpoint's config may take (`None`: not a size this
/// knows). Far above every published model (126 layers, widths of 16k, 262k-token vocabularies,
/// 10M-token contexts) and far below what would exhaust memory or overflow arithmetic, so a
/// corrupt or hostile number is refused before anything is sized from it.
pub fn size_limit(field: &str) -> Option<u64> {
    Some(match field {
        "num_hidden_layers" | "num_layers" | "depth" => 1 << 12,
        "num_attention_heads" | "num_key_value_heads" | "num_heads" => 1 << 12,
        "hidden_size" | "head_dim" | "embed_dim" | "projection_dim" => 1 << 18,
        "intermediate_size" => 1 << 20,
        "vocab_size" => 1 << 24,
        "max_position_embeddings" => 1 << 28,
        "image_size" | "patch_size" => 1 << 14,
        _ => return None,
    })
}
