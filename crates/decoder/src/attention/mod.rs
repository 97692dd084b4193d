//! Multi-head attention with grouped key/value heads (Ainslie et al. 2023, "GQA"): the layer
//! (`q_proj`, `k_proj`, `v_proj`, `o_proj`, optional q/k norms) and its one entry point,
//! [`Attention::forward`], which picks the implementation that runs a call (`Path`).
//!
//! MHA (`kv_heads == heads`), GQA and MQA (`kv_heads == 1`) are one code path: the query
//! heads that share a key/value head are folded into the row dimension of one matmul, so
//! keys and values are never repeated in memory.
//!
//! The implementations, one module each:
//! - `generic`: Candle's device-generic ops (CUDA, Metal; bf16/f16 and soft-capped scores on
//!   the CPU; the CPU with `TESSERA_KERNELS=off`), over the queries in chunks, and the eager
//!   attention that returns its weights; with `half_logits`, its one-pass bf16/f16 logits on
//!   the CPU;
//! - `flash`: flash-attention v2 on CUDA (feature `flash-attn`), which the generic path tries
//!   first;
//! - `fused`: tessera's CPU kernels in f32, for one sequence;
//! - `batched`: a batched decode step, each row over its own cache (the kernels' one call for
//!   every row, or each row alone through the generic path).

mod batched;
mod flash;
mod fused;
mod generic;
mod half_logits;

use candle_core::Tensor;

use crate::error::{DecoderError, Result};
use crate::kv_cache::KvCache;
use crate::linear::Linear;
use crate::mask::AttentionMask;
use crate::norm::{NormStyle, RmsNorm};
use crate::rope::RopeAngles;
use crate::weights::Weights;

pub use flash::{flash_attention, flash_attention_enabled};
pub use generic::{
    attention_in_query_chunks, capped_attention, scaled_dot_product_attention, scaled_dot_product_attention_slow,
};

/// How the scores `q·kᵀ` become logits before the mask: multiplied by `scale`, then (Gemma 2)
/// soft-capped to `cap · tanh(scores / cap)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    pub scale: f64,
    pub softcap: Option<f64>,
}

impl Scores {
    pub fn scaled(scale: f64) -> Self {
        Self { scale, softcap: None }
    }
}

#[derive(Debug, Clone)]
pub struct AttentionConfig {
    pub hidden_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Biases on the q, k and v projections (Qwen2, ViTs).
    pub qkv_bias: bool,
    /// Bias on the output projection (ViTs).
    pub out_bias: bool,
    /// Softmax scale; usually `1/√head_dim`.
    pub scale: f64,
    /// Gemma 2's attention logit soft-cap (`attn_logit_softcapping`).
    pub softcap: Option<f64>,
    /// RMSNorms over each head's queries and keys before RoPE (`q_norm`, `k_norm`; Gemma 3,
    /// Qwen3): their epsilon and style.
    pub qk_norm: Option<(f64, NormStyle)>,
    /// The output projection's name in the checkpoint (`o_proj` in LMs, `out_proj` in ViTs).
    pub out_name: &'static str,
    /// Qwen3.5's output gate: `q_proj` gives each head its queries and then as many gate
    /// values, and the attention output is multiplied by `σ(gate)` before `o_proj`.
    pub output_gate: bool,
    /// Values and keys come from one projection, `k_proj` (Gemma 4's `attention_k_eq_v`
    /// full-attention layers): no `v_proj`; the values are the keys before their norm and RoPE.
    pub k_eq_v: bool,
    /// A parameter-free RMSNorm over each head's values (Gemma 4's `v_norm`), with the q/k
    /// norms' epsilon.
    pub v_norm: bool,
}

impl AttentionConfig {
    pub fn validate(&self) -> Result<()> {
        if self.num_heads == 0 || self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(DecoderError::Config(format!(
                "num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})",
                self.num_heads, self.num_kv_heads
            )));
        }
        Ok(())
    }
}

