//! The int8 prefill GEMM's micro-kernel on AVX-512 VNNI: one panel of 16 weight rows × up to
//! [`IGEMM_MR`] tokens, `vpdpbusd` on 512-bit registers with one lane per row; and the same on
//! AVX2's 256-bit registers (two per step of a panel's rows). `igemm.rs` packs the panels and
//! quantizes the activations, and says why the layout is what it is.
//!
//! # Safety
//! [`igemm_tile`] runs only on a CPU with AVX-512 VNNI (`has_vnni()`), or AVX2 as it says, with
//! the panel, the activations and the output its own `# Safety` section describes.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::row_mask;
use crate::blocks::QType;
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

/// The same tile on AVX2: the panel's 16 rows as two 256-bit halves, and `vpdpbusd` as
/// `vpmaddubsw` (pairs of unsigned × signed products summed to 16 bits) then `vpmaddwd` by
/// ones (pairs of those to 32 bits). The 16-bit pair sums are exact while the unsigned weights
/// are ≤ 127 (`2 · 127 · 127 < 2¹⁵`); `Q8_0`'s (`u = q + 128`, up to 255) go in `SIGNED` as
/// `|q| · sign(x, q)` (at most `2 · 128 · 127`), and `128 · Σ x` is added per granule. So the
/// integer sums, and then the f32 steps done in the same order, are the VNNI tile's bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn igemm_tile_avx2_g<const MR: usize, const G: usize, const SIGNED: bool>(
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
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let mut facc = [[_mm256_setzero_ps(); 2]; MR];
    for g in 0..ngran {
        let mut iacc = [[_mm256_setzero_si256(); 2]; MR];
        let ug = u.add(g * G * PANEL_ROWS);
        let ag = aq.add(g * G);
        for s in 0..G / 4 {
            let w = ug.add(s * 64) as *const __m256i;
            let (w0, w1) = (_mm256_loadu_si256(w), _mm256_loadu_si256(w.add(1)));
            // Signed: q = u − 128, multiplied as |q| · sign(x, q).
            let (q0, q1) = (_mm256_xor_si256(w0, flip), _mm256_xor_si256(w1, flip));
            let (w0, w1) = if SIGNED { (_mm256_abs_epi8(q0), _mm256_abs_epi8(q1)) } else { (w0, w1) };
            for (t, acc) in iacc.iter_mut().enumerate() {
                let x = _mm256_set1_epi32((ag.add(t * cols + 4 * s) as *const i32).read_unaligned());
                let (x0, x1) = if SIGNED { (_mm256_sign_epi8(x, q0), _mm256_sign_epi8(x, q1)) } else { (x, x) };
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, x0), ones));
                acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, x1), ones));
            }
        }
        if SIGNED {
            for (t, acc) in iacc.iter_mut().enumerate() {
                let shift = _mm256_set1_epi32(128 * *a.sum.as_ptr().add((t0 + t) * ngran + g));
                *acc = [_mm256_add_epi32(acc[0], shift), _mm256_add_epi32(acc[1], shift)];
            }
        }
        for h in 0..2 {
            let dwv = _mm256_loadu_ps(dw.add(g * PANEL_ROWS + 8 * h));
            let cv = _mm256_loadu_ps(c.add(g * PANEL_ROWS + 8 * h));
            for t in 0..MR {
                let scale = _mm256_mul_ps(dwv, _mm256_set1_ps(*ad.add(t * ngran + g)));
                facc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t][h]), scale, facc[t][h]);
                facc[t][h] = _mm256_fmadd_ps(cv, _mm256_set1_ps(*asum.add(t * ngran + g)), facc[t][h]);
            }
        }
    }
    let mut row = [0f32; PANEL_ROWS];
    for (t, acc) in facc.iter().enumerate() {
        _mm256_storeu_ps(row.as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(row.as_mut_ptr().add(8), acc[1]);
        std::ptr::copy_nonoverlapping(row.as_ptr(), out.add(t * ldo), nvalid.min(PANEL_ROWS));
    }
}

