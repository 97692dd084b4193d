//! The matmul entry point: `out (m, rows) = x (m, cols) · Wᵀ` for a quantized `W (rows, cols)`.
//!
//! - **Few tokens** (decode): the activations are quantized once (`Q8`/`Q8_K`, as llama.cpp),
//!   the weight rows are split into one contiguous range per pool thread, and each row is
//!   dotted with every token's activations while it is in cache.
//!   On AVX-512 VNNI the 32-value types are stored as 16-row panels (`panels.rs`) and their
//!   rows stream through one kernel per panel. Matrices that share an input (q/k/v, gate/up)
//!   run together ([`QMatrix::matmul_shared_uninit`]): one quantization, one pool run.
//! - **Many tokens** (prefill): on AVX-512 VNNI, the int8 GEMM (`igemm.rs`); elsewhere, tiles
//!   of weight rows are dequantized into a per-thread f32 buffer that fits in L2 and multiplied
//!   with all the tokens by an f32 GEMM micro-kernel (the `gemm` crate). Either way each
//!   weight block is read once per prompt, not once per token.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::blocks::{dequantize, quantize_q8_wide, quantize_q8k_wide, ActKind, Q8Block, Q8KBlock, QType};
use crate::error::{KernelError, Result};
#[cfg(target_arch = "x86_64")]
use crate::igemm::{granule, Acts, Panel};
use crate::panels;
#[cfg(target_arch = "x86_64")]
use crate::panels::PANEL_ROWS;
use crate::pool::{SendPtr, ThreadPool};

/// Whether the CPU runs tessera's kernels at all: yes, unless `TESSERA_KERNELS` is `off`. Off,
/// the decoder takes Candle's device-generic ops on the CPU too: the path CUDA and Metal run,
/// so that a machine without a GPU executes (and its tests check) that path. Read once.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| !std::env::var("TESSERA_KERNELS").is_ok_and(|v| v.eq_ignore_ascii_case("off")))
}

/// An instruction set the dot-product kernels can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 VNNI (`vpdpbusd`) with AVX-512 F/VL/BW and AVX2.
    Avx512Vnni,
    /// aarch64 NEON with the dotprod extension (`sdot`).
    NeonDotprod,
}

impl Isa {
    /// Every instruction set this CPU can run, the portable one first.
    pub fn available() -> Vec<Isa> {
        Self::detected().to_vec()
    }

    /// [`available`](Self::available), detected once (matmuls check it on every call).
    fn detected() -> &'static [Isa] {
        static DETECTED: OnceLock<Vec<Isa>> = OnceLock::new();
        DETECTED.get_or_init(Self::detect)
    }

    fn detect() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if crate::x86::has_avx2() {
                v.push(Isa::Avx2);
            }
            if crate::x86::has_vnni() {
                v.push(Isa::Avx512Vnni);
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if crate::neon::has_dotprod() {
                v.push(Isa::NeonDotprod);
            }
        }
        v
    }

    /// The fastest available set, or the one named by `TESSERA_KERNELS`
    /// (`portable`, `avx2`, `avx512vnni`, `neon`) when this CPU has it. Detected once.
    /// (`TESSERA_KERNELS=off` turns the kernels off altogether: see [`enabled`].)
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let avail = Self::detected();
            let forced = std::env::var("TESSERA_KERNELS").ok().and_then(|v| Self::parse(&v));
            match forced {
                Some(f) if avail.contains(&f) => f,
                _ => *avail.last().unwrap_or(&Isa::Portable),
            }
        })
    }

    pub fn parse(s: &str) -> Option<Isa> {
        match s.to_ascii_lowercase().as_str() {
            "portable" | "scalar" => Some(Isa::Portable),
            "avx2" => Some(Isa::Avx2),
            "avx512vnni" | "avx512" | "vnni" => Some(Isa::Avx512Vnni),
            "neon" | "dotprod" => Some(Isa::NeonDotprod),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::NeonDotprod => "neon-dotprod",
        }
    }
}

/// Dot of one weight row with one token's `Q8` activations.
type RowFn = unsafe fn(&[u8], &[Q8Block]) -> f32;

