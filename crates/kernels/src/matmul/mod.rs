//! The matmul entry point: `out (m, rows) = x (m, cols) · Wᵀ` for a quantized `W (rows, cols)`.
//!
//! - **Few tokens** (decode): the activations are quantized once (`Q8`/`Q8_K`, as llama.cpp),
//!   the weight rows are split into one contiguous range per pool thread, and each row is
//!   dotted with every token's activations while it is in cache.
//!   On AVX-512 VNNI and AVX2 the weights are stored as 16-row panels (`panels.rs`,
//!   `kpanels.rs`) and their rows stream through one kernel per panel. Matrices that share an
//!   input (q/k/v, gate/up) run together ([`QMatrix::matmul_shared_uninit`]): one
//!   quantization, one pool run.
//! - **Many tokens** (prefill): on AVX-512 VNNI and AVX2, the int8 GEMM (`igemm.rs`); elsewhere, tiles
//!   of weight rows are dequantized into a per-thread f32 buffer that fits in L2 and multiplied
//!   with all the tokens by an f32 GEMM micro-kernel (the `gemm` crate). Either way each
//!   weight block is read once per prompt, not once per token.
//!
//! This file holds [`QMatrix`] (its layouts, constructors and accessors), the public entry
//! points, their shape checks and the choice between the two paths; underneath,
//! - [`isa`]: [`Isa`], the instruction sets detected at run time, and the SIMD row kernel
//!   each one uses for a weight type;
//! - [`decode`]: the few-token path: activations quantized once, rows shared out among the pool
//!   parts, integer dot products;
//! - [`prefill`]: the many-token path: the int8 GEMM on AVX-512 VNNI and AVX2, dequantized
//!   tiles × an f32 GEMM elsewhere.

mod decode;
mod isa;
mod prefill;

use std::mem::MaybeUninit;

use crate::blocks::{dequantize, QType};
use crate::error::{KernelError, Result};
use crate::panels;
use crate::pool::{SendPtr, ThreadPool};
pub(crate) use isa::RowKFn;
pub use isa::{enabled, Isa};
use prefill::IGEMM_CHUNK;

/// From this many tokens on, a matmul runs a GEMM (int8 on AVX-512 VNNI, f32 elsewhere).
pub const GEMM_MIN_TOKENS: usize = 16;

/// One output of [`QMatrix::shared_to`]: `len` f32 at `ptr`, and the residual added to them.
struct Out<'a> {
    len: usize,
    ptr: *mut f32,
    residual: Option<&'a [f32]>,
}

/// `out[i] += add[i]`.
fn add_into(out: &mut [f32], add: &[f32]) {
    for (o, &a) in out.iter_mut().zip(add) {
        *o += a;
    }
}

/// How a [`QMatrix`] keeps its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Row after row of blocks, as stored in GGUF.
    Rows,
    /// 16 rows interleaved per block (see `panels.rs`, and `kpanels.rs` for the k-quants): the
    /// layout the AVX-512 VNNI and AVX2 kernels read fastest.
    Panels,
}

impl Layout {
    /// The layout a matrix of `t` gets on this CPU: panels wherever its best kernels read them
    /// ([`Isa::reads_panels`]). On AVX-512 VNNI, for the k-quants (`kpanels.rs`) the panels
    /// beat the rows on a 1B Llama shape (`tessera-bench`, pp64 / tg32, one thread, one run):
    /// Q4_K_M prefill 110 vs 80–88 tok/s, decode 32–37 vs 24–27; Q5_K_M 103 vs 88, 27–31 vs 23;
    /// Q6_K 88–93 vs 71, 26–28 vs 24.
    pub fn preferred(t: QType) -> Layout {
        if Isa::best().reads_panels(t) {
            Layout::Panels
        } else {
            Layout::Rows
        }
    }
}

