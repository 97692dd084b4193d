//! Multi-head attention with grouped key/value heads (Ainslie et al. 2023, "GQA").
//!
//! MHA (`kv_heads == heads`), GQA and MQA (`kv_heads == 1`) are one code path: the query
//! heads that share a key/value head are folded into the row dimension of one matmul, so
//! keys and values are never repeated in memory.

use candle_core::{DType, Tensor, D};

use crate::error::{DecoderError, Result};
use crate::kv_cache::KvCache;
use crate::linear::Linear;
use crate::mask::AttentionMask;
use crate::norm::{NormStyle, RmsNorm};
use crate::rope::RopeAngles;
use crate::weights::Weights;

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

/// `scale · s + bias` for bf16/f16 scores `s` `(…, rows, tk)` on the CPU kernels' device, in f32
/// for the softmax, rounded where Candle's ops round it on the generic path (`Tensor::affine`
/// with the scale in the scores' dtype, a broadcast add, a cast): one pass instead of three,
/// the same bits (a test checks). Row `r` takes the bias row `r mod queries` `(queries, tk)`.
struct HalfLogits {
    scale: f64,
    queries: usize,
}

impl HalfLogits {
    fn takes(scores: &Tensor) -> bool {
        matches!(scores.dtype(), DType::BF16 | DType::F16) && crate::cpu_op::kernels_run_on(scores.device())
    }

    fn logits<T: HalfFloat>(&self, s: &[T], bias: Option<&[T]>, tk: usize) -> candle_core::Result<Vec<f32>> {
        let queries = self.queries.max(1);
        if tk == 0 || !s.len().is_multiple_of(tk) || bias.is_some_and(|b| b.len() != queries * tk) {
            candle_core::bail!("attention logits: {} scores, {tk} keys, {queries} bias rows", s.len());
        }
        // `Tensor::affine` rounds its factor to the dtype, then each op rounds its result;
        // `+ 0.0` is the affine's addend (it turns −0 into +0).
        let mul = T::round_f64(self.scale);
        let fill = |r: usize, row: &mut [std::mem::MaybeUninit<f32>]| {
            let scores = &s[r * tk..(r + 1) * tk];
            match bias {
                Some(b) => {
                    let b = &b[(r % queries) * tk..(r % queries + 1) * tk];
                    for ((o, &x), &b) in row.iter_mut().zip(scores).zip(b) {
                        o.write(T::round(T::round(x.to_f32() * mul) + 0.0 + b.to_f32()));
                    }
                }
                None => {
                    for (o, &x) in row.iter_mut().zip(scores) {
                        o.write(T::round(x.to_f32() * mul) + 0.0);
                    }
                }
            }
        };
        // SAFETY: every row of `tk` is written, and the rows tile the output (`s.len()` is a
        // multiple of `tk`, checked above).
        unsafe {
            crate::cpu_op::written_by(s.len(), |out| {
                tessera_kernels::for_each_row(tessera_kernels::ThreadPool::global(), out, tk, 64, &fill)
            })
        }
    }

    fn run(
        &self,
        s: &candle_core::CpuStorage,
        sl: &candle_core::Layout,
        bias: Option<(&candle_core::CpuStorage, &candle_core::Layout)>,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use crate::cpu_op::contiguous as slice;
        use candle_core::CpuStorage::{BF16, F16};
        let tk = sl.shape().dims().last().copied().unwrap_or(0);
        let out = match (s, bias) {
            (BF16(d), None) => self.logits(slice(d, sl, "attention logits")?, None, tk)?,
            (BF16(d), Some((BF16(b), bl))) => {
                self.logits(slice(d, sl, "attention logits")?, Some(slice(b, bl, "attention logits bias")?), tk)?
            }
            (F16(d), None) => self.logits(slice(d, sl, "attention logits")?, None, tk)?,
            (F16(d), Some((F16(b), bl))) => {
                self.logits(slice(d, sl, "attention logits")?, Some(slice(b, bl, "attention logits bias")?), tk)?
            }
            _ => candle_core::bail!("attention logits take bf16 or f16 scores and a bias of the same dtype"),
        };
        Ok((candle_core::CpuStorage::F32(out), sl.shape().clone()))
    }
}

/// bf16 and f16 as f32 values: exact widening, and rounding to the nearest value of the type
/// (what `half`'s arithmetic does after each f32 operation).
trait HalfFloat: Copy + Sync {
    fn to_f32(self) -> f32;
    fn round(x: f32) -> f32;
    /// `x` rounded to the type (once, as `WithDType::from_f64` rounds it).
    fn round_f64(x: f64) -> f32;
}

