//! tessera's own f32 GEMM, for the CPUs with AVX2 or AVX-512 F: the dense layers of vision towers and
//! f32 prefill (`dense::linear`) and attention over many queries (`dense::attend_many`).
//! `D [+]= A·B` with `A` read in place (rows of contiguous values, any row stride), `B` in
//! column panels of [`NR`] (a weight matrix packed once at load into [`PackedF32`]; a head's
//! keys packed per call; a head's values read where they are), and the BLIS loop order
//! around one micro-kernel (Van Zee & van de Geijn, 2015): blocks of [`KC`] steps of `k`, of
//! [`MC`] rows, then every panel, then tiles of [`MR`] rows (`x86::sgemm512` on AVX-512,
//! `x86::sgemm256` on AVX2, the portable [`tile_portable`] elsewhere). On the 2-core Zen 4 the
//! tower's matmuls reach ~90% of the FMA peak where the `gemm` crate's kernel (`dense::sgemm`,
//! the other CPUs' path) reached 70–78%; on the AVX2-only Zen 3 the two are level (densebench),
//! and f16 weights then stay f16 in the panels.
//!
//! Every output is, for each block of `k` in order (the blocks set by `k` alone), one `fma`
//! chain from zero added to what `D` holds (or written, for the first block without
//! `accumulate`), whichever tile, block of rows or thread computes it: a row's values do not
//! depend on how many rows the call has (row-invariant by construction), and the SIMD and
//! portable tiles agree bit for bit.

use crate::error::{KernelError, Result};

/// Rows of `A` per micro-kernel tile.
pub(crate) const MR: usize = 12;
/// Columns of `B` per panel: two 512-bit registers of f32.
pub(crate) const NR: usize = 32;
/// Steps of `k` per block: each tile's slice of a panel (`KC·NR` values) is read from L2.
const KC: usize = 512;
/// Rows of `A` per block: `MC·KC` values of `A` stay in L2 while every panel passes, and the
/// block's outputs in cache while every block of `k` adds to them (`dense::linear` also
/// initialises and finishes its outputs a block at a time).
pub(crate) const MC: usize = 11 * MR;

/// Whether this CPU runs a SIMD tile (AVX2 or AVX-512; [`crate::Isa::best`]): only then do
/// callers pack weights into [`PackedF32`] and send attention here.
pub(crate) fn fast() -> bool {
    matches!(crate::Isa::best(), crate::Isa::Avx2 | crate::Isa::Avx512Vnni)
}

/// One micro-kernel call: `D[i][j] = (accumulate ? D[i][j] : 0) + Σ_{p<kc} A[i][p]·B[p][j]`
/// (the sum one `fma` chain from zero) for `i < m ≤ MR`, `j < n ≤ NR`; `A[i][p]` at `a + p·MR + i` (packed by [`pack_a`]),
/// `B[p][j]` at `b + p·ldb + j`, `D[i][j]` at `d + i·ldd + j`.
pub(crate) struct Tile {
    pub m: usize,
    pub n: usize,
    pub kc: usize,
    pub a: *const f32,
    pub b: PanelPtr,
    pub ldb: usize,
    pub d: *mut f32,
    pub ldd: usize,
    pub accumulate: bool,
}

/// The portable twin of `x86::sgemm512::tile`: the same `fma` chains (`f32::mul_add` rounds
/// once, as `vfmadd` does) and the same add to `D`, one value at a time.
///
/// # Safety
/// As `x86::sgemm512::tile`, without the CPU requirement.
pub(crate) unsafe fn tile_portable(t: &Tile) {
    // SAFETY: every address is inside what the caller vouches for.
    unsafe {
        for i in 0..t.m {
            for j in 0..t.n {
                let d = t.d.add(i * t.ldd + j);
                let mut acc = 0f32;
                for p in 0..t.kc {
                    acc = (*t.a.add(p * MR + i)).mul_add(t.b.get(p * t.ldb + j), acc);
                }
                *d = if t.accumulate { *d + acc } else { acc };
            }
        }
    }
}

/// The tile on this CPU's fastest kernel.
///
/// # Safety
/// As [`tile_portable`].
unsafe fn tile(t: &Tile) {
    // SAFETY: as the caller's.
    unsafe { tile_on(crate::Isa::best(), t) }
}