/// Where this attention call sits: the rotary table (if any), the mask, and the cache slot.
pub struct AttentionInput<'a> {
    /// The rotation of each row of `x` (its positions' angles); `None`: no RoPE (vision towers).
    pub rope: Option<&'a RopeAngles>,
    /// Which keys each query sees; queries are at absolute positions `cached .. cached + t`.
    pub mask: &'a AttentionMask,
    /// `mask`'s additive bias `(t, kv_len)`, when the caller built it once for all layers (the
    /// paths that add a bias use it; the fused CPU path reads `mask`). `None`: built here if
    /// needed.
    pub bias: Option<&'a Tensor>,
    /// The caches and this layer's index in them; `None` attends over `x` alone. One cache:
    /// every row of `x` continues it. Several: `x` is `(1, n, hidden)` and row `i` is the next
    /// token of the sequence whose cache is `caches[i]` (a batched decode step: the
    /// projections see all rows at once, each row attends over its own cache).
    pub cache: Option<(&'a mut [KvCache], usize)>,
    /// Return the attention weights `(b, heads, tq, tk)`.
    pub capture: bool,
    /// Added to the output (the layer's skip connection), inside the output projection's pass
    /// where the kernels can.
    pub residual: Option<&'a Tensor>,
}

#[derive(Clone, Debug)]
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    scale: f64,
    softcap: Option<f64>,
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    output_gate: bool,
    /// `None` when the values are the keys' projection ([`AttentionConfig::k_eq_v`]).
    v_proj_used: bool,
    v_norm: Option<RmsNorm>,
}

/// One attention call's keys and values as projected, `(b, t, kv_heads·d)` each, before their
/// norms and RoPE: what a layer that reuses another's keys and values (Gemma 4's
/// `num_kv_shared_layers`) is given instead of projecting its own.
pub type ProjectedKv = (Tensor, Tensor);

