//! 2-D rotary position embeddings for vision towers that rotate each patch by its `(row, col)`
//! on the patch grid (Su et al. 2021, "RoFormer", extended axially): a head's first half of
//! angles is the row times one set of frequencies, its second half the column times another,
//! applied `rotate_half`-style over the whole head. Qwen2-VL's tower uses the same frequencies
//! for rows and columns; Pixtral's gives the rows the even and the columns the odd frequencies
//! of one `head_dim` ladder (`PixtralRotaryEmbedding` in transformers v5.23).

use candle_core::{DType, Device, Tensor};
use tessera_decoder::{RopeAngles, RopeStyle};

use crate::error::Result;

/// The angles of patches at `positions` `(row, col)`: per patch, `row · f` for each of
/// `row_freqs`, then `col · f` for each of `col_freqs`, as `RopeAngles` over heads of
/// `2 · (row_freqs + col_freqs)` dimensions, applied in `style` (`Half`: `rotate_half` as
/// transformers; `Interleaved` for q/k rows llama.cpp's converter permuted, the same scores).
pub fn axial_angles(
    positions: impl ExactSizeIterator<Item = (usize, usize)>,
    (row_freqs, col_freqs): (&[f32], &[f32]),
    style: RopeStyle,
    dtype: DType,
    device: &Device,
) -> Result<RopeAngles> {
    let n = positions.len();
    let half = row_freqs.len() + col_freqs.len();
    let mut angles = Vec::with_capacity(n * half);
    for (r, c) in positions {
        angles.extend(row_freqs.iter().map(|f| r as f32 * f));
        angles.extend(col_freqs.iter().map(|f| c as f32 * f));
    }
    let angles = Tensor::from_vec(angles, (n, half), device)?;
    Ok(RopeAngles::from_angles(&angles, style, 2 * half, dtype)?)
}

/// The standard RoPE frequency ladder `1 / θ^(i / dim)` for even `i` below `dim`, in f32 as
/// PyTorch computes it.
pub fn inv_freq(theta: f64, dim: usize) -> Vec<f32> {
    (0..dim).step_by(2).map(|i| 1.0 / (theta as f32).powf(i as f32 / dim as f32)).collect()
}