/// The tile on `isa`'s kernel (the portable one where `isa` has no f32 tile).
///
/// # Safety
/// As [`tile_portable`]; this CPU runs `isa` ([`crate::Isa::available`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
unsafe fn tile_on(isa: crate::Isa, t: &Tile) {
    // SAFETY: each SIMD kernel runs only on an instruction set this CPU has.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        match isa {
            crate::Isa::Avx512Vnni => return crate::x86::sgemm_tile(t),
            crate::Isa::Avx2 => return crate::x86::sgemm_tile_avx2(t),
            _ => {}
        }
        tile_portable(t)
    }
}

/// Where `B`'s values are: f32, or f16 widened (exactly) as the tile reads them. f16 panels are
/// always whole ([`PackedF32`]'s, padded to [`NR`] columns): the tile reads all `NR` values of a
/// row of them.
#[derive(Clone, Copy)]
pub(crate) enum PanelPtr {
    F32(*const f32),
    F16(*const half::f16),
}

impl PanelPtr {
    /// The pointer `n` values on.
    ///
    /// # Safety
    /// As `pointer::add`.
    pub(crate) unsafe fn add(self, n: usize) -> Self {
        // SAFETY: as the caller's.
        unsafe {
            match self {
                Self::F32(p) => Self::F32(p.add(n)),
                Self::F16(p) => Self::F16(p.add(n)),
            }
        }
    }

    /// The value `i` on, as f32.
    ///
    /// # Safety
    /// It is in bounds.
    unsafe fn get(self, i: usize) -> f32 {
        // SAFETY: as the caller's.
        unsafe {
            match self {
                Self::F32(p) => *p.add(i),
                Self::F16(p) => (*p.add(i)).to_f32(),
            }
        }
    }
}

/// `B` as column panels of [`NR`]: panel `j` starts at `ptr + j·panel_stride`, its row `p` at
/// `+ p·ldb` (a [`PackedF32`]: `panel_stride = k·NR`, `ldb = NR`; a row-major f32 matrix read
/// in place: `panel_stride = NR`, `ldb` its row stride).
#[derive(Clone, Copy)]
pub(crate) struct Panels {
    pub ptr: PanelPtr,
    pub panel_stride: usize,
    pub ldb: usize,
}