impl HalfFloat for half::bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::bf16::from_f32(x).to_f32()
    }
    #[inline(always)]
    fn round_f64(x: f64) -> f32 {
        half::bf16::from_f64(x).to_f32()
    }
}

impl HalfFloat for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }
    #[inline(always)]
    fn round_f64(x: f64) -> f32 {
        half::f16::from_f64(x).to_f32()
    }
}

impl candle_core::CustomOp1 for HalfLogits {
    fn name(&self) -> &'static str {
        "tessera-half-logits"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        self.run(s, l, None)
    }
}

impl candle_core::CustomOp2 for HalfLogits {
    fn name(&self) -> &'static str {
        "tessera-half-logits"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        sl: &candle_core::Layout,
        b: &candle_core::CpuStorage,
        bl: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        self.run(s, sl, Some((b, bl)))
    }
}

/// Up to this many new queries (decode steps), CPU f32 attention runs fused in one pass
/// (`tessera_kernels::attention::attend`); more run as two GEMMs per head and block of
/// queries (`tessera_kernels::dense::attend_many`).
const FUSED_MAX_QUERIES: usize = 8;

/// `softmax(q kᵀ · scale + mask) v` by `tessera-kernels` on the CPU: `q` `(b, heads, tq, d)`,
/// `k`/`v` `(b, kv_heads, tk, d)`, any of them a strided view whose rows are contiguous (the
/// projections' `(b, t, heads, d)` transposed, the cache) → `(b, tq, heads·d)`.
struct FusedAttention {
    mask: AttentionMask,
    scale: f32,
}

fn kv_layout(l: &candle_core::Layout, name: &str) -> candle_core::Result<tessera_kernels::attention::KvLayout> {
    let st = l.stride();
    if st.len() != 4 || st[3] != 1 {
        candle_core::bail!("fused attention: {name} rows must be contiguous, strides {st:?}");
    }
    Ok(tessera_kernels::attention::KvLayout {
        offset: l.start_offset(),
        batch_stride: st[0],
        head_stride: st[1],
        row_stride: st[2],
    })
}

/// Row `i` of `k`, `v` `(1, kv_heads, n, d)` appended to `caches[i]`, the caches shared out
/// among the kernels' pool threads (one contiguous share each): every write lands in a
/// different sequence's buffer, a cache miss apiece, which the threads then overlap.
fn append_rows_in_parallel(caches: &mut [KvCache], layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
    use std::sync::Mutex;
    let pool = tessera_kernels::ThreadPool::global();
    let per = caches.len().div_ceil(pool.threads()).max(1);
    let shares: Vec<Mutex<&mut [KvCache]>> = caches.chunks_mut(per).map(Mutex::new).collect();
    let failed: Mutex<Option<DecoderError>> = Mutex::new(None);
    pool.run(&|part| {
        let Some(share) = shares.get(part) else { return };
        let mut share = share.lock().unwrap_or_else(|e| e.into_inner());
        for (j, cache) in share.iter_mut().enumerate() {
            if let Err(e) = cache.append_row(layer, k, v, part * per + j) {
                failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                return;
            }
        }
    })
    .map_err(|e| DecoderError::Config(format!("KV cache writes: {e}")))?;
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A KV cache element type the kernels read (f32, f16), taken out of Candle's CPU storage.
trait CpuKv: tessera_kernels::attention::KvValue {
    /// The storage's values when it is a CPU storage of this type.
    fn values(s: &candle_core::Storage) -> Option<&[Self]>;
}

impl CpuKv for f32 {
    fn values(s: &candle_core::Storage) -> Option<&[f32]> {
        match s {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => Some(v),
            _ => None,
        }
    }
}

impl CpuKv for half::f16 {
    fn values(s: &candle_core::Storage) -> Option<&[half::f16]> {
        match s {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F16(v)) => Some(v),
            _ => None,
        }
    }
}