/// A quantized weight matrix `(rows, cols)`, rows of whole blocks (as stored in GGUF), kept in
/// the [`Layout`] its kernels read fastest.
#[derive(Clone)]
pub struct QMatrix {
    qtype: QType,
    rows: usize,
    cols: usize,
    layout: Layout,
    data: Vec<u8>,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QMatrix({}, {}×{})", self.qtype, self.rows, self.cols)
    }
}

impl QMatrix {
    /// Takes `data`: `rows` rows of `cols / block_elems` blocks of `qtype` (GGUF's layout),
    /// repacked into the [preferred](Layout::preferred) layout.
    pub fn new(qtype: QType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        Self::with_layout(qtype, rows, cols, data, Layout::preferred(qtype))
    }

    /// [`new`](Self::new) with a chosen layout (an error for panels of a type without them).
    pub fn with_layout(qtype: QType, rows: usize, cols: usize, data: Vec<u8>, layout: Layout) -> Result<Self> {
        let expected = Self::byte_len(qtype, rows, cols)?;
        if data.len() != expected {
            return Err(KernelError::Shape(format!(
                "{rows}×{cols} {qtype} takes {expected} bytes, got {}",
                data.len()
            )));
        }
        let data = match layout {
            Layout::Rows => data,
            Layout::Panels if panels::has_panels(qtype) => panels::repack(qtype, rows, cols, &data),
            Layout::Panels => return Err(KernelError::Shape(format!("{qtype} has no panel layout"))),
        };
        Ok(Self { qtype, rows, cols, layout, data })
    }

    /// [`new`](Self::new) from a matrix read a block of rows at a time: `read(r0, count)` gives
    /// rows `r0 .. r0 + count`, GGUF's layout. Where the rows are repacked into panels, only
    /// the panels and one block per thread (a few MB) are held at once, not a second copy of the
    /// matrix as stored (the largest, an 8B model's embeddings, is hundreds of MB). Each pool
    /// thread reads and repacks its own blocks, so none waits while another reads. The error of
    /// the first block whose `read` failed comes back as it is.
    pub fn from_row_blocks<E: From<KernelError> + Send>(
        qtype: QType,
        rows: usize,
        cols: usize,
        read: impl Fn(usize, usize) -> std::result::Result<Vec<u8>, E> + Sync,
    ) -> std::result::Result<Self, E> {
        /// Rows per block: whole panels.
        const BLOCK: usize = 16 * panels::PANEL_ROWS;
        let layout = Layout::preferred(qtype);
        let row_bytes = Self::byte_len(qtype, 1, cols)?;
        if layout == Layout::Rows || !panels::has_panels(qtype) || rows <= BLOCK {
            let data = read(0, rows)?;
            return Ok(Self::with_layout(qtype, rows, cols, data, layout)?);
        }
        Self::byte_len(qtype, rows, cols)?;
        let mut data = vec![0u8; panels::byte_len(qtype, rows, cols)];
        let panel_bytes = panels::byte_len(qtype, panels::PANEL_ROWS, cols);
        let dst = crate::pool::SendPtr(data.as_mut_ptr());
        let block = |b: usize| -> std::result::Result<(), E> {
            let dst = &dst;
            let (r0, count) = (b * BLOCK, BLOCK.min(rows - b * BLOCK));
            let block = read(r0, count)?;
            if block.len() != count * row_bytes {
                return Err(KernelError::Shape(format!(
                    "rows {r0}..{} of a {rows}×{cols} {qtype} matrix: {} bytes, expected {}",
                    r0 + count,
                    block.len(),
                    count * row_bytes
                ))
                .into());
            }
            let (at, len) = (r0 / panels::PANEL_ROWS * panel_bytes, panels::byte_len(qtype, count, cols));
            // SAFETY: block b's panels, bytes at .. at + len of `data`, are written by this call alone.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.0.add(at), len) };
            panels::repack_serial(qtype, count, cols, &block, out);
            Ok(())
        };
        crate::pool::try_blocks(crate::ThreadPool::global(), rows.div_ceil(BLOCK), &block)?;
        Ok(Self { qtype, rows, cols, layout, data })
    }

