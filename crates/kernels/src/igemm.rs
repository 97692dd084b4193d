//! The int8 prefill GEMM: `out (m, rows) = x (m, cols) · Wᵀ` with int8 products for every
//! weight type.
//!
//! Every GGUF type is, within a *granule* of `G` consecutive values of a row (32, or 16 for
//! `Q6_K`), `w = dw · u + c` with `u` an unsigned byte and `dw`, `c` f32 constants of the
//! row and granule (Q4_0: `u` = the nibble, `c = −8·d`; Q4_1: `c` = the min; Q8_0: `u = q +
//! 128`; Q4_K: `dw = d·scale`, `c = −dmin·min`; Q6_K: `u = q + 32`, …). The activations are
//! quantized once per matmul to int8 in blocks of 32 (`x ≈ da · q`), so per granule
//!
//! `Σ w·x = dw·da·Σ u·q + c·(da·Σ q)`,
//!
//! an integer dot product (`vpdpbusd` takes exactly unsigned × signed bytes) plus a term
//! from the activations' block sums.
//!
//! The weights are repacked, one **panel** of [`PANEL_ROWS`] rows at a time, so one SIMD
//! register holds four consecutive values of each of the 16 rows: a micro-kernel multiplies
//! it with four values of one token broadcast to every lane, and each lane accumulates its
//! own row, with no horizontal sums. A panel is packed once per matmul and then multiplied
//! with every token while it sits in L1, so each weight is read from memory once per prompt.

use crate::blocks::{unpack32, unpack_k, unsigned_bias, QType};
use crate::error::Result;
use crate::pool::{SendPtr, ThreadPool};

pub(crate) use crate::panels::PANEL_ROWS;

/// The granule of `t`: the longest run of values that share one `dw` and `c`.
pub(crate) const fn granule(t: QType) -> usize {
    match t {
        QType::Q6K => 16,
        _ => 32,
    }
}

/// One panel: [`PANEL_ROWS`] weight rows (zero rows past the matrix's end), repacked.
#[derive(Default)]
pub(crate) struct Panel {
    /// `[granule][G/4][16 rows][4 values]` unsigned weights.
    pub u: Vec<u8>,
    /// `[granule][16 rows]` scales `dw`.
    pub dw: Vec<f32>,
    /// `[granule][16 rows]` constants `c`.
    pub c: Vec<f32>,
}

impl Panel {
    /// Packs `bytes`: `n ≤ 16` whole rows of `t` of `cols` values, in GGUF's row layout (the
    /// k-quants; the 32-value types are stored as panels on the CPUs that run this GEMM and
    /// come in through `panels::load`).
    pub(crate) fn pack(&mut self, t: QType, bytes: &[u8], n: usize, cols: usize) {
        let g = granule(t);
        let ngran = cols / g;
        self.u.resize(ngran * g * PANEL_ROWS, 0);
        self.dw.resize(ngran * PANEL_ROWS, 0.0);
        self.c.resize(ngran * PANEL_ROWS, 0.0);
        // Every slot of the n rows is written below; only a short panel needs zeros.
        if n < PANEL_ROWS {
            self.u.fill(0);
            self.dw.fill(0.0);
            self.c.fill(0.0);
        }
        let (be, bb) = (t.block_elems(), t.block_bytes());
        let row_bytes = cols / be * bb;
        let off = unsigned_bias(t);
        let gpb = be / g; // granules per block
        let mut ub = [0u8; 256];
        for r in 0..n {
            let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
            for (bi, b) in row.chunks_exact(bb).enumerate() {
                // Per granule of this block: its unsigned values go in four at a time, to each
                // step's slot of row r; `dw` and `c` to row r's lane.
                let mut put = |gi: usize, u: &[u8], dw: f32, c: f32| {
                    let gg = bi * gpb + gi;
                    self.dw[gg * PANEL_ROWS + r] = dw;
                    self.c[gg * PANEL_ROWS + r] = c - off as f32 * dw;
                    let dst = &mut self.u[gg * g * PANEL_ROWS..(gg + 1) * g * PANEL_ROWS];
                    for (slot, u) in dst.chunks_exact_mut(4 * PANEL_ROWS).zip(u.chunks_exact(4)) {
                        slot[4 * r..4 * r + 4].copy_from_slice(u);
                    }
                };
                if be == 32 {
                    let v = unpack32(t, b);
                    for (u, &q) in ub.iter_mut().zip(&v.q) {
                        *u = (q as i32 + off) as u8;
                    }
                    put(0, &ub[..32], v.d, v.m);
                } else {
                    let v = unpack_k(t, b);
                    for (u, &q) in ub.iter_mut().zip(&v.q) {
                        *u = (q as i32 + off) as u8;
                    }
                    for gi in 0..gpb {
                        // A granule never straddles a sub-block (G = the sub-block length).
                        let s = gi * g / v.sub;
                        let dw = v.d * v.scales[s] as f32;
                        put(gi, &ub[gi * g..(gi + 1) * g], dw, -v.dmin * v.mins[s] as f32);
                    }
                }
            }
        }
    }
}

