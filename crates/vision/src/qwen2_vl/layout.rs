//! Qwen2-VL's pixel layout, as transformers v5.23's `Qwen2VLImageProcessorPil` and
//! `Qwen2_5_VisionTransformerPretrainedModel.get_window_index` compute it: `smart_resize`, the
//! block-major patch order and Qwen2.5-VL's window order.

use candle_core::Tensor;

use crate::error::{Result, VisionError};

/// transformers' `smart_resize`: `(height, width)` rounded (half to even, as Python's `round`)
/// to multiples of `factor`, scaled down to at most `max_pixels` or up to at least
/// `min_pixels`, keeping the aspect ratio as closely as it can.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(VisionError::Config(format!("cannot resize a {width}×{height} image to multiples of {factor}")));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(VisionError::Config(format!(
            "the image's aspect ratio {:.0}:1 is over 200:1 ({width}×{height})",
            h.max(w) / h.min(w)
        )));
    }
    let mut h_bar = ((h / f).round_ties_even() * f) as usize;
    let mut w_bar = ((w / f).round_ties_even() * f) as usize;
    if h_bar * w_bar > max_pixels {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = factor.max(((h / beta / f).floor() * f) as usize);
        w_bar = factor.max(((w / beta / f).floor() * f) as usize);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = ((h * beta / f).ceil() * f) as usize;
        w_bar = ((w * beta / f).ceil() * f) as usize;
    }
    Ok((h_bar, w_bar))
}

/// `(C, H, W)` normalized pixels → `(rows·cols, C·T·P·P)` patches in the processor's order
/// (merge blocks in raster order, patches within a block in raster order; each patch's values
/// channel-major, the still image repeated over `t` frames), and the grid `(rows, cols)`.
pub fn patchify(pixels: &Tensor, patch: usize, merge: usize, t: usize) -> Result<(Tensor, usize, usize)> {
    let (c, h, w) = pixels.dims3()?;
    let (rows, cols) = (h / patch, w / patch);
    if rows * patch != h || cols * patch != w || !rows.is_multiple_of(merge) || !cols.is_multiple_of(merge) {
        return Err(VisionError::Config(format!(
            "a {w}×{h} image is not whole {merge}×{merge} blocks of {patch}-px patches"
        )));
    }
    // (c, R, m, P, C', m, P) → (R, C', m, m, c, P, P)
    let x = pixels.reshape(vec![c, rows / merge, merge, patch, cols / merge, merge, patch])?;
    let x = x.permute(vec![1, 4, 2, 5, 0, 3, 6])?.contiguous()?;
    // One frame's values per patch, then the same values for each of the t frames.
    let x = x.reshape((rows * cols, c, 1, patch * patch))?;
    let x = x.broadcast_as((rows * cols, c, t, patch * patch))?.contiguous()?;
    Ok((x.reshape((rows * cols, c * t * patch * patch))?, rows, cols))
}

/// The `(row, col)` of each patch in [`patchify`]'s order.
pub fn patch_positions(rows: usize, cols: usize, merge: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(rows * cols);
    for br in 0..rows / merge {
        for bc in 0..cols / merge {
            for r in 0..merge {
                for c in 0..merge {
                    out.push((br * merge + r, bc * merge + c));
                }
            }
        }
    }
    out
}

/// Qwen2.5-VL's window order of a `rows × cols` grid of merged tokens: the merged tokens
/// (raster indices) window by window, and each window's length in merged tokens.
pub fn window_order(rows: usize, cols: usize, side: usize) -> (Vec<usize>, Vec<usize>) {
    let side = side.max(1);
    let (wr, wc) = (rows / side + 1, cols / side + 1); // the reference pads by a whole window when even
    let (mut order, mut lengths) = (Vec::with_capacity(rows * cols), Vec::new());
    for a in 0..wr {
        for b in 0..wc {
            let before = order.len();
            for r in a * side..((a + 1) * side).min(rows) {
                for c in b * side..((b + 1) * side).min(cols) {
                    order.push(r * cols + c);
                }
            }
            if order.len() > before {
                lengths.push(order.len() - before);
            }
        }
    }
    (order, lengths)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    #[test]
    fn smart_resize_follows_the_reference() -> Result<()> {
        // 300×451 (h×w) under 4096 pixels, factor 8: scaled down, multiples of 8.
        assert_eq!(smart_resize(300, 451, 8, 256, 4096)?, (48, 72));
        // Python's round is half to even: 20/8 = 2.5 → 2, 28/8 = 3.5 → 4.
        assert_eq!(smart_resize(20, 28, 8, 1, 100_000)?, (16, 32));
        // Too small: scaled up to at least min_pixels.
        assert_eq!(smart_resize(4, 4, 8, 256, 4096)?, (16, 16));
        assert!(smart_resize(1, 300, 8, 1, 100_000).is_err(), "aspect ratio over 200");
        Ok(())
    }

    #[test]
    fn patches_are_block_major_and_repeated_over_frames() -> Result<()> {
        // One channel... as three: a 4×4 image of 1-px patches, merge 2, 2 frames.
        let v: Vec<f32> = (0..48).map(|i| i as f32).collect();
        let px = Tensor::from_vec(v, (3, 4, 4), &Device::Cpu)?;
        let (p, rows, cols) = patchify(&px, 1, 2, 2)?;
        assert_eq!((p.dims(), rows, cols), (&[16, 6][..], 4, 4));
        let rows_v: Vec<Vec<f32>> = p.to_vec2()?;
        // Block (0,0) holds pixels (0,0), (0,1), (1,0), (1,1); then block (0,1).
        assert_eq!(rows_v[0], vec![0.0, 0.0, 16.0, 16.0, 32.0, 32.0]);
        assert_eq!(rows_v[2][0], 4.0);
        assert_eq!(rows_v[4][0], 2.0);
        assert_eq!(patch_positions(4, 4, 2)[..5], [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2)]);
        Ok(())
    }

    #[test]
    fn windows_cover_the_grid_in_the_reference_order() {
        // A 3×5 grid of merged tokens in windows of 2×2: 2×3 windows, the last row and column partial.
        let (order, lengths) = window_order(3, 5, 2);
        assert_eq!(lengths, vec![4, 4, 2, 2, 2, 1]);
        assert_eq!(&order[..6], &[0, 1, 5, 6, 2, 3]);
        assert_eq!(&order[12..], &[12, 13, 14]);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..15).collect::<Vec<_>>());
        // An even grid: the reference pads by a whole (empty, dropped) window.
        assert_eq!(window_order(2, 2, 2).1, vec![4]);
    }
}
