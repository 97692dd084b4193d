//! x86-64 dot products of 32-value blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`) with `Q8`
//! activations: AVX2 (`maddubs` + `madd`) and AVX-512 VNNI on 256-bit registers (`vpdpbusd`).
//!
//! Each block becomes 32 int8 weights in one register (ggml's `bytes_from_nibbles_32` and
//! `bytes_from_bits_32`, `ggml-cpu/arch/x86/quants.c`); signed weights go through the sign
//! trick (`|w| · sign(x, w)`) because both instructions take one unsigned operand.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use crate::blocks::{Q8Block, QType};

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;

const fn code(t: QType) -> u8 {
    match t {
        QType::Q4_0 => Q4_0,
        QType::Q4_1 => Q4_1,
        QType::Q5_0 => Q5_0,
        QType::Q5_1 => Q5_1,
        _ => Q8_0,
    }
}

#[inline(always)]
unsafe fn f16_to_f32(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 16 bytes of nibbles → 32 bytes: low nibbles first, then high nibbles.
#[inline(always)]
unsafe fn bytes_from_nibbles(p: *const u8) -> __m256i {
    let x = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// 32 bits → 32 bytes of 0xFF (bit set) or 0x00.
#[inline(always)]
unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
    let x32 = i32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]);
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
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

const fn block_bytes(t: u8) -> usize {
    match t {
        Q4_0 => 18,
        Q4_1 => 20,
        Q5_0 => 22,
        Q5_1 => 24,
        _ => 34,
    }
}

const fn signed(t: u8) -> bool {
    matches!(t, Q4_0 | Q5_0 | Q8_0)
}

#[inline(always)]
unsafe fn hsum(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
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
            _mm_prefetch::<_MM_HINT_T0>(p[r].add(i * bb + 8 * bb) as *const i8);
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

pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

pub(crate) fn has_vnni() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
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

// ---- k-quants (256-value blocks) with Q8_K activations: AVX2 `maddubs` per 32 values, the
// sub-block scales applied by `madd` on the int16 pairs, mins through the activation sums.

use crate::blocks::{scale_min_k4, Q8KBlock};

/// Σ over the 8 sub-blocks of 32 of `min[j] · (bsums[2j] + bsums[2j+1])`.
#[inline(always)]
fn mins_dot(mins: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    (0..8).map(|j| mins[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32)).sum()
}

#[inline(always)]
unsafe fn scales_mins_k4(sc: *const u8) -> ([u8; 8], [u8; 8]) {
    let s = std::slice::from_raw_parts(sc, 12);
    let (mut scales, mut mins) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        (scales[j], mins[j]) = scale_min_k4(j, s);
    }
    (scales, mins)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q45k_avx2<const FIVE: bool>(row: &[u8], act: &[Q8KBlock]) -> f32 {
    let bb = if FIVE { 176 } else { 144 };
    let n = act.len().min(row.len() / bb);
    let p = row.as_ptr();
    let low4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut summ = 0f32;
    for i in 0..n {
        let b = p.add(i * bb);
        let a = act.get_unchecked(i);
        let d = f16_to_f32(b) * a.d;
        let dmin = f16_to_f32(b.add(2)) * a.d;
        let (scales, mins) = scales_mins_k4(b.add(4));
        summ += dmin * mins_dot(&mins, &a.bsums) as f32;
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
    hsum(acc) - summ
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

/// The row kernel of a k-quant type. Callers check `has_avx2()` first.
pub(crate) fn row_k_fn(t: QType) -> Option<crate::matmul::RowKFn> {
    match t {
        QType::Q4K => Some(row_q45k_avx2::<false>),
        QType::Q5K => Some(row_q45k_avx2::<true>),
        QType::Q6K => Some(row_q6k_avx2),
        _ => None,
    }
}

// ---- The int8 prefill GEMM's packing and micro-kernel (AVX-512 VNNI): one panel of 16 weight rows ×
// `MR` tokens. See `igemm.rs` for the layout.

use crate::igemm::{Acts, Panel, PANEL_ROWS};

/// Tokens per micro-kernel call: `MR` int32 and `MR` f32 accumulators stay in registers.
pub(crate) const IGEMM_MR: usize = 8;

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn igemm_tile_g<const MR: usize, const G: usize>(
    p: &Panel,
    a: &Acts,
    cols: usize,
    t0: usize,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let ngran = cols / G;
    let (u, dw, c) = (p.u.as_ptr(), p.dw.as_ptr(), p.c.as_ptr());
    let aq = a.q.as_ptr().add(t0 * cols);
    let (ad, asum) = (a.d.as_ptr().add(t0 * ngran), a.s.as_ptr().add(t0 * ngran));
    let mut facc = [_mm512_setzero_ps(); MR];
    for g in 0..ngran {
        let mut iacc = [_mm512_setzero_si512(); MR];
        let ug = u.add(g * G * PANEL_ROWS);
        let ag = aq.add(g * G);
        for s in 0..G / 4 {
            let w = _mm512_loadu_si512(ug.add(s * 64) as *const _);
            for (t, acc) in iacc.iter_mut().enumerate() {
                let x = _mm512_set1_epi32((ag.add(t * cols + 4 * s) as *const i32).read_unaligned());
                *acc = _mm512_dpbusd_epi32(*acc, w, x);
            }
        }
        let dwv = _mm512_loadu_ps(dw.add(g * PANEL_ROWS));
        let cv = _mm512_loadu_ps(c.add(g * PANEL_ROWS));
        for t in 0..MR {
            let scale = _mm512_mul_ps(dwv, _mm512_set1_ps(*ad.add(t * ngran + g)));
            facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t]), scale, facc[t]);
            facc[t] = _mm512_fmadd_ps(cv, _mm512_set1_ps(*asum.add(t * ngran + g)), facc[t]);
        }
    }
    let mask = row_mask(nvalid);
    for (t, acc) in facc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * ldo), mask, *acc);
    }
}

