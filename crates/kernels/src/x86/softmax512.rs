//! Softmax's numerators sixteen lanes at a time (AVX-512 F) for attention over many queries:
//! `ops::softmax_numerators`' passes with `ops::exp`'s steps as vector operations, each the
//! same IEEE operation in the same order, so the values and the sum are that portable loop's
//! bit for bit.

use std::arch::x86_64::*;

/// `ops::exp` on sixteen lanes.
#[inline(always)]
unsafe fn exp16(x: __m512) -> __m512 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12582912.0;
    let c = _mm512_set1_ps;
    let xc = _mm512_max_ps(x, c(-87.0));
    let t = _mm512_add_ps(_mm512_mul_ps(xc, c(std::f32::consts::LOG2_E)), c(MAGIC));
    let n = _mm512_sub_ps(t, c(MAGIC));
    let ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(MAGIC.to_bits() as i32));
    let r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, c(LN2_HI))), _mm512_mul_ps(n, c(LN2_LO)));
    let horner = |acc: __m512, k: f32| _mm512_add_ps(c(k), _mm512_mul_ps(r, acc));
    let mut p = c(1.0 / 5040.0);
    for k in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = horner(p, k);
    }
    let two_n = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(ni, _mm512_set1_epi32(127))));
    let v = _mm512_mul_ps(p, two_n);
    _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, c(-87.0)), _mm512_setzero_ps())
}

/// `ops::softmax_numerators` (its portable body's bits).
///
/// # Safety
/// The CPU has AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn softmax_numerators(s: &mut [f32], scale: f32) -> f32 {
    let full = s.len() / 16 * 16;
    let ptr = s.as_mut_ptr();
    let (mut hi, mut lo) = (_mm512_set1_ps(f32::NEG_INFINITY), _mm512_set1_ps(f32::INFINITY));
    for i in (0..full).step_by(16) {
        let v = _mm512_loadu_ps(ptr.add(i));
        hi = _mm512_max_ps(hi, v);
        lo = _mm512_min_ps(lo, v);
    }
    let (mut max, mut min) = (_mm512_reduce_max_ps(hi), _mm512_reduce_min_ps(lo));
    for &v in &s[full..] {
        max = max.max(v);
        min = min.min(v);
    }
    let shift = if scale >= 0.0 { max * scale } else { min * scale };
    if shift == f32::NEG_INFINITY || s.is_empty() {
        s.fill(0.0);
        return 0.0;
    }
    let (vscale, vshift) = (_mm512_set1_ps(scale), _mm512_set1_ps(shift));
    let mut sums = _mm512_setzero_ps();
    for i in (0..full).step_by(16) {
        let e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(ptr.add(i)), vscale), vshift));
        _mm512_storeu_ps(ptr.add(i), e);
        sums = _mm512_add_ps(sums, e);
    }
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), sums);
    let mut total: f32 = lanes.iter().sum();
    for v in &mut s[full..] {
        *v = crate::ops::exp(*v * scale - shift);
        total += *v;
    }
    total
}
