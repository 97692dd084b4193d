//! x86-64 decode over the panel layout (`panels.rs`): on AVX-512 VNNI 16 weight rows per
//! 512-bit register, on AVX2 two 256-bit halves of 8 rows; one lane per row, and several
//! tokens per pass over the panel, so each chunk's values are unpacked once for all of them
//! and no horizontal sums are needed. Both give every lane the same integer sum and the same
//! f32 operations in the same order: their outputs are equal bit for bit.
//!
//! # Safety
//! The kernels [`panel_dots_fn`] returns run only on a CPU with AVX-512 VNNI (`has_vnni()`),
//! or AVX2 (`has_avx2()`) for the AVX2 ones, with the panel, the activations and the output
//! their `# Safety` section describes.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::{block_bytes, bytes_from_bits, code, row_mask, store_halves, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::blocks::{Q8Block, QType};

/// How many chunks ahead the panel decode kernel prefetches.
const PANEL_PREFETCH: usize = 4;

/// Tokens per pass over a panel: each chunk's values are unpacked once for all of them.
const PANEL_MR: usize = 16;

/// The same on AVX2, whose 16 registers hold two accumulators per token.
const PANEL_MR_AVX2: usize = 4;

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
        // The next chunks stream in while this one is multiplied (an address past the panel is
        // only a hint: `wrapping_add`, not `add`, which must stay inside the allocation).
        let mut line = 0;
        while line < cb {
            _mm_prefetch::<_MM_HINT_T0>(chunk.wrapping_add(PANEL_PREFETCH * cb + line) as *const i8);
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

/// [`panel_dots_vnni`] on AVX2: each 64-byte step of a chunk is two registers (rows 0–7 and
/// 8–15), `maddubs` + `madd` by ones stand for `vpdpbusd`. The integer sums are the same: the
/// 4- and 5-bit values (≤ 31) times activations (|x| ≤ 127) add up in int16 over four steps
/// without saturating, and `Q8_0`'s values go through the sign trick as signed `q = u − 128`,
/// whose sum `Σ q·x` is the VNNI kernel's `Σ u·x − 128 · Σ x`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_dots_avx2<const T: u8, const MR: usize>(
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
        _ => 0,
    };
    let low = _mm256_set1_epi8(0x0F);
    let fifth = _mm256_set1_epi8(0x10);
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for b in 0..nb {
        let chunk = panel.add(b * cb);
        let mut line = 0;
        while line < cb {
            _mm_prefetch::<_MM_HINT_T0>(chunk.wrapping_add(PANEL_PREFETCH * cb + line) as *const i8);
            line += 64;
        }
        let vals = chunk.add(hdr);
        for h in 0..2 {
            // Σ u·x of rows 8h..8h+8 for each token, in int32.
            let mut sums = [_mm256_setzero_si256(); MR];
            if T == Q8_0 {
                for s in 0..8 {
                    let q = _mm256_xor_si256(_mm256_loadu_si256(vals.add(64 * s + 32 * h) as *const _), flip);
                    let aq = _mm256_sign_epi8(q, q);
                    for (t, sum) in sums.iter_mut().enumerate() {
                        let x = (*act.add(t * nb + b)).qs.as_ptr();
                        let xs = _mm256_set1_epi32((x.add(4 * s) as *const i32).read_unaligned());
                        let p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xs, q));
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p, ones));
                    }
                }
            } else {
                // Steps 0–3 (low nibbles) and 4–7 (high nibbles), each in int16.
                let mut p16 = [[_mm256_setzero_si256(); 2]; MR];
                for s in 0..4 {
                    let raw = _mm256_loadu_si256(vals.add(64 * s + 32 * h) as *const _);
                    let mut lo = _mm256_and_si256(raw, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi32::<4>(raw), low);
                    if five {
                        let bits = vals.add(256 + 4 * h);
                        lo = _mm256_or_si256(lo, _mm256_and_si256(bytes_from_bits(bits.add(8 * s)), fifth));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(bytes_from_bits(bits.add(8 * (s + 4))), fifth));
                    }
                    for (t, p) in p16.iter_mut().enumerate() {
                        let x = (*act.add(t * nb + b)).qs.as_ptr();
                        let xs = |s: usize| _mm256_set1_epi32((x.add(4 * s) as *const i32).read_unaligned());
                        p[0] = _mm256_add_epi16(p[0], _mm256_maddubs_epi16(lo, xs(s)));
                        p[1] = _mm256_add_epi16(p[1], _mm256_maddubs_epi16(hi, xs(s + 4)));
                    }
                }
                for (sum, p) in sums.iter_mut().zip(&p16) {
                    *sum = _mm256_add_epi32(_mm256_madd_epi16(p[0], ones), _mm256_madd_epi16(p[1], ones));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(chunk.add(16 * h) as *const __m128i));
            let mv = if min { _mm256_cvtph_ps(_mm_loadu_si128(chunk.add(32 + 16 * h) as *const __m128i)) } else { d };
            for (t, (acc, sum)) in acc.iter_mut().zip(&sums).enumerate() {
                let ab = &*act.add(t * nb + b);
                let i = _mm256_sub_epi32(*sum, _mm256_set1_epi32(bias * ab.isum));
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(d, _mm256_set1_ps(ab.d)), acc[h]);
                if min {
                    acc[h] = _mm256_fmadd_ps(mv, _mm256_set1_ps(ab.s), acc[h]);
                }
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_halves(acc, out.add(t * ldo), nvalid);
    }
}

