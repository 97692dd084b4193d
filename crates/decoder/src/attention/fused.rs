//! Attention by tessera's CPU kernels (`tessera-kernels`) in f32: the path one sequence takes on
//! the CPU ([`Path::Fused`](super::Path::Fused)). Up to [`FUSED_MAX_QUERIES`] new queries (decode)
//! the scores, softmax and values run fused in one pass per row, reading the keys and values in
//! the cache's dtype (f32 or f16) through their strides; more queries (a prompt) run as two GEMMs
//! per head and block of queries. Also the chunk step that [`super::attention_in_query_chunks`]
//! runs on the CPU in f32: the score matmul, then scale, mask and softmax in place.

use candle_core::Tensor;

use super::generic::{chunk_keys, kv_in, narrow_keys, ContiguousIfNeeded};
use super::{over_cache, Attention, Projected};
use crate::error::{DecoderError, Result};
use crate::mask::AttentionMask;

/// Up to this many new queries (decode steps), CPU f32 attention runs fused in one pass
/// (`tessera_kernels::attention::attend`); more run as two GEMMs per head and block of
/// queries (`tessera_kernels::dense::attend_many`).
pub(super) const FUSED_MAX_QUERIES: usize = 8;

/// `softmax(q kᵀ · scale + mask) v` by `tessera-kernels` on the CPU: `q` `(b, heads, tq, d)`,
/// `k`/`v` `(b, kv_heads, tk, d)`, any of them a strided view whose rows are contiguous (the
/// projections' `(b, t, heads, d)` transposed, the cache) → `(b, tq, heads·d)`.
struct FusedAttention {
    mask: AttentionMask,
    scale: f32,
}

/// The kernels' view of a `(b, heads, t, d)` layout `l` whose rows are contiguous; `name` names
/// the tensor in the error otherwise.
pub(super) fn kv_layout(
    l: &candle_core::Layout,
    name: &str,
) -> candle_core::Result<tessera_kernels::attention::KvLayout> {
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

/// One chunk of [`attention_in_query_chunks`] on the CPU in f32: the score matmul over the keys
/// some query of the chunk sees, then scale, mask and softmax fused in place
/// (`tessera_kernels::attention::scale_mask_softmax`), then the value matmul. `q`
/// `(b, heads, n, d)` holds the queries at positions `first_q ..`.
pub(super) fn fused_chunk(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &AttentionMask,
    scale: f64,
    first_q: usize,
) -> Result<Tensor> {
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

impl Attention {
    /// [`Path::Fused`](super::Path::Fused): the heads (strided views where the kernels read them
    /// so) over the cache (if any), attention by the kernels → `(b, t, heads·d)`. A cache stored
    /// in another dtype (f16 under f32 activations) is read as it is by the decode kernel and
    /// converted for the prompt's.
    pub(super) fn fused(&self, call: Projected<'_>) -> Result<Tensor> {
        let (q, k, v) = self.heads(call.q, call.k, call.v, call.rope, true)?;
        let (k, v) = over_cache(call.cache, k, v)?;
        let (_, _, t, _) = q.dims4()?;
        let (k, v) = if t > FUSED_MAX_QUERIES { kv_in(&k, &v, q.dtype())? } else { (k, v) };
        let op = FusedAttention { mask: call.mask.clone(), scale: self.scale as f32 };
        Ok(q.apply_op3_no_bwd(&k, &v, &op)?) // (b, t, heads·d)
    }
}
