//! Attention in Candle's device-generic ops: the path every device but the CPU kernels' takes
//! (CUDA, Metal; bf16/f16 and soft-capped scores on the CPU; the CPU with
//! `TESSERA_KERNELS=off`), as transformers' eager attention computes it (`eager_attention_forward`
//! in `modeling_llama.py`): scores scaled, soft-capped and masked in the activations' dtype, the
//! softmax in f32. Long prompts run over the queries in chunks ([`attention_in_query_chunks`]);
//! [`scaled_dot_product_attention_slow`] is the obviously-correct twin the tests compare with.

use candle_core::{DType, Tensor, D};

use super::flash::flash_attention;
use super::fused::fused_chunk;
use super::half_logits::HalfLogits;
use super::{over_cache, Attention, Projected, Scores};
use crate::error::{DecoderError, Result};
use crate::mask::AttentionMask;

/// `softmax(q kᵀ · scale + bias) v` for grouped heads.
///
/// Shapes: `q` `(b, heads, tq, d)`, `k`/`v` `(b, kv_heads, tk, d)` with `heads` a multiple of
/// `kv_heads`, `bias` `(tq, tk)` additive (0 / −∞). Returns the output `(b, heads, tq, d)`
/// and the attention weights `(b, heads, tq, tk)` (f32). As in transformers' eager attention,
/// the scores are scaled, soft-capped and masked in the activations' dtype (each op rounds to
/// bf16/f16 there, as PyTorch's do), and the softmax runs in f32.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
    scale: f64,
) -> Result<(Tensor, Tensor)> {
    capped_attention(q, k, v, bias, Scores::scaled(scale))
}

/// [`scaled_dot_product_attention`] with the scores' rule `scores` (Gemma 2's soft-capping).
pub fn capped_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
    scores_rule: Scores,
) -> Result<(Tensor, Tensor)> {
    let Scores { scale, softcap } = scores_rule;
    let (b, heads, tq, d) = q.dims4()?;
    let (_, kv_heads, tk, _) = k.dims4()?;
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(DecoderError::Config(format!("{heads} query heads cannot share {kv_heads} kv heads")));
    }
    let groups = heads / kv_heads;
    let dtype = q.dtype();
    // (b, kv_heads, groups·tq, d): the heads of one group become extra query rows.
    let q = q.contiguous()?.reshape((b, kv_heads, groups * tq, d))?;
    let scores = q.matmul(&k.t()?)?; // (b, kv_heads, groups·tq, tk)
    let logits = if softcap.is_none() && HalfLogits::takes(&scores) {
        let op = HalfLogits { scale, queries: tq };
        match bias {
            Some(bias) => scores.apply_op2_no_bwd(&bias.to_dtype(dtype)?.contiguous()?, &op)?,
            None => scores.apply_op1_no_bwd(&op)?,
        }
    } else {
        let scores = (scores * scale)?;
        let scores = match softcap {
            Some(cap) => ((scores / cap)?.tanh()? * cap)?,
            None => scores,
        };
        let scores = match bias {
            Some(bias) => scores
                .reshape((b, kv_heads, groups, tq, tk))?
                .broadcast_add(&bias.to_dtype(dtype)?)?
                .reshape((b, kv_heads, groups * tq, tk))?,
            None => scores,
        };
        scores.to_dtype(DType::F32)?
    };
    let weights = candle_nn::ops::softmax_last_dim(&logits)?;
    let out = weights.to_dtype(dtype)?.matmul(&v.contiguous_if_needed()?)?; // (b, kv_heads, groups·tq, d)
    let out = out.reshape((b, heads, tq, d))?;
    Ok((out, weights.reshape((b, heads, tq, tk))?))
}

/// Bytes of f32 scores one attention call may hold at once (all heads together).
const SCORE_BYTES: usize = 64 << 20;

/// Query rows per chunk so that `heads × rows × kv_len` f32 scores fit in [`SCORE_BYTES`].
fn query_chunk(heads: usize, kv_len: usize) -> usize {
    (SCORE_BYTES / 4 / (heads * kv_len).max(1)).max(1)
}