/// [`panel_dots_tokens`] on AVX2, `PANEL_MR_AVX2` tokens per pass.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; otherwise as [`panel_dots_tokens`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_dots_tokens_avx2<const T: u8>(
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
        let mr = (m - t0).min(PANEL_MR_AVX2);
        match mr {
            1 => panel_dots_avx2::<T, 1>(panel, nb, a, o, ldo, nvalid),
            2 => panel_dots_avx2::<T, 2>(panel, nb, a, o, ldo, nvalid),
            3 => panel_dots_avx2::<T, 3>(panel, nb, a, o, ldo, nvalid),
            _ => panel_dots_avx2::<T, PANEL_MR_AVX2>(panel, nb, a, o, ldo, nvalid),
        }
        t0 += mr;
    }
}

/// A panel decode kernel: `(panel, nb, act, m, out, ldo, nvalid)`.
type PanelDotsFn = unsafe fn(*const u8, usize, &[Q8Block], usize, *mut f32, usize, usize);

/// The panel decode kernel of `t` (a 32-value type), VNNI or AVX2. Callers check `has_vnni()`
/// or `has_avx2()`.
pub(crate) fn panel_dots_fn(t: QType, vnni: bool) -> PanelDotsFn {
    match (code(t), vnni) {
        (Q4_0, true) => panel_dots_tokens::<Q4_0>,
        (Q4_1, true) => panel_dots_tokens::<Q4_1>,
        (Q5_0, true) => panel_dots_tokens::<Q5_0>,
        (Q5_1, true) => panel_dots_tokens::<Q5_1>,
        (_, true) => panel_dots_tokens::<Q8_0>,
        (Q4_0, false) => panel_dots_tokens_avx2::<Q4_0>,
        (Q4_1, false) => panel_dots_tokens_avx2::<Q4_1>,
        (Q5_0, false) => panel_dots_tokens_avx2::<Q5_0>,
        (Q5_1, false) => panel_dots_tokens_avx2::<Q5_1>,
        (_, false) => panel_dots_tokens_avx2::<Q8_0>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{quantize_q8, unpack32};
    use crate::panels;
    use crate::x86::panel_tests::{acts_of, check_panels, rows_of, Rng};

    /// A row's dot the kernels' way: per block the exact integer sum, then the same `fma` steps
    /// (`f32::mul_add` rounds once, as `vfmadd`).
    fn twin(t: QType, row: &[u8], act: &[Q8Block]) -> f32 {
        let mut acc = 0f32;
        for (b, a) in row.chunks_exact(t.block_bytes()).zip(act) {
            let u = unpack32(t, b);
            let sum: i32 = u.q.iter().zip(&a.qs).map(|(&w, &x)| w as i32 * x as i32).sum();
            acc = (sum as f32).mul_add(u.d * a.d, acc);
            if panels::has_min(t) {
                acc = u.m.mul_add(a.s, acc);
            }
        }
        acc
    }

    /// The AVX2 and VNNI panel kernels give the twin's bits on every 32-value type, for every
    /// token count of a pass and a panel's last rows, on the harness's four cases: rows at the
    /// types' largest magnitudes and all activations at +127 do not saturate the AVX2 kernel's
    /// 16-bit sums, and `Q8_0`'s −128 survives the sign trick.
    #[test]
    fn avx2_and_vnni_panel_kernels_equal_the_twin_bit_for_bit() {
        if !super::super::has_avx2() {
            return;
        }
        let (rows, cols) = (21, 256);
        let nb = cols / 32;
        let mut rng = Rng(11);
        for t in [QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::Q8_0] {
            for case in 0..4 {
                let data = rows_of(t, rows, cols, case, &mut rng);
                let packed = panels::repack(t, rows, cols, &data);
                let row = |r: usize| &data[r * nb * t.block_bytes()..(r + 1) * nb * t.block_bytes()];
                for m in 1..=6 {
                    let mut act = vec![Q8Block::default(); m * nb];
                    quantize_q8(&acts_of(m, cols, case, &mut rng), &mut act);
                    for vnni in [false].into_iter().chain(super::super::has_vnni().then_some(true)) {
                        let label = format!("{t} case {case} m={m} vnni={vnni}");
                        let twin = |tk: usize, r: usize| twin(t, row(r), &act[tk * nb..(tk + 1) * nb]);
                        check_panels(
                            rows,
                            m,
                            nb * panels::chunk_bytes(t),
                            &packed,
                            &label,
                            twin,
                            |panel, out, nvalid| {
                                // SAFETY: the CPU runs this kernel; the panel holds nb chunks; act
                                // holds m · nb blocks; out has m rows of `rows` from the panel's first.
                                unsafe { panel_dots_fn(t, vnni)(panel, nb, &act, m, out, rows, nvalid) }
                            },
                        );
                    }
                }
            }
        }
    }
}
