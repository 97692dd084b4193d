//! Weight quantization into GGUF blocks, as llama-quantize writes them without an importance
//! matrix: ports of ggml's reference quantizers (`quantize_row_*_ref` in
//! `ggml/src/ggml-quants.c`, llama.cpp 0c1e57098 as vendored by llama-cpp-python 0.3.36), which
//! `ggml_quantize_chunk` calls when no imatrix is given.
//!
//! ggml builds these files without `-march` flags (the `ggml-base` library), so its arithmetic
//! is plain IEEE single precision with no fused multiply-adds; the ports keep each expression's
//! order so that the bytes are the same (`tests/quantize.rs` in `tessera` compares them with
//! llama-quantize's output). Candle's `from_float` gives the same bytes for the 32-value types
//! (a test in `tessera` checks it) but not for `Q4_K`/`Q5_K` (still ggml's older
//! `make_qkx1_quants`) nor `Q6_K`, hence these ports.
//!
//! [`quantize_rows`] shares the rows of a matrix among the pool's threads; every block depends
//! only on its own 32 or 256 values, so the bytes do not depend on the thread count.

use half::f16;

use crate::blocks::QType;
use crate::error::{KernelError, Result};
use crate::pool::{for_each_row, ThreadPool};

const QK_K: usize = 256;
/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

