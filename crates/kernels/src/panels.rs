//! The row-interleaved ("panel") layout that the 32-value types (`Q4_0`, `Q4_1`, `Q5_0`,
//! `Q5_1`, `Q8_0`) are stored in on CPUs with AVX-512 VNNI (llama.cpp repacks too).
//!
//! Rows are grouped in panels of 16 (the 16 int32 lanes of a 512-bit register; the last
//! panel padded with zero rows). Per panel, per block of 32 values, one chunk of exactly the
//! bytes the 16 rows' GGUF blocks take:
//! - the header: 16 f16 scales `d`, row by row, then for `Q4_1`/`Q5_1` 16 f16 mins `m`;
//! - the unsigned values `u = q + bias` (value = `d·(u − bias) + m`), four consecutive values
//!   of each row per 32-bit lane:
//!   - `Q8_0` (bias 128): 8 steps × 16 rows × 4 bytes;
//!   - the 4- and 5-bit types: 4 × 16 rows × 4 bytes of nibbles, the low nibbles holding
//!     steps 0–3 and the high nibbles steps 4–7 (`Q4_0` bias 8, `Q4_1` 0);
//! - for `Q5_0` (bias 16) / `Q5_1` (0), the fifth bits: per step a 64-bit mask whose bit
//!   `4·row + k` is the fifth bit of that row's value `4·step + k` (one `vpmovm`-style masked
//!   move puts them in place).
//!
//! One `vpdpbusd` then multiplies four values of all 16 rows with four activations broadcast
//! to every lane, and each lane accumulates its own row: no horizontal sums, and a decode
//! step reads the weights as one sequential stream. The int8 prefill GEMM unpacks a panel
//! with a copy instead of a repack.

use half::f16;

use crate::blocks::{dequantize, unpack32, unsigned_bias, QType};
use crate::kpanels;

/// Weight rows per panel: the 16 int32 lanes of a 512-bit register.
pub(crate) const PANEL_ROWS: usize = 16;

/// Whether `t` has a panel layout (the 32-value types, and the k-quants in `kpanels.rs`).
pub(crate) const fn has_panels(t: QType) -> bool {
    matches!(t, QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q5_1 | QType::Q8_0) || kpanels::is_kpanel(t)
}

/// Bytes of one panel's chunk for one block (the 16 rows' GGUF blocks).
pub(crate) const fn chunk_bytes(t: QType) -> usize {
    if kpanels::is_kpanel(t) {
        // `Q6_K`'s 16 × 210 bytes padded to whole cache lines, so that every chunk starts on one.
        (PANEL_ROWS * t.block_bytes()).next_multiple_of(64)
    } else {
        PANEL_ROWS * t.block_bytes()
    }
}

/// Whether `t`'s blocks carry a min (`Q4_1`, `Q5_1`).
pub(crate) const fn has_min(t: QType) -> bool {
    matches!(t, QType::Q4_1 | QType::Q5_1)
}

/// Whether `t`'s values have a fifth bit (`Q5_0`, `Q5_1`).
pub(crate) const fn has_fifth_bit(t: QType) -> bool {
    matches!(t, QType::Q5_0 | QType::Q5_1)
}

/// Bytes of a chunk's header (scales, and mins).
pub(crate) const fn header_bytes(t: QType) -> usize {
    if has_min(t) {
        4 * PANEL_ROWS
    } else {
        2 * PANEL_ROWS
    }
}

/// Offset of a chunk's fifth-bit masks (after the header and 256 bytes of nibbles).
pub(crate) const fn fifth_bits_at(t: QType) -> usize {
    header_bytes(t) + 8 * PANEL_ROWS * 2
}

/// Bytes a `(rows, cols)` matrix of `t` takes in panels.
pub(crate) fn byte_len(t: QType, rows: usize, cols: usize) -> usize {
    rows.div_ceil(PANEL_ROWS) * (cols / t.block_elems()) * chunk_bytes(t)
}

/// Repacks GGUF rows (`data`, `rows × cols` of `t`) into panels, the panels shared out over
/// the global pool's threads (a model's load repacks every matrix: 0.5 s of SmolVLM's Q5_0 text
/// model on one thread).
pub(crate) fn repack(t: QType, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; byte_len(t, rows, cols)];
    repack_into(t, rows, cols, data, &mut out);
    out
}

