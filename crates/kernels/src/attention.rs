//! Fused attention for a few query rows (decode): for each head, `softmax(q·kᵀ·scale + mask)·v`
//! in one pass over the cached keys and values, with no score tensor, no mask tensor and no
//! allocation per step. The query heads that share a kv head are computed together (each
//! cached key and value loaded once for them); the groups are split across the pool. AVX2 +
//! FMA where the CPU has them; otherwise plain Rust whose dot products keep 8 independent
//! partial sums so the compiler vectorises them, and `exp` is [`crate::ops::exp`].
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
    // One job per (batch, kv head, query row): the query heads of a group share each key and
    // value as they are loaded. Jobs are dealt out in turn, so the rows of a causal mask
    // (later ones see more keys) spread evenly over the threads.
    let jobs = s.batch * s.kv_heads * s.tq;
    let n = pool.threads();
    let dst = SendPtr(out.as_mut_ptr());
    let first_q = s.tk - s.tq;
    pool.run(&|part| {
        let dst = &dst;
        let mut scores = Vec::new();
        for job in (part..jobs).step_by(n) {
            let (b, kvh, i) = (job / (s.kv_heads * s.tq), job / s.tq % s.kv_heads, job % s.tq);
            let h0 = kvh * groups;
            let keys = visible(first_q + i);
            let (lo, hi) = (keys.start.min(s.tk), keys.end.min(s.tk).max(keys.start.min(s.tk)));
            // SAFETY: heads h0 .. h0 + groups of (b, i) are this job's part of the output; in
            // bounds (checked above).
            let o =
                unsafe { std::slice::from_raw_parts_mut(dst.0.add(((b * s.tq + i) * s.heads + h0) * d), groups * d) };
            let kv = HeadKv {
                k,
                kbase: kl.offset + b * kl.batch_stride + kvh * kl.head_stride,
                krow: kl.row_stride,
                v,
                vbase: vl.offset + b * vl.batch_stride + kvh * vl.head_stride,
                vrow: vl.row_stride,
            };
            let qs = Queries { q, first: ((b * s.heads + h0) * s.tq + i) * d, stride: s.tq * d, heads: groups, d };
            one_group(&qs, &kv, lo..hi, scale, &mut scores, o);
        }
    })
}

/// The query heads of one group (those sharing a kv head): head `h` is `q[first + h·stride ..][..d]`.
struct Queries<'a> {
    q: &'a [f32],
    first: usize,
    stride: usize,
    heads: usize,
    d: usize,
}

impl Queries<'_> {
    fn head(&self, h: usize) -> &[f32] {
        &self.q[self.first + h * self.stride..][..self.d]
    }
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

/// `o` `(heads, d)` ← the attention of a group's query heads `qs` over the keys `keys` of
/// their kv head: the arithmetic of every fused attention call, written once so that a row
/// computes the same alone ([`attend`]) or among others ([`attend_rows`]). A head's result
/// does not depend on the other heads of its group.
#[inline(always)]
fn one_group<E: KvValue>(
    qs: &Queries<'_>,
    kv: &HeadKv<'_, E>,
    keys: std::ops::Range<usize>,
    scale: f32,
    scores: &mut Vec<f32>,
    o: &mut [f32],
) {
    let (d, heads, n) = (qs.d, qs.heads, keys.len());
    if scores.len() < heads * n {
        scores.resize(heads * n, 0.0);
    }
    let sc = &mut scores[..heads * n];
    if heads == 0 {
        return;
    }
    if n == 0 {
        o.fill(0.0);
        return;
    }
    // The keys' and values' rows `keys`, as slices (bounds checked here, once).
    let k = &kv.k[kv.kbase + keys.start * kv.krow..][..(n - 1) * kv.krow + d];
    let v = &kv.v[kv.vbase + keys.start * kv.vrow..][..(n - 1) * kv.vrow + d];
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8) && crate::ops::avx2_kernels() {
        // The last head's bounds (the kernel reads the heads through a raw pointer).
        let _ = qs.head(heads - 1);
        let g = x86::Group {
            q: qs.q[qs.first..].as_ptr(),
            qstride: qs.stride,
            heads,
            d,
            k,
            krow: kv.krow,
            v,
            vrow: kv.vrow,
        };
        // SAFETY: the kernels use AVX2, so the CPU has it (with FMA and F16C); the heads'
        // queries lie inside `qs.q` (checked just above, the first ones below it); `k` and `v`
        // hold `n` rows of `d` values at strides `krow` / `vrow`; `sc` holds `heads · n`
        // scores; `o` holds `heads · d` values; `d` is a multiple of 8.
        unsafe { x86::group(&g, scale, sc, o) };
        return;
    }
    crate::ops::wide(|| {
        for ((h, sc), o) in sc.chunks_exact_mut(n).enumerate().zip(o.chunks_exact_mut(d)) {
            let q = qs.head(h);
            for (j, x) in sc.iter_mut().enumerate() {
                *x = dot(q, &k[j * kv.krow..][..d]);
            }
            softmax_in_place(sc, scale);
            o.fill(0.0);
            for (j, &p) in sc.iter().enumerate() {
                for (a, &x) in o.iter_mut().zip(&v[j * kv.vrow..][..d]) {
                    *a += p * x.to_f32();
                }
            }
        }
    });
}

