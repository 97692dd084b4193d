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

/// Where the unit that starts at byte `start` of a block begins in a chunk of `t` (lane 0's).
#[cfg(target_arch = "x86_64")]
fn base_of(t: QType, start: usize) -> usize {
    let mut base = 0;
    for &(s, unit) in units(t) {
        if s == start {
            return base;
        }
        base += unit * PANEL_ROWS;
    }
    unreachable!("no unit of a {t} block starts at byte {start}")
}

/// Loads one panel (its `nb` chunks) straight into the int8 GEMM's `Panel`: a chunk's four-byte
/// steps are already the GEMM's `[16 rows][4 values]` slots, so each step is split into its
/// low and high nibbles (plus the fifth bits or high bit pairs) without going back to rows.
#[cfg(target_arch = "x86_64")]
pub(crate) fn load_panel(t: QType, panel: &[u8], nb: usize, into: &mut crate::igemm::Panel) {
    use crate::blocks::scale_min_k4;
    let f16_at = |c: &[u8], at: usize| half::f16::from_bits(u16::from_le_bytes([c[at], c[at + 1]])).to_f32();
    const STEP: usize = 4 * PANEL_ROWS;
    let g = crate::igemm::granule(t);
    let gpb = 256 / g;
    into.u.resize(nb * 256 * PANEL_ROWS, 0);
    into.dw.resize(nb * gpb * PANEL_ROWS, 0.0);
    into.c.resize(nb * gpb * PANEL_ROWS, 0.0);
    for (b, chunk) in panel.chunks_exact(crate::panels::chunk_bytes(t)).take(nb).enumerate() {
        let u = &mut into.u[b * 256 * PANEL_ROWS..(b + 1) * 256 * PANEL_ROWS];
        let dw = &mut into.dw[b * gpb * PANEL_ROWS..(b + 1) * gpb * PANEL_ROWS];
        let c = &mut into.c[b * gpb * PANEL_ROWS..(b + 1) * gpb * PANEL_ROWS];
        // Granule k's step s: the 64 bytes of `u` at (k · g/4 + s) · STEP.
        let slot = |k: usize, s: usize| (k * g / 4 + s) * STEP;
        if t == QType::Q6K {
            let (d0, s0, q0) = (base_of(t, 208), base_of(t, 192), base_of(t, 0));
            for lane in 0..PANEL_ROWS {
                let d = f16_at(chunk, d0 + 2 * lane);
                for k in 0..16 {
                    let w = d * (chunk[s0 + (k / 4) * STEP + 4 * lane + k % 4] as i8) as f32;
                    dw[k * PANEL_ROWS + lane] = w;
                    c[k * PANEL_ROWS + lane] = -32.0 * w;
                }
            }
            // Step (n, l) holds ql[64n + 4l..], ql[64n + 32 + 4l..] and qh[32n + 4l..]: values
            // 128n + 32j + 4l.. for j = 0..4, in granule 8n + 2j + l/4, step l % 4.
            for n in 0..2 {
                for l in 0..8 {
                    let at = q0 + (n * 8 + l) * 3 * STEP;
                    let (a, bq, h) =
                        (&chunk[at..at + STEP], &chunk[at + STEP..at + 2 * STEP], &chunk[at + 2 * STEP..at + 3 * STEP]);
                    for j in 0..4 {
                        let dst = &mut u[slot(8 * n + 2 * j + l / 4, l % 4)..][..STEP];
                        let src = if j % 2 == 0 { a } else { bq };
                        let (shift, hshift) = (4 * (j / 2) as u32, 2 * j as u32);
                        for ((v, &q), &hb) in dst.iter_mut().zip(src).zip(h) {
                            *v = ((q >> shift) & 0x0F) | (((hb >> hshift) & 3) << 4);
                        }
                    }
                }
            }
            continue;
        }
        let (d0, m0, s0) = (base_of(t, 0), base_of(t, 2), base_of(t, 4));
        for lane in 0..PANEL_ROWS {
            let (d, dmin) = (f16_at(chunk, d0 + 2 * lane), f16_at(chunk, m0 + 2 * lane));
            let mut sc = [0u8; 12];
            for (w, s) in sc.chunks_exact_mut(4).enumerate() {
                s.copy_from_slice(&chunk[s0 + w * STEP + 4 * lane..][..4]);
            }
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, &sc);
                dw[j * PANEL_ROWS + lane] = d * s as f32;
                c[j * PANEL_ROWS + lane] = -dmin * m as f32;
            }
        }
        // Step 8c + i: low nibbles are granule 2c's step i, high nibbles granule 2c + 1's.
        let fifth = (t == QType::Q5K).then(|| base_of(t, 16));
        let q0 = base_of(t, if t == QType::Q5K { 48 } else { 16 });
        for cc in 0..4 {
            for i in 0..8 {
                let src = &chunk[q0 + (8 * cc + i) * STEP..][..STEP];
                // Granule 2cc's slot comes before granule 2cc + 1's.
                let (a, rest) = u.split_at_mut(slot(2 * cc + 1, i));
                let (lo, hi) = (&mut a[slot(2 * cc, i)..][..STEP], &mut rest[..STEP]);
                match fifth {
                    Some(f) => {
                        let bits = &chunk[f + i * STEP..][..STEP];
                        let (sl, sh) = (2 * cc as u32, 2 * cc as u32 + 1);
                        for (((l, h), &v), &hb) in lo.iter_mut().zip(hi.iter_mut()).zip(src).zip(bits) {
                            *l = (v & 0x0F) | (((hb >> sl) & 1) << 4);
                            *h = (v >> 4) | (((hb >> sh) & 1) << 4);
                        }
                    }
                    None => {
                        for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(src) {
                            *l = v & 0x0F;
                            *h = v >> 4;
                        }
                    }
                }
            }
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
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_panel_loads_into_the_gemm_as_its_rows_pack() {
        // Random bytes for every field (f16 scales kept finite: a NaN compares unequal).
        for t in [QType::Q4K, QType::Q5K, QType::Q6K] {
            let (bb, nb) = (t.block_bytes(), 3);
            let mut seed = 0x9e37_79b9_u32;
            let mut rows: Vec<u8> = (0..PANEL_ROWS * nb * bb)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 24) as u8
                })
                .collect();
            let f16s: &[usize] = if t == QType::Q6K { &[208] } else { &[0, 2] };
            for block in rows.chunks_exact_mut(bb) {
                for &at in f16s {
                    block[at + 1] &= 0x3B; // exponent below the top: a finite value
                }
            }
            let mut panel = vec![0u8; nb * crate::panels::chunk_bytes(t)];
            for (b, chunk) in panel.chunks_exact_mut(crate::panels::chunk_bytes(t)).enumerate() {
                for lane in 0..PANEL_ROWS {
                    put_block(t, chunk, lane, &rows[(lane * nb + b) * bb..][..bb]);
                }
            }
            let (mut direct, mut packed) = (crate::igemm::Panel::default(), crate::igemm::Panel::default());
            load_panel(t, &panel, nb, &mut direct);
            packed.pack(t, &rows, PANEL_ROWS, nb * 256);
            assert_eq!(direct.u, packed.u, "{t}: values");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&direct.dw), bits(&packed.dw), "{t}: scales");
            assert_eq!(bits(&direct.c), bits(&packed.c), "{t}: constants");
        }
    }
}
