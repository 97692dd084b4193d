//! Dense f32 layers on the CPU for long inputs (vision towers, f32 prefill): a linear layer
//! with its bias, its residual add and its activation done inside the matmul's pass, and
//! attention over many queries as two GEMMs per head that read the projections where they
//! are (any row stride), so no head is transposed or copied and no score tensor of every head
//! exists at once. On CPUs with AVX2 or AVX-512 the products are tessera's own f32 GEMM (`sgemm.rs`:
//! weights packed once at load into [`PackedF32`], a head's keys packed per call); elsewhere,
//! and for weights left unpacked, the `gemm` crate's micro-kernels. Either runs
//! single-threaded inside the pool's parts.

use std::ops::Range;

use crate::attention::{AttentionShape, KvLayout};
use crate::error::{KernelError, Result};
use crate::ops::{gelu_tanh_one, softmax_numerators, wide};
use crate::pool::{SendPtr, ThreadPool};
use crate::sgemm::{self, PackedF32, PanelPtr, Panels, NR};

/// What is applied to each output value after `x·Wᵀ + bias (+ residual)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    None,
    /// GELU, tanh approximation (`gelu_pytorch_tanh`), as [`crate::ops::gelu_tanh`].
    GeluTanh,
}

/// A linear layer's weight `W` `(n, k)` (a PyTorch `Linear` weight).
#[derive(Clone, Copy, Debug)]
pub enum DenseWeight<'a> {
    /// Row-major, as stored (the `gemm` crate multiplies it).
    Rows(&'a [f32]),
    /// Packed at load for tessera's GEMM ([`PackedF32::new`], where [`packs_weights`]).
    Packed(&'a PackedF32),
}

/// Whether this CPU multiplies [`DenseWeight::Packed`] weights on a SIMD kernel (AVX2, AVX-512):
/// where it does, a layer packs its f32 weight once when it loads.
pub fn packs_weights() -> bool {
    sgemm::fast()
}

/// The operands of one [`linear`]: `x` `(m, k)` row-major, `w` `(n, k)`, `bias` `(n)`,
/// `residual` `(m, n)`.
#[derive(Clone, Copy, Debug)]
pub struct LinearArgs<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub k: usize,
    pub w: DenseWeight<'a>,
    pub n: usize,
    pub bias: Option<&'a [f32]>,
    pub residual: Option<&'a [f32]>,
    pub epilogue: Epilogue,
}

/// Rows of `x` per pool part below which the parts split the weight's rows instead.
const MIN_ROWS_PER_PART: usize = 32;