/// The store mask of a panel's first `nvalid` rows.
#[inline(always)]
fn row_mask(nvalid: usize) -> __mmask16 {
    if nvalid >= PANEL_ROWS {
        0xFFFF
    } else {
        (1u16 << nvalid) - 1
    }
}

/// Tokens `t0 .. t0 + mr` (`mr ≤ IGEMM_MR`) × the panel's first `nvalid` rows into
/// `out[t · ldo + r]` (`out` points at token `t0`, the panel's first row), for granules of `g`.
///
/// # Safety
/// The CPU has AVX-512 VNNI (`has_vnni()`); `p` was packed and `a` quantized with granule `g`
/// for rows of `cols` values; `a` holds tokens up to `t0 + mr`; `out` is valid for those
/// writes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn igemm_tile(
    p: &Panel,
    a: &Acts,
    cols: usize,
    g: usize,
    t0: usize,
    mr: usize,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    macro_rules! go {
        ($g:literal) => {
            match mr {
                8 => igemm_tile_g::<8, $g>(p, a, cols, t0, out, ldo, nvalid),
                7 => igemm_tile_g::<7, $g>(p, a, cols, t0, out, ldo, nvalid),
                6 => igemm_tile_g::<6, $g>(p, a, cols, t0, out, ldo, nvalid),
                5 => igemm_tile_g::<5, $g>(p, a, cols, t0, out, ldo, nvalid),
                4 => igemm_tile_g::<4, $g>(p, a, cols, t0, out, ldo, nvalid),
                3 => igemm_tile_g::<3, $g>(p, a, cols, t0, out, ldo, nvalid),
                2 => igemm_tile_g::<2, $g>(p, a, cols, t0, out, ldo, nvalid),
                _ => igemm_tile_g::<1, $g>(p, a, cols, t0, out, ldo, nvalid),
            }
        };
    }
    if g == 16 {
        go!(16)
    } else {
        go!(32)
    }
}

// ---- Decode over the panel layout (`panels.rs`): 16 rows per register, up to `PANEL_MR` tokens
// per pass over the panel.

/// How many chunks ahead the panel decode kernel prefetches.
const PANEL_PREFETCH: usize = 4;

/// Tokens per pass over a panel: each chunk's values are unpacked once for all of them.
const PANEL_MR: usize = 16;

