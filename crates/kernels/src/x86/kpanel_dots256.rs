//! The AVX2 twins of `kpanel_dots.rs`'s VNNI kernels (`Q4_K`, `Q5_K`, `Q6_K` panels): the same
//! integer arithmetic on two 256-bit halves (rows 0–7 and 8–15 of every 64-byte segment of a
//! chunk): `maddubs` for `vpdpbusd`, their 16-bit sums added over no more steps than stay below
//! 2¹⁵, then one `madd` by each lane's sub-block scale in both 16-bit halves, which widens, pairs
//! and scales at once (llama.cpp's AVX2 `gemv_q4_K_8x8` does the same) where the VNNI kernels
//! `vpmulld` the int32 sums; `madd` + `add` for `vpdpwssd`. Integer sums are exact and the f32
//! steps the same, so both give the same bits.
//!
//! Unlike the VNNI kernels they prefetch the stream, one line per step `KPANEL_PREFETCH` bytes
//! ahead (`docs/benchmarks.md`: on the AVX2-only Zen 3 Q4_K and Q6_K read more with it, from DRAM
//! and from L3).
//!
//! # Safety
//! These kernels run only on a CPU with AVX2, FMA and F16C (`has_avx2()`), with the panel, the
//! activations and the output `kpanel_dots.rs`'s kernels take.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::kpanel_dots::{CB6, Q4K, Q5K, Q6_SCALES, Q6_VALUES};
use super::store_halves;
use crate::blocks::Q8KBlock;

/// How far ahead (bytes) the kernels prefetch the panel's stream, one line per step (of 1024,
/// 2304, 4608 and 8192 measured, 2304 read the most from DRAM).
const KPANEL_PREFETCH: usize = 2304;

/// Bit `bit` of each byte of `v` as 0x10 (`Q5_K`'s fifth bit, in place over a nibble). The
/// 16-bit shifts bring bit 4 of each byte from the same byte.
#[inline(always)]
unsafe fn fifth_bit(v: __m256i, bit: usize) -> __m256i {
    let s = match bit {
        0 => _mm256_slli_epi16::<4>(v),
        1 => _mm256_slli_epi16::<3>(v),
        2 => _mm256_slli_epi16::<2>(v),
        3 => _mm256_slli_epi16::<1>(v),
        4 => v,
        5 => _mm256_srli_epi16::<1>(v),
        6 => _mm256_srli_epi16::<2>(v),
        _ => _mm256_srli_epi16::<3>(v),
    };
    _mm256_and_si256(s, _mm256_set1_epi8(0x10))
}

/// `pshufb` controls that put byte `k` of each 32-bit lane, zero-extended, into both of its
/// 16-bit halves: a `madd` by the result multiplies a lane's two 16-bit sums by that byte.
#[inline(always)]
unsafe fn spread_byte(k: i32) -> __m256i {
    // Lane j's control: bytes (k + 4j, none, k + 4j, none); 0xFF selects a zero.
    let w = |j: i32| ((k + 4 * j) * 0x0001_0001) | 0xFF00_FF00u32 as i32;
    _mm256_setr_epi32(w(0), w(1), w(2), w(3), w(0), w(1), w(2), w(3))
}