/// `out` `(m, n)` ← `epilogue(residual + x·Wᵀ + bias)`. Long inputs are split by rows of `x`
/// across the pool (each part reads all of `W`), short ones by rows of `W` (a packed weight's
/// by whole panels).
pub fn linear(pool: &ThreadPool, a: LinearArgs<'_>, out: &mut [f32]) -> Result<()> {
    let LinearArgs { x, m, k, w, n, bias, residual, epilogue } = a;
    let w_fits = match w {
        DenseWeight::Rows(w) => w.len() == n * k,
        DenseWeight::Packed(p) => p.rows() == n && p.cols() == k,
    };
    let bad = x.len() != m * k
        || !w_fits
        || out.len() != m * n
        || bias.is_some_and(|b| b.len() != n)
        || residual.is_some_and(|r| r.len() != m * n);
    if bad {
        return Err(KernelError::Shape(format!(
            "linear: x {} values for ({m}, {k}), W {w:?} for ({n}, {k}), bias {:?}, residual {:?}, out {}",
            x.len(),
            bias.map(<[f32]>::len),
            residual.map(<[f32]>::len),
            out.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let parts = pool.threads();
    // Row-invariant calls split like a single row (by W's rows), whatever their length (a
    // packed weight's rows are invariant however they split).
    let invariant = crate::invariant::active() && matches!(w, DenseWeight::Rows(_));
    let by_rows = m >= MIN_ROWS_PER_PART * parts && !invariant;
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|p| {
        let dst = &dst;
        let (r, c) = match w {
            _ if by_rows => (split(m, parts, p), 0..n),
            DenseWeight::Rows(_) => (0..m, split(n, parts, p)),
            DenseWeight::Packed(_) => {
                let panels = split(n.div_ceil(NR), parts, p);
                (0..m, panels.start * NR..(panels.end * NR).min(n))
            }
        };
        if r.is_empty() || c.is_empty() {
            return;
        }
        // Blocks of rows, each initialised, multiplied and finished while it is in cache (a
        // packed weight's blocks of sgemm::MC rows), or every row alone (row-invariant).
        let block = match w {
            DenseWeight::Packed(_) => sgemm::MC,
            DenseWeight::Rows(_) if invariant => 1,
            DenseWeight::Rows(_) => r.len(),
        };
        // The `gemm` crate adds its product to outputs preloaded with bias and residual; tessera's
        // GEMM starts each product from zero and adds them after (an accumulator that starts at
        // a large residual would round every step to its ulp).
        let preload = matches!(w, DenseWeight::Rows(_)) && (bias.is_some() || residual.is_some());
        for g in r.clone().step_by(block) {
            let rows = g..(g + block).min(r.end);
            // SAFETY: part p writes only rows r × columns c of out, which no other part writes;
            // every slice below is in bounds (sizes checked above).
            unsafe {
                let at = |i: usize| dst.0.add(i * n + c.start);
                let row = |i: usize| std::slice::from_raw_parts_mut(at(i), c.len());
                let res = |i: usize| residual.map(|r| &r[i * n + c.start..i * n + c.end]);
                let b = bias.map(|b| &b[c.clone()]);
                if preload {
                    for i in rows.clone() {
                        match (res(i), b) {
                            (Some(res), Some(b)) => {
                                row(i).iter_mut().zip(res).zip(b).for_each(|((o, &x), &y)| *o = x + y)
                            }
                            (Some(v), None) | (None, Some(v)) => row(i).copy_from_slice(v),
                            (None, None) => {}
                        }
                    }
                }
                match w {
                    // dst(rows, c) = x(rows, :) · W(c, :)ᵀ, by panels of Wᵀ's columns.
                    DenseWeight::Packed(pw) => {
                        sgemm::gemm(rows.clone(), c.clone(), k, (x.as_ptr(), k), pw.panels(), (dst.0, n), false)
                    }
                    // rhs (k, c) is W's rows read transposed.
                    DenseWeight::Rows(w) => sgemm(
                        (rows.len(), c.len(), k),
                        at(g),
                        n,
                        preload,
                        x.as_ptr().add(g * k),
                        k,
                        w.as_ptr().add(c.start * k),
                        (1, k),
                    ),
                }
                for i in rows {
                    let row = row(i);
                    if !preload {
                        if let Some(b) = b {
                            row.iter_mut().zip(b).for_each(|(o, &y)| *o += y);
                        }
                        if let Some(res) = res(i) {
                            row.iter_mut().zip(res).for_each(|(o, &x)| *o += x);
                        }
                    }
                    if epilogue == Epilogue::GeluTanh {
                        wide(|| row.iter_mut().for_each(|v| *v = gelu_tanh_one(*v)));
                    }
                }
            }
        }
    })
}

/// Part `p` of `0..len` cut into `parts` near-equal ranges.
fn split(len: usize, parts: usize, p: usize) -> Range<usize> {
    let per = len.div_ceil(parts.max(1));
    (p * per).min(len)..((p + 1) * per).min(len)
}

/// `dst (m × n) [+]= lhs (m × k) · rhs (k × n)`, single-threaded, by the `gemm` crate's f32
/// micro-kernels: the one call every f32 GEMM of the kernels goes through. Rows of `dst` and
/// `lhs` hold contiguous values (row strides `dst_rs`, `lhs_rs`); `rhs` element `(p, j)` is at
/// `rhs + p·rhs_rs + j·rhs_cs` (a row-major weight read transposed: `rhs_rs = 1`, `rhs_cs = k`).
/// With `accumulate` the product is added to what `dst` holds, otherwise it replaces it.
///
/// # Safety
/// Every element the strides address lies inside its allocation, and `dst` overlaps neither
/// `lhs` nor `rhs` nor what another thread writes meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    lhs: *const f32,
    lhs_rs: usize,
    rhs: *const f32,
    (rhs_rs, rhs_cs): (usize, usize),
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            accumulate,
            lhs,
            1,
            lhs_rs as isize,
            rhs,
            rhs_cs as isize,
            rhs_rs as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Query rows per attention job: the scores of one job (`rows × keys`) stay in cache.
const QUERY_ROWS: usize = 128;

/// `out` `(batch, tq, heads, head_dim)` ← `softmax(q·kᵀ·scale + mask)·v` for many queries:
/// per head and per block of [`QUERY_ROWS`] queries, the scores against the keys that block
/// can see by one GEMM, the softmax in place, the output by a second GEMM written straight
/// into its place in `out`. `q`, `k`, `v` are read through their layouts (rows of `head_dim`
/// contiguous values, any row, head and batch strides); query `i` (absolute position
/// `tk − tq + i`) sees the keys `visible(tk − tq + i)`.
#[allow(clippy::too_many_arguments)]
pub fn attend_many(
    pool: &ThreadPool,
    s: AttentionShape,
    q: &[f32],
    ql: KvLayout,
    k: &[f32],
    kl: KvLayout,
    v: &[f32],
    vl: KvLayout,
    scale: f32,
    visible: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
) -> Result<()> {
    attend_many_on(sgemm::fast(), pool, s, (q, ql), (k, kl), (v, vl), scale, visible, out)
}

/// [`attend_many`] on tessera's GEMM (`fast`) or the `gemm` crate's.
#[allow(clippy::too_many_arguments)]
fn attend_many_on(
    fast: bool,
    pool: &ThreadPool,
    s: AttentionShape,
    (q, ql): (&[f32], KvLayout),
    (k, kl): (&[f32], KvLayout),
    (v, vl): (&[f32], KvLayout),
    scale: f32,
    visible: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
) -> Result<()> {
    let d = s.head_dim;
    if s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) || s.tk < s.tq {
        return Err(KernelError::Shape(format!("attention shape {s:?}")));
    }
    if s.batch == 0 || s.tq == 0 || d == 0 {
        return Ok(());
    }
    // The furthest value each operand's layout reaches, + 1.
    let end = |l: &KvLayout, heads: usize, rows: usize| {
        l.offset + (s.batch - 1) * l.batch_stride + (heads - 1) * l.head_stride + (rows.max(1) - 1) * l.row_stride + d
    };
    if q.len() < end(&ql, s.heads, s.tq)
        || (s.tk > 0 && (k.len() < end(&kl, s.kv_heads, s.tk) || v.len() < end(&vl, s.kv_heads, s.tk)))
        || out.len() != s.batch * s.tq * s.heads * d
    {
        return Err(KernelError::Shape(format!("attention buffers too small for {s:?}")));
    }
    let groups = s.heads / s.kv_heads;
    let blocks = s.tq.div_ceil(QUERY_ROWS);
    let jobs = s.batch * s.heads * blocks;
    let parts = pool.threads();
    let first_q = s.tk - s.tq;
    // tessera's GEMM: a head's keys packed once per thread as panels of NR keys (a job's
    // scores then start at a panel's first key), its values read in place.
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|p| {
        let dst = &dst;
        let mut scores = Vec::new();
        let mut sums = [0f32; QUERY_ROWS];
        let (mut keys, mut keys_of) = (Vec::new(), None);
        for job in (p..jobs).step_by(parts) {
            let (bh, blk) = (job / blocks, job % blocks);
            let (b, h) = (bh / s.heads, bh % s.heads);
            let kvh = h / groups;
            let rows = blk * QUERY_ROWS..((blk + 1) * QUERY_ROWS).min(s.tq);
            // The keys any query of the block sees (each rule of a decoder gives a range).
            let mut lo = s.tk;
            let mut hi = 0;
            for i in rows.clone() {
                let r = visible(first_q + i);
                lo = lo.min(r.start);
                hi = hi.max(r.end.min(s.tk));
            }
            if fast && lo < hi {
                lo = lo / NR * NR;
            }
            let nr = rows.len();
            // SAFETY: job (b, h, blk) writes only out[b, rows, h, :], which no other job
            // writes; the operands' reads are within the bounds checked above.
            unsafe {
                let o = dst.0.add(((b * s.tq + rows.start) * s.heads + h) * d);
                if lo >= hi {
                    for i in 0..nr {
                        std::slice::from_raw_parts_mut(o.add(i * s.heads * d), d).fill(0.0);
                    }
                    continue;
                }
                let span = hi - lo;
                scores.resize(nr * span, 0f32);
                let qp =
                    q.as_ptr().add(ql.offset + b * ql.batch_stride + h * ql.head_stride + rows.start * ql.row_stride);
                let k0 = k.as_ptr().add(kl.offset + b * kl.batch_stride + kvh * kl.head_stride);
                let vp = v.as_ptr().add(vl.offset + b * vl.batch_stride + kvh * vl.head_stride + lo * vl.row_stride);
                // scores (nr, span) = q (nr, d) · keys (d, span).
                if fast {
                    if keys_of != Some((b, kvh)) {
                        keys.resize(s.tk.div_ceil(NR) * d * NR, 0f32);
                        sgemm::pack_rows(k0, kl.row_stride, s.tk, d, &mut keys);
                        keys_of = Some((b, kvh));
                    }
                    let kp = Panels {
                        ptr: PanelPtr::F32(keys.as_ptr().add(lo / NR * d * NR)),
                        panel_stride: d * NR,
                        ldb: NR,
                    };
                    sgemm::gemm(0..nr, 0..span, d, (qp, ql.row_stride), kp, (scores.as_mut_ptr(), span), false);
                } else {
                    let kp = k0.add(lo * kl.row_stride);
                    sgemm((nr, span, d), scores.as_mut_ptr(), span, false, qp, ql.row_stride, kp, (1, kl.row_stride));
                }
                // Softmax's numerators; each output row is divided by its sum below.
                for ((i, row), sum) in scores.chunks_exact_mut(span).enumerate().zip(&mut sums) {
                    let r = visible(first_q + rows.start + i);
                    let a = r.start.clamp(lo, hi) - lo;
                    let z = r.end.clamp(lo, hi).max(r.start.clamp(lo, hi)) - lo;
                    row[..a].fill(0.0);
                    row[z..].fill(0.0);
                    *sum = softmax_numerators(&mut row[a..z], scale);
                }
                // out rows (nr, d), row stride heads·d = scores (nr, span) · values (span, d).
                if fast {
                    let vpanels = Panels { ptr: PanelPtr::F32(vp), panel_stride: NR, ldb: vl.row_stride };
                    sgemm::gemm(0..nr, 0..d, span, (scores.as_ptr(), span), vpanels, (o, s.heads * d), false);
                } else {
                    sgemm((nr, d, span), o, s.heads * d, false, scores.as_ptr(), span, vp, (vl.row_stride, 1));
                }
                for (i, &sum) in sums[..nr].iter().enumerate() {
                    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                    std::slice::from_raw_parts_mut(o.add(i * s.heads * d), d).iter_mut().for_each(|v| *v *= inv);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn gelu(v: f64) -> f64 {
        0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
    }

    #[test]
    fn linear_matches_f64_reference_with_bias_residual_and_gelu() -> Result<()> {
        // Row counts on both sides of the row/column split, odd sizes everywhere.
        for (m, k, n) in [(1, 7, 5), (3, 33, 17), (70, 65, 31), (129, 48, 96), (40, 530, 40)] {
            let (x, w, b, res) = (rand(m * k, 1), rand(n * k, 2), rand(n, 3), rand(m * n, 4));
            let packed = PackedF32::new(&w, n, k)?;
            let weights = [1, 2, 3].map(|t| [(t, DenseWeight::Rows(&w)), (t, DenseWeight::Packed(&packed))]);
            for (threads, weight) in weights.into_iter().flatten() {
                let pool = ThreadPool::new(threads);
                for (bias, residual, epilogue) in [
                    (None, None, Epilogue::None),
                    (Some(&b[..]), None, Epilogue::None),
                    (None, Some(&res[..]), Epilogue::None),
                    (Some(&b[..]), Some(&res[..]), Epilogue::GeluTanh),
                ] {
                    let mut out = vec![f32::NAN; m * n];
                    linear(&pool, LinearArgs { x: &x, m, k, w: weight, n, bias, residual, epilogue }, &mut out)?;
                    for i in 0..m {
                        for j in 0..n {
                            let mut want: f64 = (0..k).map(|t| x[i * k + t] as f64 * w[j * k + t] as f64).sum();
                            want += bias.map_or(0.0, |b| b[j] as f64) + residual.map_or(0.0, |r| r[i * n + j] as f64);
                            if epilogue == Epilogue::GeluTanh {
                                want = gelu(want);
                            }
                            let got = out[i * n + j] as f64;
                            assert!(
                                (got - want).abs() < 1e-5 * (1.0 + k as f64).sqrt() * (1.0 + want.abs()),
                                "({m},{k},{n}) {threads} threads {weight:?} [{i},{j}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
        let pool = ThreadPool::new(2);
        let args = LinearArgs {
            x: &[0.0; 6],
            m: 2,
            k: 3,
            w: DenseWeight::Rows(&[0.0; 6]),
            n: 2,
            bias: Some(&[0.0]),
            residual: None,
            epilogue: Epilogue::None,
        };
        assert!(linear(&pool, args, &mut [0.0; 4]).is_err(), "a bias of the wrong length is refused");
        let packed = PackedF32::new(&[0.0; 6], 3, 2)?;
        let args = LinearArgs { w: DenseWeight::Packed(&packed), bias: None, ..args };
        assert!(linear(&pool, args, &mut [0.0; 4]).is_err(), "a packed weight of another shape is refused");
        Ok(())
    }

    /// `attend_many` against a direct f64 softmax over strided q/k/v (the projections'
    /// `(b, t, heads, d)` layout for q, the cache's `(b, kv_heads, t, d)` for k and v), with
    /// grouped heads, cached keys before the queries, and a causal rule.
    #[test]
    fn attend_many_matches_f64_reference_on_strided_heads() -> Result<()> {
        let cases = [
            (5, 5, false, 24),
            (130, 130, true, 24),
            (300, 310, true, 24),
            (200, 200, false, 24),
            (140, 150, true, 80),
        ];
        for (tq, tk, causal, d) in cases {
            let (b, heads, kv_heads) = (2, 4, 2);
            let s = AttentionShape { batch: b, heads, kv_heads, tq, tk, head_dim: d };
            // q: (b, tq, heads, d) read as (b, heads, tq, d).
            let q = rand(b * tq * heads * d, 5);
            let ql = KvLayout { offset: 0, batch_stride: tq * heads * d, head_stride: d, row_stride: heads * d };
            // k, v: (b, kv_heads, tk + 3, d) with 3 spare rows (a cache with room), offset 1 row.
            let cap = tk + 3;
            let kvl = KvLayout { offset: d, batch_stride: kv_heads * cap * d, head_stride: cap * d, row_stride: d };
            let (k, v) = (rand(b * kv_heads * cap * d + d, 6), rand(b * kv_heads * cap * d + d, 7));
            let first = tk - tq;
            let visible = move |pos: usize| if causal { 0..pos + 1 } else { 0..tk };
            let scale = 0.3f32;
            for threads in [1, 2] {
                let pool = ThreadPool::new(threads);
                let mut out = vec![f32::NAN; b * tq * heads * d];
                attend_many(&pool, s, &q, ql, &k, kvl, &v, kvl, scale, &visible, &mut out)?;
                for (bi, h, i) in [(0, 0, 0), (1, 3, tq - 1), (0, 2, tq / 2), (1, 1, tq.min(129) - 1)] {
                    let qrow = &q[bi * ql.batch_stride + h * d + i * ql.row_stride..][..d];
                    let kvh = h / (heads / kv_heads);
                    let row = |j: usize, src: &[f32]| {
                        src[kvl.offset + bi * kvl.batch_stride + kvh * kvl.head_stride + j * d..][..d].to_vec()
                    };
                    let keys = visible(first + i);
                    let logits: Vec<f64> = keys
                        .clone()
                        .map(|j| {
                            row(j, &k).iter().zip(qrow).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * scale as f64
                        })
                        .collect();
                    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for c in 0..d {
                        let want: f64 = keys.clone().zip(&e).map(|(j, p)| p / total * row(j, &v)[c] as f64).sum();
                        let got = out[((bi * tq + i) * heads + h) * d + c] as f64;
                        assert!((got - want).abs() < 1e-5, "tq {tq} tk {tk} ({bi},{h},{i},{c}): {got} vs {want}");
                    }
                }
            }
        }
        Ok(())
    }

    /// `attend_many` on tessera's GEMM (keys packed per head, each job's keys starting at a
    /// panel's first key) gives every output the `gemm` crate's path gives, within f32
    /// rounding: causal, sliding windows whose first key is not on a panel boundary, cached
    /// keys before the queries, head widths that fill no panel.
    #[test]
    fn attend_many_on_packed_keys_matches_the_gemm_crate_path() -> Result<()> {
        type Rule = fn(usize) -> Range<usize>;
        let rules: [(&str, Rule); 3] =
            [("causal", |p| 0..p + 1), ("window 45", |p| p.saturating_sub(44)..p + 1), ("full", |_| 0..1000)];
        for (tq, tk, d) in [(7, 7, 24), (150, 181, 64), (300, 300, 80), (129, 140, 33)] {
            let (b, heads, kv_heads) = (2, 6, 2);
            let s = AttentionShape { batch: b, heads, kv_heads, tq, tk, head_dim: d };
            let q = rand(b * tq * heads * d, 8);
            let ql = KvLayout { offset: 0, batch_stride: tq * heads * d, head_stride: d, row_stride: heads * d };
            let kvl = KvLayout { offset: 0, batch_stride: kv_heads * tk * d, head_stride: tk * d, row_stride: d };
            let (k, v) = (rand(b * kv_heads * tk * d, 9), rand(b * kv_heads * tk * d, 10));
            for (name, rule) in rules {
                let visible = move |pos: usize| {
                    let r = rule(pos);
                    r.start..r.end.min(tk)
                };
                let pool = ThreadPool::new(2);
                let mut outs = [true, false].map(|_| vec![f32::NAN; b * tq * heads * d]);
                for (fast, out) in [true, false].into_iter().zip(&mut outs) {
                    attend_many_on(fast, &pool, s, (&q, ql), (&k, kvl), (&v, kvl), 0.2, &visible, out)?;
                }
                for (i, (a, z)) in outs[0].iter().zip(&outs[1]).enumerate() {
                    assert!((a - z).abs() < 2e-6 * (1.0 + z.abs()), "{name} tq {tq} tk {tk} d {d} [{i}]: {a} vs {z}");
                }
            }
        }
        Ok(())
    }
}
