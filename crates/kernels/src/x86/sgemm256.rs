//! The f32 GEMM micro-kernel on 256-bit registers (AVX2 + FMA; F16C widens f16 panels), for
//! the CPUs without AVX-512. It runs the same tiles as `sgemm512` — up to [`MR`] rows of packed
//! `A` times a panel of up to [`NR`] columns of `B` — as sub-tiles of 6 rows × 16 columns:
//! sixteen 256-bit registers hold 12 accumulators, the panel row's two registers and the
//! broadcast, the BLIS Haswell kernel's shape (Van Zee & van de Geijn, 2015). Every sum is the
//! same `fma` chain over `p` in order from zero, then added to what `D` holds, as in
//! `sgemm::tile_portable`: the three kernels agree bit for bit, and a row's values do not
//! depend on how many rows the tile has.

use std::arch::x86_64::*;

use crate::sgemm::{PanelPtr, Tile, MR, NR};

/// Rows of a sub-tile.
const SUB_M: usize = 6;
/// Columns of a sub-tile: two registers of 8 f32.
const SUB_N: usize = 16;

/// `D[i][j] = (accumulate ? D[i][j] : 0) + Σ_p A[i][p]·B[p][j]` for `i < t.m`, `j < t.n`: each
/// sum one `fma` chain in `p` order from zero, then added to `D`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; otherwise as `sgemm512::tile`: `t.m ≤ MR`, `t.n ≤ NR`, `A`,
/// `B` (all [`NR`] values of a row of f16 panels) and `D` in bounds where the tile reads and
/// writes them, and no other thread writes that part of `D` meanwhile.
pub(crate) unsafe fn tile(t: &Tile) {
    const _: () = assert!(MR.is_multiple_of(SUB_M) && NR.is_multiple_of(SUB_N));
    for c in (0..t.n).step_by(SUB_N) {
        for r in (0..t.m).step_by(SUB_M) {
            let s = Tile {
                m: SUB_M.min(t.m - r),
                n: SUB_N.min(t.n - c),
                a: t.a.add(r),
                b: t.b.add(c),
                d: t.d.add(r * t.ldd + c),
                ..*t
            };
            macro_rules! by_rows {
                ($($m:literal)*) => {
                    match (s.m, s.n == SUB_N, s.b) {
                        $(($m, true, PanelPtr::F32(b)) => sub_tile::<$m, true, false>(&s, b.cast()),
                          ($m, false, PanelPtr::F32(b)) => sub_tile::<$m, false, false>(&s, b.cast()),
                          ($m, true, PanelPtr::F16(b)) => sub_tile::<$m, true, true>(&s, b.cast()),
                          ($m, false, PanelPtr::F16(b)) => sub_tile::<$m, false, true>(&s, b.cast()),)*
                        _ => {}
                    }
                };
            }
            by_rows!(1 2 3 4 5 6);
        }
    }
}

/// A sub-tile of `M ≤ 6` rows and `s.n ≤ 16` columns (`FULL`: all 16) on `B` at `b`: f32
/// values, or with `HALF` f16 values widened as they are loaded (`vcvtph2ps`: exact; f16
/// panels are whole, so all 16 values are read).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sub_tile<const M: usize, const FULL: bool, const HALF: bool>(s: &Tile, b: *const u8) {
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let n = s.n as i32;
    let (m0, m1) =
        (_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes), _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lanes));
    // A row of D, or of an f32 panel, at `p` (columns past `n` read as zeros, never touched).
    macro_rules! load {
        ($p:expr) => {{
            let p: *const f32 = $p;
            if FULL {
                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
            } else {
                (_mm256_maskload_ps(p, m0), _mm256_maskload_ps(p.add(8), m1))
            }
        }};
    }
    macro_rules! load_b {
        ($p:expr) => {{
            let p: *const u8 = $p;
            if HALF {
                let h = p.cast::<__m128i>();
                (_mm256_cvtph_ps(_mm_loadu_si128(h)), _mm256_cvtph_ps(_mm_loadu_si128(h.add(1))))
            } else {
                load!(p.cast::<f32>())
            }
        }};
    }
    let step = s.ldb * if HALF { 2 } else { 4 };
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    let (mut a, mut b) = (s.a, b);
    for _ in 0..s.kc {
        let (b0, b1) = load_b!(b);
        for (i, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_broadcast_ss(&*a.add(i));
            acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
            acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
        }
        a = a.add(MR);
        b = b.add(step);
    }
    for (i, a) in acc.iter_mut().enumerate() {
        let d = s.d.add(i * s.ldd);
        if s.accumulate {
            let (lo, hi) = load!(d);
            *a = [_mm256_add_ps(lo, a[0]), _mm256_add_ps(hi, a[1])];
        }
        if FULL {
            _mm256_storeu_ps(d, a[0]);
            _mm256_storeu_ps(d.add(8), a[1]);
        } else {
            _mm256_maskstore_ps(d, m0, a[0]);
            _mm256_maskstore_ps(d.add(8), m1, a[1]);
        }
    }
}