/// Quantizes each token (a row of `cols` values of `x`) into its blocks of `out` with
/// `quantize`, tokens shared out among the pool's threads when there are several (each
/// token's blocks are the same whichever thread makes them).
fn quantize_tokens<B: Send>(
    pool: &ThreadPool,
    x: &[f32],
    cols: usize,
    out: &mut [B],
    quantize: impl Fn(&[f32], &mut [B]) + Sync,
) -> Result<()> {
    let m = x.len() / cols;
    let nb = out.len() / m.max(1);
    crate::pool::for_each_row(pool, &mut out[..m * nb], nb, 2, &|t, ar| quantize(&x[t * cols..(t + 1) * cols], ar))
}

/// The SIMD row kernel of `t` on `isa`, if there is one.
fn simd_row_fn(t: QType, isa: Isa) -> Option<RowFn> {
    if t.activation() != ActKind::Q8 {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(crate::x86::row_fn(t, false)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(crate::x86::row_fn(t, true)),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => Some(crate::neon::row_fn(t)),
        _ => None,
    }
}

/// Dots of four weight rows with one token's `Q8` activations.
type Rows4Fn = unsafe fn([&[u8]; 4], &[Q8Block]) -> [f32; 4];

/// The four-row SIMD kernel of `t` on `isa`, if there is one.
fn simd_rows4_fn(t: QType, isa: Isa) -> Option<Rows4Fn> {
    if t.activation() != ActKind::Q8 {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(crate::x86::rows4_fn(t, false)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(crate::x86::rows4_fn(t, true)),
        _ => None,
    }
}

/// Dot of one weight row with one token's `Q8_K` activations.
pub(crate) type RowKFn = unsafe fn(&[u8], &[Q8KBlock]) -> f32;

/// The SIMD row kernel of the k-quant `t` on `isa`, if there is one.
fn simd_row_k_fn(t: QType, isa: Isa) -> Option<RowKFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512Vnni => crate::x86::row_k_fn(t),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => crate::neon::row_k_fn(t),
        _ => {
            let _ = t;
            None
        }
    }
}

/// From this many tokens on, a matmul runs a GEMM (int8 on AVX-512 VNNI, f32 elsewhere).
pub const GEMM_MIN_TOKENS: usize = 16;

/// The int8 GEMM multiplies at most this many tokens per packing of the weights, so their
/// quantized activations stay in L2.
const IGEMM_CHUNK: usize = 512;

/// A few tokens' activations quantized for the dot-product kernels: `Q8` blocks (the 32-value
/// types read them) and `Q8_K` blocks (the k-quants), each empty where no matrix reads it.
struct QuantizedActs<'a> {
    q8: &'a [Q8Block],
    q8k: &'a [Q8KBlock],
    m: usize,
}

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
    /// 16 rows interleaved per block (the 32-value types; see `panels.rs`): the layout the
    /// AVX-512 VNNI kernels read fastest.
    Panels,
}

