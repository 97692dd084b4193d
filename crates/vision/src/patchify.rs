//! Patchify: cut an image into non-overlapping `P×P` patches and project each to the model
//! width. Two forms that must agree:
//! - unfold: `(C, H, W)` → `(N, C·P·P)` (each patch flattened channel-major, then row, then
//!   column — the order of a Conv2d weight `(d, C, P, P)` reshaped to `(d, C·P·P)`), then a
//!   linear layer;
//! - Conv2d with kernel = stride = `P`.
//!
//! Patches are numbered in raster order (row-major over the `H/P × W/P` grid).

use candle_core::{Result, Tensor};

/// `(b, C, H, W)` → `(b, N, C·P·P)` with `N = (H/P)·(W/P)`. `H` and `W` must be multiples of `P`.
pub fn patchify(images: &Tensor, patch: usize) -> Result<Tensor> {
    let (b, c, h, w) = images.dims4()?;
    if patch == 0 || h % patch != 0 || w % patch != 0 {
        candle_core::bail!("image {h}×{w} is not a whole number of {patch}×{patch} patches");
    }
    let (gh, gw) = (h / patch, w / patch);
    images
        .reshape((b, c, gh, patch, gw, patch))? // (b, C, gh, P, gw, P)
        .permute((0, 2, 4, 1, 3, 5))? // (b, gh, gw, C, P, P)
        .reshape((b, gh * gw, c * patch * patch))
}

/// A patch embedding: weight `(d, C, P, P)` and an optional bias `(d,)` (CLIP has none),
/// applicable either way.
#[derive(Clone, Debug)]
pub struct PatchEmbedding {
    weight: Tensor,
    bias: Option<Tensor>,
    patch: usize,
}

impl PatchEmbedding {
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let (_, _, p, p2) = weight.dims4()?;
        if p != p2 {
            candle_core::bail!("patch embedding kernel must be square, got {p}×{p2}");
        }
        Ok(Self { weight, bias, patch: p })
    }

    /// Unfold + linear: `(b, C, H, W)` → `(b, N, d)`.
    pub fn forward_unfold(&self, images: &Tensor) -> Result<Tensor> {
        let d = self.weight.dim(0)?;
        let w = self.weight.reshape((d, ()))?; // (d, C·P·P)
        self.add_bias(patchify(images, self.patch)?.broadcast_matmul(&w.t()?)?)
    }

    /// Conv2d (kernel = stride = P): `(b, C, H, W)` → `(b, N, d)`.
    pub fn forward_conv(&self, images: &Tensor) -> Result<Tensor> {
        let y = images.conv2d(&self.weight, 0, self.patch, 1, 1)?; // (b, d, gh, gw)
        let y = y.flatten_from(2)?.transpose(1, 2)?; // (b, N, d)
        self.add_bias(y)
    }

    pub fn patch_size(&self) -> usize {
        self.patch
    }

    fn add_bias(&self, y: Tensor) -> Result<Tensor> {
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}
