//! Elementwise ops of the fused CPU paths: a vectorisable `exp` for softmax arguments and
//! SwiGLU's `silu(gate) · up` in one pass.

use std::mem::MaybeUninit;

use crate::error::{KernelError, Result};
use crate::pool::{SendPtr, ThreadPool};

/// `eᵡ` for x ≤ 0 (softmax arguments), relative error < 2e-7; 0 below −87. Branch-free, so
/// loops over it vectorise.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // eˣ = 2ⁿ · e^r, n = round(x / ln 2), |r| ≤ ln2 / 2; e^r by its Taylor polynomial to r⁷.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12582912.0; // 1.5 · 2²³: adding it rounds to an integer (no libm call)
    let xc = x.max(-87.0);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    // The integer n sits in t's low mantissa bits.
    let ni = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let v = p * f32::from_bits(((ni + 127) as u32) << 23);
    if x < -87.0 {
        0.0
    } else {
        v
    }
}

/// Whether the kernels run AVX2 code (the chosen instruction set is AVX2 or AVX-512 VNNI, so
/// the CPU has AVX2, FMA and F16C): the one test every AVX2 path here and in `blocks.rs` and
/// `attention.rs` makes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_kernels() -> bool {
    matches!(crate::Isa::best(), crate::Isa::Avx2 | crate::Isa::Avx512Vnni)
}

/// Runs `f` compiled for AVX2 + FMA when the kernels use them (the workspace is built for
/// baseline x86-64, whose vectors are SSE2's four lanes): elementwise loops inlined into `f`
/// then vectorise eight lanes wide — when the compiler inlines `f`'s body, which it need not
/// (`silu_mul`'s loop stayed a function of its own, four lanes wide, until it got its own
/// `#[target_feature]` function with an `#[inline(always)]` body).
#[inline(always)]
pub(crate) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if avx2_kernels() {
            // SAFETY: `Isa::best` only names instruction sets this CPU has.
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// Softmax's numerators in place: `s[i] ← exp(scale·s[i] − max_j scale·s[j])` (each product
/// rounded, then the shift subtracted: the arguments `attention::softmax_in_place` forms), and
/// their sum, for the caller to divide by where it is cheaper (attention over many queries
/// divides each output row, `head_dim` values, instead of the row of scores). Sixteen lanes
/// wide on AVX-512, eight on AVX2. An empty `s`, or one of `-inf`s, gives zeros and a sum of 0.
pub(crate) fn softmax_numerators(s: &mut [f32], scale: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::Isa::best() == crate::Isa::Avx512Vnni {
        // SAFETY: the chosen instruction set has AVX-512 F.
        return unsafe { crate::x86::softmax_numerators_512(s, scale) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_kernels() {
        // SAFETY: the chosen instruction set has AVX2.
        return unsafe { crate::x86::softmax_numerators_256(s, scale) };
    }
    wide(|| softmax_numerators_portable(s, scale))
}

/// The portable twin of the AVX-512 `softmax_numerators`: sixteen lanes of maxima and sums,
/// the lanes' sums added in order, then the values past the last sixteen.
#[inline(always)]
pub(crate) fn softmax_numerators_portable(s: &mut [f32], scale: f32) -> f32 {
    const L: usize = 16;
    // The largest scaled value: scale·max for scale ≥ 0, scale·min below (rounding is
    // monotonic, so this is the largest rounded product).
    let (mut max, mut min) = (f32::NEG_INFINITY, f32::INFINITY);
    for &v in s.iter() {
        max = max.max(v);
        min = min.min(v);
    }
    let shift = if scale >= 0.0 { max * scale } else { min * scale };
    if shift == f32::NEG_INFINITY || s.is_empty() {
        s.fill(0.0);
        return 0.0;
    }
    let mut sums = [0f32; L];
    let mut chunks = s.chunks_exact_mut(L);
    for c in &mut chunks {
        for l in 0..L {
            c[l] = exp(c[l] * scale - shift);
            sums[l] += c[l];
        }
    }
    let mut total: f32 = sums.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp(*v * scale - shift);
        total += *v;
    }
    total
}

/// `dst[i] = f16(src[i])`, rounded to nearest even as `half` rounds (F16C eight at a time where
/// the kernels use AVX2: `half`'s slice conversion spends about as long per call checking the
/// CPU and looping over 8-value helper calls as converting, and a KV cache write converts a
/// few dozen values per call).
pub fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(KernelError::Shape(format!("f16 conversion of {} values into {}", src.len(), dst.len())));
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_kernels() {
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn f16c(src: &[f32], dst: &mut [half::f16]) {
            use std::arch::x86_64::*;
            let (mut s8, mut d8) = (src.chunks_exact(8), dst.chunks_exact_mut(8));
            for (s, d) in (&mut s8).zip(&mut d8) {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
                _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, h);
            }
            for (s, d) in s8.remainder().iter().zip(d8.into_remainder()) {
                *d = half::f16::from_f32(*s);
            }
        }
        // SAFETY: the CPU has AVX2 and F16C (`avx2_kernels`); the lengths match.
        unsafe { f16c(src, dst) };
        return Ok(());
    }
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = half::f16::from_f32(s));
    Ok(())
}

