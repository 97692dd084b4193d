//! Fused attention for a few query rows (decode): for each head, `softmax(q·kᵀ·scale + mask)·v`
//! in one pass over the cached keys and values, with no score tensor, no mask tensor and no
//! allocation per step; heads are split across the pool. AVX2 + FMA where the CPU has them;
//! otherwise plain Rust whose dot products keep 8 independent partial sums so the compiler
//! vectorises them, and `exp` is [`crate::ops::exp`].
//!
//! The cached keys and values are f32 or f16 ([`KvValue`]): an f16 cache halves the bytes a
//! decode step reads (what bounds this kernel) and is converted on load, so the arithmetic is
//! the f32 kernel's on the rounded values.

use half::f16;

use crate::error::{KernelError, Result};
use crate::pool::{SendPtr, ThreadPool};

/// The element type of a KV cache the kernels read: f32, or f16 converted to f32 on load.
pub trait KvValue: Copy + Send + Sync + 'static {
    /// Whether this is f16 (the SIMD loads convert it).
    const F16: bool;
    fn to_f32(self) -> f32;
}

impl KvValue for f32 {
    const F16: bool = false;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl KvValue for f16 {
    const F16: bool = true;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Where each head's keys (or values) are: row `j` of kv-head `h` of batch `b` starts at
/// `offset + b·batch_stride + h·head_stride + j·row_stride`; a row holds `d` contiguous values.
#[derive(Clone, Copy, Debug)]
pub struct KvLayout {
    pub offset: usize,
    pub batch_stride: usize,
    pub head_stride: usize,
    pub row_stride: usize,
}

/// The sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// New query rows, at absolute positions `tk − tq ..`.
    pub tq: usize,
    /// Keys and values, at absolute positions `0 .. tk`.
    pub tk: usize,
    pub head_dim: usize,
}

/// `out` `(batch, tq, heads, head_dim)` ← attention of `q` `(batch, heads, tq, head_dim)`
/// (contiguous) over `k`, `v`; the query at absolute position `p` sees the keys `visible(p)`
/// (a range: every mask rule of a decoder gives one).
#[allow(clippy::too_many_arguments)]
pub fn attend<E: KvValue>(
    pool: &ThreadPool,
    s: AttentionShape,
    q: &[f32],
    k: &[E],
    kl: KvLayout,
    v: &[E],
    vl: KvLayout,
    scale: f32,
    visible: &(dyn Fn(usize) -> std::ops::Range<usize> + Sync),
    out: &mut [f32],
) -> Result<()> {
    let d = s.head_dim;
    if s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) || s.tk < s.tq {
        return Err(KernelError::Shape(format!("attention shape {s:?}")));
    }
    let last_row = |l: &KvLayout| {
        l.offset + (s.batch.max(1) - 1) * l.batch_stride + (s.kv_heads - 1) * l.head_stride + s.tk.max(1) * l.row_stride
    };
    if q.len() < s.batch * s.heads * s.tq * d
        || out.len() < s.batch * s.heads * s.tq * d
        || (s.tk > 0 && (k.len() < last_row(&kl) - kl.row_stride + d || v.len() < last_row(&vl) - vl.row_stride + d))
    {
        return Err(KernelError::Shape(format!("attention buffers too small for {s:?}")));
    }
    let groups = s.heads / s.kv_heads;
    let jobs = s.batch * s.heads;
    let n = pool.threads();
    let dst = SendPtr(out.as_mut_ptr());
    let first_q = s.tk - s.tq;
    pool.run(&|part| {
        let dst = &dst;
        let mut scores = vec![0f32; s.tk];
        let mut acc = vec![0f32; d];
        // Consecutive jobs to each part: the query heads of one kv-head (and a row's heads) stay
        // together, so their keys and values are read from memory once, into this core's cache.
        let per = jobs.div_ceil(n);
        for job in (part * per).min(jobs)..((part + 1) * per).min(jobs) {
            let (b, h) = (job / s.heads, job % s.heads);
            let kvh = h / groups;
            let kbase = kl.offset + b * kl.batch_stride + kvh * kl.head_stride;
            let vbase = vl.offset + b * vl.batch_stride + kvh * vl.head_stride;
            for i in 0..s.tq {
                let qrow = &q[((b * s.heads + h) * s.tq + i) * d..][..d];
                let keys = visible(first_q + i);
                let (lo, hi) = (keys.start.min(s.tk), keys.end.min(s.tk).max(keys.start.min(s.tk)));
                // SAFETY: (b, i, h) is this job's row of the output; in bounds (checked above).
                let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add(((b * s.tq + i) * s.heads + h) * d), d) };
                let kv = HeadKv { k, kbase, krow: kl.row_stride, v, vbase, vrow: vl.row_stride };
                one_query(qrow, &kv, lo..hi, scale, &mut scores, &mut acc, o);
            }
        }
    })
}