/// 16 rows (one panel, `nb` chunks at `panel`) × `MR` tokens (`act`, `nb` blocks each) into
/// `out[t · ldo + r]` for the first `nvalid` rows. Each token's lane gets the same operations
/// in the same order whatever `MR` is (integer sums are exact), so a token's result does not
/// depend on the tokens beside it.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn panel_dots_vnni<const T: u8, const MR: usize>(
    panel: *const u8,
    nb: usize,
    act: *const Q8Block,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let cb = 16 * block_bytes(T);
    let min = matches!(T, Q4_1 | Q5_1);
    let five = matches!(T, Q5_0 | Q5_1);
    let hdr = if min { 64 } else { 32 };
    let bias = match T {
        Q4_0 => 8,
        Q5_0 => 16,
        Q8_0 => 128,
        _ => 0,
    };
    let low = _mm512_set1_epi8(0x0F);
    let fifth = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); MR];
    for b in 0..nb {
        let chunk = panel.add(b * cb);
        // The next chunks stream in while this one is multiplied.
        let mut line = 0;
        while line < cb {
            _mm_prefetch::<_MM_HINT_T0>(chunk.add(PANEL_PREFETCH * cb + line) as *const i8);
            line += 64;
        }
        let vals = chunk.add(hdr);
        // w[s]: four unsigned values of each row, to multiply with activations 4s..4s+3.
        let mut w = [_mm512_setzero_si512(); 8];
        if T == Q8_0 {
            for (s, ws) in w.iter_mut().enumerate() {
                *ws = _mm512_loadu_si512(vals.add(64 * s) as *const _);
            }
        } else {
            let bits = vals.add(256) as *const u64;
            for s in 0..4 {
                let raw = _mm512_loadu_si512(vals.add(64 * s) as *const _);
                let mut lo = _mm512_and_si512(raw, low);
                // A 32-bit shift moves each byte's high nibble down (the next byte's low
                // nibble lands above it and is masked off).
                let mut hi = _mm512_and_si512(_mm512_srli_epi32::<4>(raw), low);
                if five {
                    // The fifth bits of steps s and s + 4, one mask bit per value.
                    lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(bits.add(s).read_unaligned(), fifth));
                    hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(bits.add(s + 4).read_unaligned(), fifth));
                }
                w[s] = lo;
                w[s + 4] = hi;
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(chunk as *const __m256i));
        let mv = if min { _mm512_cvtph_ps(_mm256_loadu_si256(chunk.add(32) as *const __m256i)) } else { d };
        for (t, acc) in acc.iter_mut().enumerate() {
            let ab = &*act.add(t * nb + b);
            let x = ab.qs.as_ptr();
            let xs = |s: usize| _mm512_set1_epi32((x.add(4 * s) as *const i32).read_unaligned());
            let (mut i0, mut i1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for s in 0..4 {
                i0 = _mm512_dpbusd_epi32(i0, w[2 * s], xs(2 * s));
                i1 = _mm512_dpbusd_epi32(i1, w[2 * s + 1], xs(2 * s + 1));
            }
            // Σ u·x − bias · Σ x: the dot of each row's values without their min.
            let i = _mm512_sub_epi32(_mm512_add_epi32(i0, i1), _mm512_set1_epi32(bias * ab.isum));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(d, _mm512_set1_ps(ab.d)), *acc);
            if min {
                // Σ m·x = m · (d_x · Σ q): the activation block's stored sum.
                *acc = _mm512_fmadd_ps(mv, _mm512_set1_ps(ab.s), *acc);
            }
        }
    }
    let mask = row_mask(nvalid);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * ldo), mask, *acc);
    }
}

/// 16 rows (one panel, `nb` chunks at `panel`) × `m` tokens (`act`, `nb` blocks each) into
/// `out[t · ldo + r]` for the first `nvalid` rows, `PANEL_MR` tokens per pass.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `panel` holds `nb` chunks of `T`; `act` holds `m · nb` blocks;
/// `out` is valid for those writes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn panel_dots_tokens<const T: u8>(
    panel: *const u8,
    nb: usize,
    act: &[Q8Block],
    m: usize,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let mut t0 = 0;
    while t0 < m {
        let (a, o) = (act.as_ptr().add(t0 * nb), out.add(t0 * ldo));
        // Full passes of `PANEL_MR`, then one of 8 if that many are left, then the rest.
        let mr = match m - t0 {
            r if r >= PANEL_MR => PANEL_MR,
            r => r.min(8),
        };
        match mr {
            1 => panel_dots_vnni::<T, 1>(panel, nb, a, o, ldo, nvalid),
            2 => panel_dots_vnni::<T, 2>(panel, nb, a, o, ldo, nvalid),
            3 => panel_dots_vnni::<T, 3>(panel, nb, a, o, ldo, nvalid),
            4 => panel_dots_vnni::<T, 4>(panel, nb, a, o, ldo, nvalid),
            5 => panel_dots_vnni::<T, 5>(panel, nb, a, o, ldo, nvalid),
            6 => panel_dots_vnni::<T, 6>(panel, nb, a, o, ldo, nvalid),
            7 => panel_dots_vnni::<T, 7>(panel, nb, a, o, ldo, nvalid),
            8 => panel_dots_vnni::<T, 8>(panel, nb, a, o, ldo, nvalid),
            _ => panel_dots_vnni::<T, PANEL_MR>(panel, nb, a, o, ldo, nvalid),
        }
        t0 += mr;
    }
}

/// The panel decode kernel of `t` (a 32-value type). Callers check `has_vnni()`.
pub(crate) fn panel_dots_fn(t: QType) -> unsafe fn(*const u8, usize, &[Q8Block], usize, *mut f32, usize, usize) {
    match code(t) {
        Q4_0 => panel_dots_tokens::<Q4_0>,
        Q4_1 => panel_dots_tokens::<Q4_1>,
        Q5_0 => panel_dots_tokens::<Q5_0>,
        Q5_1 => panel_dots_tokens::<Q5_1>,
        _ => panel_dots_tokens::<Q8_0>,
    }
}

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
