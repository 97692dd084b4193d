//! The many-token (prefill) path of [`QMatrix`]: on AVX-512 VNNI and AVX2, the int8 GEMM
//! (`igemm.rs` packs each panel of 16 weight rows, `x86/igemm.rs` multiplies it with every
//! token); elsewhere, tiles of weight rows dequantized into a per-thread f32 buffer that fits in
//! L2 and multiplied with all the tokens by an f32 GEMM micro-kernel (the `gemm` crate, through
//! `dense::sgemm`). Either way each weight block is read once per prompt, not once per token,
//! and the pool's threads take panels or tiles from a shared counter.
//!
//! Both write through a raw output pointer, under `matmul_to`'s contract (`mod.rs`): valid for
//! the `(m, rows)` writes, which nothing else makes meanwhile; each panel or tile writes only
//! its own columns. `igemm` runs only when the chosen instruction set is AVX-512 VNNI or AVX2.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(target_arch = "x86_64")]
use super::Layout;
use super::QMatrix;
use crate::error::Result;
#[cfg(target_arch = "x86_64")]
use crate::igemm::{granule, Acts, Panel};
#[cfg(target_arch = "x86_64")]
use crate::panels::{self, PANEL_ROWS};
use crate::pool::{SendPtr, ThreadPool};

/// The int8 GEMM multiplies at most this many tokens per packing of the weights, so their
/// quantized activations stay in L2.
pub(super) const IGEMM_CHUNK: usize = 512;

thread_local! {
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    #[cfg(target_arch = "x86_64")]
    static PANEL: RefCell<Panel> = RefCell::new(Panel::default());
    #[cfg(target_arch = "x86_64")]
    static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
}

impl QMatrix {
    /// The many-token path on AVX-512 VNNI: the activations quantized to int8 once, then per
    /// panel of 16 weight rows (shared out among the pool's threads) the panel loaded (or, for
    /// the k-quants, repacked) and multiplied with every token by the int8 micro-kernel.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn igemm(&self, isa: super::Isa, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        use crate::x86::{igemm_tile, IGEMM_MR};
        let vnni = isa == super::Isa::Avx512Vnni;
        let (rows, cols, t) = (self.rows, self.cols, self.qtype);
        let g = granule(t);
        ACTS.with(|cell| {
            let mut acts = cell.borrow_mut();
            acts.quantize(pool, x, m, cols, g)?;
            let acts = &*acts;
            let panels = rows.div_ceil(PANEL_ROWS);
            let next = AtomicUsize::new(0);
            let dst = SendPtr(out);
            let rb = self.row_bytes();
            pool.run(&|_part| {
                let dst = &dst;
                PANEL.with(|pc| {
                    let mut panel = pc.borrow_mut();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= panels {
                            break;
                        }
                        let (r0, r1) = (i * PANEL_ROWS, ((i + 1) * PANEL_ROWS).min(rows));
                        match self.layout {
                            Layout::Rows => panel.pack(t, &self.data[r0 * rb..r1 * rb], r1 - r0, cols),
                            Layout::Panels => {
                                let nb = cols / t.block_elems();
                                let pb = nb * panels::chunk_bytes(t);
                                panels::load(t, &self.data[i * pb..(i + 1) * pb], nb, &mut panel)
                            }
                        }
                        let mut t0 = 0;
                        while t0 < m {
                            let mr = IGEMM_MR.min(m - t0);
                            // SAFETY: `igemm` runs only on AVX-512 VNNI or AVX2 (`matmul_to`);
                            // panel and activations use granule `g` and `cols`; the writes are
                            // tokens t0..t0+mr × columns r0..r1 of the (m, rows) output, which
                            // only this panel writes.
                            unsafe {
                                let out = dst.0.add(t0 * rows + r0);
                                igemm_tile(vnni, t, &panel, acts, cols, g, t0, mr, out, rows, r1 - r0)
                            };
                            t0 += mr;
                        }
                    }
                })
            })
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn igemm(&self, _isa: super::Isa, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        self.gemm(pool, x, m, out)
    }

    /// Rows per dequantized tile: about 96 KiB of f32, a multiple of 8.
    fn tile_rows(&self) -> usize {
        ((96 * 1024 / 4 / self.cols) / 8 * 8).clamp(8, 256)
    }

    /// The many-token path: dequantized tiles × f32 GEMM.
    pub(super) fn gemm(&self, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        let tr = self.tile_rows();
        let tiles = rows.div_ceil(tr);
        let next = AtomicUsize::new(0);
        let dst = SendPtr(out);
        pool.run(&|_part| {
            let dst = &dst;
            TILE.with(|cell| {
                let mut tile = cell.borrow_mut();
                tile.resize(tr * cols, 0.0);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= tiles {
                        break;
                    }
                    let (r0, r1) = (i * tr, ((i + 1) * tr).min(rows));
                    let w = &mut tile[..(r1 - r0) * cols];
                    self.dequantize_rows(r0, r1, w);
                    // SAFETY: dst (m, rows) row-major; this tile writes columns r0..r1 only,
                    // which no other tile writes. lhs (m, cols) row-major; rhs (cols, r1 − r0)
                    // is the tile read transposed (column stride `cols`).
                    unsafe {
                        crate::dense::sgemm(
                            (m, r1 - r0, cols),
                            dst.0.add(r0),
                            rows,
                            false,
                            x.as_ptr(),
                            cols,
                            w.as_ptr(),
                            (1, cols),
                        );
                    }
                }
            })
        })
    }
}
