//! x86-64 decode dot products of the k-quants (`Q4_K`, `Q5_K`, `Q6_K`) with `Q8_K` activations
//! on 512-bit registers (AVX-512 BW + VNNI). The AVX2 kernels (`kquants.rs`) cost ~100 cycles
//! per 256-value block, most of it in unpacking the sub-block scales one at a time: a 1B
//! model's decode was bound by them, not by memory. Here each register holds 64 values in the
//! activations' order, so one activation load, one `maddubs` and one `vpdpwssd` (which applies
//! the sub-block scales, broadcast by a byte shuffle) serve 64 values:
//!
//! - `Q4_K` / `Q5_K`: a 32-byte chunk of nibbles holds sub-blocks 2c (low nibbles) and 2c + 1
//!   (high nibbles); broadcast to both halves and shifted by 0 and 4 per half, it lines up with
//!   activations 64c..64c + 63. The 6-bit scales and mins are unpacked with 32-bit masks
//!   (ggml's `utmp` trick, `ggml-cpu/arch/x86/quants.c`), the mins dotted with the activations'
//!   pair sums by one `madd`.
//! - `Q6_K`: 64 bytes of low bits and the 32 bytes of high bits broadcast and shifted per half;
//!   the −32 offset is taken out once per block through the activations' 16-value sums
//!   (Σ s·(q − 32)·y = Σ s·q·y − 32 Σ s·bsum).
//!
//! The integer sums are exact; only the f32 combination order differs from the AVX2 kernels.
//!
//! # Safety
//! The kernels run only on a CPU with AVX-512 F/VL/BW/VNNI, AVX2, FMA and F16C (`has_vnni()`).
//! They read `min(act.len(), row.len() / block bytes)` blocks, so any lengths are memory-safe.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::f16_to_f32;
use crate::blocks::Q8KBlock;

/// A 512-bit register whose low 256 bits repeat the 32-bit `lo` and whose high 256 bits repeat `hi`.
#[inline(always)]
unsafe fn halves_epi32(lo: i32, hi: i32) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_set1_epi32(lo)), _mm256_set1_epi32(hi))
}

/// The byte-shuffle control that broadcasts 16-bit element `lo` over the low 256 bits and
/// element `hi` over the high 256 bits of a register whose 128-bit lanes each hold the same
/// eight 16-bit values.
#[inline(always)]
unsafe fn word_pick(lo: i32, hi: i32) -> __m512i {
    let pick = |e: i32| (2 * e) | ((2 * e + 1) << 8) | ((2 * e) << 16) | ((2 * e + 1) << 24);
    halves_epi32(pick(lo), pick(hi))
}