/// `D (rows × cols) [+]= A (rows × k) · B (k × cols)` on the calling thread: rows `rows` of `A`
/// (`a + i·lda`) and `D` (`d + i·ldd`), columns `cols` (panel-aligned: `cols.start` a multiple of
/// [`NR`]) of `B` and `D`; without `accumulate` the product replaces what `D` held. Each block
/// of `A` (`MC × KC`) is packed first ([`pack_a`]): its rows then sit side by side, where rows a
/// multiple of 4 KiB apart (a 1024-wide row of scores, a 3072-wide activation) would all fall
/// in one L1 set.
///
/// # Safety
/// Every element named above is in bounds, and no other thread writes that part of `D`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm(
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    k: usize,
    (a, lda): (*const f32, usize),
    b: Panels,
    (d, ldd): (*mut f32, usize),
    accumulate: bool,
) {
    debug_assert!(cols.start.is_multiple_of(NR));
    thread_local! {
        static PACKED_A: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    PACKED_A.with_borrow_mut(|ap| {
        ap.resize(MC * KC, 0.0);
        // SAFETY: each tile addresses a part of what the caller vouches for; ap holds a block.
        unsafe {
            // k in blocks of equal length, at most KC (576 as 2 × 288, as the `gemm` crate cuts it).
            let block = k.div_ceil(k.div_ceil(KC).max(1)).max(1);
            for ic in rows.clone().step_by(MC) {
                let ie = (ic + MC).min(rows.end);
                for pc in (0..k).step_by(block) {
                    let kc = block.min(k - pc);
                    pack_a(a.add(ic * lda + pc), lda, ie - ic, kc, ap);
                    for j0 in cols.clone().step_by(NR) {
                        let bp = b.ptr.add(j0 / NR * b.panel_stride + pc * b.ldb);
                        for i0 in (ic..ie).step_by(MR) {
                            tile(&Tile {
                                m: MR.min(ie - i0),
                                n: NR.min(cols.end - j0),
                                kc,
                                a: ap.as_ptr().add((i0 - ic) * kc),
                                b: bp,
                                ldb: b.ldb,
                                d: d.add(i0 * ldd + j0),
                                ldd,
                                accumulate: accumulate || pc > 0,
                            });
                        }
                    }
                }
            }
        }
    })
}

/// Packs `m ≤ MC` rows of `kc` values of `A` (`a + i·lda + p`) for [`Tile`]s: tile `t`'s rows
/// `MR·t ..` at `ap[MR·t·kc ..]`, value `(i, p)` at `p·MR + i` (rows past `m` are zero).
///
/// # Safety
/// `a` holds those rows; `ap` holds `m.div_ceil(MR)·MR·kc` values.
unsafe fn pack_a(a: *const f32, lda: usize, m: usize, kc: usize, ap: &mut [f32]) {
    for (t, out) in ap[..m.div_ceil(MR) * MR * kc].chunks_exact_mut(MR * kc).enumerate() {
        if (t + 1) * MR <= m {
            // A whole tile: each step of k writes its MR values side by side.
            // SAFETY: rows t·MR .. t·MR + MR < m of A, kc values each.
            let rows: [&[f32]; MR] =
                std::array::from_fn(|i| unsafe { std::slice::from_raw_parts(a.add((t * MR + i) * lda), kc) });
            for (p, o) in out.chunks_exact_mut(MR).enumerate() {
                for (o, row) in o.iter_mut().zip(&rows) {
                    // SAFETY: out has kc chunks of MR, so p < kc = row.len().
                    *o = unsafe { *row.get_unchecked(p) };
                }
            }
            continue;
        }
        for i in 0..MR {
            let r = t * MR + i;
            if r >= m {
                (0..kc).for_each(|p| out[p * MR + i] = 0.0);
                continue;
            }
            // SAFETY: row r < m of A, kc values.
            let row = unsafe { std::slice::from_raw_parts(a.add(r * lda), kc) };
            for (p, &v) in row.iter().enumerate() {
                out[p * MR + i] = v;
            }
        }
    }
}

/// Packs rows `0..n` of `src` (`n × k`, row `j` at `src + j·lds`) into `dst` as
/// `ceil(n/NR)` panels of `k × NR` (columns past `n` zero).
///
/// # Safety
/// `src` holds those rows; `dst` is `ceil(n/NR)·k·NR` values.
pub(crate) unsafe fn pack_rows(src: *const f32, lds: usize, n: usize, k: usize, dst: &mut [f32]) {
    debug_assert_eq!(dst.len(), n.div_ceil(NR) * k * NR);
    for (panel, out) in dst.chunks_exact_mut(k * NR).enumerate() {
        // SAFETY: as the caller's.
        unsafe { pack_panel(src, lds, n, k, panel, out) };
    }
}

/// Packs panel `panel` of [`pack_rows`] into `out` (`k · NR` values; f32 or f16 alike).
///
/// # Safety
/// As [`pack_rows`]: `src` holds `n` rows of `k` values `lds` apart.
unsafe fn pack_panel<T: Copy + Default>(src: *const T, lds: usize, n: usize, k: usize, panel: usize, out: &mut [T]) {
    let j0 = panel * NR;
    let width = NR.min(n - j0);
    for jj in 0..NR {
        if jj >= width {
            (0..k).for_each(|p| out[p * NR + jj] = T::default());
            continue;
        }
        // SAFETY: row j0 + jj < n of src, k values.
        let row = unsafe { std::slice::from_raw_parts(src.add((j0 + jj) * lds), k) };
        for (p, &v) in row.iter().enumerate() {
            out[p * NR + jj] = v;
        }
    }
}

/// A weight matrix `W` `(n, k)` (a PyTorch `Linear` weight: `y = x·Wᵀ`) packed for [`gemm`] as
/// `Wᵀ`'s column panels: panel `j` holds `W`'s rows `32j .. 32j + 32` interleaved, `k` rows of
/// [`NR`] values (the last panel padded with zeros). Same size as `W`, give or take the
/// padding; packed once when a layer loads.
///
/// Stored as f32, or as f16 where the checkpoint stores the weight so ([`from_f16`](Self::from_f16)):
/// half the memory, widened exactly as the GEMM reads it, so the products are the f32 weight's.
#[derive(Clone)]
pub struct PackedF32 {
    n: usize,
    k: usize,
    data: PanelData,
}

#[derive(Clone)]
enum PanelData {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

/// Zeroed f16 panels for `(n, k)`, as fresh pages the allocator has not touched (a `vec!` of
/// `f16::ZERO` would write every page on this thread; the packing then touches them first, on
/// every thread: the page faults of a 2B tower's 1.3 GB are shared out with the work).
fn zeroed_f16(n: usize, k: usize) -> Vec<half::f16> {
    use half::vec::HalfBitsVecExt;
    vec![0u16; n.div_ceil(NR) * k * NR].reinterpret_into()
}

/// Packs `w` `(n, k)` row-major into `data`, `ceil(n / NR)` panels, on every thread of the pool.
fn pack_into<T: Copy + Default + Send + Sync>(w: &[T], n: usize, k: usize, data: &mut [T]) -> Result<()> {
    if w.len() != n * k || data.len() != n.div_ceil(NR) * k * NR {
        return Err(KernelError::Shape(format!("packed f32 weight: {} values for ({n}, {k})", w.len())));
    }
    let src = crate::pool::SendPtr(w.as_ptr().cast_mut());
    let panel = |j: usize, out: &mut [T]| {
        let src = &src;
        // SAFETY: w holds n rows of k values; panel j of data is `out`, k · NR values.
        unsafe { pack_panel(src.0.cast_const(), k, n, k, j, out) }
    };
    if crate::for_each_row(crate::ThreadPool::global(), data, k * NR, 2, &panel).is_err() {
        // A worker panicked (no input can make it): the same work on this thread.
        for (j, out) in data.chunks_exact_mut((k * NR).max(1)).enumerate() {
            panel(j, out);
        }
    }
    Ok(())
}

impl std::fmt::Debug for PackedF32 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedF32({}x{})", self.n, self.k)
    }
}

