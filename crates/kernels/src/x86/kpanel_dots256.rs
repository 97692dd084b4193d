//! The AVX2 twins of `kpanel_dots.rs`'s VNNI kernels (`Q4_K`, `Q5_K`, `Q6_K` panels): the same
//! integer arithmetic on two 256-bit halves (rows 0–7 and 8–15 of every 64-byte segment of a
//! chunk): `maddubs` + `madd` by ones for `vpdpbusd` (their 16-bit sums added over no more steps
//! than stay below 2¹⁵), `madd` + `add` for `vpdpwssd`. Integer sums are exact and the f32 steps
//! the same, so both give the same bits.
//!
//! # Safety
//! These kernels run only on a CPU with AVX2, FMA and F16C (`has_avx2()`), with the panel, the
//! activations and the output `kpanel_dots.rs`'s kernels take.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::kpanel_dots::{CB6, Q4K, Q5K, Q6_SCALES, Q6_VALUES};
use super::store_halves;
use crate::blocks::Q8KBlock;

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

/// [`q45k_panel_vnni`] on AVX2. The nibbles' 16-bit sums (≤ 2 · 15 · 127 per step) add up over
/// a sub-block's eight steps; with `Q5_K`'s fifth bits (values ≤ 31) over four.
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
    let byte = _mm256_set1_epi32(0xFF);
    let even = _mm256_set1_epi32(0x00FF_00FF);
    let ones = _mm256_set1_epi16(1);
    let zero = _mm256_setzero_si256();
    let (cb, qs) = if FIVE { (16 * 176, 768) } else { (16 * 144, 256) };
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for b in 0..nb {
        let chunk = panel.add(b * cb);
        for h in 0..2 {
            let seg = |at: usize| _mm256_loadu_si256(chunk.add(at + 32 * h) as *const __m256i);
            let (u0, u1, u2) = (seg(64), seg(128), seg(192));
            let s03 = _mm256_and_si256(u0, m6);
            let s47 = _mm256_or_si256(
                _mm256_and_si256(u2, m4),
                _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u0), m2)),
            );
            let m03 = _mm256_and_si256(u1, m6);
            let m47 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(u2), m4),
                _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u1), m2)),
            );
            let mut isum = [zero; MR];
            for c in 0..4 {
                let sc = if c < 2 { s03 } else { s47 };
                let (sl, sh) = match c % 2 {
                    0 => (_mm256_and_si256(sc, byte), _mm256_and_si256(_mm256_srli_epi32::<8>(sc), byte)),
                    _ => (_mm256_and_si256(_mm256_srli_epi32::<16>(sc), byte), _mm256_srli_epi32::<24>(sc)),
                };
                // Per token: the low and high nibbles' 16-bit sums, and their int32 totals.
                let mut p16 = [[zero; 2]; MR];
                let mut d32 = [[zero; 2]; MR];
                for i in 0..8 {
                    let raw = seg(qs + 512 * c + 64 * i);
                    let mut lo = _mm256_and_si256(raw, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low);
                    if FIVE {
                        let bits = seg(256 + 64 * i);
                        lo = _mm256_or_si256(lo, fifth_bit(bits, 2 * c));
                        hi = _mm256_or_si256(hi, fifth_bit(bits, 2 * c + 1));
                    }
                    for (t, p) in p16.iter_mut().enumerate() {
                        let x = (*act.add(t * nb + b)).qs.as_ptr().add(64 * c);
                        let xs = |k: usize| _mm256_set1_epi32((x.add(4 * k) as *const i32).read_unaligned());
                        p[0] = _mm256_add_epi16(p[0], _mm256_maddubs_epi16(lo, xs(i)));
                        p[1] = _mm256_add_epi16(p[1], _mm256_maddubs_epi16(hi, xs(8 + i)));
                    }
                    if i == 7 || (FIVE && i == 3) {
                        for (p, d) in p16.iter_mut().zip(d32.iter_mut()) {
                            for k in 0..2 {
                                d[k] = _mm256_add_epi32(d[k], _mm256_madd_epi16(p[k], ones));
                                p[k] = zero;
                            }
                        }
                    }
                }
                for (isum, d) in isum.iter_mut().zip(&d32) {
                    let scaled = _mm256_add_epi32(_mm256_mullo_epi32(d[0], sl), _mm256_mullo_epi32(d[1], sh));
                    *isum = _mm256_add_epi32(*isum, scaled);
                }
            }
            let mp = [
                _mm256_and_si256(m03, even),
                _mm256_and_si256(_mm256_srli_epi32::<8>(m03), even),
                _mm256_and_si256(m47, even),
                _mm256_and_si256(_mm256_srli_epi32::<8>(m47), even),
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
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, ad), acc[h]);
                acc[h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, ad), acc[h]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_halves(acc, out.add(t * ldo), nvalid);
    }
}

/// [`q6k_panel_vnni`] on AVX2: the 6-bit values' 16-bit sums (≤ 2 · 63 · 127 per step) add up
/// over two steps.
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
    let ones = _mm256_set1_epi16(1);
    let zero = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for b in 0..nb {
        let chunk = panel.add(b * CB6);
        for rh in 0..2 {
            let load = |at: usize| _mm256_loadu_si256(chunk.add(at + 32 * rh) as *const __m256i);
            let words = [load(Q6_SCALES), load(Q6_SCALES + 64), load(Q6_SCALES + 128), load(Q6_SCALES + 192)];
            let scale = |g: usize| {
                let w = words[g / 4];
                match g % 4 {
                    0 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(w)),
                    1 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<16>(w)),
                    2 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<8>(w)),
                    _ => _mm256_srai_epi32::<24>(w),
                }
            };
            let mut isum = [zero; MR];
            for n in 0..2 {
                for h in 0..2 {
                    let mut p16 = [[zero; 4]; MR];
                    let mut dots = [[zero; 4]; MR];
                    for l in 4 * h..4 * h + 4 {
                        let at = Q6_VALUES + 192 * (8 * n + l);
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
                            for (p, d) in p16.iter_mut().zip(dots.iter_mut()) {
                                for k in 0..4 {
                                    d[k] = _mm256_add_epi32(d[k], _mm256_madd_epi16(p[k], ones));
                                    p[k] = zero;
                                }
                            }
                        }
                    }
                    for (isum, dots) in isum.iter_mut().zip(&dots) {
                        for (k, d) in dots.iter().enumerate() {
                            *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(*d, scale(8 * n + 2 * k + h)));
                        }
                    }
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