impl candle_core::CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        "tessera-fused-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &candle_core::CpuStorage,
        ql: &candle_core::Layout,
        ks: &candle_core::CpuStorage,
        kl: &candle_core::Layout,
        vs: &candle_core::CpuStorage,
        vl: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use candle_core::CpuStorage::{F16, F32};
        let (b, heads, tq, d) = ql.shape().dims4()?;
        let (_, kv_heads, tk, _) = kl.shape().dims4()?;
        let shape = tessera_kernels::attention::AttentionShape { batch: b, heads, kv_heads, tq, tk, head_dim: d };
        let mut out = vec![0f32; b * tq * heads * d];
        let mask = &self.mask;
        let pool = tessera_kernels::ThreadPool::global();
        let (kl, vl) = (kv_layout(kl, "k")?, kv_layout(vl, "v")?);
        let visible = |qp| mask.visible_keys(qp, tk);
        let scale = self.scale;
        if tq <= FUSED_MAX_QUERIES {
            let q = crate::cpu_op::contiguous_f32(qs, ql, "fused attention")?;
            match (ks, vs) {
                (F32(k), F32(v)) => {
                    tessera_kernels::attention::attend(pool, shape, q, k, kl, v, vl, scale, &visible, &mut out)
                }
                (F16(k), F16(v)) => {
                    tessera_kernels::attention::attend(pool, shape, q, k, kl, v, vl, scale, &visible, &mut out)
                }
                _ => candle_core::bail!("fused attention takes f32 queries and f32 or f16 keys and values"),
            }
        } else {
            let (F32(q), F32(k), F32(v)) = (qs, ks, vs) else {
                candle_core::bail!("fused attention over many queries takes f32 tensors")
            };
            let ql = kv_layout(ql, "q")?;
            tessera_kernels::dense::attend_many(pool, shape, q, ql, k, kl, v, vl, scale, &visible, &mut out)
        }
        .map_err(candle_core::Error::wrap)?;
        Ok((F32(out), candle_core::Shape::from((b, tq, heads * d))))
    }
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
fn chunk_keys(mask: &AttentionMask, first_q: usize, n: usize, tk: usize) -> std::ops::Range<usize> {
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
fn narrow_keys(k: &Tensor, v: &Tensor, keys: &std::ops::Range<usize>) -> Result<(Tensor, Tensor)> {
    if keys.start == 0 && keys.end == k.dim(2)? {
        return Ok((k.clone(), v.clone()));
    }
    Ok((k.narrow(2, keys.start, keys.len())?, v.narrow(2, keys.start, keys.len())?))
}

/// One chunk of [`attention_in_query_chunks`] on the CPU in f32: the score matmul over the keys
/// some query of the chunk sees, then scale, mask and softmax fused in place
/// (`tessera_kernels::attention::scale_mask_softmax`), then the value matmul. `q`
/// `(b, heads, n, d)` holds the queries at positions `first_q ..`.
fn fused_chunk(q: &Tensor, k: &Tensor, v: &Tensor, mask: &AttentionMask, scale: f64, first_q: usize) -> Result<Tensor> {
    let (b, heads, n, d) = q.dims4()?;
    let (_, kv_heads, tk, _) = k.dims4()?;
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(DecoderError::Config(format!("{heads} query heads cannot share {kv_heads} kv heads")));
    }
    let keys = chunk_keys(mask, first_q, n, tk);
    let (k, v) = narrow_keys(k, v, &keys)?;
    let lo = keys.start;
    let groups = heads / kv_heads;
    // (b, kv_heads, groups·n, d): the heads of one group become extra query rows.
    let qg = q.contiguous()?.reshape((b, kv_heads, groups * n, d))?;
    let scores = qg.matmul(&k.t()?)?.contiguous()?; // (b, kv_heads, groups·n, hi − lo)
    let op = ScaleMaskSoftmax { mask: mask.clone(), scale: scale as f32, first_q, n, keys: lo, tk };
    let weights = scores.apply_op1_no_bwd(&op)?;
    let out = weights.matmul(&v.contiguous_if_needed()?)?; // (b, kv_heads, groups·n, d)
    Ok(out.reshape((b, heads, n, d))?)
}

/// In-place `softmax(scale · s + mask)` over score rows `(…, groups·n, tk)`; row `r` is query
/// `first_q + r mod n`; the score columns are the keys `keys ..` of `tk`.
struct ScaleMaskSoftmax {
    mask: AttentionMask,
    scale: f32,
    first_q: usize,
    n: usize,
    keys: usize,
    tk: usize,
}