impl PackedF32 {
    /// Packs `w` `(n, k)`, row-major.
    pub fn new(w: &[f32], n: usize, k: usize) -> Result<Self> {
        let mut data = vec![0f32; n.div_ceil(NR) * k * NR];
        pack_into(w, n, k, &mut data)?;
        Ok(Self { n, k, data: PanelData::F32(data) })
    }

    /// Packs `w` `(n, k)`, row-major f16 values, kept in f16.
    pub fn from_f16(w: &[half::f16], n: usize, k: usize) -> Result<Self> {
        let mut data = zeroed_f16(n, k);
        pack_into(w, n, k, &mut data)?;
        Ok(Self { n, k, data: PanelData::F16(data) })
    }

    /// Packs an f16 `(n, k)` matrix read a block of rows at a time: `read(r0, count)` gives
    /// rows `r0 .. r0 + count` of it, row-major (`r0` a multiple of [`NR`]). Only the panels
    /// are allocated, not a copy of the whole matrix as stored; each pool thread reads and packs
    /// its own blocks, so none waits while another reads. The error of the first block whose
    /// `read` failed comes back as it is.
    pub fn from_f16_blocks<E: From<KernelError> + Send>(
        n: usize,
        k: usize,
        read: impl Fn(usize, usize) -> std::result::Result<Vec<half::f16>, E> + Sync,
    ) -> std::result::Result<Self, E> {
        /// Rows per block: whole panels, a few hundred KB of f16 for a tower's widest matrices.
        const BLOCK: usize = 2 * NR;
        let mut data = zeroed_f16(n, k);
        let dst = crate::pool::SendPtr(data.as_mut_ptr());
        let block = |b: usize| -> std::result::Result<(), E> {
            let dst = &dst;
            let (r0, count) = (b * BLOCK, BLOCK.min(n - b * BLOCK));
            let rows = read(r0, count)?;
            if rows.len() != count * k {
                return Err(KernelError::Shape(format!(
                    "rows {r0}..{} of a {n}×{k} f16 matrix: {} values",
                    r0 + count,
                    rows.len()
                ))
                .into());
            }
            let panels = r0 / NR * k * NR..(r0 + count).div_ceil(NR) * k * NR;
            // SAFETY: block b's panels, values `panels` of `data`, are written by this call alone.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.0.add(panels.start), panels.len()) };
            for (j, out) in out.chunks_exact_mut((k * NR).max(1)).enumerate() {
                // SAFETY: rows holds `count` rows of k values.
                unsafe { pack_panel(rows.as_ptr(), k, count, k, j, out) };
            }
            Ok(())
        };
        crate::pool::try_blocks(crate::ThreadPool::global(), n.div_ceil(BLOCK), &block)?;
        Ok(Self { n, k, data: PanelData::F16(data) })
    }

    /// Whether the values are stored in f16.
    pub fn is_f16(&self) -> bool {
        matches!(self.data, PanelData::F16(_))
    }