/// A group's attention in AVX2 + FMA: the scores of up to four query heads against four keys
/// at a time (each key loaded once for the heads), then the weighted sum of values in
/// registers, each value loaded once for the heads.
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

    /// The lane sums of `a[0..4]`: per vector, lanes 0–3 and 4–7 summed pairwise, then the
    /// two halves added.
    #[inline(always)]
    unsafe fn sum4(a: [__m256; 4]) -> __m128 {
        let h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }

    /// One group's queries, keys and values: head `h`'s query is the `d` values at
    /// `q + h·qstride`; `k` and `v` hold the visible keys' and values' rows (`d` values each) at
    /// strides `krow` / `vrow`.
    pub(super) struct Group<'a, E> {
        pub q: *const f32,
        pub qstride: usize,
        pub heads: usize,
        pub d: usize,
        pub k: &'a [E],
        pub krow: usize,
        pub v: &'a [E],
        pub vrow: usize,
    }

    /// `o` `(heads, d)` ← `softmax(scale · q_h·kᵀ) · v` for each of `g`'s heads over its
    /// `n = sc.len() / heads` keys and values; `sc` `(heads, n)` holds the scores meanwhile.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `g.q + h·g.qstride` holds `g.d` values for every head;
    /// `g.d` is a multiple of 8; `g.k` and `g.v` hold `n ≥ 1` rows at their strides; `o` holds
    /// `heads · d` values.
    pub(super) unsafe fn group<E: KvValue>(g: &Group<'_, E>, scale: f32, sc: &mut [f32], o: &mut [f32]) {
        // The same instructions either way: AVX-512VL only lends the compiler 32 vector
        // registers for the accumulators instead of 16.
        if crate::Isa::best() == crate::Isa::Avx512Vnni {
            group_avx512(g, scale, sc, o)
        } else {
            group_avx2(g, scale, sc, o)
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group_avx2<E: KvValue>(g: &Group<'_, E>, scale: f32, sc: &mut [f32], o: &mut [f32]) {
        group_body(g, scale, sc, o)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn group_avx512<E: KvValue>(g: &Group<'_, E>, scale: f32, sc: &mut [f32], o: &mut [f32]) {
        group_body(g, scale, sc, o)
    }

    #[inline(always)]
    unsafe fn group_body<E: KvValue>(g: &Group<'_, E>, scale: f32, sc: &mut [f32], o: &mut [f32]) {
        let &Group { q, qstride, heads, d, k, krow, v, vrow } = g;
        let n = sc.len() / heads;
        let mut h0 = 0;
        while h0 < heads {
            let (q, sc, o) = (q.add(h0 * qstride), sc.as_mut_ptr().add(h0 * n), o.as_mut_ptr().add(h0 * d));
            let hs = (heads - h0).min(4);
            // Values are fetched during the first pass only (a later pass finds them cached).
            let vp = if h0 == 0 { Some((v.as_ptr(), vrow)) } else { None };
            match hs {
                4 => scores::<E, 4>(q, qstride, d, k.as_ptr(), krow, vp, n, sc),
                3 => scores::<E, 3>(q, qstride, d, k.as_ptr(), krow, vp, n, sc),
                2 => scores::<E, 2>(q, qstride, d, k.as_ptr(), krow, vp, n, sc),
                _ => scores::<E, 1>(q, qstride, d, k.as_ptr(), krow, vp, n, sc),
            }
            for h in 0..hs {
                super::softmax_in_place(std::slice::from_raw_parts_mut(sc.add(h * n), n), scale);
            }
            // Columns in strips whose accumulators (heads × strip) fit in the registers; a
            // column's sum runs over the keys in order whatever the strip, so the strip
            // widths do not change the result.
            let most = [8, 4, 4, 2][hs - 1];
            let mut c0 = 0;
            while c0 < d {
                let l = ((d - c0) / 8).min(most);
                let (vp, op) = (v.as_ptr().add(c0), o.add(c0));
                match hs {
                    4 => strip::<E, 4>(l, sc, n, vp, vrow, op, d),
                    3 => strip::<E, 3>(l, sc, n, vp, vrow, op, d),
                    2 => strip::<E, 2>(l, sc, n, vp, vrow, op, d),
                    _ => strip::<E, 1>(l, sc, n, vp, vrow, op, d),
                }
                c0 += 8 * l;
            }
            h0 += hs;
        }
    }

    /// How many keys ahead of the one being scored [`scores`] prefetches: a cache's rows come
    /// from memory (a batched step reads megabytes of them), in runs too short for the
    /// hardware prefetcher to get ahead.
    const KEYS_AHEAD: usize = 8;

    /// Prefetches the `d` values of row `j` (clamped to the last of `n`) at `p` into L1.
    #[inline(always)]
    unsafe fn prefetch_row<E>(p: *const E, row: usize, j: usize, n: usize, d: usize) {
        let start = p.add(j.min(n - 1) * row) as *const i8;
        for line in (0..d * std::mem::size_of::<E>()).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(start.add(line));
        }
    }

    /// `sc[h·n + j]` ← `q_h · k_j` for the `H` heads at `q + h·qstride` and the `n` keys at
    /// `k + j·krow`, four keys at a time (the last block repeats its last key for the missing
    /// ones, so every key's sum is formed the same way). Prefetches the keys
    /// [`KEYS_AHEAD`] on, and with `v` (values at `v.0 + j·v.1`) the values of the keys
    /// scored, for the weighted sum that follows.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn scores<E: KvValue, const H: usize>(
        q: *const f32,
        qstride: usize,
        d: usize,
        k: *const E,
        krow: usize,
        v: Option<(*const E, usize)>,
        n: usize,
        sc: *mut f32,
    ) {
        for j in 0..KEYS_AHEAD.min(n) {
            prefetch_row(k, krow, j, n, d);
        }
        let mut j = 0;
        while j < n {
            for i in 0..4 {
                prefetch_row(k, krow, j + KEYS_AHEAD + i, n, d);
                if let Some((v, vrow)) = v {
                    prefetch_row(v, vrow, j + i, n, d);
                }
            }
            let rows: [*const E; 4] = std::array::from_fn(|i| k.add((j + i).min(n - 1) * krow));
            let mut acc = [[_mm256_setzero_ps(); 4]; H];
            for c in (0..d).step_by(8) {
                let kv: [__m256; 4] = std::array::from_fn(|i| load8(rows[i].add(c)));
                for (h, acc) in acc.iter_mut().enumerate() {
                    let qv = _mm256_loadu_ps(q.add(h * qstride + c));
                    for (a, kv) in acc.iter_mut().zip(kv) {
                        *a = _mm256_fmadd_ps(qv, kv, *a);
                    }
                }
            }
            let m = (n - j).min(4);
            for (h, acc) in acc.into_iter().enumerate() {
                let s = sum4(acc);
                let dst = sc.add(h * n + j);
                if m == 4 {
                    _mm_storeu_ps(dst, s);
                } else {
                    let mut t = [0f32; 4];
                    _mm_storeu_ps(t.as_mut_ptr(), s);
                    std::ptr::copy_nonoverlapping(t.as_ptr(), dst, m);
                }
            }
            j += 4;
        }
    }

    /// [`weighted`] over a strip of `8l` columns (`1 ≤ l ≤ 8`).
    #[inline(always)]
    unsafe fn strip<E: KvValue, const H: usize>(
        l: usize,
        sc: *const f32,
        n: usize,
        v: *const E,
        vrow: usize,
        o: *mut f32,
        d: usize,
    ) {
        match l {
            1 => weighted::<E, H, 1>(sc, n, v, vrow, o, d),
            2 => weighted::<E, H, 2>(sc, n, v, vrow, o, d),
            3 => weighted::<E, H, 3>(sc, n, v, vrow, o, d),
            4 => weighted::<E, H, 4>(sc, n, v, vrow, o, d),
            5 => weighted::<E, H, 5>(sc, n, v, vrow, o, d),
            6 => weighted::<E, H, 6>(sc, n, v, vrow, o, d),
            7 => weighted::<E, H, 7>(sc, n, v, vrow, o, d),
            _ => weighted::<E, H, 8>(sc, n, v, vrow, o, d),
        }
    }

    /// `o[h·d ..][..8L]` ← `Σ_j p_h[j] · v_j[..8L]` for the `H` heads (`p_h` = `sc[h·n ..][..n]`),
    /// the `H · L` accumulators in registers.
    #[inline(always)]
    unsafe fn weighted<E: KvValue, const H: usize, const L: usize>(
        sc: *const f32,
        n: usize,
        v: *const E,
        vrow: usize,
        o: *mut f32,
        d: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); L]; H];
        for j in 0..n {
            let r = v.add(j * vrow);
            let p: [__m256; H] = std::array::from_fn(|h| _mm256_set1_ps(*sc.add(h * n + j)));
            let x: [__m256; L] = std::array::from_fn(|l| load8(r.add(8 * l)));
            for (acc, p) in acc.iter_mut().zip(p) {
                for (a, x) in acc.iter_mut().zip(x) {
                    *a = _mm256_fmadd_ps(p, x, *a);
                }
            }
        }
        for (h, acc) in acc.into_iter().enumerate() {
            for (l, a) in acc.into_iter().enumerate() {
                _mm256_storeu_ps(o.add(h * d + 8 * l), a);
            }
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
    let (jobs, n) = (rows.len() * kv_heads, pool.threads());
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|part| {
        let dst = &dst;
        let mut scores = Vec::new();
        // Consecutive jobs to each part (handing them out from a shared counter measured
        // slower: the atomic's cache line moves between cores).
        let per = jobs.div_ceil(n);
        for job in (part * per).min(jobs)..((part + 1) * per).min(jobs) {
            let (i, kvh) = (job / kv_heads, job % kv_heads);
            let r = &rows[i];
            let kv = HeadKv {
                k: r.k,
                kbase: r.kl.offset + kvh * r.kl.head_stride,
                krow: r.kl.row_stride,
                v: r.v,
                vbase: r.vl.offset + kvh * r.vl.head_stride,
                vrow: r.vl.row_stride,
            };
            let (lo, hi) = (r.visible.start.min(r.tk), r.visible.end.min(r.tk).max(r.visible.start.min(r.tk)));
            let h0 = kvh * groups;
            // SAFETY: heads h0 .. h0 + groups of row i are this job's part of the output, in
            // bounds (checked above).
            let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add((i * heads + h0) * d), groups * d) };
            let qs = Queries { q: r.q, first: h0 * d, stride: d, heads: groups, d };
            one_group(&qs, &kv, lo..hi, scale, &mut scores, o);
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