    /// The bytes a `(rows, cols)` matrix of `qtype` takes; an error when a row is not whole
    /// blocks or the size overflows.
    pub fn byte_len(qtype: QType, rows: usize, cols: usize) -> Result<usize> {
        if cols == 0 || !cols.is_multiple_of(qtype.block_elems()) {
            return Err(KernelError::Shape(format!(
                "{qtype} rows hold blocks of {} values, but a row has {cols}",
                qtype.block_elems()
            )));
        }
        rows.checked_mul(cols / qtype.block_elems())
            .and_then(|b| b.checked_mul(qtype.block_bytes()))
            .ok_or_else(|| KernelError::Shape(format!("{rows}×{cols} {qtype} overflows")))
    }

    pub fn qtype(&self) -> QType {
        self.qtype
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// The stored bytes (in [`layout`](Self::layout)).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    fn row_bytes(&self) -> usize {
        self.cols / self.qtype.block_elems() * self.qtype.block_bytes()
    }

    fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Rows `r0..r1` as f32, into `out` (`(r1 − r0) · cols` long).
    pub fn dequantize_rows(&self, r0: usize, r1: usize, out: &mut [f32]) {
        match self.layout {
            Layout::Rows => {
                let rb = self.row_bytes();
                dequantize(self.qtype, &self.data[r0 * rb..r1 * rb], out);
            }
            Layout::Panels => panels::dequantize_rows(self.qtype, self.cols, &self.data, r0, r1, out),
        }
    }