impl candle_core::CustomOp1 for ScaleMaskSoftmax {
    fn name(&self) -> &'static str {
        "tessera-scale-mask-softmax"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let cols = l.shape().dims().last().copied().unwrap_or(0);
        let mut out = crate::cpu_op::contiguous_f32(s, l, "softmax")?.to_vec();
        let (mask, first_q, n, keys, tk) = (&self.mask, self.first_q, self.n.max(1), self.keys, self.tk);
        tessera_kernels::attention::scale_mask_softmax(
            tessera_kernels::ThreadPool::global(),
            &mut out,
            cols,
            self.scale,
            &|r| {
                let vis = mask.visible_keys(first_q + r % n, tk);
                vis.start.saturating_sub(keys)..vis.end.saturating_sub(keys)
            },
        )
        .map_err(candle_core::Error::wrap)?;
        Ok((candle_core::CpuStorage::F32(out), l.shape().clone()))
    }
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

trait ContiguousIfNeeded {
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
}

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
        })
    }

    pub fn new(cfg: &AttentionConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let (h, q_out, kv_out) = (cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim);
        Ok(Self {
            q_proj: vb.linear(h, q_out, cfg.qkv_bias, "q_proj")?,
            k_proj: vb.linear(h, kv_out, cfg.qkv_bias, "k_proj")?,
            v_proj: vb.linear(h, kv_out, cfg.qkv_bias, "v_proj")?,
            o_proj: vb.linear(q_out, h, cfg.out_bias, cfg.out_name)?,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            scale: cfg.scale,
            softcap: cfg.softcap,
            qk_norm: match cfg.qk_norm {
                Some((eps, style)) => Some((
                    RmsNorm::load(cfg.head_dim, eps, style, &vb.pp("q_norm"))?,
                    RmsNorm::load(cfg.head_dim, eps, style, &vb.pp("k_norm"))?,
                )),
                None => None,
            },
        })
    }

    /// `x`: `(b, t, hidden)` → `(b, t, hidden)` (plus `input.residual`), and the weights when
    /// `input.capture`.
    pub fn forward(&self, x: &Tensor, mut input: AttentionInput<'_>) -> Result<(Tensor, Option<Tensor>)> {
        let (b, t, _) = x.dims3()?;
        let residual = input.residual;
        // The kernels' attention reads strided heads; everything else takes contiguous ones.
        // (Soft-capped scores take the tensor path: the kernels do not cap.)
        let fused = !input.capture && crate::cpu_op::kernels_take(x) && self.softcap.is_none();
        let per_row = match &input.cache {
            Some((caches, _)) if caches.len() > 1 => {
                if b != 1 || t != caches.len() || input.capture {
                    return Err(DecoderError::Config(format!(
                        "a batched step takes one row per cache: input ({b}, {t}), {} caches{}",
                        caches.len(),
                        if input.capture { ", and captures no weights" } else { "" }
                    )));
                }
                true
            }
            _ => false,
        };
        let [q, k, v] = Linear::forward_shared([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
        if per_row && fused {
            if let Some((caches, layer)) = input.cache.take() {
                return Ok((self.batched_rows(q, k, v, caches, layer, input.rope, input.mask, residual)?, None));
            }
        }
        let heads = |y: Tensor, n: usize, copy: bool| -> Result<Tensor> {
            // (b, t, n·d) → (b, n, t, d)
            let y = y.reshape((b, t, n, self.head_dim))?.transpose(1, 2)?;
            Ok(if copy { y.contiguous()? } else { y })
        };
        let copy_q = !fused || input.rope.is_some() || t <= FUSED_MAX_QUERIES;
        // The kernels and the cache's CPU write read strided keys and values; RoPE takes
        // contiguous ones.
        let copy_k = !fused || input.rope.is_some();
        let q = heads(q, self.num_heads, copy_q)?;
        let k = heads(k, self.num_kv_heads, copy_k)?;
        let v = heads(v, self.num_kv_heads, !fused)?;
        let (q, k) = match &self.qk_norm {
            Some((qn, kn)) => (qn.forward(&q.contiguous()?)?, kn.forward(&k.contiguous()?)?),
            None => (q, k),
        };
        let (q, k) = match input.rope {
            Some(rope) => (rope.apply(&q)?, rope.apply(&k)?),
            None => (q, k),
        };
        let (mask, bias, capture) = (input.mask, input.bias, input.capture);
        let (out, weights) = match input.cache {
            Some((caches, layer)) if per_row => {
                // Each row: its keys and values into its own cache, one query over that cache.
                let mut kvs = Vec::with_capacity(t);
                for (i, cache) in caches.iter_mut().enumerate() {
                    kvs.push(cache.append(layer, &k.narrow(2, i, 1)?, &v.narrow(2, i, 1)?)?);
                }
                let mut outs = Vec::with_capacity(t);
                for (i, (kc, vc)) in kvs.iter().enumerate() {
                    outs.push(self.attend(&q.narrow(2, i, 1)?.contiguous()?, kc, vc, mask, None, false, false)?.0);
                }
                (Tensor::cat(&outs, 1)?, None)
            }
            Some((caches, layer)) => {
                let cache = caches
                    .first_mut()
                    .ok_or_else(|| DecoderError::Config("an attention call was given no cache".into()))?;
                let (k, v) = cache.append(layer, &k, &v)?;
                self.attend(&q, &k, &v, mask, bias, capture, fused)?
            }
            None => self.attend(&q, &k, &v, mask, bias, capture, fused)?,
        };
        Ok((self.o_proj.forward_add(&out, residual)?, weights))
    }

    /// A batched decode step on the CPU in f32, from the projections `q`, `k`, `v` `(1, n, ·)`
    /// of its `n` rows, row `i` at the next position of `caches[i]`: q/k norms and RoPE in the
    /// projections' own layout (one token after another: no copies into heads), each row's keys
    /// and values into its cache, attention, `o_proj` with the residual. Each row computes what
    /// the one-sequence path computes for it alone.
    #[allow(clippy::too_many_arguments)]
    fn batched_rows(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        caches: &mut [KvCache],
        layer: usize,
        rope: Option<&RopeAngles>,
        mask: &AttentionMask,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (n, d) = (caches.len(), self.head_dim);
        let q = q.reshape((1, n, self.num_heads, d))?;
        let k = k.reshape((1, n, self.num_kv_heads, d))?;
        let v = v.reshape((1, n, self.num_kv_heads, d))?;
        let (q, k) = match &self.qk_norm {
            Some((qn, kn)) => (qn.forward(&q)?, kn.forward(&k)?),
            None => (q, k),
        };
        let (q, k) = match rope {
            Some(rope) => (rope.apply_token_major(&q)?, rope.apply_token_major(&k)?),
            None => (q, k),
        };
        // (1, kv_heads, n, d) views; the cache's write reads any strides.
        let (k, v) = (k.transpose(1, 2)?, v.transpose(1, 2)?);
        append_rows_in_parallel(caches, layer, &k, &v)?;
        let out = self.attend_rows(&q, caches, layer, mask)?;
        self.o_proj.forward_add(&out, residual)
    }

    /// A batched decode step's attention on the CPU: row `i` of `q` `(1, n, heads, d)` over
    /// layer `layer` of its own cache `caches[i]` (f32 or f16), all rows in one kernel call
    /// (one pool fork/join per layer, not one per row) → `(1, n, heads·d)`. Each row computes
    /// what the fused kernel computes for it alone.
    fn attend_rows(&self, q: &Tensor, caches: &[KvCache], layer: usize, mask: &AttentionMask) -> Result<Tensor> {
        use candle_core::{CpuStorage, Storage};
        let (n, d) = (caches.len(), self.head_dim);
        let q = q.contiguous()?;
        let (qs, ql) = q.storage_and_layout();
        let q = crate::cpu_op::storage_f32(&qs, ql, "batched attention's queries")?; // (n, heads, d)
        let mut guards = Vec::with_capacity(n);
        for cache in caches {
            let (k, v, len) = cache
                .layer(layer)
                .ok_or_else(|| DecoderError::Config(format!("a batched step's cache has no layer {layer}")))?;
            guards.push((k.storage_and_layout(), v.storage_and_layout(), len));
        }
        let stores: Vec<_> =
            guards.iter().map(|((ks, kl), (vs, vl), len)| ((&**ks, *kl), (&**vs, *vl), *len)).collect();
        let mut out = vec![0f32; n * self.num_heads * d];
        match stores.first().map(|((ks, _), _, _)| ks) {
            Some(Storage::Cpu(CpuStorage::F16(_))) => self.attend_rows_in::<half::f16>(q, &stores, mask, &mut out),
            Some(Storage::Cpu(CpuStorage::F32(_))) | None => self.attend_rows_in::<f32>(q, &stores, mask, &mut out),
            Some(_) => Err(DecoderError::Config("batched attention takes f32 or f16 CPU caches".into())),
        }?;
        drop(stores);
        drop(guards); // the caches' read locks
        Ok(Tensor::from_vec(out, (1, n, self.num_heads * d), &candle_core::Device::Cpu)?)
    }

    /// [`attend_rows`](Self::attend_rows) over caches whose values are `E` (every cache of a
    /// model holds one dtype): `q` `(n, heads, d)`, each row's key and value storage.
    #[allow(clippy::type_complexity)]
    fn attend_rows_in<E: CpuKv>(
        &self,
        q: &[f32],
        stores: &[(
            (&candle_core::Storage, &candle_core::Layout),
            (&candle_core::Storage, &candle_core::Layout),
            usize,
        )],
        mask: &AttentionMask,
        out: &mut [f32],
    ) -> Result<()> {
        let (heads, d) = (self.num_heads, self.head_dim);
        let mut rows = Vec::with_capacity(stores.len());
        for (i, &((ks, kl), (vs, vl), tk)) in stores.iter().enumerate() {
            let (Some(k), Some(v)) = (E::values(ks), E::values(vs)) else {
                return Err(DecoderError::Config("a batched step's caches hold different dtypes".into()));
            };
            rows.push(tessera_kernels::attention::RowAttention {
                q: &q[i * heads * d..][..heads * d],
                k,
                kl: kv_layout(kl, "k")?,
                v,
                vl: kv_layout(vl, "v")?,
                tk,
                visible: mask.visible_keys(tk - 1, tk),
            });
        }
        let pool = tessera_kernels::ThreadPool::global();
        tessera_kernels::attention::attend_rows(pool, &rows, heads, self.num_kv_heads, d, self.scale as f32, out)
            .map_err(|e| DecoderError::Config(format!("batched attention: {e}")))
    }

    /// `softmax(q kᵀ · scale + mask) v` for `q` `(b, heads, tq, d)` over `k`/`v`
    /// `(b, kv_heads, tk, d)` (the cache's positions, then the new ones) → `(b, tq, heads·d)`,
    /// and the weights when `capture`; `fused`: the CPU f32 kernels run it.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &AttentionMask,
        bias: Option<&Tensor>,
        capture: bool,
        fused: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let (b, _, t, _) = q.dims4()?;
        if !capture {
            if let Some(out) = flash_attention(q, k, v, mask, self.scores())? {
                return Ok((out.reshape((b, t, self.num_heads * self.head_dim))?, None));
            }
        }
        let kv_len = k.dim(2)?;
        // A cache stored in another dtype (f16 under f32 activations) is read as it is by the
        // decode kernel and converted for every other path.
        let converted;
        let (k, v) = if k.dtype() != q.dtype() && !(fused && t <= FUSED_MAX_QUERIES) {
            converted = (k.to_dtype(q.dtype())?, v.to_dtype(q.dtype())?);
            (&converted.0, &converted.1)
        } else {
            (k, v)
        };
        if fused {
            let op = FusedAttention { mask: mask.clone(), scale: self.scale as f32 };
            return Ok((q.apply_op3_no_bwd(k, v, &op)?, None)); // (b, t, heads·d)
        }
        let (out, weights) = if capture {
            let built;
            let bias = match bias {
                Some(b) => Some(b),
                None => {
                    built = mask.bias(t, kv_len, q.dtype(), q.device())?;
                    built.as_ref()
                }
            };
            let (out, weights) = capped_attention(q, k, v, bias, self.scores())?;
            (out, Some(weights))
        } else {
            let rows = query_chunk(b * self.num_heads, kv_len);
            (attention_in_query_chunks(q, k, v, mask, bias, self.scores(), rows)?, None)
        };
        Ok((out.transpose(1, 2)?.reshape((b, t, self.num_heads * self.head_dim))?, weights))
    }

    fn scores(&self) -> Scores {
        Scores { scale: self.scale, softcap: self.softcap }
    }
}