/// [`scaled_dot_product_attention`] over the queries `rows` at a time, keeping only the
/// output: a long prompt never holds its `T × T` scores of every head at once. `q`
/// `(b, heads, tq, d)` follows `tk − tq` cached positions. `bias`: `mask`'s bias `(tq, tk)`
/// when the caller built it once for every layer (each chunk reads its rows); `None` builds
/// each chunk's rows here.
pub fn attention_in_query_chunks(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &AttentionMask,
    bias: Option<&Tensor>,
    scores: Scores,
    rows: usize,
) -> Result<Tensor> {
    let Scores { scale, softcap } = scores;
    let tq = q.dim(2)?;
    let tk = k.dim(2)?;
    let first = tk.saturating_sub(tq);
    let rows = rows.max(1);
    let mut outs = Vec::with_capacity(tq.div_ceil(rows));
    let fused = crate::cpu_op::kernels_take(q) && softcap.is_none();
    // Where later queries see more keys (causal masks), smaller chunks let each one multiply
    // only the keys its queries see: a causal prompt of T tokens does about half of T² work.
    // Elsewhere (a GPU) the chunks stay as large as the score budget allows: each costs about
    // ten kernel launches per layer, which a small model's short prompt would wait on.
    let rows = if *mask != AttentionMask::Bidirectional && crate::cpu_op::kernels_run_on(q.device()) {
        rows.min(CAUSAL_CHUNK_ROWS)
    } else {
        rows
    };
    for start in (0..tq).step_by(rows) {
        let n = rows.min(tq - start);
        let qc = if n == tq { q.clone() } else { q.narrow(2, start, n)? };
        if fused {
            outs.push(fused_chunk(&qc, k, v, mask, scale, first + start)?);
            continue;
        }
        let keys = chunk_keys(mask, first + start, n, tk);
        let (kc, vc) = narrow_keys(k, v, &keys)?;
        let rows_bias = match bias {
            Some(b) => Some(b.narrow(0, start, n)?),
            None => mask.bias_at(first + start, n, tk, q.dtype(), q.device())?,
        };
        let rows_bias = match rows_bias {
            Some(b) if keys.len() < tk => Some(b.narrow(1, keys.start, keys.len())?),
            b => b,
        };
        outs.push(capped_attention(&qc, &kc, &vc, rows_bias.as_ref(), scores)?.0);
    }
    if outs.len() == 1 {
        return Ok(outs.remove(0));
    }
    Ok(Tensor::cat(&outs, 2)?)
}

/// Query rows per chunk on the CPU kernels' device (f32 fused, bf16/f16 through [`HalfLogits`])
/// under every mask but the bidirectional one: each chunk multiplies only the keys its queries
/// see, so a causal prompt of 2048 tokens computes 53% of the `T × T` scores.
const CAUSAL_CHUNK_ROWS: usize = 128;

/// The keys that some query of `first_q .. first_q + n` sees among `0..tk`: the union of their
/// visible ranges (a query outside every block of a block-diagonal mask sees none), or all
/// `tk` when none sees any.
pub(super) fn chunk_keys(mask: &AttentionMask, first_q: usize, n: usize, tk: usize) -> std::ops::Range<usize> {
    let (mut lo, mut hi) = (tk, 0);
    for q in first_q..first_q + n {
        let r = mask.visible_keys(q, tk);
        if !r.is_empty() {
            (lo, hi) = (lo.min(r.start), hi.max(r.end));
        }
    }
    if lo < hi {
        lo..hi
    } else {
        0..tk
    }
}

/// `k` and `v` `(b, kv_heads, tk, d)` narrowed to the positions `keys`.
pub(super) fn narrow_keys(k: &Tensor, v: &Tensor, keys: &std::ops::Range<usize>) -> Result<(Tensor, Tensor)> {
    if keys.start == 0 && keys.end == k.dim(2)? {
        return Ok((k.clone(), v.clone()));
    }
    Ok((k.narrow(2, keys.start, keys.len())?, v.narrow(2, keys.start, keys.len())?))
}