/// Tokens `t0 .. t0 + mr` (`mr ≤ IGEMM_MR`) × the panel's first `nvalid` rows into
/// `out[t · ldo + r]` (`out` points at token `t0`, the panel's first row), for granules of `g`.
///
/// On AVX-512 VNNI with `vnni`, else on AVX2; `t` is the panel's type.
///
/// # Safety
/// The CPU has AVX-512 VNNI (`has_vnni()`) with `vnni`, AVX2 (`has_avx2()`) without; `p` was
/// packed from type `t` and `a` quantized with granule `g`
/// for rows of `cols` values; `a` holds tokens up to `t0 + mr`; `out` is valid for those
/// writes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn igemm_tile(
    vnni: bool,
    t: QType,
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
    match (vnni, g == 16) {
        (true, true) => go!(16),
        (true, false) => go!(32),
        (false, _) => {
            // AVX2's sixteen registers hold the integer sums of AVX2_MR tokens beside the
            // panel's two halves: the tokens go in groups of that many.
            for i in (0..mr).step_by(AVX2_MR) {
                let (t0, mr, out) = (t0 + i, (mr - i).min(AVX2_MR), out.add(i * ldo));
                macro_rules! avx2 {
                    ($($c:literal),*) => {
                        match mr {
                            1 => igemm_tile_avx2_g::<1, $($c),*>(p, a, cols, t0, out, ldo, nvalid),
                            2 => igemm_tile_avx2_g::<2, $($c),*>(p, a, cols, t0, out, ldo, nvalid),
                            3 => igemm_tile_avx2_g::<3, $($c),*>(p, a, cols, t0, out, ldo, nvalid),
                            _ => igemm_tile_avx2_g::<AVX2_MR, $($c),*>(p, a, cols, t0, out, ldo, nvalid),
                        }
                    };
                }
                match (g == 16, t == QType::Q8_0) {
                    (true, _) => avx2!(16, false),
                    (false, false) => avx2!(32, false),
                    (false, true) => avx2!(32, true),
                }
            }
        }
    }
}

/// Tokens per AVX2 tile.
const AVX2_MR: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::igemm::granule;
    use crate::ThreadPool;

    /// The tile's arithmetic one value at a time: per granule the exact integer sum, then the
    /// same two f32 `fma` steps (`f32::mul_add` rounds once, as `vfmadd`).
    fn portable(p: &Panel, a: &Acts, cols: usize, g: usize, t: usize, r: usize) -> f32 {
        let ngran = cols / g;
        let mut acc = 0f32;
        for gi in 0..ngran {
            let mut sum = 0i32;
            for v in 0..g {
                let u = p.u[gi * g * PANEL_ROWS + v / 4 * 4 * PANEL_ROWS + 4 * r + v % 4] as i32;
                sum += u * a.q[t * cols + gi * g + v] as i32;
            }
            let scale = p.dw[gi * PANEL_ROWS + r] * a.d[t * ngran + gi];
            acc = (sum as f32).mul_add(scale, acc);
            acc = p.c[gi * PANEL_ROWS + r].mul_add(a.s[t * ngran + gi], acc);
        }
        acc
    }

    /// The AVX2 and VNNI tiles give the portable twin's bits on every type, so the AVX2 int8
    /// GEMM is the VNNI one's arithmetic exactly; weights of the largest magnitudes (every
    /// value at −1 of the row's range: nibbles 15, 6-bit values 63, Q8_0's −127) do not
    /// saturate its 16-bit sums.
    #[test]
    fn avx2_and_vnni_tiles_equal_the_portable_twin() {
        if !super::super::has_avx2() {
            return;
        }
        let pool = ThreadPool::new(1);
        let (rows, cols, m) = (13, 512, 11);
        let mut s = 7u64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let x: Vec<f32> = (0..m * cols).map(|i| if i % 7 == 0 { 127.0 } else { rnd() }).collect();
        for t in [QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::Q8_0, QType::Q4K, QType::Q5K, QType::Q6K] {
            for extreme in [false, true] {
                // Extreme rows: every value at the type's largest magnitude, either sign.
                let w: Vec<f32> = (0..rows * cols).map(|i| if extreme { [-1.0, 1.0][i % 2] } else { rnd() }).collect();
                let Ok(bytes) = crate::quantize::quantize_rows(&pool, t, &w, rows, cols) else {
                    panic!("quantize {t:?}")
                };
                let g = granule(t);
                let mut p = Panel::default();
                p.pack(t, &bytes, rows, cols);
                let mut a = Acts::default();
                assert!(a.quantize(&pool, &x, m, cols, g).is_ok());
                let want: Vec<f32> = (0..m)
                    .flat_map(|tk| (0..rows).map(move |r| (tk, r)))
                    .map(|(tk, r)| portable(&p, &a, cols, g, tk, r))
                    .collect();
                for vnni in [false].into_iter().chain(super::super::has_vnni().then_some(true)) {
                    let mut out = vec![f32::NAN; m * rows];
                    for t0 in (0..m).step_by(IGEMM_MR) {
                        // SAFETY: the CPU runs this tile for t; panel and activations use
                        // granule g; out holds m rows of `rows`.
                        unsafe {
                            igemm_tile(
                                vnni,
                                t,
                                &p,
                                &a,
                                cols,
                                g,
                                t0,
                                IGEMM_MR.min(m - t0),
                                out.as_mut_ptr().add(t0 * rows),
                                rows,
                                rows,
                            )
                        };
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out), bits(&want), "{t:?} vnni {vnni} extreme {extreme}");
                }
            }
        }
    }
}