/// Activations quantized for the GEMM: per token, int8 values and per granule the scale
/// `da`, `da · Σ q` and `Σ q`.
#[derive(Default)]
pub(crate) struct Acts {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    pub sum: Vec<i32>,
}

impl Acts {
    /// Quantizes `m` tokens of `cols` values (blocks of 32, `d = max|x| / 127`, round half to
    /// even), with `d` and the sums per granule `g` (16 or 32).
    /// The tokens are shared out among `pool`'s threads.
    pub(crate) fn quantize(&mut self, pool: &ThreadPool, x: &[f32], m: usize, cols: usize, g: usize) -> Result<()> {
        let ngran = cols / g;
        self.q.resize(m * cols, 0);
        self.d.resize(m * ngran, 0.0);
        self.s.resize(m * ngran, 0.0);
        self.sum.resize(m * ngran, 0);
        let (q, d, s) = (SendPtr(self.q.as_mut_ptr()), SendPtr(self.d.as_mut_ptr()), SendPtr(self.s.as_mut_ptr()));
        let sum = SendPtr(self.sum.as_mut_ptr());
        let per = m.div_ceil(pool.threads());
        pool.run(&|part| {
            let (q, d, s, sum) = (&q, &d, &s, &sum);
            for t in part * per..((part + 1) * per).min(m) {
                // SAFETY: token t's slices lie inside the buffers just sized for m tokens, and
                // only this part (which owns token t) touches them.
                let (qr, dr, sr, sumr) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(q.0.add(t * cols), cols),
                        std::slice::from_raw_parts_mut(d.0.add(t * ngran), ngran),
                        std::slice::from_raw_parts_mut(s.0.add(t * ngran), ngran),
                        std::slice::from_raw_parts_mut(sum.0.add(t * ngran), ngran),
                    )
                };
                crate::ops::wide(|| quantize_row(&x[t * cols..(t + 1) * cols], qr, (dr, sr, sumr), g));
            }
        })
    }
}

/// One token's activations: blocks of 32 quantized with `d = max|x| / 127` (round half to
/// even); `d`, `d · Σ q` and `Σ q` written per granule of `g`. Eight lanes at a time.
#[inline(always)]
fn quantize_row(x: &[f32], q: &mut [i8], (d, s, sums_out): (&mut [f32], &mut [f32], &mut [i32]), g: usize) {
    const MAGIC: f32 = 12582912.0; // 1.5 · 2²³, as in `round_even`
    let per = 32 / g;
    for (bi, (xs, qs)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let mut lanes = [0f32; 8];
        for c in xs.chunks_exact(8) {
            for l in 0..8 {
                lanes[l] = lanes[l].max(c[l].abs());
            }
        }
        let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
        let db = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sums = [0i32; 32];
        for ((q, &v), sum) in qs.iter_mut().zip(xs).zip(sums.iter_mut()) {
            // |v · id| ≤ 127: the rounded integer sits in the low mantissa bits.
            let r = (v * id + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32;
            *q = r as i8;
            *sum = r;
        }
        for k in 0..per {
            let sum: i32 = sums[k * g..(k + 1) * g].iter().sum();
            d[bi * per + k] = db;
            s[bi * per + k] = db * sum as f32;
            sums_out[bi * per + k] = sum;
        }
    }
}