/// The obviously-correct twin: keys and values repeated per head, one head at a time.
pub fn scaled_dot_product_attention_slow(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
    scale: f64,
) -> Result<(Tensor, Tensor)> {
    let (_, heads, _, _) = q.dims4()?;
    let kv_heads = k.dim(1)?;
    let groups = heads / kv_heads;
    let mut outs = Vec::new();
    let mut ws = Vec::new();
    for h in 0..heads {
        let qh = q.narrow(1, h, 1)?.to_dtype(DType::F32)?;
        let kh = k.narrow(1, h / groups, 1)?.to_dtype(DType::F32)?;
        let vh = v.narrow(1, h / groups, 1)?.to_dtype(DType::F32)?;
        let mut s = (qh.matmul(&kh.t()?.contiguous()?)? * scale)?;
        if let Some(bias) = bias {
            s = s.broadcast_add(&bias.to_dtype(DType::F32)?)?;
        }
        let m = s.max_keepdim(D::Minus1)?;
        let e = s.broadcast_sub(&m)?.exp()?;
        let w = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        outs.push(w.matmul(&vh.contiguous()?)?);
        ws.push(w);
    }
    Ok((Tensor::cat(&outs, 1)?.to_dtype(q.dtype())?, Tensor::cat(&ws, 1)?))
}

/// A tensor as a matmul operand, copied only where its matrices are not row-major.
pub(super) trait ContiguousIfNeeded {
    fn contiguous_if_needed(&self) -> candle_core::Result<Tensor>;
}

impl ContiguousIfNeeded for Tensor {
    /// A narrowed cache view is fine as a matmul operand as long as each matrix is row-major.
    fn contiguous_if_needed(&self) -> candle_core::Result<Tensor> {
        let stride = self.stride();
        let n = stride.len();
        if n >= 2 && stride[n - 1] == 1 && stride[n - 2] == self.dims()[n - 1] {
            Ok(self.clone())
        } else {
            self.contiguous()
        }
    }
}

/// `k`, `v` in `dtype`: a cache stored in another dtype (f16 under f32 activations) converted.
pub(super) fn kv_in(k: &Tensor, v: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
    if k.dtype() != dtype {
        Ok((k.to_dtype(dtype)?, v.to_dtype(dtype)?))
    } else {
        Ok((k.clone(), v.clone()))
    }
}

impl Attention {
    /// [`Path::Generic`](super::Path::Generic): the heads over the cache (if any), then
    /// [`attend`](Self::attend) → `(b, t, heads·d)`.
    pub(super) fn generic(&self, call: Projected<'_>) -> Result<Tensor> {
        let (q, k, v) = self.heads(call.q, call.k, call.v, call.rope, false)?;
        let (k, v) = over_cache(call.cache, k, v)?;
        self.attend(&q, &k, &v, call.mask, call.bias)
    }

    /// `softmax(q kᵀ · scale + mask) v` for `q` `(b, heads, tq, d)` over `k`/`v`
    /// `(b, kv_heads, tk, d)` (the cache's positions, then the new ones) → `(b, tq, heads·d)`:
    /// flash-attention where it applies, else Candle's ops over the queries in chunks that bound
    /// the scores held at once. `bias`: `mask`'s bias `(tq, tk)` if the caller built it.
    pub(super) fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &AttentionMask,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, _, t, _) = q.dims4()?;
        if let Some(out) = flash_attention(q, k, v, mask, self.scores())? {
            return Ok(out.reshape((b, t, self.num_heads * self.head_dim))?);
        }
        let kv_len = k.dim(2)?;
        let (k, v) = kv_in(k, v, q.dtype())?;
        let rows = query_chunk(b * self.num_heads, kv_len);
        let out = attention_in_query_chunks(q, &k, &v, mask, bias, self.scores(), rows)?;
        Ok(out.transpose(1, 2)?.reshape((b, t, self.num_heads * self.head_dim))?)
    }

    /// [`Path::Captured`](super::Path::Captured): the heads over the cache (if any), attention
    /// over the whole mask in one pass → the output `(b, t, heads·d)` and the weights
    /// `(b, heads, t, tk)` (f32).
    pub(super) fn captured(&self, call: Projected<'_>) -> Result<(Tensor, Tensor)> {
        let (q, k, v) = self.heads(call.q, call.k, call.v, call.rope, false)?;
        let (k, v) = over_cache(call.cache, k, v)?;
        let (b, _, t, _) = q.dims4()?;
        let kv_len = k.dim(2)?;
        let (k, v) = kv_in(&k, &v, q.dtype())?;
        let built;
        let bias = match call.bias {
            Some(b) => Some(b),
            None => {
                built = call.mask.bias(t, kv_len, q.dtype(), q.device())?;
                built.as_ref()
            }
        };
        let (out, weights) = capped_attention(&q, &k, &v, bias, self.scores())?;
        Ok((out.transpose(1, 2)?.reshape((b, t, self.num_heads * self.head_dim))?, weights))
    }
}