/// One head's keys and values: row `j` of the keys starts at `k[kbase + j·krow]`.
struct HeadKv<'a, E> {
    k: &'a [E],
    kbase: usize,
    krow: usize,
    v: &'a [E],
    vbase: usize,
    vrow: usize,
}

/// `o` ← one query's attention over the keys `keys` of one head: the arithmetic of every
/// fused attention call, written once so that a row computes the same alone
/// ([`attend`]) or among others ([`attend_rows`]).
#[inline(always)]
fn one_query<E: KvValue>(
    q: &[f32],
    kv: &HeadKv<'_, E>,
    keys: std::ops::Range<usize>,
    scale: f32,
    scores: &mut Vec<f32>,
    acc: &mut [f32],
    o: &mut [f32],
) {
    let d = q.len();
    if scores.len() < keys.end {
        scores.resize(keys.end, 0.0);
    }
    let sc = &mut scores[keys.clone()];
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8)
        && !keys.is_empty()
        && matches!(crate::Isa::best(), crate::Isa::Avx2 | crate::Isa::Avx512Vnni)
    {
        let n = keys.len();
        // The keys' and values' rows `keys`, as slices (bounds checked here, once).
        let k = &kv.k[kv.kbase + keys.start * kv.krow..][..(n - 1) * kv.krow + d];
        let v = &kv.v[kv.vbase + keys.start * kv.vrow..][..(n - 1) * kv.vrow + d];
        // SAFETY: `Isa::best` names only instruction sets this CPU has; `k` and `v` hold `n`
        // rows of `d` values at strides `krow` / `vrow`; `sc` holds `n` scores; `q` and `o`
        // hold `d` values; `d` is a multiple of 8.
        unsafe { x86::head(q, k, kv.krow, v, kv.vrow, scale, sc, o) };
        return;
    }
    crate::ops::wide(|| {
        for (j, x) in keys.clone().zip(sc.iter_mut()) {
            *x = dot(q, &kv.k[kv.kbase + j * kv.krow..][..d]);
        }
        softmax_in_place(sc, scale);
        acc.fill(0.0);
        for (j, &p) in keys.zip(sc.iter()) {
            for (a, &x) in acc.iter_mut().zip(&kv.v[kv.vbase + j * kv.vrow..][..d]) {
                *a += p * x.to_f32();
            }
        }
        o.copy_from_slice(acc);
    });
}

