//! x86-64 decode dot products of 32-value blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`) with
//! `Q8` activations: AVX2 (`maddubs` + `madd`) and AVX-512 VNNI on 256-bit registers
//! (`vpdpbusd`), one weight row or four at a time against one token.
//!
//! Each block becomes 32 int8 weights in one register (ggml's `bytes_from_nibbles_32` and
//! `bytes_from_bits_32`, `ggml-cpu/arch/x86/quants.c`); signed weights go through the sign
//! trick (`|w| · sign(x, w)`) because both instructions take one unsigned operand.
//!
//! # Safety
//! The kernels [`row_fn`] and [`rows4_fn`] return run only on a CPU with AVX2, FMA and F16C
//! (`has_avx2()`), and with AVX-512 VNNI (`has_vnni()`) for the `vnni` ones. They read
//! `min(act.len(), row.len() / block bytes)` blocks, so any lengths are memory-safe.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::{block_bytes, bytes_from_bits, code, f16_to_f32, hsum, signed, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::blocks::{Q8Block, QType};

/// 16 bytes of nibbles → 32 bytes: low nibbles first, then high nibbles.
#[inline(always)]
unsafe fn bytes_from_nibbles(p: *const u8) -> __m256i {
    let x = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The block's 32 weights as int8 (signed for the symmetric types, 0..31 otherwise), its
/// scale and its min.
#[inline(always)]
unsafe fn load_block<const T: u8>(b: *const u8) -> (__m256i, f32, f32) {
    let d = f16_to_f32(b);
    match T {
        Q4_0 => (_mm256_sub_epi8(bytes_from_nibbles(b.add(2)), _mm256_set1_epi8(8)), d, 0.0),
        Q4_1 => (bytes_from_nibbles(b.add(4)), d, f16_to_f32(b.add(2))),
        Q5_0 => {
            let hi = _mm256_andnot_si256(bytes_from_bits(b.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            (_mm256_or_si256(bytes_from_nibbles(b.add(6)), hi), d, 0.0)
        }
        Q5_1 => {
            let hi = _mm256_and_si256(bytes_from_bits(b.add(4)), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(bytes_from_nibbles(b.add(8)), hi), d, f16_to_f32(b.add(2)))
        }
        _ => (_mm256_loadu_si256(b.add(2) as *const __m256i), d, 0.0),
    }
}

/// The block's weights as unsigned bytes `w + c` and the offset `c` (so `Σ w·x = Σ (w+c)·x −
/// c·Σ x`): nibbles as stored for Q4_0 (c = 8), five bits for Q5_0 (c = 16), and for Q8_0 the
/// sign bit flipped (c = 128, VNNI only: `maddubs` would saturate).
#[inline(always)]
unsafe fn load_block_unsigned<const T: u8>(b: *const u8) -> (__m256i, i32) {
    match T {
        Q4_0 => (bytes_from_nibbles(b.add(2)), 8),
        Q4_1 => (bytes_from_nibbles(b.add(4)), 0),
        Q5_0 => {
            let hi = _mm256_and_si256(bytes_from_bits(b.add(2)), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(bytes_from_nibbles(b.add(6)), hi), 16)
        }
        Q5_1 => {
            let hi = _mm256_and_si256(bytes_from_bits(b.add(4)), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(bytes_from_nibbles(b.add(8)), hi), 0)
        }
        _ => (_mm256_xor_si256(_mm256_loadu_si256(b.add(2) as *const __m256i), _mm256_set1_epi8(-128)), 128),
    }
}

/// Eight int32 partial sums of `w · x` (AVX2: `maddubs` to int16 pairs, `madd` to int32).
#[inline(always)]
unsafe fn dot_avx2<const SIGNED: bool>(w: __m256i, x: __m256i) -> __m256i {
    let p16 = if SIGNED {
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
    } else {
        _mm256_maddubs_epi16(w, x)
    };
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

/// One row against one token (the rows left over after the four-row kernel).
#[inline(always)]
unsafe fn row_body<const T: u8, const VNNI: bool>(row: &[u8], act: &[Q8Block]) -> f32 {
    let bb = block_bytes(T);
    let n = act.len().min(row.len() / bb);
    let p = row.as_ptr();
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    for i in 0..n {
        let (w, d, m) = load_block::<T>(p.add(i * bb));
        let a = act.get_unchecked(i);
        let x = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
        let s = match (VNNI, signed(T)) {
            (true, true) => _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
            (true, false) => _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x),
            (false, true) => dot_avx2::<true>(w, x),
            (false, false) => dot_avx2::<false>(w, x),
        };
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(s), acc);
        if !signed(T) {
            mins += m * a.s;
        }
    }
    hsum(acc) + mins
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_avx2<const T: u8>(row: &[u8], act: &[Q8Block]) -> f32 {
    row_body::<T, false>(row, act)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn row_vnni<const T: u8>(row: &[u8], act: &[Q8Block]) -> f32 {
    row_body::<T, true>(row, act)
}

/// Four rows against one token: the activations are loaded once per block, and the four
/// rows' int32 sums are folded into one register (`hadd`) so that the scales of all four rows
/// are applied by one conversion and one `fmadd` per block, not one per row.
#[inline(always)]
unsafe fn rows4_body<const T: u8, const VNNI: bool>(rows: [&[u8]; 4], act: &[Q8Block]) -> [f32; 4] {
    let bb = block_bytes(T);
    let n = rows.iter().fold(act.len(), |n, r| n.min(r.len() / bb));
    let p = [rows[0].as_ptr(), rows[1].as_ptr(), rows[2].as_ptr(), rows[3].as_ptr()];
    // Lanes (r0, r1, r2, r3, r0, r1, r2, r3): the low and high halves of each row's sum.
    let mut acc = _mm256_setzero_ps();
    // Lanes (r0, r1, r2, r3): Σ min · s for the types with a min.
    let mut accm = _mm_setzero_ps();
    let f16 = |q: *const u8| u16::from_le_bytes([*q, *q.add(1)]) as i16;
    for i in 0..n {
        let a = act.get_unchecked(i);
        let x = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
        let mut s = [_mm256_setzero_si256(); 4];
        // With VNNI every type runs unsigned (one `vpdpbusd`, the offset removed once per block
        // below); AVX2 does too except for Q8_0, whose flipped bytes would saturate `maddubs`.
        let unsigned = VNNI || T != Q8_0;
        let mut offset = 0;
        for r in 0..4 {
            // Four short interleaved streams defeat the hardware prefetcher on matrices that
            // do not fit in cache (the LM head): fetch ~8 blocks ahead.
            _mm_prefetch::<_MM_HINT_T0>(p[r].wrapping_add(i * bb + 8 * bb) as *const i8);
            s[r] = if unsigned {
                let (w, c) = load_block_unsigned::<T>(p[r].add(i * bb));
                offset = c;
                if VNNI {
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x)
                } else {
                    dot_avx2::<false>(w, x)
                }
            } else {
                let (w, _, _) = load_block::<T>(p[r].add(i * bb));
                dot_avx2::<true>(w, x)
            };
        }
        let mut folded = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        if offset != 0 {
            // Σ (w+c)·x − c·Σ x, once per row (on the low-half lanes).
            let c = offset * a.isum;
            folded = _mm256_sub_epi32(folded, _mm256_setr_epi32(c, c, c, c, 0, 0, 0, 0));
        }
        let b = [p[0].add(i * bb), p[1].add(i * bb), p[2].add(i * bb), p[3].add(i * bb)];
        let d = _mm_setr_epi16(f16(b[0]), f16(b[1]), f16(b[2]), f16(b[3]), 0, 0, 0, 0);
        let d4 = _mm_mul_ps(_mm_cvtph_ps(d), _mm_set1_ps(a.d));
        let d8 = _mm256_set_m128(d4, d4);
        acc = _mm256_fmadd_ps(d8, _mm256_cvtepi32_ps(folded), acc);
        if !signed(T) {
            let m = _mm_setr_epi16(f16(b[0].add(2)), f16(b[1].add(2)), f16(b[2].add(2)), f16(b[3].add(2)), 0, 0, 0, 0);
            accm = _mm_fmadd_ps(_mm_cvtph_ps(m), _mm_set1_ps(a.s), accm);
        }
    }
    let sum = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)), accm);
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), sum);
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows4_avx2<const T: u8>(rows: [&[u8]; 4], act: &[Q8Block]) -> [f32; 4] {
    rows4_body::<T, false>(rows, act)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn rows4_vnni<const T: u8>(rows: [&[u8]; 4], act: &[Q8Block]) -> [f32; 4] {
    rows4_body::<T, true>(rows, act)
}

/// The four-row kernel for `t` (a 32-value type). Callers check `has_avx2()` / `has_vnni()`.
pub(crate) fn rows4_fn(t: QType, vnni: bool) -> unsafe fn([&[u8]; 4], &[Q8Block]) -> [f32; 4] {
    match (code(t), vnni) {
        (Q4_0, false) => rows4_avx2::<Q4_0>,
        (Q4_1, false) => rows4_avx2::<Q4_1>,
        (Q5_0, false) => rows4_avx2::<Q5_0>,
        (Q5_1, false) => rows4_avx2::<Q5_1>,
        (_, false) => rows4_avx2::<Q8_0>,
        (Q4_0, true) => rows4_vnni::<Q4_0>,
        (Q4_1, true) => rows4_vnni::<Q4_1>,
        (Q5_0, true) => rows4_vnni::<Q5_0>,
        (Q5_1, true) => rows4_vnni::<Q5_1>,
        (_, true) => rows4_vnni::<Q8_0>,
    }
}

/// The row kernel for `t` (a 32-value type). Callers check `has_avx2()` / `has_vnni()` first.
pub(crate) fn row_fn(t: QType, vnni: bool) -> unsafe fn(&[u8], &[Q8Block]) -> f32 {
    match (code(t), vnni) {
        (Q4_0, false) => row_avx2::<Q4_0>,
        (Q4_1, false) => row_avx2::<Q4_1>,
        (Q5_0, false) => row_avx2::<Q5_0>,
        (Q5_1, false) => row_avx2::<Q5_1>,
        (_, false) => row_avx2::<Q8_0>,
        (Q4_0, true) => row_vnni::<Q4_0>,
        (Q4_1, true) => row_vnni::<Q4_1>,
        (Q5_0, true) => row_vnni::<Q5_0>,
        (Q5_1, true) => row_vnni::<Q5_1>,
        (_, true) => row_vnni::<Q8_0>,
    }
}