#[inline(always)]
fn f16_bits(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

#[inline(always)]
fn f16_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// ggml's `nearest_int`: round to nearest, ties to even, for |v| ≤ 4194303.
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    let i = (v + 12582912.0).to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// Quantizes a `(rows, cols)` row-major f32 matrix into `qtype` blocks, row after row (GGUF's
/// layout), on `pool`'s threads. An error when a row is not whole blocks or `x` is not
/// `rows · cols` long.
pub fn quantize_rows(pool: &ThreadPool, qtype: QType, x: &[f32], rows: usize, cols: usize) -> Result<Vec<u8>> {
    let len = crate::QMatrix::byte_len(qtype, rows, cols)?;
    if x.len() != rows * cols {
        return Err(KernelError::Shape(format!("{rows}×{cols} matrix given {} values", x.len())));
    }
    let mut out = vec![0u8; len];
    let row_bytes = len / rows.max(1);
    for_each_row(pool, &mut out, row_bytes, 4, &|r, dst| quantize_blocks(qtype, &x[r * cols..(r + 1) * cols], dst))?;
    Ok(out)
}

/// Quantizes `x` (whole blocks of `qtype`) into `out` (`x.len() / block_elems` blocks).
pub fn quantize_blocks(qtype: QType, x: &[f32], out: &mut [u8]) {
    let (be, bb) = (qtype.block_elems(), qtype.block_bytes());
    debug_assert_eq!(x.len() / be * bb, out.len());
    for (xs, y) in x.chunks_exact(be).zip(out.chunks_exact_mut(bb)) {
        match qtype {
            QType::Q4_0 => q4_0(xs, y),
            QType::Q4_1 => q4_1(xs, y),
            QType::Q5_0 => q5_0(xs, y),
            QType::Q5_1 => q5_1(xs, y),
            QType::Q8_0 => crate::blocks::quantize_q8_0_blocks(xs, y),
            QType::Q4K => q45_k(xs, y, false),
            QType::Q5K => q45_k(xs, y, true),
            QType::Q6K => q6_k(xs, y),
        }
    }
}

/// The signed largest-magnitude value of `x` (the first one on ties), as ggml finds it.
fn signed_amax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `quantize_row_q4_0_ref`: `d = max / −8`, values `min(15, trunc(x/d + 8.5))`.
fn q4_0(x: &[f32], y: &mut [u8]) {
    let d = signed_amax(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    y[..2].copy_from_slice(&f16_bits(d));
    for j in 0..16 {
        let x0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let x1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        y[2 + j] = x0 | (x1 << 4);
    }
}

/// The min and max of `x`, as ggml's `quantize_row_q4_1_ref` / `q5_1` find them.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `quantize_row_q4_1_ref`: `d = (max − min) / 15`, `m = min`.
fn q4_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    y[..2].copy_from_slice(&f16_bits(d));
    y[2..4].copy_from_slice(&f16_bits(min));
    for j in 0..16 {
        let x0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        y[4 + j] = x0 | (x1 << 4);
    }
}

/// `quantize_row_q5_0_ref`: `d = max / −16`, values `min(31, trunc(x/d + 16.5))`.
fn q5_0(x: &[f32], y: &mut [u8]) {
    let d = signed_amax(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    y[..2].copy_from_slice(&f16_bits(d));
    let mut qh = 0u32;
    for j in 0..16 {
        let x0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
        let x1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
        y[6 + j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
        qh |= (((x0 & 0x10) >> 4) as u32) << j;
        qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
    }
    y[2..6].copy_from_slice(&qh.to_le_bytes());
}

/// `quantize_row_q5_1_ref`: `d = (max − min) / 31`, `m = min`.
fn q5_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    y[..2].copy_from_slice(&f16_bits(d));
    y[2..4].copy_from_slice(&f16_bits(min));
    let mut qh = 0u32;
    for j in 0..16 {
        let x0 = ((x[j] - min) * id + 0.5) as u8;
        let x1 = ((x[j + 16] - min) * id + 0.5) as u8;
        y[8 + j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
        qh |= (((x0 & 0x10) >> 4) as u32) << j;
        qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
    }
    y[4..8].copy_from_slice(&qh.to_le_bytes());
}

/// ggml's `make_qkx2_quants` for 32 values: the scale and (negated) min of an asymmetric
/// `nmax`-level grid, searched over `nstep + 1` candidate scales by weighted squared error;
/// the levels go to `l`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let (w, lf) = (weights[i], q as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `quantize_row_q4_K_ref` (`five = false`) and `quantize_row_q5_K_ref` (`five = true`): eight
/// sub-blocks of 32 with 6-bit scales and mins under f16 super-scales.
fn q45_k(x: &[f32], y: &mut [u8], five: bool) {
    let nmax = if five { 31 } else { 15 };
    let (rmin, nstep) = if five { (-0.5, 15) } else { (-1.0, 20) };
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &weights, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let (d_bits, dmin_bits) = (f16_bits(max_scale / 63.0), f16_bits(max_min / 63.0));
    let (d_all, dmin_all) = (f16_round(max_scale / 63.0), f16_round(max_min / 63.0));
    for j in 0..8 {
        let (s, m) = crate::blocks::scale_min_k4(j, sc);
        let d = d_all * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
    y[0..2].copy_from_slice(&d_bits);
    y[2..4].copy_from_slice(&dmin_bits);
    y[4..16].copy_from_slice(sc);
    if five {
        let (qh, ql) = y[16..176].split_at_mut(32);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for (c, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let (mut l1, mut l2) = (l[n + j], l[n + j + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * c + j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    } else {
        for (c, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                y[16 + 32 * c + j] = l[n + j] | (l[n + j + 32] << 4);
            }
        }
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no weights, for 16 values: a symmetric
/// grid of `2·nmax` levels whose scale is searched over 19 candidates by `x²`-weighted error;
/// the levels (offset by `nmax`) go to `l`.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let max = signed_amax(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let q = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        let lv = q(iscale, v);
        *li = (lv + nmax) as i8;
        let w = v * v;
        sumlx += w * v * lv as f32;
        suml2 += w * lv as f32 * lv as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        (sumlx, suml2) = (0.0, 0.0);
        for &v in x {
            let lv = q(iscale, v);
            let w = v * v;
            sumlx += w * v * lv as f32;
            suml2 += w * lv as f32 * lv as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (q(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `quantize_row_q6_K_ref`: sixteen sub-blocks of 16 with int8 scales under an f16 scale.
fn q6_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..16 {
        let scale = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    y.fill(0);
    if max_abs_scale < GROUP_MAX_EPS {
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = 1.0 / iscale;
    y[208..210].copy_from_slice(&f16_bits(d));
    let d_all = f16_round(d);
    let mut sc = [0i8; 16];
    for (s, &scale) in sc.iter_mut().zip(&scales) {
        *s = nearest_int(iscale * scale).min(127) as i8;
    }
    for j in 0..16 {
        let d = d_all * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    for (half, j) in (0..QK_K).step_by(128).enumerate() {
        let (ql, qh) = (64 * half, 128 + 32 * half);
        for i in 0..32 {
            let lv = |k: usize| l[j + i + 32 * k] as u8;
            y[ql + i] = (lv(0) & 0xF) | ((lv(2) & 0xF) << 4);
            y[ql + i + 32] = (lv(1) & 0xF) | ((lv(3) & 0xF) << 4);
            y[qh + i] = (lv(0) >> 4) | ((lv(1) >> 4) << 2) | ((lv(2) >> 4) << 4) | ((lv(3) >> 4) << 6);
        }
    }
    for (dst, &s) in y[192..208].iter_mut().zip(&sc) {
        *dst = s as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantizing then dequantizing stays within each type's step of the values, and the
    /// threads' split gives the one-thread bytes.
    #[test]
    fn quantized_rows_dequantize_close_to_the_values_on_any_thread_count() {
        let (rows, cols) = (8, 512);
        let x: Vec<f32> =
            (0..rows * cols).map(|i| ((i as f32) * 0.377).sin() * (1.0 + (i % 13) as f32 * 0.1)).collect();
        for t in QType::ALL {
            let one = quantize_rows(&ThreadPool::new(1), t, &x, rows, cols).unwrap();
            let two = quantize_rows(&ThreadPool::new(2), t, &x, rows, cols).unwrap();
            assert_eq!(one, two, "{t}");
            let mut back = vec![0f32; x.len()];
            crate::blocks::dequantize(t, &one, &mut back);
            let rms = (x.iter().zip(&back).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
            let bound = match t {
                QType::Q8_0 => 0.01,
                QType::Q6K | QType::Q5K | QType::Q5_0 | QType::Q5_1 => 0.05,
                _ => 0.1,
            };
            assert!(rms < bound, "{t}: rms {rms}");
        }
    }

    #[test]
    fn a_row_of_partial_blocks_is_refused() {
        let x = vec![0f32; 64];
        let err = quantize_rows(ThreadPool::global(), QType::Q4K, &x, 1, 64).unwrap_err();
        assert!(err.to_string().contains("256"), "{err}");
    }
}
