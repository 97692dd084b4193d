//! The f32 GEMM micro-kernel on 512-bit registers (AVX-512 F): a tile of up to [`MR`] rows of
//! `A` (packed: the tile's rows interleaved, `MR` values per step of `k`) times a panel of up to
//! [`NR`] columns of `B`, added to (or written into) `D`. Each row of `A` is broadcast one value
//! at a time and multiplied with the panel's row of `B` (two
//! registers of 16 columns) into `2·M` accumulators that stay in registers for the whole
//! `kc` loop: 24 fused multiply-adds per step for 12 broadcasts and 2 loads, the
//! BLIS-style outer-product kernel (Van Zee & van de Geijn, "BLIS: A Framework for Rapidly
//! Instantiating BLAS Functionality", 2015). Every sum is one `fma` chain over `p` in order from
//! zero (`s = fma(a[p], b[p], s)`), then added to what `D` holds, the arithmetic of
//! `sgemm::tile_portable`, so the two agree bit for bit and a row's values do not depend on how
//! many rows the tile has.

use std::arch::x86_64::*;

use crate::sgemm::{PanelPtr, Tile, MR, NR};

/// `D[i][j] = (accumulate ? D[i][j] : 0) + Σ_p A[i][p]·B[p][j]` for `i < t.m`, `j < t.n`: each
/// sum one `fma` chain in `p` order from zero, then added to `D`.
///
/// # Safety
/// The CPU has AVX-512 F; `t.m ≤ MR`, `t.n ≤ NR`; `A[i][p]` (`t.a + p·MR + i`) for `i < m`,
/// `p < kc`, `B[p][j]` (`t.b + p·ldb + j`) for `p < kc`, `j < n` (`j < NR` for f16 panels), and `D[i][j]`
/// (`t.d + i·ldd + j`) for `i < m`, `j < n` are in bounds, and no other thread writes that
/// part of `D` meanwhile.
pub(crate) unsafe fn tile(t: &Tile) {
    macro_rules! by_rows {
        ($($m:literal)*) => {
            match (t.m, t.n == NR, t.b) {
                $(($m, true, PanelPtr::F32(b)) => tile_m::<$m, true, false>(t, b.cast()),
                  ($m, false, PanelPtr::F32(b)) => tile_m::<$m, false, false>(t, b.cast()),
                  ($m, true, PanelPtr::F16(b)) => tile_m::<$m, true, true>(t, b.cast()),
                  ($m, false, PanelPtr::F16(b)) => tile_m::<$m, false, true>(t, b.cast()),)*
                _ => {}
            }
        };
    }
    by_rows!(1 2 3 4 5 6 7 8 9 10 11 12);
    const _: () = assert!(MR == 12 && NR == 32);
}

/// The tile on `B` at `b`: f32 values, or with `HALF` f16 values widened as they are loaded
/// (f16 panels are whole: all [`NR`] values of a row are read).
#[target_feature(enable = "avx512f")]
unsafe fn tile_m<const M: usize, const FULL: bool, const HALF: bool>(t: &Tile, b: *const u8) {
    let (m0, m1): (__mmask16, __mmask16) = if FULL {
        (0xFFFF, 0xFFFF)
    } else {
        let n = t.n as u32;
        (((1u32 << n.min(16)) - 1) as u16, ((1u32 << n.saturating_sub(16)) - 1) as u16)
    };
    // A row of D, or of an f32 panel, at `p` (columns past `n` read as zeros, never touched).
    macro_rules! load {
        ($p:expr) => {{
            let p: *const f32 = $p;
            if FULL {
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            } else {
                (_mm512_maskz_loadu_ps(m0, p), _mm512_maskz_loadu_ps(m1, p.add(16)))
            }
        }};
    }
    // A panel row at `p`: f16 widened (`vcvtph2ps`: exact), or f32.
    macro_rules! load_b {
        ($p:expr) => {{
            let p: *const u8 = $p;
            if HALF {
                let h = p.cast::<__m256i>();
                (_mm512_cvtph_ps(_mm256_loadu_si256(h)), _mm512_cvtph_ps(_mm256_loadu_si256(h.add(1))))
            } else {
                load!(p.cast::<f32>())
            }
        }};
    }
    let step = t.ldb * if HALF { 2 } else { 4 };
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    let (mut a, mut b) = (t.a, b);
    for _ in 0..t.kc {
        let (b0, b1) = load_b!(b);
        for (i, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*a.add(i));
            acc[0] = _mm512_fmadd_ps(x, b0, acc[0]);
            acc[1] = _mm512_fmadd_ps(x, b1, acc[1]);
        }
        a = a.add(MR);
        b = b.add(step);
    }
    for (i, a) in acc.iter_mut().enumerate() {
        let d = t.d.add(i * t.ldd);
        if t.accumulate {
            let (lo, hi) = load!(d);
            *a = [_mm512_add_ps(lo, a[0]), _mm512_add_ps(hi, a[1])];
        }
        if FULL {
            _mm512_storeu_ps(d, a[0]);
            _mm512_storeu_ps(d.add(16), a[1]);
        } else {
            _mm512_mask_storeu_ps(d, m0, a[0]);
            _mm512_mask_storeu_ps(d.add(16), m1, a[1]);
        }
    }
}