    /// The whole matrix as f32, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        self.dequantize_rows(0, self.rows, &mut out);
        out
    }

    /// `out (m, rows) = x (m, cols) · Wᵀ` on the global pool with the best instruction set.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        self.matmul_with(Isa::best(), ThreadPool::global(), x, m, out)
    }

    /// [`matmul`](Self::matmul) into an output that need not be initialised (a fresh
    /// `Vec::with_capacity`'s spare capacity): every element is written, none read, so a
    /// caller skips zeroing a buffer the kernels overwrite. On `Ok`, all of `out` is
    /// initialised.
    pub fn matmul_uninit(&self, x: &[f32], m: usize, out: &mut [MaybeUninit<f32>]) -> Result<()> {
        let (isa, pool) = (Isa::best(), ThreadPool::global());
        self.check(isa, x, m, out.len())?;
        // SAFETY: `out` holds m · rows elements (checked); every path below writes each of them
        // through the pointer and reads none.
        unsafe { self.matmul_to(isa, pool, x, m, out.as_mut_ptr().cast::<f32>()) }
    }

    /// `outs[i] (m, rows of mats[i]) = x (m, cols) · mats[i]ᵀ` for matrices that read the same
    /// input (q/k/v, gate/up), on the global pool with the best instruction set. Each output
    /// holds the bits [`matmul`](Self::matmul) writes; on the few-token path `x` is quantized
    /// once and every matrix's rows are shared out in one pool run. On `Ok`, all of every
    /// output is initialised.
    pub fn matmul_shared_uninit(
        mats: &[&QMatrix],
        x: &[f32],
        m: usize,
        outs: &mut [&mut [MaybeUninit<f32>]],
    ) -> Result<()> {
        let outs: Vec<Out<'_>> =
            outs.iter_mut().map(|o| Out { len: o.len(), ptr: o.as_mut_ptr().cast::<f32>(), residual: None }).collect();
        // SAFETY: each pointer comes from a distinct `&mut` slice of its length.
        unsafe { Self::shared_to(Isa::best(), ThreadPool::global(), mats, x, m, &outs) }
    }

    /// [`matmul_shared_uninit`](Self::matmul_shared_uninit) into initialised outputs, with a
    /// chosen instruction set (which this CPU must have) and pool.
    pub fn matmul_shared_with(
        isa: Isa,
        pool: &ThreadPool,
        mats: &[&QMatrix],
        x: &[f32],
        m: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        let outs: Vec<Out<'_>> =
            outs.iter_mut().map(|o| Out { len: o.len(), ptr: o.as_mut_ptr(), residual: None }).collect();
        // SAFETY: each pointer comes from a distinct `&mut` slice of its length.
        unsafe { Self::shared_to(isa, pool, mats, x, m, &outs) }
    }

    /// `out (m, rows) = residual + x · Wᵀ` (a layer's skip connection), each value the bits of
    /// `residual + matmul`, added by each pool thread to the outputs it has just written. On
    /// `Ok`, all of `out` is initialised.
    pub fn matmul_add_uninit(&self, x: &[f32], m: usize, residual: &[f32], out: &mut [MaybeUninit<f32>]) -> Result<()> {
        let out = Out { len: out.len(), ptr: out.as_mut_ptr().cast::<f32>(), residual: Some(residual) };
        // SAFETY: the pointer comes from a `&mut` slice of its length.
        unsafe { Self::shared_to(Isa::best(), ThreadPool::global(), &[self], x, m, &[out]) }
    }

    /// [`matmul_add_uninit`](Self::matmul_add_uninit) into an initialised output, with a chosen
    /// instruction set (which this CPU must have) and pool.
    pub fn matmul_add_with(
        &self,
        isa: Isa,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        residual: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let out = Out { len: out.len(), ptr: out.as_mut_ptr(), residual: Some(residual) };
        // SAFETY: the pointer comes from a `&mut` slice of its length.
        unsafe { Self::shared_to(isa, pool, &[self], x, m, &[out]) }
    }

    /// # Safety
    /// Each output's pointer is valid for `len` f32 writes that nothing else accesses
    /// meanwhile.
    unsafe fn shared_to(
        isa: Isa,
        pool: &ThreadPool,
        mats: &[&QMatrix],
        x: &[f32],
        m: usize,
        outs: &[Out<'_>],
    ) -> Result<()> {
        if mats.len() != outs.len() {
            return Err(KernelError::Shape(format!("{} matrices, {} outputs", mats.len(), outs.len())));
        }
        for (w, o) in mats.iter().zip(outs) {
            w.check(isa, x, m, o.len)?;
            if let Some(r) = o.residual.filter(|r| r.len() != o.len) {
                return Err(KernelError::Shape(format!("a residual of {} values for an output of {}", r.len(), o.len)));
            }
        }
        let few = m < GEMM_MIN_TOKENS || crate::invariant::active();
        if m > 0 && few && mats.iter().all(|w| w.layout == Layout::Rows || isa.reads_panels(w.qtype)) {
            let mats: Vec<_> = mats.iter().zip(outs).map(|(w, o)| (*w, SendPtr(o.ptr), o.residual)).collect();
            return Self::shared_dots(&mats, isa, pool, x, m);
        }
        for (w, o) in mats.iter().zip(outs) {
            // SAFETY: checked above; `ptr` is valid for this matrix's (m, rows) output.
            unsafe { w.matmul_to(isa, pool, x, m, o.ptr)? };
            if let Some(res) = o.residual {
                // SAFETY: every element was just written; nothing else accesses the output.
                let out = unsafe { std::slice::from_raw_parts_mut(o.ptr, o.len) };
                crate::pool::for_each_row(pool, out, w.rows, 2, &|t, row| {
                    add_into(row, &res[t * w.rows..][..w.rows]);
                })?;
            }
        }
        Ok(())
    }

    /// [`matmul`](Self::matmul) with a chosen instruction set (which this CPU must have)
    /// and pool.
    pub fn matmul_with(&self, isa: Isa, pool: &ThreadPool, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        self.check(isa, x, m, out.len())?;
        // SAFETY: `out` holds m · rows elements (checked).
        unsafe { self.matmul_to(isa, pool, x, m, out.as_mut_ptr()) }
    }

    fn check(&self, isa: Isa, x: &[f32], m: usize, out_len: usize) -> Result<()> {
        if x.len() != m * self.cols || out_len != m * self.rows {
            return Err(KernelError::Shape(format!(
                "matmul of {m} tokens: x has {} values (expected {}), out {out_len} (expected {})",
                x.len(),
                m * self.cols,
                m * self.rows
            )));
        }
        if !Isa::detected().contains(&isa) {
            return Err(KernelError::Shape(format!("this CPU lacks the {} instructions", isa.name())));
        }
        Ok(())
    }

    /// Writes `out (m, rows)`, each element once, reading none; every path below does.
    ///
    /// # Safety
    /// `out` is valid for writes of m · rows f32 that nothing else accesses meanwhile; `x`
    /// holds m · cols values and `isa` is one this CPU has (see [`check`](Self::check)).
    unsafe fn matmul_to(&self, isa: Isa, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        let (cols, rows) = (self.cols, self.rows);
        if self.layout == Layout::Panels && !isa.reads_panels(self.qtype) {
            // Sets whose kernels do not read these panels (forced in tests) use the f32 path,
            // a token at a time when rows must not depend on the batch.
            if crate::invariant::active() {
                for (t, xr) in x.chunks_exact(cols).enumerate() {
                    // SAFETY: token t's output row lies inside `out`.
                    self.gemm(pool, xr, 1, unsafe { out.add(t * rows) })?;
                }
                return Ok(());
            }
            return self.gemm(pool, x, m, out);
        }
        if m >= GEMM_MIN_TOKENS && !crate::invariant::active() {
            if matches!(isa, Isa::Avx512Vnni | Isa::Avx2) {
                for (c, xc) in x.chunks(IGEMM_CHUNK * cols).enumerate() {
                    // SAFETY: chunk c's output rows lie inside `out`.
                    self.igemm(isa, pool, xc, xc.len() / cols, unsafe { out.add(c * IGEMM_CHUNK * rows) })?;
                }
                return Ok(());
            }
            self.gemm(pool, x, m, out)
        } else {
            self.dots(isa, pool, x, m, out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A matrix read in blocks of rows is the matrix read whole, in either layout (rows not a
    /// multiple of the block nor of a panel).
    #[test]
    fn a_matrix_read_in_blocks_of_rows_is_the_matrix_read_whole() {
        for t in [QType::Q4_0, QType::Q8_0, QType::Q4K, QType::Q6K] {
            let (rows, cols) = (600, t.block_elems());
            let row_bytes = QMatrix::byte_len(t, 1, cols).expect("size");
            let data: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 + i / 13) as u8).collect();
            let whole = QMatrix::new(t, rows, cols, data.clone()).expect("whole");
            let reads = std::sync::atomic::AtomicUsize::new(0);
            let blocks = QMatrix::from_row_blocks(t, rows, cols, |r0, n| {
                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, KernelError>(data[r0 * row_bytes..(r0 + n) * row_bytes].to_vec())
            })
            .expect("blocks");
            assert_eq!((blocks.layout(), blocks.bytes()), (whole.layout(), whole.bytes()), "{t}");
            assert_eq!(reads.into_inner(), if whole.layout() == Layout::Panels { 3 } else { 1 }, "{t}");
            let failed = QMatrix::from_row_blocks(t, rows, cols, |r0, _| {
                Err::<Vec<u8>, _>(KernelError::Shape(format!("read at {r0}")))
            });
            assert!(matches!(failed, Err(KernelError::Shape(m)) if m == "read at 0"), "{t}: the first block's error");
            let short = QMatrix::from_row_blocks(t, rows, cols, |_, _| Ok::<_, KernelError>(vec![0; row_bytes]));
            assert!(short.is_err(), "{t}: a short block is an error");
        }
    }
}
