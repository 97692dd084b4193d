//! x86-64 decode over the panel layout (`panels.rs`) on AVX-512 VNNI: 16 weight rows per
//! 512-bit register, one lane per row, and up to `PANEL_MR` tokens per pass over the panel,
//! so each chunk's values are unpacked once for all of them and no horizontal sums are needed.
//!
//! # Safety
//! The kernels [`panel_dots_fn`] returns run only on a CPU with AVX-512 VNNI (`has_vnni()`),
//! with the panel, the activations and the output their `# Safety` section describes.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::{block_bytes, code, row_mask, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::blocks::{Q8Block, QType};

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