/// `σ(z)` with the polynomial `exp`: `1 / (1 + e⁻ᶻ)` for z ≥ 0, `eᶻ / (1 + eᶻ)` below, so
/// `e^{−|z|}` never overflows. Branch-free.
#[inline(always)]
fn sigmoid(z: f32) -> f32 {
    let e = exp(-z.abs());
    let num = if z >= 0.0 { 1.0 } else { e };
    num / (1.0 + e)
}

/// `sums[i] += row[i] · weight` in wrapping 32-bit integers (C's `int` arithmetic, as Pillow's
/// resampling sums: one source row times one filter weight, added into a row of sums), eight
/// lanes wide where the kernels use AVX2 (baseline x86-64 has no 32-bit vector multiply).
/// Integer sums: every path gives the same values.
pub fn add_scaled_u8(sums: &mut [i32], row: &[u8], weight: i32) {
    #[inline(always)]
    fn body(sums: &mut [i32], row: &[u8], weight: i32) {
        for (s, &p) in sums.iter_mut().zip(row) {
            *s = s.wrapping_add(i32::from(p).wrapping_mul(weight));
        }
    }
    wide(|| body(sums, row, weight))
}

/// `silu(g) · u = g · σ(g) · u` elementwise into `out` (SwiGLU's gate), with the polynomial
/// `exp`; split across the pool when large.
pub fn silu_mul(pool: &ThreadPool, gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    if gate.len() != up.len() || gate.len() != out.len() {
        return Err(KernelError::Shape(format!("silu_mul of {} × {} into {}", gate.len(), up.len(), out.len())));
    }
    par_chunks(pool, out, &|a, o| {
        #[inline(always)]
        fn body(gate: &[f32], up: &[f32], out: &mut [f32]) {
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = g * sigmoid(g) * u;
            }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn body_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
            body(gate, up, out)
        }
        #[cfg(target_arch = "x86_64")]
        if avx2_kernels() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { body_avx2(&gate[a..], &up[a..], o) };
        }
        body(&gate[a..], &up[a..], o)
    })
}

/// Rows of at least this many values are normalised across the pool ([`rms_norm`]): a row's sum
/// of squares is a chain of dependent adds, about a microsecond for 576 values.
const RMS_NORM_PAR_ROWS: usize = 4;

