//! The panel layout of the k-quants `Q4_K`, `Q5_K` and `Q6_K` (see `panels.rs` for the 32-value
//! types): 16 rows per panel and, per panel and 256-value block, one chunk holding exactly the
//! bytes of the 16 rows' GGUF blocks, moved so that one 512-bit register holds the same field
//! of all 16 rows (one 32-bit lane per row). A chunk is a run of segments, each one field of
//! the block for all 16 rows, in units of 2 bytes (f16 scales) or 4 bytes (one lane's share):
//! - `Q4_K`: `d`, `dmin` (16 f16 each); the 12 bytes of 6-bit scales and mins as three words
//!   (word `g` of all rows together, unpacked for all rows at once by ggml's mask trick); the
//!   128 bytes of nibbles in 32 steps of four bytes (step `s = 8c + i`: low nibbles are values
//!   `64c + 4i..`, high nibbles `64c + 32 + 4i..`).
//! - `Q5_K`: as `Q4_K`, with the 32 bytes of fifth bits in 8 steps before the nibbles (bit
//!   `2c` of step `i`'s bytes goes with the low nibbles of chunk `c`, bit `2c + 1` the high).
//! - `Q6_K`: `d`; the 16 signed scales as four words; then the 128 bytes of low nibbles (`ql`)
//!   and 64 of high bit pairs (`qh`) in four-byte steps, in the order the kernel reads them (per
//!   128-value half `n` and step `l`: `ql[64n + 4l..]`, `ql[64n + 32 + 4l..]`, `qh[32n + 4l..]`),
//!   so that a decode step reads each chunk front to back; the chunk is padded to whole cache
//!   lines.
//!
//! A chunk is a permutation of the rows' bytes (`Q6_K`'s plus 32 bytes of padding): the matrix
//! takes the bytes GGUF stores (the last panel padded with zero rows), and a decode step reads
//! one sequential stream.

use crate::blocks::QType;
use crate::panels::PANEL_ROWS;

/// Whether `t` has this module's panel layout.
pub(crate) const fn is_kpanel(t: QType) -> bool {
    matches!(t, QType::Q4K | QType::Q5K | QType::Q6K)
}

/// A chunk's units in order, each `(start in the block, bytes)`: unit `g` of all 16 rows
/// together, row after row.
fn units(t: QType) -> &'static [(usize, usize)] {
    use std::sync::LazyLock;
    /// `(start, bytes per row, unit)` runs: the run's units one after another.
    fn runs(r: &[(usize, usize, usize)]) -> Vec<(usize, usize)> {
        r.iter().flat_map(|&(start, len, unit)| (start..start + len).step_by(unit).map(move |s| (s, unit))).collect()
    }
    static Q4K: LazyLock<Vec<(usize, usize)>> =
        LazyLock::new(|| runs(&[(0, 2, 2), (2, 2, 2), (4, 12, 4), (16, 128, 4)]));
    static Q5K: LazyLock<Vec<(usize, usize)>> =
        LazyLock::new(|| runs(&[(0, 2, 2), (2, 2, 2), (4, 12, 4), (16, 32, 4), (48, 128, 4)]));
    // Q6_K's values in the order the kernel reads them: per 128-value half n and step l, the
    // low nibbles of values 128n + 4l.. and 128n + 32 + 4l.., then their high bit pairs.
    static Q6K: LazyLock<Vec<(usize, usize)>> = LazyLock::new(|| {
        let mut u = runs(&[(208, 2, 2), (192, 16, 4)]);
        for n in 0..2 {
            for l in 0..8 {
                u.extend([(64 * n + 4 * l, 4), (64 * n + 32 + 4 * l, 4), (128 + 32 * n + 4 * l, 4)]);
            }
        }
        u
    });
    match t {
        QType::Q6K => &Q6K,
        QType::Q5K => &Q5K,
        _ => &Q4K,
    }
}

/// Where byte `i` of lane `lane`'s block lies in a chunk of `t`.
#[cfg(test)]
fn chunk_at(t: QType, lane: usize, i: usize) -> usize {
    let mut base = 0;
    for &(start, unit) in units(t) {
        if (start..start + unit).contains(&i) {
            return base + lane * unit + (i - start);
        }
        base += unit * PANEL_ROWS;
    }
    unreachable!("byte {i} is outside a {t} block")
}

/// Copies a unit (2 or 4 bytes) from the front of `src` to the front of `dst`, as a fixed-size
/// move rather than a `memcpy` call.
#[inline(always)]
fn move_unit(unit: usize, dst: &mut [u8], src: &[u8]) {
    if unit == 4 {
        dst[..4].copy_from_slice(&src[..4]);
    } else {
        dst[..2].copy_from_slice(&src[..2]);
    }
}

/// Puts `block` (one row's GGUF block) into lane `lane` of `chunk`.
pub(crate) fn put_block(t: QType, chunk: &mut [u8], lane: usize, block: &[u8]) {
    let mut base = 0;
    for &(start, unit) in units(t) {
        let at = base + lane * unit;
        move_unit(unit, &mut chunk[at..], &block[start..]);
        base += unit * PANEL_ROWS;
    }
}

/// Lane `lane`'s GGUF block out of `chunk`, into `block`.
pub(crate) fn get_block(t: QType, chunk: &[u8], lane: usize, block: &mut [u8]) {
    let mut base = 0;
    for &(start, unit) in units(t) {
        let at = base + lane * unit;
        move_unit(unit, &mut block[start..], &chunk[at..]);
        base += unit * PANEL_ROWS;
    }
}

#[cfg(target_arch = "x86_64")]
/// Panel `panel` (its `nb` chunks) back as the 16 rows' GGUF bytes (`16 · nb` blocks, row by
/// row) into `rows`.
pub(crate) fn unpack_panel(t: QType, panel: &[u8], nb: usize, rows: &mut Vec<u8>) {
    let bb = t.block_bytes();
    rows.resize(PANEL_ROWS * nb * bb, 0);
    for (b, chunk) in panel.chunks_exact(crate::panels::chunk_bytes(t)).take(nb).enumerate() {
        for lane in 0..PANEL_ROWS {
            let at = (lane * nb + b) * bb;
            get_block(t, chunk, lane, &mut rows[at..at + bb]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_a_permutation_of_the_rows_blocks() {
        for t in [QType::Q4K, QType::Q5K, QType::Q6K] {
            let bb = t.block_bytes();
            let mut seen = vec![false; PANEL_ROWS * bb];
            assert!(crate::panels::chunk_bytes(t) - PANEL_ROWS * bb < 64, "{t}: padding");
            for lane in 0..PANEL_ROWS {
                for i in 0..bb {
                    let at = chunk_at(t, lane, i);
                    assert!(!seen[at], "{t}: byte {i} of lane {lane} lands on a taken place {at}");
                    seen[at] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "{t}");
            // put_block / get_block move each byte where chunk_at says.
            let block: Vec<u8> = (0..bb).map(|i| (i * 7 + 3) as u8).collect();
            let mut chunk = vec![0u8; PANEL_ROWS * bb];
            put_block(t, &mut chunk, 5, &block);
            assert!((0..bb).all(|i| chunk[chunk_at(t, 5, i)] == block[i]), "{t}");
            let mut back = vec![0u8; bb];
            get_block(t, &chunk, 5, &mut back);
            assert_eq!(back, block, "{t}");
        }
    }
}