/// One head's attention in AVX2 + FMA: scores four keys at a time (independent sums), the
/// weighted sum of values in registers, 64 columns at a time.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::KvValue;

    /// Eight values from `p` as f32 (f16 converted by F16C).
    #[inline(always)]
    unsafe fn load8<E: KvValue>(p: *const E) -> __m256 {
        if E::F16 {
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        } else {
            _mm256_loadu_ps(p.cast())
        }
    }

    /// The sum of the eight lanes: halves, then pairs, then the last two.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// `o` ← `softmax(scale · q·kᵀ) · v` over the `sc.len()` keys in `k` (rows at stride
    /// `krow`) and values in `v` (stride `vrow`).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `q.len() = o.len() = d` is a multiple of 8; `k` and `v`
    /// hold `sc.len() ≥ 1` rows of `d` values at their strides.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn head<E: KvValue>(
        q: &[f32],
        k: &[E],
        krow: usize,
        v: &[E],
        vrow: usize,
        scale: f32,
        sc: &mut [f32],
        o: &mut [f32],
    ) {
        let (d, n) = (q.len(), sc.len());
        let (qp, kp, sp) = (q.as_ptr(), k.as_ptr(), sc.as_mut_ptr());
        let mut j = 0;
        while j + 4 <= n {
            let rows = [kp.add(j * krow), kp.add((j + 1) * krow), kp.add((j + 2) * krow), kp.add((j + 3) * krow)];
            let mut acc = [_mm256_setzero_ps(); 4];
            for c in (0..d).step_by(8) {
                let qv = _mm256_loadu_ps(qp.add(c));
                for (a, r) in acc.iter_mut().zip(rows) {
                    *a = _mm256_fmadd_ps(qv, load8(r.add(c)), *a);
                }
            }
            for (i, a) in acc.into_iter().enumerate() {
                *sp.add(j + i) = hsum(a);
            }
            j += 4;
        }
        while j < n {
            let r = kp.add(j * krow);
            let mut a = _mm256_setzero_ps();
            for c in (0..d).step_by(8) {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), load8(r.add(c)), a);
            }
            *sp.add(j) = hsum(a);
            j += 1;
        }
        super::softmax_in_place(sc, scale);
        let mut c0 = 0;
        while c0 < d {
            let (vp, op) = (v.as_ptr().add(c0), o.as_mut_ptr().add(c0));
            let w = (d - c0).min(64);
            match w / 8 {
                8 => weighted::<E, 8>(sc, vp, vrow, op),
                7 => weighted::<E, 7>(sc, vp, vrow, op),
                6 => weighted::<E, 6>(sc, vp, vrow, op),
                5 => weighted::<E, 5>(sc, vp, vrow, op),
                4 => weighted::<E, 4>(sc, vp, vrow, op),
                3 => weighted::<E, 3>(sc, vp, vrow, op),
                2 => weighted::<E, 2>(sc, vp, vrow, op),
                _ => weighted::<E, 1>(sc, vp, vrow, op),
            }
            c0 += w;
        }
    }

    /// `o[..8L]` ← `Σ_j p[j] · v_j[..8L]`, the `L` accumulators in registers.
    #[inline(always)]
    unsafe fn weighted<E: KvValue, const L: usize>(p: &[f32], v: *const E, vrow: usize, o: *mut f32) {
        let mut acc = [_mm256_setzero_ps(); L];
        for (j, &pj) in p.iter().enumerate() {
            let (pv, r) = (_mm256_set1_ps(pj), v.add(j * vrow));
            for (l, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(pv, load8(r.add(8 * l)), *a);
            }
        }
        for (l, a) in acc.into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * l), a);
        }
    }
}

/// One sequence's row of a batched decode step: its query `(heads, head_dim)` (contiguous),
/// its own cache's keys and values (`tk` rows, batch 1) and the keys its mask lets it see.
pub struct RowAttention<'a, E = f32> {
    pub q: &'a [f32],
    pub k: &'a [E],
    pub kl: KvLayout,
    pub v: &'a [E],
    pub vl: KvLayout,
    pub tk: usize,
    pub visible: std::ops::Range<usize>,
}

