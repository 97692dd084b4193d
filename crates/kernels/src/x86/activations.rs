//! x86-64 passes over f32 activation rows, in AVX2: quantization to `Q8` blocks and RMSNorm of
//! eight rows at once. Each gives the bits of its portable twin
//! ([`crate::blocks::quantize_q8`], [`crate::ops::rms_norm`]), which the tests compare exactly.
//!
//! # Safety
//! Both run only on a CPU with the features their `#[target_feature]` names (`has_avx2()`),
//! with the lengths their `# Safety` sections state.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use crate::blocks::Q8Block;

// ---- Activations to `Q8` blocks.

/// [`crate::blocks::quantize_q8`] in AVX2 + F16C, the same bits for finite inputs: the largest
/// magnitude by vector max (exact in any order), `round(x · 127 / amax)` ties to even by the
/// conversion instruction (the scalar code's magic-number rounding gives the same for
/// |v| ≤ 127), the integer sum, and `d`, `s` rounded through f16 by F16C (IEEE rounding, as
/// `half` does it).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `x.len() = 32 · out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_avx2(x: &[f32], out: &mut [Q8Block]) {
    let sign = _mm256_set1_ps(-0.0);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let round_f16 = |v: f32| _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v))));
    for (xs, y) in x.chunks_exact(32).zip(out.iter_mut()) {
        let p = xs.as_ptr();
        let v = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let r = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, id)));
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        _mm256_storeu_si256(y.qs.as_mut_ptr() as *mut __m256i, _mm256_permutevar8x32_epi32(bytes, order));
        let s = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
        y.d = round_f16(d);
        y.s = round_f16(d * sum as f32);
        y.isum = sum;
    }
}

// ---- RMSNorm of eight rows at once.

/// `t[j][l]` = `r[l][j]`: an 8 × 8 block of f32 transposed.
#[inline(always)]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let a0 = _mm256_unpacklo_ps(r[0], r[1]);
    let a1 = _mm256_unpackhi_ps(r[0], r[1]);
    let a2 = _mm256_unpacklo_ps(r[2], r[3]);
    let a3 = _mm256_unpackhi_ps(r[2], r[3]);
    let a4 = _mm256_unpacklo_ps(r[4], r[5]);
    let a5 = _mm256_unpackhi_ps(r[4], r[5]);
    let a6 = _mm256_unpacklo_ps(r[6], r[7]);
    let a7 = _mm256_unpackhi_ps(r[6], r[7]);
    let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
    let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
    let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
    let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
    let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
    let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
    let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
    let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
    [
        _mm256_permute2f128_ps::<0x20>(b0, b4),
        _mm256_permute2f128_ps::<0x20>(b1, b5),
        _mm256_permute2f128_ps::<0x20>(b2, b6),
        _mm256_permute2f128_ps::<0x20>(b3, b7),
        _mm256_permute2f128_ps::<0x31>(b0, b4),
        _mm256_permute2f128_ps::<0x31>(b1, b5),
        _mm256_permute2f128_ps::<0x31>(b2, b6),
        _mm256_permute2f128_ps::<0x31>(b3, b7),
    ]
}

/// [`crate::ops::rms_norm`] of the eight rows `x` (`8 · dim` values) into `out`, bit for bit:
/// each row's sum of squares is still one sequential chain (a square, rounded, then added),
/// but the eight chains run side by side in the lanes of one vector (the rows read through
/// 8 × 8 transposes), so a row costs a chain of `dim` adds shared eight ways; then per value a
/// division and a product, eight values at a time.
///
/// # Safety
/// The CPU has AVX2 and FMA; `x.len() = out.len() = 8 · alpha.len()`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rms_norm_rows8(x: &[f32], alpha: &[f32], eps: f32, out: &mut [std::mem::MaybeUninit<f32>]) {
    let dim = alpha.len();
    let p = x.as_ptr();
    let mut sum = _mm256_setzero_ps();
    let mut c = 0;
    while c + 8 <= dim {
        let block: [__m256; 8] = std::array::from_fn(|r| _mm256_loadu_ps(p.add(r * dim + c)));
        for col in transpose8(block) {
            sum = _mm256_add_ps(sum, _mm256_mul_ps(col, col));
        }
        c += 8;
    }
    for c in c..dim {
        let col: [f32; 8] = std::array::from_fn(|r| *p.add(r * dim + c));
        let col = _mm256_loadu_ps(col.as_ptr());
        sum = _mm256_add_ps(sum, _mm256_mul_ps(col, col));
    }
    let m = _mm256_sqrt_ps(_mm256_add_ps(_mm256_div_ps(sum, _mm256_set1_ps(dim as f32)), _mm256_set1_ps(eps)));
    let mut ms = [0f32; 8];
    _mm256_storeu_ps(ms.as_mut_ptr(), m);
    let o = out.as_mut_ptr() as *mut f32;
    for (r, &m) in ms.iter().enumerate() {
        let (src, dst, mv) = (p.add(r * dim), o.add(r * dim), _mm256_set1_ps(m));
        let mut c = 0;
        while c + 8 <= dim {
            let v =
                _mm256_mul_ps(_mm256_div_ps(_mm256_loadu_ps(src.add(c)), mv), _mm256_loadu_ps(alpha.as_ptr().add(c)));
            _mm256_storeu_ps(dst.add(c), v);
            c += 8;
        }
        for (c, &a) in alpha.iter().enumerate().skip(c) {
            *dst.add(c) = *src.add(c) / m * a;
        }
    }
}