impl Attention {
    /// An attention from projections already loaded (Qwen2-VL's vision blocks store q, k and v
    /// as one `qkv` matrix); `cfg` gives the heads, scale and soft-cap (no q/k norms).
    pub fn from_parts(cfg: &AttentionConfig, q: Linear, k: Linear, v: Linear, o: Linear) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            q_proj: q,
            k_proj: k,
            v_proj: v,
            o_proj: o,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            scale: cfg.scale,
            softcap: cfg.softcap,
            qk_norm: None,
            output_gate: cfg.output_gate,
            v_proj_used: true,
            v_norm: None,
        })
    }

    pub fn new(cfg: &AttentionConfig, vb: &Weights) -> Result<Self> {
        Self::load(cfg, vb, None)
    }

    /// A layer that reuses the keys and values of `source` (an earlier layer of the same kind,
    /// Gemma 4's `num_kv_shared_layers`): only `q_proj`, `q_norm` and `o_proj` are loaded from
    /// `vb`; the keys' norm is `source`'s, applied to the [`ProjectedKv`] it is given.
    pub fn reusing(cfg: &AttentionConfig, vb: &Weights, source: &Attention) -> Result<Self> {
        if (cfg.num_kv_heads, cfg.head_dim) != (source.num_kv_heads, source.head_dim) {
            return Err(DecoderError::Config(format!(
                "a layer reusing keys and values needs its source's {} key/value heads of {}, not {} of {}",
                source.num_kv_heads, source.head_dim, cfg.num_kv_heads, cfg.head_dim
            )));
        }
        Self::load(cfg, vb, Some(source))
    }

    fn load(cfg: &AttentionConfig, vb: &Weights, source: Option<&Attention>) -> Result<Self> {
        cfg.validate()?;
        let (h, q_out, kv_out) = (cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim);
        let q_rows = if cfg.output_gate { 2 * q_out } else { q_out };
        let q_proj = vb.linear(h, q_rows, cfg.qkv_bias, "q_proj")?;
        let eps_style = cfg.qk_norm.unwrap_or((1e-6, NormStyle::Plain));
        let q_norm = match cfg.qk_norm {
            Some((eps, style)) => Some(RmsNorm::load(cfg.head_dim, eps, style, &vb.pp("q_norm"))?),
            None => None,
        };
        let (k_proj, v_proj, k_norm, v_proj_used, v_norm) = match source {
            Some(s) => (
                s.k_proj.clone(),
                s.v_proj.clone(),
                s.qk_norm.as_ref().map(|(_, k)| k.clone()),
                s.v_proj_used,
                s.v_norm.clone(),
            ),
            None => {
                let k_proj = vb.linear(h, kv_out, cfg.qkv_bias, "k_proj")?;
                let v_proj = match cfg.k_eq_v {
                    true => k_proj.clone(),
                    false => vb.linear(h, kv_out, cfg.qkv_bias, "v_proj")?,
                };
                let k_norm = match cfg.qk_norm {
                    Some((eps, style)) => Some(RmsNorm::load(cfg.head_dim, eps, style, &vb.pp("k_norm"))?),
                    None => None,
                };
                let v_norm = match cfg.v_norm {
                    true => Some(RmsNorm::unscaled(cfg.head_dim, eps_style.0, vb.dtype(), vb.device())?),
                    false => None,
                };
                (k_proj, v_proj, k_norm, !cfg.k_eq_v, v_norm)
            }
        };
        Ok(Self {
            output_gate: cfg.output_gate,
            q_proj,
            k_proj,
            v_proj,
            o_proj: vb.linear(q_out, h, cfg.out_bias, cfg.out_name)?,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            scale: cfg.scale,
            softcap: cfg.softcap,
            qk_norm: q_norm.zip(k_norm),
            v_proj_used,
            v_norm,
        })
    }

    /// `x`: `(b, t, hidden)` → `(b, t, hidden)` (plus `input.residual`), and the weights when
    /// `input.capture`.
    pub fn forward(&self, x: &Tensor, input: AttentionInput<'_>) -> Result<(Tensor, Option<Tensor>)> {
        let (out, weights, _) = self.forward_kv(x, input, None)?;
        Ok((out, weights))
    }

    /// [`forward`](Self::forward) over the keys and values `reused` (another layer's, as it
    /// projected them) when given, else its own; also returns the keys and values it used.
    pub fn forward_kv(
        &self,
        x: &Tensor,
        input: AttentionInput<'_>,
        reused: Option<ProjectedKv>,
    ) -> Result<(Tensor, Option<Tensor>, ProjectedKv)> {
        let path = Path::choose(x, &input, self.softcap)?;
        let AttentionInput { rope, mask, bias, cache, capture: _, residual } = input;
        let (q, k, v) = match reused {
            Some((k, v)) => (self.q_proj.forward(x)?, k, v),
            None if self.v_proj_used => {
                let [q, k, v] = Linear::forward_shared([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
                (q, k, v)
            }
            None => {
                let [q, k] = Linear::forward_shared([&self.q_proj, &self.k_proj], x)?;
                (q, k.clone(), k)
            }
        };
        let kv = (k.clone(), v.clone());
        let (q, gate) = self.gated_queries(q)?;
        let call = Projected { q, k, v, rope, mask, bias, cache };
        // (b, t, heads·d)
        let (out, weights) = match path {
            Path::BatchedRows => (self.batched_rows(call)?, None),
            Path::EachRow => (self.each_row(call)?, None),
            Path::Fused => (self.fused(call)?, None),
            Path::Captured => {
                let (out, weights) = self.captured(call)?;
                (out, Some(weights))
            }
            Path::Generic => (self.generic(call)?, None),
        };
        let out = match gate {
            Some(gate) => (out * candle_nn::ops::sigmoid(&gate)?)?,
            None => out,
        };
        Ok((self.o_proj.forward_add(&out, residual)?, weights, kv))
    }

    /// `q_proj`'s output `(b, t, heads·d)`, or with the output gate `(b, t, heads·2d)` (each
    /// head's queries, then its gate: transformers' `view(…, heads, 2d).chunk(2)`) → the queries
    /// `(b, t, heads·d)` and the gate `(b, t, heads·d)`.
    fn gated_queries(&self, q: Tensor) -> Result<(Tensor, Option<Tensor>)> {
        if !self.output_gate {
            return Ok((q, None));
        }
        let (b, t, _) = q.dims3()?;
        let (n, d) = (self.num_heads, self.head_dim);
        // (b, t, heads, 2d)
        let q = q.reshape((b, t, n, 2 * d))?;
        let half = |at: usize| -> Result<Tensor> { Ok(q.narrow(3, at, d)?.contiguous()?.reshape((b, t, n * d))?) };
        Ok((half(0)?, Some(half(d)?)))
    }

    /// The projections `q` `(b, t, heads·d)`, `k`, `v` `(b, t, kv_heads·d)` as heads
    /// `(b, heads, t, d)`, `(b, kv_heads, t, d)`, q and k normed (`qk_norm`) and rotated (`rope`).
    /// `strided`: laid out for the CPU kernels, which read heads whose rows are contiguous as
    /// views (the transposed projections) where nothing else needs a copy; otherwise contiguous.
    fn heads(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        rope: Option<&RopeAngles>,
        strided: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, t, _) = q.dims3()?;
        let heads = |y: Tensor, n: usize, copy: bool| -> Result<Tensor> {
            // (b, t, n·d) → (b, n, t, d)
            let y = y.reshape((b, t, n, self.head_dim))?.transpose(1, 2)?;
            Ok(if copy { y.contiguous()? } else { y })
        };
        let copy_q = !strided || rope.is_some() || t <= fused::FUSED_MAX_QUERIES;
        // The kernels and the cache's CPU write read strided keys and values; RoPE takes
        // contiguous ones.
        let copy_k = !strided || rope.is_some();
        let q = heads(q, self.num_heads, copy_q)?;
        let k = heads(k, self.num_kv_heads, copy_k)?;
        let v = match &self.v_norm {
            Some(norm) => norm.forward(&heads(v, self.num_kv_heads, true)?)?,
            None => heads(v, self.num_kv_heads, !strided)?,
        };
        let (q, k) = match &self.qk_norm {
            Some((qn, kn)) => (qn.forward(&q.contiguous()?)?, kn.forward(&k.contiguous()?)?),
            None => (q, k),
        };
        let (q, k) = match rope {
            Some(rope) => (rope.apply(&q)?, rope.apply(&k)?),
            None => (q, k),
        };
        Ok((q, k, v))
    }

    fn scores(&self) -> Scores {
        Scores { scale: self.scale, softcap: self.softcap }
    }
}

