//! The int8 prefill GEMM's micro-kernel on AVX-512 VNNI: one panel of 16 weight rows × up to
//! [`IGEMM_MR`] tokens, `vpdpbusd` on 512-bit registers with one lane per row. `igemm.rs`
//! packs the panels and quantizes the activations, and says why the layout is what it is.
//!
//! # Safety
//! [`igemm_tile`] runs only on a CPU with AVX-512 VNNI (`has_vnni()`), with the panel, the
//! activations and the output its own `# Safety` section describes.

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::row_mask;
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