/// `out` `(rows, heads, head_dim)` ← each row's query attending over its own cache, every
/// (row, head) pair shared out in one pool call; each row computes exactly what [`attend`]
/// computes for it alone.
pub fn attend_rows<E: KvValue>(
    pool: &ThreadPool,
    rows: &[RowAttention<'_, E>],
    heads: usize,
    kv_heads: usize,
    d: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<()> {
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) || out.len() < rows.len() * heads * d {
        return Err(KernelError::Shape(format!("{} rows of {heads} heads / {kv_heads} kv heads × {d}", rows.len())));
    }
    for r in rows {
        let last = |l: &KvLayout| l.offset + (kv_heads - 1) * l.head_stride + r.tk.saturating_sub(1) * l.row_stride + d;
        if r.q.len() < heads * d || (r.tk > 0 && (r.k.len() < last(&r.kl) || r.v.len() < last(&r.vl))) {
            return Err(KernelError::Shape(format!("attention row buffers too small for {} keys", r.tk)));
        }
    }
    let groups = heads / kv_heads;
    let (jobs, n) = (rows.len() * heads, pool.threads());
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|part| {
        let dst = &dst;
        let mut scores = Vec::new();
        let mut acc = vec![0f32; d];
        // Consecutive jobs to each part: the query heads of one kv-head (and a row's heads) stay
        // together, so their keys and values are read from memory once, into this core's cache.
        let per = jobs.div_ceil(n);
        for job in (part * per).min(jobs)..((part + 1) * per).min(jobs) {
            let (i, h) = (job / heads, job % heads);
            let r = &rows[i];
            let kvh = h / groups;
            let kv = HeadKv {
                k: r.k,
                kbase: r.kl.offset + kvh * r.kl.head_stride,
                krow: r.kl.row_stride,
                v: r.v,
                vbase: r.vl.offset + kvh * r.vl.head_stride,
                vrow: r.vl.row_stride,
            };
            let (lo, hi) = (r.visible.start.min(r.tk), r.visible.end.min(r.tk).max(r.visible.start.min(r.tk)));
            // SAFETY: (i, h) is this job's row of the output, in bounds (checked above).
            let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add((i * heads + h) * d), d) };
            one_query(&r.q[h * d..][..d], &kv, lo..hi, scale, &mut scores, &mut acc, o);
        }
    })
}

/// `a · b` with 8 independent partial sums (vectorised by the compiler).
#[inline(always)]
fn dot<E: KvValue>(a: &[f32], b: &[E]) -> f32 {
    let mut s = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y.to_f32()).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            s[l] += x[l] * y[l].to_f32();
        }
    }
    s.iter().sum::<f32>() + tail
}

/// In place over `scores` (`rows × tk`, row-major): `softmax(scale · s + mask)` per row, where
/// row `r` sees the keys `visible(r)` (a range: every mask rule of a decoder is one) and the
/// others get weight 0. One pass per row instead of scale, mask, softmax as three tensors;
/// rows split across the pool.
pub fn scale_mask_softmax(
    pool: &ThreadPool,
    scores: &mut [f32],
    tk: usize,
    scale: f32,
    visible: &(dyn Fn(usize) -> std::ops::Range<usize> + Sync),
) -> Result<()> {
    if tk == 0 || !scores.len().is_multiple_of(tk) {
        return Err(KernelError::Shape(format!("softmax over rows of {tk} in {} values", scores.len())));
    }
    let rows = scores.len() / tk;
    let parts = pool.threads();
    let per = rows.div_ceil(parts);
    let dst = SendPtr(scores.as_mut_ptr());
    pool.run(&|p| {
        let dst = &dst;
        for r in (p * per).min(rows)..((p + 1) * per).min(rows) {
            // SAFETY: part p owns rows p·per .. (p+1)·per.
            let row = unsafe { std::slice::from_raw_parts_mut(dst.0.add(r * tk), tk) };
            let vis = visible(r);
            let (lo, hi) = (vis.start.min(tk), vis.end.min(tk).max(vis.start.min(tk)));
            row[..lo].fill(0.0);
            row[hi..].fill(0.0);
            crate::ops::wide(|| softmax_in_place(&mut row[lo..hi], scale));
        }
    })
}

/// `softmax(scale · s)` over `s` in place (all zeros when `s` is empty), eight lanes at a time.
#[inline(always)]
pub(crate) fn softmax_in_place(s: &mut [f32], scale: f32) {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = s.chunks_exact_mut(8);
    for c in &mut chunks {
        for l in 0..8 {
            c[l] *= scale;
            lanes[l] = lanes[l].max(c[l]);
        }
    }
    let mut max = lanes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in chunks.into_remainder() {
        *v *= scale;
        max = max.max(*v);
    }
    if max == f32::NEG_INFINITY {
        s.fill(0.0);
        return;
    }
    let mut sums = [0f32; 8];
    let mut chunks = s.chunks_exact_mut(8);
    for c in &mut chunks {
        for l in 0..8 {
            c[l] = crate::ops::exp(c[l] - max);
            sums[l] += c[l];
        }
    }
    let mut total: f32 = sums.iter().sum();
    for v in chunks.into_remainder() {
        *v = crate::ops::exp(*v - max);
        total += *v;
    }
    let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
    s.iter_mut().for_each(|v| *v *= inv);
}