/// [`repack`] into `out`, [`byte_len`] zeroed bytes (the panels of `rows` rows starting at a
/// panel's first row).
pub(crate) fn repack_into(t: QType, rows: usize, cols: usize, data: &[u8], out: &mut [u8]) {
    let nb = cols / t.block_elems();
    let panel = |p: usize, chunks: &mut [u8]| repack_panel(t, rows, cols, data, p, chunks);
    // A panel's chunks are one run of `nb · cb` bytes, which one part writes alone.
    if crate::for_each_row(crate::ThreadPool::global(), out, nb * chunk_bytes(t), 2, &panel).is_err() {
        // A worker panicked (no panel's input can make it): the same work on this thread.
        repack_serial(t, rows, cols, data, out);
    }
}

/// [`repack_into`] on the calling thread alone.
pub(crate) fn repack_serial(t: QType, rows: usize, cols: usize, data: &[u8], out: &mut [u8]) {
    let width = (cols / t.block_elems() * chunk_bytes(t)).max(1);
    for (p, chunks) in out.chunks_exact_mut(width).enumerate() {
        repack_panel(t, rows, cols, data, p, chunks);
    }
}

/// Panel `p` of [`repack_into`] into `chunks`, its `nb · cb` bytes.
fn repack_panel(t: QType, rows: usize, cols: usize, data: &[u8], p: usize, chunks: &mut [u8]) {
    let (nb, bb, cb) = (cols / t.block_elems(), t.block_bytes(), chunk_bytes(t));
    for r in p * PANEL_ROWS..((p + 1) * PANEL_ROWS).min(rows) {
        for (b, chunk) in chunks.chunks_exact_mut(cb).enumerate() {
            put_block(t, chunk, r % PANEL_ROWS, &data[(r * nb + b) * bb..][..bb]);
        }
    }
}

/// Writes one GGUF block (row `lane` of its panel) into its chunk.
fn put_block(t: QType, chunk: &mut [u8], lane: usize, block: &[u8]) {
    if kpanels::is_kpanel(t) {
        return kpanels::put_block(t, chunk, lane, block);
    }
    let hdr = header_bytes(t);
    let v = unpack32(t, block);
    // d (and m): the block's own f16 bytes.
    chunk[2 * lane..2 * lane + 2].copy_from_slice(&block[..2]);
    if has_min(t) {
        chunk[2 * PANEL_ROWS + 2 * lane..2 * PANEL_ROWS + 2 * lane + 2].copy_from_slice(&block[2..4]);
    }
    let u = v.q.map(|q| (q as i32 + unsigned_bias(t)) as u8);
    for (j, &u) in u.iter().enumerate() {
        let (step, k) = (j / 4, j % 4);
        if t == QType::Q8_0 {
            chunk[hdr + (step * PANEL_ROWS + lane) * 4 + k] = u;
            continue;
        }
        chunk[hdr + ((step % 4) * PANEL_ROWS + lane) * 4 + k] |= (u & 0x0F) << (4 * (step / 4));
        if has_fifth_bit(t) && u & 0x10 != 0 {
            let bit = 4 * lane + k;
            chunk[fifth_bits_at(t) + 8 * step + bit / 8] |= 1 << (bit % 8);
        }
    }
}

/// The unsigned values of row `lane` of one chunk (the block's 32 values in order).
fn chunk_values(t: QType, chunk: &[u8], lane: usize) -> [u8; 32] {
    let hdr = header_bytes(t);
    std::array::from_fn(|j| {
        let (step, k) = (j / 4, j % 4);
        if t == QType::Q8_0 {
            return chunk[hdr + (step * PANEL_ROWS + lane) * 4 + k];
        }
        let nib = (chunk[hdr + ((step % 4) * PANEL_ROWS + lane) * 4 + k] >> (4 * (step / 4))) & 0x0F;
        let bit = 4 * lane + k;
        let fifth = has_fifth_bit(t) && chunk[fifth_bits_at(t) + 8 * step + bit / 8] & (1 << (bit % 8)) != 0;
        nib | if fifth { 0x10 } else { 0 }
    })
}