/// Flash-attention v2 (the `flash-attn` feature) for `q` `(b, heads, tq, d)` over `k`/`v`
/// `(b, kv_heads, tk, d)` on CUDA in f16/bf16, when the mask is causal (bottom-right aligned, so
/// a prompt's later blocks and cached decoding work) or bidirectional, with no soft-cap and `k`/`v`
/// in the queries' dtype: `(b, tq, heads, d)`, or `None` where it does not apply (the caller
/// takes the generic path). It reads the tensors through their strides (the head-major layout and
/// a cache's narrowed view: no copies); the scores stay in f32 inside the kernel.
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &AttentionMask,
    scores: Scores,
) -> Result<Option<Tensor>> {
    #[cfg(feature = "flash-attn")]
    {
        let causal = match mask {
            AttentionMask::Causal => true,
            AttentionMask::Bidirectional => false,
            _ => return Ok(None),
        };
        let dtype = q.dtype();
        if scores.softcap.is_some()
            || !flash_attention_enabled()
            || !q.device().is_cuda()
            || !matches!(dtype, DType::F16 | DType::BF16)
            || k.dtype() != dtype
            || v.dtype() != dtype
            || !flash_takes_head(q.dim(3)?)
        {
            return Ok(None);
        }
        // flash_attn takes (b, seq, heads, d) with the last dimension contiguous.
        let rows = |x: &Tensor| -> Result<Tensor> {
            let x = x.transpose(1, 2)?;
            Ok(if x.stride()[3] == 1 { x } else { x.contiguous()? })
        };
        Ok(Some(candle_flash_attn::flash_attn(&rows(q)?, &rows(k)?, &rows(v)?, scores.scale as f32, causal)?))
    }
    #[cfg(not(feature = "flash-attn"))]
    {
        let _ = (q, k, v, mask, scores);
        Ok(None)
    }
}

