//! x86-64 decode dot products of the k-quants (256-value blocks: `Q4_K`, `Q5_K`, `Q6_K`) with
//! `Q8_K` activations, in AVX2: `maddubs` per 32 values, the sub-block scales applied by `madd`
//! on the int16 pairs, the mins through the activations' block sums (ggml's
//! `ggml_vec_dot_q4_K_q8_K` and its siblings, `ggml-cpu/arch/x86/quants.c`).
//!
//! # Safety
//! The AVX2 kernels [`row_k_fn`] returns run only on a CPU with AVX2, FMA and F16C (`has_avx2()`);
//! the AVX-512 ones (`kquants512.rs`), only with AVX-512 VNNI too (`has_vnni()`).
//! They read `min(act.len(), row.len() / block bytes)` blocks, so any lengths are memory-safe.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum};
use crate::blocks::{Q8KBlock, QType};

/// The 8 six-bit scales and 8 mins of a Q4_K/Q5_K block's 12 scale bytes at `sc`, as bytes
/// `[scales…, mins…]`: ggml's four-word unpacking (`utmp` in `ggml_vec_dot_q4_K_q8_K`), the
/// values of `blocks::scale_min_k4` without its per-value branches.
#[inline(always)]
unsafe fn scales_mins_k4(sc: *const u8) -> [u8; 16] {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes(std::ptr::read_unaligned(sc.add(4 * i) as *const [u8; 4]));
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let u = [w0 & M1, (w2 & M2) | (((w0 >> 6) & M3) << 4), w1 & M1, ((w2 >> 4) & M2) | (((w1 >> 6) & M3) << 4)];
    std::mem::transmute::<[u32; 4], [u8; 16]>(u.map(u32::to_le))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q45k_avx2<const FIVE: bool>(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let bb = if FIVE { 176 } else { 144 };
    let n = act.len().min(row.len() / bb);
    let p = row.as_ptr();
    let low4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for i in 0..n {
        let b = p.add(i * bb);
        let a = act.get_unchecked(i);
        let d = f16_to_f32(b) * a.d;
        let dmin = f16_to_f32(b.add(2)) * a.d;
        let sm = scales_mins_k4(b.add(4));
        let scales = &sm[..8];
        // Σ_j min[j] · (bsums[2j] + bsums[2j+1]), four lanes of pairs of j.
        let mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(sm.as_ptr().add(8) as *const __m128i));
        let bs = a.bsums.as_ptr() as *const __m128i;
        let pairs = _mm_hadd_epi16(_mm_loadu_si128(bs), _mm_loadu_si128(bs.add(1)));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, pairs)), acc_m);
        let (qh, qs) = if FIVE {
            (_mm256_loadu_si256(b.add(16) as *const __m256i), b.add(48))
        } else {
            (_mm256_setzero_si256(), b.add(16))
        };
        let y = a.qs.as_ptr();
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let v = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let mut lo = _mm256_and_si256(v, low4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if FIVE {
                let sh = _mm_cvtsi32_si128(2 * c as i32);
                let sh1 = _mm_cvtsi32_si128(2 * c as i32 + 1);
                let b0 = _mm256_and_si256(_mm256_srl_epi16(qh, sh), one);
                let b1 = _mm256_and_si256(_mm256_srl_epi16(qh, sh1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
            }
            let y0 = _mm256_loadu_si256(y.add(64 * c) as *const __m256i);
            let y1 = _mm256_loadu_si256(y.add(64 * c + 32) as *const __m256i);
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(scales[2 * c] as i16));
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(scales[2 * c + 1] as i16));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    hsum(acc) - _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q6k_avx2(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let n = act.len().min(row.len() / 210);
    let p = row.as_ptr();
    let low4 = _mm256_set1_epi8(0x0F);
    let three = _mm256_set1_epi8(3);
    let m32 = _mm256_set1_epi8(32);
    let mut acc = _mm256_setzero_ps();
    for i in 0..n {
        let b = p.add(i * 210);
        let a = act.get_unchecked(i);
        let d = f16_to_f32(b.add(208)) * a.d;
        let sc = b.add(192) as *const i8;
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let ql0 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
            let hb = |s: i32| -> __m256i {
                let v = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), three);
                _mm256_slli_epi16(v, 4)
            };
            let v = [
                _mm256_or_si256(_mm256_and_si256(ql0, low4), hb(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, low4), hb(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), hb(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), hb(6)),
            ];
            for (k, v) in v.iter().enumerate() {
                let y = _mm256_loadu_si256(a.qs.as_ptr().add(128 * h + 32 * k) as *const __m256i);
                let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(*v, y), _mm256_maddubs_epi16(m32, y));
                let s0 = *sc.add(8 * h + 2 * k) as i16;
                let s1 = *sc.add(8 * h + 2 * k + 1) as i16;
                let scale = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scale));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// The row kernel of a k-quant type: the AVX-512 one when `vnni` (callers check `has_vnni()`
/// first), else AVX2 (callers check `has_avx2()`).
pub(crate) fn row_k_fn(t: QType, vnni: bool) -> Option<crate::matmul::RowKFn> {
    match (t, vnni) {
        (QType::Q4K, false) => Some(row_q45k_avx2::<false>),
        (QType::Q5K, false) => Some(row_q45k_avx2::<true>),
        (QType::Q6K, false) => Some(row_q6k_avx2),
        (QType::Q4K, true) => Some(super::kquants512::row_q45k_vnni::<false>),
        (QType::Q5K, true) => Some(super::kquants512::row_q45k_vnni::<true>),
        (QType::Q6K, true) => Some(super::kquants512::row_q6k_vnni),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    /// The four-word unpacking gives `blocks::scale_min_k4`'s scales and mins for every byte
    /// pattern of each position.
    #[test]
    fn scales_and_mins_unpack_as_ggml_does() {
        let mut s = 1u64;
        for _ in 0..2000 {
            let bytes: [u8; 12] = std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 32) as u8
            });
            // SAFETY: 12 readable bytes.
            let got = unsafe { super::scales_mins_k4(bytes.as_ptr()) };
            for j in 0..8 {
                assert_eq!((got[j], got[8 + j]), crate::blocks::scale_min_k4(j, &bytes), "{bytes:?} j {j}");
            }
        }
    }
}