/// [`q45k_panel_vnni`] on AVX2: both halves of each 64-byte step together, so the activations
/// are broadcast once per step. The nibbles' 16-bit sums (≤ 2 · 15 · 127 per step) add up over
/// a sub-block's eight steps (with `Q5_K`'s fifth bits, values ≤ 31, over four), then one `madd`
/// by the sub-block's scale in both 16-bit halves of each lane widens, pairs and scales them
/// (exact: ≤ 2 · 2¹⁵ · 63 per lane).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45k_panel_avx2<const FIVE: bool, const MR: usize>(
    panel: *const u8,
    nb: usize,
    act: *const Q8KBlock,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let low = _mm256_set1_epi8(0x0F);
    let (m6, m4, m2) = (_mm256_set1_epi32(0x3f3f_3f3f), _mm256_set1_epi32(0x0f0f_0f0f), _mm256_set1_epi32(0x0303_0303));
    let even = _mm256_set1_epi32(0x00FF_00FF);
    let zero = _mm256_setzero_si256();
    let (cb, qs) = if FIVE { (16 * 176, 768) } else { (16 * 144, 256) };
    let spread = [spread_byte(0), spread_byte(1), spread_byte(2), spread_byte(3)];
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for b in 0..nb {
        let chunk = panel.add(b * cb);
        // The stream `KPANEL_PREFETCH` bytes ahead: a chunk's lines past the 32 steps' here, the
        // rest one per step.
        let ahead = chunk.wrapping_add(KPANEL_PREFETCH);
        let mut line = 64 * 32;
        while line < cb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
            line += 64;
        }
        let seg = |at: usize, h: usize| _mm256_loadu_si256(chunk.add(at + 32 * h) as *const __m256i);
        // Per half: scales 0–3 and 4–7, mins 0–3 and 4–7, a byte each per lane.
        let mut sc = [[zero; 2]; 2];
        let mut mn = [[zero; 2]; 2];
        for h in 0..2 {
            let (u0, u1, u2) = (seg(64, h), seg(128, h), seg(192, h));
            sc[h][0] = _mm256_and_si256(u0, m6);
            sc[h][1] = _mm256_or_si256(
                _mm256_and_si256(u2, m4),
                _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u0), m2)),
            );
            mn[h][0] = _mm256_and_si256(u1, m6);
            mn[h][1] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(u2), m4),
                _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u1), m2)),
            );
        }
        let mut isum = [[zero; 2]; MR];
        for c in 0..4 {
            // Per token and half: the low and high nibbles' 16-bit sums.
            let mut p16 = [[[zero; 2]; 2]; MR];
            for i in 0..8 {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * (8 * c + i)) as *const i8);
                for h in 0..2 {
                    let raw = seg(qs + 512 * c + 64 * i, h);
                    let mut lo = _mm256_and_si256(raw, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low);
                    if FIVE {
                        let bits = seg(256 + 64 * i, h);
                        lo = _mm256_or_si256(lo, fifth_bit(bits, 2 * c));
                        hi = _mm256_or_si256(hi, fifth_bit(bits, 2 * c + 1));
                    }
                    for (t, p) in p16.iter_mut().enumerate() {
                        let x = (*act.add(t * nb + b)).qs.as_ptr().add(64 * c);
                        let xs = |k: usize| _mm256_set1_epi32((x.add(4 * k) as *const i32).read_unaligned());
                        p[h][0] = _mm256_add_epi16(p[h][0], _mm256_maddubs_epi16(lo, xs(i)));
                        p[h][1] = _mm256_add_epi16(p[h][1], _mm256_maddubs_epi16(hi, xs(8 + i)));
                    }
                }
                if i == 7 || (FIVE && i == 3) {
                    for h in 0..2 {
                        // Sub-blocks 2c (low nibbles) and 2c + 1 (high): bytes 2(c % 2) and
                        // 2(c % 2) + 1 of the scales' word c / 2.
                        let k = 2 * (c % 2);
                        let sl = _mm256_shuffle_epi8(sc[h][c / 2], spread[k]);
                        let sh = _mm256_shuffle_epi8(sc[h][c / 2], spread[k + 1]);
                        for (isum, p) in isum.iter_mut().zip(p16.iter_mut()) {
                            let s = _mm256_add_epi32(_mm256_madd_epi16(p[h][0], sl), _mm256_madd_epi16(p[h][1], sh));
                            isum[h] = _mm256_add_epi32(isum[h], s);
                            p[h] = [zero; 2];
                        }
                    }
                }
            }
        }
        for h in 0..2 {
            // The mins as 16-bit pairs per lane: (m0, m2), (m1, m3), (m4, m6), (m5, m7).
            let mp = [
                _mm256_and_si256(mn[h][0], even),
                _mm256_and_si256(_mm256_srli_epi32::<8>(mn[h][0]), even),
                _mm256_and_si256(mn[h][1], even),
                _mm256_and_si256(_mm256_srli_epi32::<8>(mn[h][1]), even),
            ];
            let d = _mm256_cvtph_ps(_mm_loadu_si128(chunk.add(16 * h) as *const __m128i));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(chunk.add(32 + 16 * h) as *const __m128i));
            for (t, acc) in acc.iter_mut().enumerate() {
                let a = &*act.add(t * nb + b);
                let bs = |j: usize| (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32) & 0xFFFF;
                let pair = |j: usize, k: usize| _mm256_set1_epi32(bs(j) | (bs(k) << 16));
                let mut msum = _mm256_madd_epi16(mp[0], pair(0, 2));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mp[1], pair(1, 3)));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mp[2], pair(4, 6)));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mp[3], pair(5, 7)));
                let ad = _mm256_set1_ps(a.d);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]), _mm256_mul_ps(d, ad), acc[h]);
                acc[h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, ad), acc[h]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_halves(acc, out.add(t * ldo), nvalid);
    }
}