/// RMSNorm of each row of `alpha.len()` values of `x` into `out`: `x / √(Σx²/dim + eps) · alpha`,
/// with the expressions and order of Candle's CPU `rms_norm` (a sequential sum of squares,
/// then per value a division and a product), so the same bits; rows are shared out among the
/// pool's threads when there are several (Candle runs up to 32 rows on the calling thread
/// and more on rayon's, which then spin beside this pool). With AVX2, eight rows at a time
/// (see `x86::rms_norm_rows8`: the same sequential sums, side by side in vector lanes). Every
/// element of `out` is written.
pub fn rms_norm(pool: &ThreadPool, x: &[f32], alpha: &[f32], eps: f32, out: &mut [MaybeUninit<f32>]) -> Result<()> {
    let dim = alpha.len();
    if dim == 0 || !x.len().is_multiple_of(dim) || out.len() != x.len() {
        return Err(KernelError::Shape(format!(
            "rms_norm of {} values by a weight of {dim} into {}",
            x.len(),
            out.len()
        )));
    }
    let row = |r: usize, o: &mut [MaybeUninit<f32>]| {
        let src = &x[r * dim..][..dim];
        let sum2 = src.iter().map(|&v| v * v).sum::<f32>();
        let m = (sum2 / dim as f32 + eps).sqrt();
        for ((d, &s), &a) in o.iter_mut().zip(src).zip(alpha) {
            d.write(s / m * a);
        }
    };
    #[cfg(target_arch = "x86_64")]
    if avx2_kernels() && x.len() >= 8 * dim {
        // Eight rows at a time (their sums side by side in one vector), the rest one by one.
        let eights = x.len() / dim / 8 * 8 * dim;
        let (x8, out8) = (&x[..eights], &mut out[..eights]);
        crate::pool::for_each_row(pool, out8, 8 * dim, 2, &|g, o| {
            // SAFETY: the CPU has AVX2 and FMA (`avx2_kernels`); group g's rows are 8 · dim values
            // of `x8` and of `o`.
            unsafe { crate::x86::rms_norm_rows8(&x8[g * 8 * dim..][..8 * dim], alpha, eps, o) }
        })?;
        let done = eights / dim;
        return crate::pool::for_each_row(pool, &mut out[eights..], dim, RMS_NORM_PAR_ROWS, &|r, o| row(done + r, o));
    }
    crate::pool::for_each_row(pool, out, dim, RMS_NORM_PAR_ROWS, &row)
}

/// The tanh approximation of GELU (`gelu_pytorch_tanh`), `½x(1 + tanh(√(2/π)(x + 0.044715x³)))`,
/// elementwise into `out`, computed as `x · σ(2·√(2/π)(x + 0.044715x³))` (the same function:
/// `1 + tanh(v) = 2σ(2v)`) with the polynomial `exp` instead of libm's `tanhf`.
pub fn gelu_tanh(pool: &ThreadPool, x: &[f32], out: &mut [f32]) -> Result<()> {
    if x.len() != out.len() {
        return Err(KernelError::Shape(format!("gelu of {} values into {}", x.len(), out.len())));
    }
    par_chunks(pool, out, &|a, o| {
        #[inline(always)]
        fn body(x: &[f32], out: &mut [f32]) {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = gelu_tanh_one(v);
            }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn body_avx2(x: &[f32], out: &mut [f32]) {
            body(x, out)
        }
        #[cfg(target_arch = "x86_64")]
        if avx2_kernels() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { body_avx2(&x[a..], o) };
        }
        body(&x[a..], o)
    })
}

/// QuickGELU (CLIP's `x·σ(1.702x)`) elementwise into `out`, on every thread, with the `expf`
/// and the operations of Candle's `x * sigmoid(x * 1.702)`: the same bits, without its three
/// passes and two intermediate tensors on one thread.
pub fn quick_gelu(pool: &ThreadPool, x: &[f32], out: &mut [f32]) -> Result<()> {
    if x.len() != out.len() {
        return Err(KernelError::Shape(format!("quick gelu of {} values into {}", x.len(), out.len())));
    }
    par_chunks(pool, out, &|a, o| {
        for (o, &v) in o.iter_mut().zip(&x[a..]) {
            // Candle's `x * 1.702` is an affine map, `v · 1.702 + 0`: the `+ 0` turns −0 into +0.
            let s = ((-(v * 1.702 + 0.0)).exp() + 1.0).recip();
            *o = v * s;
        }
    })
}