/// Row `lane`'s scale and min (0 for the types without one) in one chunk.
fn chunk_scale_min(t: QType, chunk: &[u8], lane: usize) -> (f32, f32) {
    let f = |at: usize| f16::from_bits(u16::from_le_bytes([chunk[at], chunk[at + 1]])).to_f32();
    (f(2 * lane), if has_min(t) { f(2 * PANEL_ROWS + 2 * lane) } else { 0.0 })
}

/// Rows `r0..r1` as f32 into `out`, from panels.
pub(crate) fn dequantize_rows(t: QType, cols: usize, data: &[u8], r0: usize, r1: usize, out: &mut [f32]) {
    if kpanels::is_kpanel(t) {
        let (be, nb, cb) = (t.block_elems(), cols / t.block_elems(), chunk_bytes(t));
        let mut block = vec![0u8; t.block_bytes()];
        for (r, y) in (r0..r1).zip(out.chunks_exact_mut(cols)) {
            let (p, lane) = (r / PANEL_ROWS, r % PANEL_ROWS);
            for (b, y) in y.chunks_exact_mut(be).enumerate() {
                kpanels::get_block(t, &data[(p * nb + b) * cb..][..cb], lane, &mut block);
                dequantize(t, &block, y);
            }
        }
        return;
    }
    let (nb, cb) = (cols / 32, chunk_bytes(t));
    for (r, y) in (r0..r1).zip(out.chunks_exact_mut(cols)) {
        let (p, lane) = (r / PANEL_ROWS, r % PANEL_ROWS);
        for (b, y) in y.chunks_exact_mut(32).enumerate() {
            let chunk = &data[(p * nb + b) * cb..(p * nb + b + 1) * cb];
            let (d, m) = chunk_scale_min(t, chunk, lane);
            for (y, u) in y.iter_mut().zip(chunk_values(t, chunk, lane)) {
                *y = d * (u as i32 - unsigned_bias(t)) as f32 + m;
            }
        }
    }
}

/// Loads one panel (its `nb` chunks) into the int8 GEMM's `Panel`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn load(t: QType, panel: &[u8], nb: usize, into: &mut crate::igemm::Panel) {
    if kpanels::is_kpanel(t) {
        kpanels::load_panel(t, panel, nb, into);
        return;
    }
    let (cb, hdr) = (chunk_bytes(t), header_bytes(t));
    into.u.resize(nb * 32 * PANEL_ROWS, 0);
    into.dw.resize(nb * PANEL_ROWS, 0.0);
    into.c.resize(nb * PANEL_ROWS, 0.0);
    for (b, chunk) in panel.chunks_exact(cb).take(nb).enumerate() {
        for lane in 0..PANEL_ROWS {
            let (d, m) = chunk_scale_min(t, chunk, lane);
            into.dw[b * PANEL_ROWS + lane] = d;
            into.c[b * PANEL_ROWS + lane] = m - unsigned_bias(t) as f32 * d;
        }
        let u = &mut into.u[b * 32 * PANEL_ROWS..(b + 1) * 32 * PANEL_ROWS];
        if t == QType::Q8_0 {
            u.copy_from_slice(&chunk[hdr..]);
            continue;
        }
        let (lo, hi) = u.split_at_mut(4 * 4 * PANEL_ROWS);
        for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(&chunk[hdr..hdr + 256]) {
            *l = v & 0x0F;
            *h = v >> 4;
        }
        if has_fifth_bit(t) {
            // Step s's 64 bytes are its 16 rows × 4 values, in the order of the mask's bits.
            let masks = &chunk[fifth_bits_at(t)..fifth_bits_at(t) + 64];
            for (step, bytes) in u.chunks_exact_mut(4 * PANEL_ROWS).enumerate() {
                let mask = u64::from_le_bytes(masks[8 * step..8 * step + 8].try_into().unwrap_or([0; 8]));
                for (bit, v) in bytes.iter_mut().enumerate() {
                    *v |= (((mask >> bit) & 1) as u8) << 4;
                }
            }
        }
    }
}
