//! The few-token (decode) path of [`QMatrix`]: the activations quantized once per matmul
//! (`Q8`/`Q8_K`, as llama.cpp), the weight rows (or 16-row panels) split into one contiguous
//! share per pool thread, and each row dotted with every token's activations while it is in
//! cache, by the SIMD row kernels [`isa`](super::isa) picks or the portable `dot.rs`.
//!
//! The kernels write through raw output pointers, under the contract of the entry points in
//! `mod.rs` (`matmul_to`, `shared_to`): each output is valid for its `(m, rows)` writes, which
//! nothing else makes meanwhile; each pool part writes only its own share of the rows; `isa` is
//! one this CPU has (checked before any kernel runs).

use std::cell::RefCell;

use super::isa::{simd_row_fn, simd_row_k_fn, simd_rows4_fn};
#[cfg(target_arch = "x86_64")]
use super::Layout;
use super::{add_into, Isa, QMatrix};
use crate::blocks::{quantize_q8_wide, quantize_q8k_wide, ActKind, Q8Block, Q8KBlock};
use crate::error::Result;
#[cfg(target_arch = "x86_64")]
use crate::panels::{self, PANEL_ROWS};
use crate::pool::{SendPtr, ThreadPool};

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

/// A few tokens' activations quantized for the dot-product kernels: `Q8` blocks (the 32-value
/// types read them) and `Q8_K` blocks (the k-quants), each empty where no matrix reads it.
struct QuantizedActs<'a> {
    q8: &'a [Q8Block],
    q8k: &'a [Q8KBlock],
    /// Tokens (read by the x86 panel path only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    m: usize,
}

thread_local! {
    static ACT_Q8: RefCell<Vec<Q8Block>> = const { RefCell::new(Vec::new()) };
    static ACT_Q8K: RefCell<Vec<Q8KBlock>> = const { RefCell::new(Vec::new()) };
}

impl QMatrix {
    /// The few-token path: quantized activations, integer dot products.
    pub(super) fn dots(&self, isa: Isa, pool: &ThreadPool, x: &[f32], m: usize, out: *mut f32) -> Result<()> {
        Self::shared_dots(&[(self, SendPtr(out), None)], isa, pool, x, m)
    }

    /// The few-token path of every matrix in `mats` (each with its `(m, rows)` output; all
    /// take `cols` values per token): `x` quantized once for each activation kind they read,
    /// then one pool run in which each thread takes its share of every matrix's rows.
    #[allow(clippy::type_complexity)]
    pub(super) fn shared_dots(
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
    /// call writes; `isa` is one this CPU has; a panel matrix runs only on a set that reads its
    /// panels ([`Isa::reads_panels`]);
    /// `acts` holds the activation kind this matrix reads, for `cols` values per token.
    unsafe fn dots_part(
        &self,
        isa: Isa,
        part: usize,
        n: usize,
        acts: &QuantizedActs<'_>,
        dst: &SendPtr<f32>,
    ) -> std::ops::Range<usize> {
        let (rows, t) = (self.rows, self.qtype);
        let nb = self.cols / t.block_elems();
        #[cfg(target_arch = "x86_64")]
        if self.layout == Layout::Panels {
            let np = rows.div_ceil(PANEL_ROWS);
            let (cb, per) = (panels::chunk_bytes(t), np.div_ceil(n));
            let share = (part * per).min(np)..((part + 1) * per).min(np);
            for p in share.clone() {
                let r0 = p * PANEL_ROWS;
                let (m, nvalid) = (acts.m, (rows - r0).min(PANEL_ROWS));
                // SAFETY: panel p holds nb chunks; the writes are tokens 0..m × rows
                // r0..r0+nvalid of the output, in this part's share.
                unsafe {
                    let (panel, out) = (self.data.as_ptr().add(p * nb * cb), dst.0.add(r0));
                    match t.activation() {
                        ActKind::Q8 => crate::x86::panel_dots_fn(t, isa == Isa::Avx512Vnni)(
                            panel, nb, acts.q8, m, out, rows, nvalid,
                        ),
                        ActKind::Q8K => crate::x86::kpanel_dots_fn(t, isa == Isa::Avx512Vnni)(
                            panel, nb, acts.q8k, m, out, rows, nvalid,
                        ),
                    }
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
}