/// [`q6k_panel_vnni`] on AVX2: the 6-bit values' 16-bit sums (≤ 2 · 63 · 127 per step) add up
/// over two steps, then one `madd` by the scale group's signed scale in both 16-bit halves of
/// each lane widens, pairs and scales them (exact: ≤ 2 · 2¹⁵ · 128 per lane).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_panel_avx2<const MR: usize>(
    panel: *const u8,
    nb: usize,
    act: *const Q8KBlock,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let low = _mm256_set1_epi8(0x0F);
    let (h0, h1, h2, h3) =
        (_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x0C), _mm256_set1_epi8(0x30), _mm256_set1_epi8(0xC0u8 as i8));
    let zero = _mm256_setzero_si256();
    // `pshufb` controls: byte k of each lane into the high byte of both 16-bit halves.
    let up = [0, 1, 2, 3].map(|k| _mm256_or_si256(_mm256_slli_epi16::<8>(spread_byte(k)), _mm256_set1_epi16(0x80)));
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for b in 0..nb {
        let chunk = panel.add(b * CB6);
        let ahead = chunk.wrapping_add(KPANEL_PREFETCH);
        for rh in 0..2 {
            let load = |at: usize| _mm256_loadu_si256(chunk.add(at + 32 * rh) as *const __m256i);
            let words = [load(Q6_SCALES), load(Q6_SCALES + 64), load(Q6_SCALES + 128), load(Q6_SCALES + 192)];
            // Scale g of each lane, sign-extended into both 16-bit halves: byte g % 4 of word
            // g / 4 into the high byte of each half, shifted down arithmetically.
            let scale = |g: usize| _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(words[g / 4], up[g % 4]));
            let mut isum = [zero; MR];
            for n in 0..2 {
                for h in 0..2 {
                    let mut p16 = [[zero; 4]; MR];
                    for l in 4 * h..4 * h + 4 {
                        let at = Q6_VALUES + 192 * (8 * n + l);
                        if rh == 0 {
                            // Lines 3s..3s + 3 of the chunk ahead at step s.
                            for k in 0..3 {
                                let line = 64 * (3 * (8 * n + l) + k);
                                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
                            }
                        }
                        let (ql0, ql1, qh) = (load(at), load(at + 64), load(at + 128));
                        let q = [
                            _mm256_or_si256(
                                _mm256_and_si256(ql0, low),
                                _mm256_slli_epi16::<4>(_mm256_and_si256(qh, h0)),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(ql1, low),
                                _mm256_slli_epi16::<2>(_mm256_and_si256(qh, h1)),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                                _mm256_and_si256(qh, h2),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                                _mm256_srli_epi16::<2>(_mm256_and_si256(qh, h3)),
                            ),
                        ];
                        for (t, p) in p16.iter_mut().enumerate() {
                            let x = (*act.add(t * nb + b)).qs.as_ptr().add(128 * n + 4 * l);
                            for (k, p) in p.iter_mut().enumerate() {
                                let xs = _mm256_set1_epi32((x.add(32 * k) as *const i32).read_unaligned());
                                *p = _mm256_add_epi16(*p, _mm256_maddubs_epi16(q[k], xs));
                            }
                        }
                        if l % 2 == 1 {
                            for k in 0..4 {
                                let s = scale(8 * n + 2 * k + h);
                                for (isum, p) in isum.iter_mut().zip(p16.iter_mut()) {
                                    *isum = _mm256_add_epi32(*isum, _mm256_madd_epi16(p[k], s));
                                    p[k] = zero;
                                }
                            }
                        }
                    }
                }
            }
            if rh == 0 {
                // The chunk ahead's last lines.
                let mut line = 64 * 48;
                while line < CB6 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
                    line += 64;
                }
            }
            let even = words.map(|w| _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(w)));
            let odd = words.map(|w| _mm256_srai_epi16::<8>(w));
            let d = _mm256_cvtph_ps(_mm_loadu_si128(chunk.add(16 * rh) as *const __m128i));
            for (t, acc) in acc.iter_mut().enumerate() {
                let a = &*act.add(t * nb + b);
                let pair =
                    |j: usize, k: usize| _mm256_set1_epi32((a.bsums[j] as u16 as i32) | ((a.bsums[k] as i32) << 16));
                let mut msum = zero;
                for w in 0..4 {
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(even[w], pair(4 * w, 4 * w + 2)));
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(odd[w], pair(4 * w + 1, 4 * w + 3)));
                }
                let i = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(msum));
                acc[rh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(d, _mm256_set1_ps(a.d)), acc[rh]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_halves(acc, out.add(t * ldo), nvalid);
    }
}

/// [`kpanel_tokens`](super::kpanel_dots) on AVX2.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; otherwise as [`kpanel_tokens`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn kpanel_tokens_avx2<const T: u8>(
    panel: *const u8,
    nb: usize,
    act: &[Q8KBlock],
    m: usize,
    out: *mut f32,
    ldo: usize,
    nvalid: usize,
) {
    let mut t0 = 0;
    while t0 < m {
        let (a, o) = (act.as_ptr().add(t0 * nb), out.add(t0 * ldo));
        let mr = (m - t0).min(MR_MAX_AVX2);
        match (T, mr) {
            (Q4K, 1) => q45k_panel_avx2::<false, 1>(panel, nb, a, o, ldo, nvalid),
            (Q4K, _) => q45k_panel_avx2::<false, MR_MAX_AVX2>(panel, nb, a, o, ldo, nvalid),
            (Q5K, 1) => q45k_panel_avx2::<true, 1>(panel, nb, a, o, ldo, nvalid),
            (Q5K, _) => q45k_panel_avx2::<true, MR_MAX_AVX2>(panel, nb, a, o, ldo, nvalid),
            (_, 1) => q6k_panel_avx2::<1>(panel, nb, a, o, ldo, nvalid),
            (_, _) => q6k_panel_avx2::<MR_MAX_AVX2>(panel, nb, a, o, ldo, nvalid),
        }
        t0 += mr;
    }
}

/// Tokens per pass on AVX2 (16 registers: the sums of more would spill).
const MR_MAX_AVX2: usize = 2;
