//! The row-interleaved ("panel") layout that `Q4_0` and `Q8_0` matrices are stored in on
//! CPUs with AVX-512 VNNI (llama.cpp repacks these types too).
//!
//! Rows are grouped in panels of 16 (the 16 int32 lanes of a 512-bit register; the last
//! panel padded with zero rows). Per panel, per block of 32 values, one chunk of exactly the
//! bytes the 16 rows' GGUF blocks take:
//! - 16 f16 scales `d`, row by row (32 bytes);
//! - the unsigned values `u = q + bias`, four consecutive values of each row per 32-bit lane:
//!   - `Q8_0` (bias 128): 8 steps × 16 rows × 4 bytes;
//!   - `Q4_0` (bias 8): 4 × 16 rows × 4 bytes, the low nibbles holding steps 0–3 and the high
//!     nibbles steps 4–7.
//!
//! One `vpdpbusd` then multiplies four values of all 16 rows with four activations broadcast
//! to every lane, and each lane accumulates its own row: no horizontal sums, and a decode
//! step reads the weights as one sequential stream. The int8 prefill GEMM unpacks a panel
//! with a copy instead of a repack.

use half::f16;

use crate::blocks::{unpack32, QType};

/// Weight rows per panel: the 16 int32 lanes of a 512-bit register.
pub(crate) const PANEL_ROWS: usize = 16;

/// Whether `t` has a panel layout.
pub(crate) const fn has_panels(t: QType) -> bool {
    matches!(t, QType::Q4_0 | QType::Q8_0)
}

/// Bytes of one panel's chunk for one block (the 16 rows' GGUF blocks).
pub(crate) const fn chunk_bytes(t: QType) -> usize {
    PANEL_ROWS * t.block_bytes()
}

/// The unsigned bias of `t`'s values.
const fn bias(t: QType) -> i32 {
    match t {
        QType::Q4_0 => 8,
        _ => 128,
    }
}

/// Bytes a `(rows, cols)` matrix of `t` takes in panels.
pub(crate) fn byte_len(t: QType, rows: usize, cols: usize) -> usize {
    rows.div_ceil(PANEL_ROWS) * (cols / 32) * chunk_bytes(t)
}

/// Repacks GGUF rows (`data`, `rows × cols` of `t`) into panels.
pub(crate) fn repack(t: QType, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let (nb, bb, cb) = (cols / 32, t.block_bytes(), chunk_bytes(t));
    let mut out = vec![0u8; byte_len(t, rows, cols)];
    for r in 0..rows {
        let (p, lane) = (r / PANEL_ROWS, r % PANEL_ROWS);
        for b in 0..nb {
            let v = unpack32(t, &data[(r * nb + b) * bb..(r * nb + b + 1) * bb]);
            let chunk = &mut out[(p * nb + b) * cb..(p * nb + b + 1) * cb];
            chunk[2 * lane..2 * lane + 2].copy_from_slice(&data[(r * nb + b) * bb..(r * nb + b) * bb + 2]);
            let u = v.q.map(|q| (q as i32 + bias(t)) as u8);
            let vals = &mut chunk[32..];
            for j in 0..32 {
                let (step, k) = (j / 4, j % 4);
                match t {
                    QType::Q8_0 => vals[(step * PANEL_ROWS + lane) * 4 + k] = u[j],
                    _ => vals[((step % 4) * PANEL_ROWS + lane) * 4 + k] |= u[j] << (4 * (step / 4)),
                }
            }
        }
    }
    out
}

/// The unsigned values of row `lane` of one chunk (the block's 32 values in order).
fn chunk_values(t: QType, chunk: &[u8], lane: usize) -> [u8; 32] {
    let vals = &chunk[32..];
    std::array::from_fn(|j| {
        let (step, k) = (j / 4, j % 4);
        match t {
            QType::Q8_0 => vals[(step * PANEL_ROWS + lane) * 4 + k],
            _ => (vals[((step % 4) * PANEL_ROWS + lane) * 4 + k] >> (4 * (step / 4))) & 0x0F,
        }
    })
}

fn chunk_scale(chunk: &[u8], lane: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([chunk[2 * lane], chunk[2 * lane + 1]])).to_f32()
}

/// Rows `r0..r1` as f32 into `out`, from panels.
pub(crate) fn dequantize_rows(t: QType, cols: usize, data: &[u8], r0: usize, r1: usize, out: &mut [f32]) {
    let (nb, cb) = (cols / 32, chunk_bytes(t));
    for (r, y) in (r0..r1).zip(out.chunks_exact_mut(cols)) {
        let (p, lane) = (r / PANEL_ROWS, r % PANEL_ROWS);
        for (b, y) in y.chunks_exact_mut(32).enumerate() {
            let chunk = &data[(p * nb + b) * cb..(p * nb + b + 1) * cb];
            let d = chunk_scale(chunk, lane);
            for (y, u) in y.iter_mut().zip(chunk_values(t, chunk, lane)) {
                *y = d * (u as i32 - bias(t)) as f32;
            }
        }
    }
}

/// Loads panel `p` (its `nb` chunks in `data`) into the int8 GEMM's `Panel`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn load(t: QType, panel: &[u8], nb: usize, into: &mut crate::igemm::Panel) {
    let cb = chunk_bytes(t);
    into.u.resize(nb * 32 * PANEL_ROWS, 0);
    into.dw.resize(nb * PANEL_ROWS, 0.0);
    into.c.resize(nb * PANEL_ROWS, 0.0);
    for (b, chunk) in panel.chunks_exact(cb).take(nb).enumerate() {
        for lane in 0..PANEL_ROWS {
            let d = chunk_scale(chunk, lane);
            into.dw[b * PANEL_ROWS + lane] = d;
            into.c[b * PANEL_ROWS + lane] = -(bias(t) as f32) * d;
        }
        let u = &mut into.u[b * 32 * PANEL_ROWS..(b + 1) * 32 * PANEL_ROWS];
        match t {
            QType::Q8_0 => u.copy_from_slice(&chunk[32..]),
            _ => {
                let (lo, hi) = u.split_at_mut(4 * 4 * PANEL_ROWS);
                for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(&chunk[32..]) {
                    *l = v & 0x0F;
                    *h = v >> 4;
                }
            }
        }
    }
}
