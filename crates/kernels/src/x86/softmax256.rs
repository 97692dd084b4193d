//! Softmax's numerators eight lanes at a time (AVX2) for attention over many queries: the AVX-512
//! kernel's passes (`softmax512`) on 256-bit registers, the sixteen lane sums of
//! `ops::softmax_numerators`' portable loop kept in two registers, `ops::exp`'s steps as vector
//! operations — each the same IEEE operation in the same order (no fused multiply-adds) — so the
//! values and the sum are that portable loop's bit for bit.

use std::arch::x86_64::*;

/// `ops::exp` on eight lanes.
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12582912.0;
    let c = _mm256_set1_ps;
    let xc = _mm256_max_ps(x, c(-87.0));
    let t = _mm256_add_ps(_mm256_mul_ps(xc, c(std::f32::consts::LOG2_E)), c(MAGIC));
    let n = _mm256_sub_ps(t, c(MAGIC));
    let ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(MAGIC.to_bits() as i32));
    let r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, c(LN2_HI))), _mm256_mul_ps(n, c(LN2_LO)));
    let horner = |acc: __m256, k: f32| _mm256_add_ps(c(k), _mm256_mul_ps(r, acc));
    let mut p = c(1.0 / 5040.0);
    for k in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = horner(p, k);
    }
    let two_n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127))));
    let v = _mm256_mul_ps(p, two_n);
    // Zero where x < -87 (ordered: a NaN keeps `v`, as the scalar `if` does).
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, c(-87.0)), v)
}

/// `ops::softmax_numerators` (its portable body's bits).
///
/// # Safety
/// The CPU has AVX2 (and FMA, F16C: the kernels' AVX2 set; none is used here but AVX2's).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn softmax_numerators(s: &mut [f32], scale: f32) -> f32 {
    let full = s.len() / 16 * 16;
    let ptr = s.as_mut_ptr();
    let (mut hi, mut lo) = (_mm256_set1_ps(f32::NEG_INFINITY), _mm256_set1_ps(f32::INFINITY));
    for i in (0..full).step_by(8) {
        let v = _mm256_loadu_ps(ptr.add(i));
        hi = _mm256_max_ps(hi, v);
        lo = _mm256_min_ps(lo, v);
    }
    let (mut his, mut los) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(his.as_mut_ptr(), hi);
    _mm256_storeu_ps(los.as_mut_ptr(), lo);
    let mut max = his.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut min = los.iter().fold(f32::INFINITY, |m, &v| m.min(v));
    for &v in &s[full..] {
        max = max.max(v);
        min = min.min(v);
    }
    let shift = if scale >= 0.0 { max * scale } else { min * scale };
    if shift == f32::NEG_INFINITY || s.is_empty() {
        s.fill(0.0);
        return 0.0;
    }
    let (vscale, vshift) = (_mm256_set1_ps(scale), _mm256_set1_ps(shift));
    // Lanes 0–7 and 8–15 of the portable loop's sixteen sums.
    let (mut sums_lo, mut sums_hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for i in (0..full).step_by(16) {
        let e0 = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(ptr.add(i)), vscale), vshift));
        let e1 = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(ptr.add(i + 8)), vscale), vshift));
        _mm256_storeu_ps(ptr.add(i), e0);
        _mm256_storeu_ps(ptr.add(i + 8), e1);
        sums_lo = _mm256_add_ps(sums_lo, e0);
        sums_hi = _mm256_add_ps(sums_hi, e1);
    }
    let mut lanes = [0f32; 16];
    _mm256_storeu_ps(lanes.as_mut_ptr(), sums_lo);
    _mm256_storeu_ps(lanes.as_mut_ptr().add(8), sums_hi);
    let mut total: f32 = lanes.iter().sum();
    for v in &mut s[full..] {
        *v = crate::ops::exp(*v * scale - shift);
        total += *v;
    }
    total
}