#[inline(always)]
unsafe fn hsum512(x: __m512) -> f32 {
    _mm512_reduce_add_ps(x)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub(super) unsafe fn row_q45k_vnni<const FIVE: bool>(row: &[u8], act: &[Q8KBlock]) -> f32 {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let bb = if FIVE { 176 } else { 144 };
    let n = act.len().min(row.len() / bb);
    let p = row.as_ptr();
    let low4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(0x10);
    // Per 64-bit lane: the low half keeps the low nibbles, the high half takes the high ones.
    let nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    // Chunk c: scales 2c (low half) and 2c + 1 (high half); Q5_K's fifth bits 2c and 2c + 1.
    let picks = [word_pick(0, 1), word_pick(2, 3), word_pick(4, 5), word_pick(6, 7)];
    let fifth = [
        halves_epi32(0x0101_0101, 0x0202_0202),
        halves_epi32(0x0404_0404, 0x0808_0808),
        halves_epi32(0x1010_1010, 0x2020_2020),
        halves_epi32(0x4040_4040, 0x8080_8080u32 as i32),
    ];
    let mut acc = _mm512_setzero_ps();
    let mut accm = _mm_setzero_ps();
    for i in 0..n {
        let b = p.add(i * bb);
        let a = act.get_unchecked(i);
        let d = f16_to_f32(b) * a.d;
        let dmin = f16_to_f32(b.add(2)) * a.d;
        // The 12 bytes of 6-bit scales and mins into eight scale bytes, then eight min bytes.
        let mut u = [0u32; 4];
        std::ptr::copy_nonoverlapping(b.add(4), u.as_mut_ptr() as *mut u8, 12);
        u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
        let m_lo = u[1] & KMASK1;
        u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
        u[2] = m_lo;
        u[0] &= KMASK1;
        let sm = _mm256_cvtepu8_epi16(_mm_set_epi32(u[3] as i32, u[2] as i32, u[1] as i32, u[0] as i32));
        // Σ min[j] · (bsums[2j] + bsums[2j+1]).
        let bs = _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i);
        let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
        let pm = _mm_madd_epi16(_mm256_extracti128_si256::<1>(sm), pairs);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(pm), accm);
        let scales = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sm));
        let (qhb, qs) = if FIVE {
            (_mm512_broadcast_i64x4(_mm256_loadu_si256(b.add(16) as *const __m256i)), b.add(48))
        } else {
            (_mm512_setzero_si512(), b.add(16))
        };
        let y = a.qs.as_ptr();
        let mut isum = _mm512_setzero_si512();
        for c in 0..4 {
            let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(qs.add(32 * c) as *const __m256i));
            let mut w = _mm512_and_si512(_mm512_srlv_epi64(v, nibble_shift), low4);
            if FIVE {
                let k = _mm512_test_epi8_mask(qhb, fifth[c]);
                w = _mm512_mask_add_epi8(w, k, w, sixteen);
            }
            let yv = _mm512_loadu_si512(y.add(64 * c) as *const _);
            let p16 = _mm512_maddubs_epi16(w, yv);
            isum = _mm512_dpwssd_epi32(isum, p16, _mm512_shuffle_epi8(scales, picks[c]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    }
    let m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum512(acc) - _mm_cvtss_f32(m)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub(super) unsafe fn row_q6k_vnni(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let n = act.len().min(row.len() / 210);
    let p = row.as_ptr();
    let low4 = _mm512_set1_epi8(0x0F);
    let three = _mm512_set1_epi8(3);
    // The high bits of values l (low half) and l + 32 (high half) of each group of 128 are
    // bits 0–1 and 2–3 of qh[l]; of values l + 64 and l + 96, bits 4–5 and 6–7.
    let qh_shift = [_mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)];
    // Register r (values 64r..64r + 63) covers sub-blocks of 16 4r..4r + 3: scale index per
    // 16-bit element, 8 elements per sub-block.
    let idx: [__m512i; 4] = std::array::from_fn(|r| {
        let r = r as i64;
        let e = |q: i64| (4 * r + q) * 0x0001_0001_0001_0001;
        _mm512_set_epi64(e(3), e(3), e(2), e(2), e(1), e(1), e(0), e(0))
    });
    let mut acc = _mm512_setzero_ps();
    for i in 0..n {
        let b = p.add(i * 210);
        let a = act.get_unchecked(i);
        let d = f16_to_f32(b.add(208)) * a.d;
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192) as *const __m128i));
        let sc512 = _mm512_castsi256_si512(sc);
        // −32 · Σ scale[j] · bsum[j], the offset of the stored values.
        let bs = _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i);
        let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bs));
        let mut isum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
        let y = a.qs.as_ptr();
        for h in 0..2 {
            let ql = _mm512_loadu_si512(b.add(64 * h) as *const _);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i));
            let lows = [_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4)];
            for (k, lo) in lows.into_iter().enumerate() {
                let hi = _mm512_and_si512(_mm512_srlv_epi64(qh, qh_shift[k]), three);
                let w = _mm512_or_si512(lo, _mm512_slli_epi16::<4>(hi));
                let r = 2 * h + k;
                let yv = _mm512_loadu_si512(y.add(64 * r) as *const _);
                let p16 = _mm512_maddubs_epi16(w, yv);
                isum = _mm512_dpwssd_epi32(isum, p16, _mm512_permutexvar_epi16(idx[r], sc512));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    }
    hsum512(acc)
}