    /// Output width `n` (rows of `W`).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input width `k` (columns of `W`).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// `W` `(n, k)` row-major again.
    pub fn unpack(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.n * self.k];
        for (j, row) in w.chunks_exact_mut(self.k.max(1)).enumerate().take(self.n) {
            let at = j / NR * self.k * NR + j % NR;
            for (p, v) in row.iter_mut().enumerate() {
                *v = match &self.data {
                    PanelData::F32(d) => d[at + p * NR],
                    PanelData::F16(d) => d[at + p * NR].to_f32(),
                };
            }
        }
        w
    }

    /// `Wᵀ` as [`Panels`].
    pub(crate) fn panels(&self) -> Panels {
        let ptr = match &self.data {
            PanelData::F32(d) => PanelPtr::F32(d.as_ptr()),
            PanelData::F16(d) => PanelPtr::F16(d.as_ptr()),
        };
        Panels { ptr, panel_stride: self.k * NR, ldb: NR }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Every tile shape (rows 1..=12, partial and full panels, one and several `k` blocks,
    /// accumulating or not) gives on this CPU's kernel the bits of the portable twin.
    #[test]
    fn tile_matches_portable_twin_bit_for_bit() {
        for (m, n, kc) in [(1, 1, 1), (12, 32, 700), (5, 17, 33), (7, 32, 64), (12, 3, 5), (11, 31, 513)] {
            let (ldb, ldd) = (n + 5, n + 2);
            // A packed: (i, p) at p·MR + i.
            let (a, b) = (rand(kc * MR, 1), rand(kc * ldb, 2));
            for accumulate in [false, true] {
                let d0 = rand(m * ldd, 3);
                let mut slow_d = d0.clone();
                let t = |d: &mut Vec<f32>| Tile {
                    m,
                    n,
                    kc,
                    a: a.as_ptr(),
                    b: PanelPtr::F32(b.as_ptr()),
                    ldb,
                    d: d.as_mut_ptr(),
                    ldd,
                    accumulate,
                };
                // SAFETY: the buffers hold every element the tiles address.
                unsafe { tile_portable(&t(&mut slow_d)) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for isa in crate::Isa::available() {
                    let mut fast_d = d0.clone();
                    // SAFETY: as above; this CPU runs isa.
                    unsafe { tile_on(isa, &t(&mut fast_d)) };
                    assert_eq!(bits(&fast_d), bits(&slow_d), "{isa:?}: m {m} n {n} kc {kc} accumulate {accumulate}");
                    // Outside the tile (row padding) nothing changed.
                    for i in 0..m {
                        assert_eq!(bits(&fast_d[i * ldd + n..(i + 1) * ldd]), bits(&d0[i * ldd + n..(i + 1) * ldd]));
                    }
                }
            }
        }
    }

    /// f16 panels: every tile shape gives the portable twin's bits, and a matrix packed from f16
    /// gives, through `gemm`, the bits of the same values widened and packed as f32.
    #[test]
    fn f16_panels_give_the_widened_f32_products_bit_for_bit() -> Result<()> {
        let f16s = |v: &[f32]| v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (m, n, kc) in [(1, 1, 1), (12, 32, 700), (5, 17, 33), (11, 31, 513)] {
            let ldb = n + 5;
            // Whole rows of NR readable past the last one (f16 tiles read all NR values).
            let (a, b) = (rand(kc * MR, 6), f16s(&rand(kc * ldb + NR, 7)));
            for accumulate in [false, true] {
                let d0 = rand(m * n, 8);
                let mut slow_d = d0.clone();
                let t = |d: &mut Vec<f32>| Tile {
                    m,
                    n,
                    kc,
                    a: a.as_ptr(),
                    b: PanelPtr::F16(b.as_ptr()),
                    ldb,
                    d: d.as_mut_ptr(),
                    ldd: n,
                    accumulate,
                };
                // SAFETY: the buffers hold every element the tiles address.
                unsafe { tile_portable(&t(&mut slow_d)) };
                for isa in crate::Isa::available() {
                    let mut fast_d = d0.clone();
                    // SAFETY: as above; this CPU runs isa.
                    unsafe { tile_on(isa, &t(&mut fast_d)) };
                    assert_eq!(bits(&fast_d), bits(&slow_d), "{isa:?}: m {m} n {n} kc {kc} accumulate {accumulate}");
                }
            }
        }
        for (m, k, n) in [(150, 1030, 70), (13, 5, 33), (1, 64, 32)] {
            let (x, w) = (rand(m * k, 9), f16s(&rand(n * k, 10)));
            let widened: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
            let (half, full) = (PackedF32::from_f16(&w, n, k)?, PackedF32::new(&widened, n, k)?);
            assert!(half.is_f16() && !full.is_f16());
            assert_eq!(half.unpack(), widened);
            let (mut h, mut f) = (vec![0f32; m * n], vec![0f32; m * n]);
            // SAFETY: x is (m, k), h and f are (m, n), the panels cover n columns of k rows.
            unsafe {
                gemm(0..m, 0..n, k, (x.as_ptr(), k), half.panels(), (h.as_mut_ptr(), n), false);
                gemm(0..m, 0..n, k, (x.as_ptr(), k), full.panels(), (f.as_mut_ptr(), n), false);
            }
            assert_eq!(bits(&h), bits(&f), "({m}, {k}, {n})");
        }
        assert!(PackedF32::from_f16(&[half::f16::ZERO; 5], 2, 3).is_err(), "a weight of the wrong length is refused");
        Ok(())
    }

    /// An f16 matrix read a block of rows at a time packs as the whole matrix does (several
    /// blocks, the last panel partial); a block read's error comes back, and so does a block of
    /// the wrong length.
    #[test]
    fn f16_panels_packed_block_by_block_equal_the_whole_matrix_packed() -> Result<()> {
        let (n, k) = (8 * NR * 2 + 37, 19);
        let w: Vec<half::f16> = rand(n * k, 11).iter().map(|&x| half::f16::from_f32(x)).collect();
        let reads = std::sync::Mutex::new(Vec::new());
        let blocks = PackedF32::from_f16_blocks(n, k, |r0, count| {
            reads.lock().expect("reads").push((r0, count));
            Ok::<_, KernelError>(w[r0 * k..(r0 + count) * k].to_vec())
        })?;
        let mut reads = reads.into_inner().expect("reads");
        reads.sort_unstable();
        let blocks_read: Vec<_> = (0..n).step_by(2 * NR).map(|r0| (r0, (2 * NR).min(n - r0))).collect();
        assert_eq!(reads, blocks_read);
        assert_eq!(reads.last(), Some(&(512, 37)));
        assert!(blocks.is_f16());
        assert_eq!(blocks.unpack(), PackedF32::from_f16(&w, n, k)?.unpack());
        let failed = PackedF32::from_f16_blocks(n, k, |r0, _| Err(KernelError::Shape(format!("read at {r0}"))));
        assert!(matches!(failed, Err(KernelError::Shape(m)) if m == "read at 0"));
        assert!(PackedF32::from_f16_blocks(n, k, |_, _| Ok::<_, KernelError>(vec![half::f16::ZERO; 3])).is_err());
        Ok(())
    }

    /// `gemm` over a packed matrix: each output the f64 product within f32 rounding, and each
    /// row's bits the same whether it is computed among 150 rows or alone.
    #[test]
    fn packed_gemm_matches_f64_and_is_row_invariant() -> Result<()> {
        for (m, k, n) in [(150, 1030, 70), (13, 5, 33), (1, 64, 32)] {
            let (x, w) = (rand(m * k, 4), rand(n * k, 5));
            let packed = PackedF32::new(&w, n, k)?;
            assert_eq!(packed.unpack(), w);
            let mut all = vec![0f32; m * n];
            // SAFETY: x is (m, k), all is (m, n), the panels cover n columns of k rows.
            unsafe { gemm(0..m, 0..n, k, (x.as_ptr(), k), packed.panels(), (all.as_mut_ptr(), n), false) };
            for i in 0..m {
                let mut one = vec![0f32; n];
                // SAFETY: row i of x; one row of n outputs.
                unsafe { gemm(0..1, 0..n, k, (x[i * k..].as_ptr(), k), packed.panels(), (one.as_mut_ptr(), n), false) };
                assert_eq!(one, all[i * n..(i + 1) * n], "row {i} of ({m}, {k}, {n})");
                for (j, &got) in one.iter().enumerate() {
                    let want: f64 = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p] as f64).sum();
                    assert!((got as f64 - want).abs() < 1e-5 * (k as f64).sqrt() * 4.0, "({i},{j}) {got} vs {want}");
                }
            }
        }
        assert!(PackedF32::new(&[0.0; 5], 2, 3).is_err(), "a weight of the wrong length is refused");
        Ok(())
    }
}