/// Which implementation runs one attention call; [`Path::choose`] says when each one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// A batched decode step on the CPU kernels: every row over its own cache in one kernel
    /// call ([`batched`]).
    BatchedRows,
    /// A batched decode step elsewhere: each row over its own cache through [`Path::Generic`]'s
    /// attention, one after another ([`batched`]).
    EachRow,
    /// The CPU kernels' attention for one sequence ([`fused`]).
    Fused,
    /// Candle's eager attention over the whole mask, returning the weights ([`generic`]).
    Captured,
    /// Flash-attention where it applies ([`flash`]: it decides from the heads and the cache's
    /// dtype), else Candle's ops over the queries in chunks ([`generic`]).
    Generic,
}

impl Path {
    /// The path for `x` `(b, t, hidden)` under `input`. The CPU kernels "take" a call when `x`
    /// is f32 on the CPU with the kernels on ([`crate::kernels_run_on`]) and the scores are not
    /// soft-capped (the kernels do not cap).
    ///
    /// - Several caches (a batched decode step; `x` must be `(1, n, hidden)` for `n` caches and
    ///   capture no weights): [`Path::BatchedRows`] where the kernels take it, else
    ///   [`Path::EachRow`].
    /// - Weights captured: [`Path::Captured`].
    /// - Otherwise [`Path::Fused`] where the kernels take it, else [`Path::Generic`] (CUDA, Metal,
    ///   bf16/f16, soft-capped scores, `TESSERA_KERNELS=off`).
    fn choose(x: &Tensor, input: &AttentionInput<'_>, softcap: Option<f64>) -> Result<Path> {
        let (b, t, _) = x.dims3()?;
        let kernels = crate::cpu_op::kernels_take(x) && softcap.is_none();
        Ok(match &input.cache {
            Some((caches, _)) if caches.len() > 1 => {
                if b != 1 || t != caches.len() || input.capture {
                    return Err(DecoderError::Config(format!(
                        "a batched step takes one row per cache: input ({b}, {t}), {} caches{}",
                        caches.len(),
                        if input.capture { ", and captures no weights" } else { "" }
                    )));
                }
                if kernels {
                    Path::BatchedRows
                } else {
                    Path::EachRow
                }
            }
            _ if input.capture => Path::Captured,
            _ if kernels => Path::Fused,
            _ => Path::Generic,
        })
    }
}

/// One call's projections, `q` `(b, t, heads·d)` and `k`, `v` `(b, t, kv_heads·d)`, with where
/// they sit ([`AttentionInput`]'s fields): what [`Attention::forward`] hands the path it chose.
struct Projected<'a> {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rope: Option<&'a RopeAngles>,
    mask: &'a AttentionMask,
    bias: Option<&'a Tensor>,
    cache: Option<(&'a mut [KvCache], usize)>,
}

/// `k`, `v` `(b, kv_heads, t, d)` appended to the one cache in `cache`: every position it holds,
/// the new ones last; without a cache, `k` and `v` as they are.
fn over_cache(cache: Option<(&mut [KvCache], usize)>, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
    match cache {
        Some((caches, layer)) => {
            let cache = caches
                .first_mut()
                .ok_or_else(|| DecoderError::Config("an attention call was given no cache".into()))?;
            cache.append(layer, &k, &v)
        }
        None => Ok((k, v)),
    }
}

/// The caches of a batched decode step (the paths [`Path::choose`] picks only with several).
fn several_caches(cache: Option<(&mut [KvCache], usize)>) -> Result<(&mut [KvCache], usize)> {
    cache.ok_or_else(|| DecoderError::Config("a batched step was given no caches".into()))
}