impl Layout {
    /// The layout a matrix of `t` gets on this CPU: panels where its kernels use them.
    pub fn preferred(t: QType) -> Layout {
        if Isa::best() == Isa::Avx512Vnni && panels::has_panels(t) {
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

thread_local! {
    static ACT_Q8: RefCell<Vec<Q8Block>> = const { RefCell::new(Vec::new()) };
    static ACT_Q8K: RefCell<Vec<Q8KBlock>> = const { RefCell::new(Vec::new()) };
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    #[cfg(target_arch = "x86_64")]
    static PANEL: RefCell<Panel> = RefCell::new(Panel::default());
    #[cfg(target_arch = "x86_64")]
    static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
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
        if m > 0 && few && mats.iter().all(|w| w.layout == Layout::Rows || isa == Isa::Avx512Vnni) {
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
        if self.layout == Layout::Panels && isa != Isa::Avx512Vnni {
            // Only the VNNI kernels read panels; other sets (forced in tests) use the f32 path,
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
            if isa == Isa::Avx512Vnni {
                for (c, xc) in x.chunks(IGEMM_CHUNK * cols).enumerate() {
                    // SAFETY: chunk c's output rows lie inside `out`.
                    self.igemm(pool, xc, xc.len() / cols, unsafe { out.add(c * IGEMM_CHUNK * rows) })?;
                }
                return Ok(());
            }
            self.gemm(pool, x, m, out)
        } else {
            self.dots(isa, pool, x, m, out)
        }
    }

    /// The few-token path: quantized activations, integer dot products.
    fn dots(&self, isa: Isa, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        Self::shared_dots(&[(self, SendPtr(out), None)], isa, pool, x, m)
    }

    /// The few-token path of every matrix in `mats` (each with its `(m, rows)` output; all
    /// take `cols` values per token): `x` quantized once for each activation kind they read,
    /// then one pool run in which each thread takes its share of every matrix's rows.
    #[allow(clippy::type_complexity)]
    fn shared_dots(
        mats: &[(&QMatrix, SendPtr<f32>, Option<&[f32]>)],
        isa: Isa,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
    ) -> Result<()> {
        let Some(cols) = mats.first().map(|(w, _, _)| w.cols) else { return Ok(()) };
        let reads = |kind| mats.iter().any(|(w, _, _)| w.qtype.activation() == kind);
        ACT_Q8.with(|q8| {
            ACT_Q8K.with(|q8k| {
                let (mut q8, mut q8k) = (q8.borrow_mut(), q8k.borrow_mut());
                // The buffers only grow: layers of different widths alternate, and refilling
                // the blocks a shrink dropped had cost 1% of a batched step.
                let (n8, n8k) = (
                    if reads(ActKind::Q8) { m * cols / 32 } else { 0 },
                    if reads(ActKind::Q8K) { m * cols / 256 } else { 0 },
                );
                if q8.len() < n8 {
                    q8.resize(n8, Q8Block::default());
                }
                if q8k.len() < n8k {
                    q8k.resize(n8k, Q8KBlock::default());
                }
                let (q8, q8k) = (&mut q8[..n8], &mut q8k[..n8k]);
                if n8 > 0 {
                    quantize_tokens(pool, x, cols, q8, quantize_q8_wide)?;
                }
                if n8k > 0 {
                    quantize_tokens(pool, x, cols, q8k, quantize_q8k_wide)?;
                }
                let acts = QuantizedActs { q8, q8k, m };
                let n = pool.threads();
                pool.run(&|part| {
                    for (w, dst, residual) in mats {
                        // SAFETY: the callers' contract (`matmul_to`): each output is valid for
                        // (m, rows) writes that nothing else makes, and `isa` is this CPU's.
                        let cols = unsafe { w.dots_part(isa, part, n, &acts, dst) };
                        if let Some(res) = residual {
                            for t in 0..m {
                                let at = t * w.rows + cols.start;
                                // SAFETY: token t's columns `cols` of the output are this part's
                                // share, written just above.
                                let out = unsafe { std::slice::from_raw_parts_mut(dst.0.add(at), cols.len()) };
                                add_into(out, &res[at..at + cols.len()]);
                            }
                        }
                    }
                })
            })
        })
    }

    /// Part `part` of `n` of this matrix's few-token dots: its share of the rows (or of the
    /// panels, 16 rows each), every token, written into `dst` `(m, rows)`. Returns the share:
    /// the output columns written.
    ///
    /// # Safety
    /// `dst` is valid for the (m, rows) output, whose columns of this part's share only this
    /// call writes; `isa` is one this CPU has; a panel matrix runs only with AVX-512 VNNI;
    /// `acts` holds the activation kind this matrix reads, for `cols` values per token.
    unsafe fn dots_part(
        &self,
        isa: Isa,
        part: usize,
        n: usize,
        acts: &QuantizedActs<'_>,
        dst: &SendPtr<f32>,
    ) -> std::ops::Range<usize> {
        let (rows, t, m) = (self.rows, self.qtype, acts.m);
        let nb = self.cols / t.block_elems();
        #[cfg(target_arch = "x86_64")]
        if self.layout == Layout::Panels {
            let np = rows.div_ceil(PANEL_ROWS);
            let (cb, per) = (panels::chunk_bytes(t), np.div_ceil(n));
            let kernel = crate::x86::panel_dots_fn(t);
            let share = (part * per).min(np)..((part + 1) * per).min(np);
            for p in share.clone() {
                let r0 = p * PANEL_ROWS;
                // SAFETY: panel p holds nb chunks; the writes are tokens 0..m × rows
                // r0..r0+nvalid of the output, in this part's share.
                unsafe {
                    kernel(
                        self.data.as_ptr().add(p * nb * cb),
                        nb,
                        acts.q8,
                        m,
                        dst.0.add(r0),
                        rows,
                        (rows - r0).min(PANEL_ROWS),
                    )
                };
            }
            return (share.start * PANEL_ROWS).min(rows)..(share.end * PANEL_ROWS).min(rows);
        }
        let per = rows.div_ceil(n);
        let (start, end) = ((part * per).min(rows), ((part + 1) * per).min(rows));
        match t.activation() {
            ActKind::Q8 => {
                let act = acts.q8;
                let mut r = start;
                if let Some(f4) = simd_rows4_fn(t, isa) {
                    while r + 4 <= end {
                        let w = [self.row(r), self.row(r + 1), self.row(r + 2), self.row(r + 3)];
                        for (tok, a) in act.chunks_exact(nb).enumerate() {
                            // SAFETY: as below.
                            let v = unsafe { f4(w, a) };
                            for (j, v) in v.into_iter().enumerate() {
                                // SAFETY: (tok, r + j) is in this part's share; in bounds.
                                unsafe { *dst.0.add(tok * rows + r + j) = v };
                            }
                        }
                        r += 4;
                    }
                }
                let simd = simd_row_fn(t, isa);
                // SAFETY: `simd` was chosen for an instruction set this CPU has; rows and
                // blocks match in length.
                self.dot_rows(r..end, act, nb, dst, |w, a| match simd {
                    Some(f) => unsafe { f(w, a) },
                    None => crate::dot::dot_q8(t, w, a),
                });
            }
            ActKind::Q8K => {
                let simd = simd_row_k_fn(t, isa);
                // SAFETY: as above.
                self.dot_rows(start..end, acts.q8k, nb, dst, |w, a| match simd {
                    Some(f) => unsafe { f(w, a) },
                    None => crate::dot::dot_q8k(t, w, a),
                });
            }
        }
        start..end
    }

    /// `dst (m, rows)[tok, r] = dot(row r, token tok's activations)` for the rows `range`, which
    /// only the calling pool part writes.
    fn dot_rows<A>(
        &self,
        range: std::ops::Range<usize>,
        act: &[A],
        nb: usize,
        dst: &SendPtr<f32>,
        dot: impl Fn(&[u8], &[A]) -> f32,
    ) {
        for r in range {
            let w = self.row(r);
            for (tok, a) in act.chunks_exact(nb).enumerate() {
                // SAFETY: (tok, r) is in bounds of the (m, rows) output and written by this part only.
                unsafe { *dst.0.add(tok * self.rows + r) = dot(w, a) };
            }
        }
    }

    /// The many-token path on AVX-512 VNNI: the activations quantized to int8 once, then per
    /// panel of 16 weight rows (shared out among the pool's threads) the panel loaded (or, for
    /// the k-quants, repacked) and multiplied with every token by the int8 micro-kernel.
    #[cfg(target_arch = "x86_64")]
    fn igemm(&self, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        use crate::x86::{igemm_tile, IGEMM_MR};
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
                                let pb = (cols / 32) * panels::chunk_bytes(t);
                                panels::load(t, &self.data[i * pb..(i + 1) * pb], cols / 32, &mut panel)
                            }
                        }
                        let mut t0 = 0;
                        while t0 < m {
                            let mr = IGEMM_MR.min(m - t0);
                            // SAFETY: `igemm` runs only when `matmul_with` found AVX-512 VNNI;
                            // panel and activations use granule `g` and `cols`; the writes are
                            // tokens t0..t0+mr × columns r0..r1 of the (m, rows) output, which
                            // only this panel writes.
                            unsafe {
                                igemm_tile(&panel, acts, cols, g, t0, mr, dst.0.add(t0 * rows + r0), rows, r1 - r0)
                            };
                            t0 += mr;
                        }
                    }
                })
            })
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn igemm(&self, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        self.gemm(pool, x, m, out)
    }

    /// Rows per dequantized tile: about 96 KiB of f32, a multiple of 8.
    fn tile_rows(&self) -> usize {
        ((96 * 1024 / 4 / self.cols) / 8 * 8).clamp(8, 256)
    }

    /// The many-token path: dequantized tiles × f32 GEMM.
    fn gemm(&self, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
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