/// Whether the flash-attention kernels take heads `d` wide: multiples of 8 up to 256 (tessera's
/// build of candle-flash-attn has the 64-, 96-, 128- and 256-wide kernels; a narrower head runs
/// masked in the next one up: third_party/candle-flash-attn/README.md).
#[cfg(feature = "flash-attn")]
fn flash_takes_head(d: usize) -> bool {
    d.is_multiple_of(8) && d <= 256
}

/// Whether attention on CUDA runs flash-attention where it applies (f16/bf16, causal or
/// bidirectional masks, no captured weights): when built with the `flash-attn` feature, unless
/// `TESSERA_FLASH_ATTN` is `off` (to measure what it is worth).
pub fn flash_attention_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    cfg!(feature = "flash-attn")
        && *ENABLED.get_or_init(|| !std::env::var("TESSERA_FLASH_ATTN").is_ok_and(|v| v.eq_ignore_ascii_case("off")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The CPU's one-pass half-precision logits are the generic path's three ops (affine,
    /// broadcast add, cast to f32) bit for bit: bf16 and f16, a scale that is no power of two,
    /// grouped rows, no bias, a mask's 0/−∞ bias and arbitrary finite biases (whose adds round).
    #[test]
    fn half_logits_are_candles_ops_bit_for_bit() -> Result<()> {
        let dev = Device::Cpu;
        let (b, kv_heads, groups, tq, tk) = (2, 3, 4, 5, 70);
        let scale = 1.0 / 128f64.sqrt();
        for dtype in [DType::BF16, DType::F16] {
            let s = Tensor::randn(0f32, 20.0, (b, kv_heads, groups * tq, tk), &dev)?.to_dtype(dtype)?;
            let mask = AttentionMask::SlidingWindow { window: 30 }.bias(tq, tk, dtype, &dev)?;
            let arbitrary = Tensor::randn(0f32, 3.0, (tq, tk), &dev)?.to_dtype(dtype)?;
            for bias in [None, mask.as_ref(), Some(&arbitrary)] {
                let op = HalfLogits { scale, queries: tq };
                let fast = match bias {
                    Some(bias) => s.apply_op2_no_bwd(bias, &op)?,
                    None => s.apply_op1_no_bwd(&op)?,
                };
                let scaled = (&s * scale)?;
                let slow = match bias {
                    Some(bias) => scaled.reshape((b, kv_heads, groups, tq, tk))?.broadcast_add(bias)?.reshape((
                        b,
                        kv_heads,
                        groups * tq,
                        tk,
                    ))?,
                    None => scaled,
                }
                .to_dtype(DType::F32)?;
                assert_eq!(fast.dims(), slow.dims());
                let bits = |t: &Tensor| -> Result<Vec<u32>> {
                    Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|x| x.to_bits()).collect())
                };
                let (fast, slow) = (bits(&fast)?, bits(&slow)?);
                let differ = fast.iter().zip(&slow).filter(|(a, b)| a != b).count();
                assert_eq!(differ, 0, "{dtype:?}, bias {}: {differ} of {} logits differ", bias.is_some(), slow.len());
            }
        }
        Ok(())
    }
}