/// [`gelu_tanh`] of one value (inlined into vectorised loops).
#[inline(always)]
pub(crate) fn gelu_tanh_one(v: f32) -> f32 {
    const K: f32 = 2.0 * 0.797_884_6; // 2·√(2/π)
    v * sigmoid(K * (v + 0.044715 * v * v * v))
}

/// Runs `body(start, out[start..end])` over `out` in one chunk per pool thread when it is
/// large (one chunk otherwise).
fn par_chunks<F: Fn(usize, &mut [f32]) + Sync>(pool: &ThreadPool, out: &mut [f32], body: &F) -> Result<()> {
    let n = out.len();
    let parts = pool.threads();
    if n < 1 << 14 || parts == 1 {
        body(0, out);
        return Ok(());
    }
    let per = n.div_ceil(parts);
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|p| {
        let dst = &dst;
        let (a, b) = ((p * per).min(n), ((p + 1) * per).min(n));
        // SAFETY: part p writes out[a..b] only.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add(a), b - a) };
        body(a, o);
    })
}

#[cfg(test)]
mod tests {
    /// This CPU's `softmax_numerators` (AVX-512's or AVX2's) gives the portable loop's bits (values
    /// and sum), at every length around the sixteen lanes, both signs of the scale, a scale that
    /// sends most arguments below exp's cut-off at -87, rows with masked (`-inf`) positions and a
    /// row of `-inf`; and the values over the sum are a softmax (f64 reference).
    #[test]
    fn softmax_numerators_match_portable_twin_and_softmax() {
        // Masked positions (every 7th of a row longer than 40) under the positive scales only:
        // a mask is `-inf` after scaling.
        let row = |n: usize, scale: f32| -> Vec<f32> {
            let masked = |i: usize| scale > 0.0 && n > 40 && i % 7 == 3;
            (0..n)
                .map(|i| if masked(i) { f32::NEG_INFINITY } else { ((i * 7919 % 1013) as f32 - 500.0) * 0.037 })
                .collect()
        };
        for n in [0, 1, 15, 16, 17, 33, 47, 1000] {
            for scale in [0.125f32, 1.0, -0.3, 8.0] {
                let (mut fast, mut slow) = (row(n, scale), row(n, scale));
                let (sf, ss) =
                    (super::softmax_numerators(&mut fast, scale), super::softmax_numerators_portable(&mut slow, scale));
                assert_eq!(sf.to_bits(), ss.to_bits(), "sum, n {n} scale {scale}");
                assert!(fast.iter().zip(&slow).all(|(a, b)| a.to_bits() == b.to_bits()), "values, n {n} scale {scale}");
                let logits: Vec<f64> = row(n, scale).iter().map(|&v| v as f64 * scale as f64).collect();
                let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                for (l, &v) in logits.iter().zip(&fast) {
                    let want = (l - max).exp() / total;
                    assert!((v as f64 / sf as f64 - want).abs() < 1e-6, "n {n} scale {scale}: {} vs {want}", v / sf);
                }
            }
        }
        let mut masked = vec![f32::NEG_INFINITY; 20];
        assert_eq!(super::softmax_numerators(&mut masked, 0.5), 0.0);
        assert!(masked.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn add_scaled_u8_is_the_scalar_sum() {
        let row: Vec<u8> = (0..1003u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for weight in [0, 1, -3, 4_194_304, -1_000_000, i32::MAX] {
            let start: Vec<i32> = (0..1003).map(|i| i * 7919 - 300_000).collect();
            let mut sums = start.clone();
            super::add_scaled_u8(&mut sums, &row, weight);
            for ((s, &p), &s0) in sums.iter().zip(&row).zip(&start) {
                assert_eq!(*s, s0.wrapping_add(i32::from(p).wrapping_mul(weight)), "weight {weight}");
            }
        }
    }
}
