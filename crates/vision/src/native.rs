//! The image side of tessera's native single-stream model (`model_type: tessera_native`): the
//! image is cut into `P×P` patches (unfold), each projected to the model width by a linear layer
//! with bias, plus a learned position embedding per patch (raster order). The resulting image
//! tokens go before the text tokens in one decoder sequence; no separate vision transformer.
//!
//! Checkpoint tensors: `patch_embed.weight` `(hidden, C·P·P)` (channel-major, the order of a
//! Conv2d kernel), `patch_embed.bias` `(hidden,)`, `image_pos_embed` `(N, hidden)`.
//! The PyTorch twin is `scripts/shapes/model.py`.

use candle_core::Tensor;
use tessera_decoder::Weights;

use crate::error::{Result, VisionError};
use crate::patchify::PatchEmbedding;

/// Image geometry of a native model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeVisionConfig {
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub hidden_size: usize,
}

impl NativeVisionConfig {
    /// Image tokens per image.
    pub fn num_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }
}

pub struct NativePatchEncoder {
    cfg: NativeVisionConfig,
    patch: PatchEmbedding,
    positions: Tensor,
}

impl NativePatchEncoder {
    pub fn new(cfg: NativeVisionConfig, vb: &Weights) -> Result<Self> {
        let NativeVisionConfig { image_size, patch_size: p, num_channels: c, hidden_size: d } = cfg;
        if p == 0 || image_size % p != 0 {
            return Err(VisionError::Config(format!("image_size {image_size} is not a multiple of patch_size {p}")));
        }
        let w = vb.get(&[d, c * p * p], "patch_embed.weight")?;
        let b = vb.get(&[d], "patch_embed.bias")?;
        let positions = vb.get(&[cfg.num_patches(), d], "image_pos_embed")?;
        // (d, C·P·P) → (d, C, P, P): the same numbers, in Conv2d's kernel layout.
        let patch = PatchEmbedding::new(w.reshape((d, c, p, p))?, Some(b))?;
        Ok(Self { cfg, patch, positions })
    }

    pub fn config(&self) -> &NativeVisionConfig {
        &self.cfg
    }

    /// `pixels`: `(b, C, S, S)` preprocessed → image tokens `(b, N, hidden)`.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (_, c, h, w) = pixels.dims4()?;
        let s = self.cfg.image_size;
        if (c, h, w) != (self.cfg.num_channels, s, s) {
            return Err(VisionError::Config(format!(
                "pixel values are {c}×{h}×{w}, the model expects {}×{s}×{s}",
                self.cfg.num_channels
            )));
        }
        let tokens = self.patch.forward_unfold(&pixels.to_dtype(self.positions.dtype())?)?;
        Ok(tokens.broadcast_add(&self.positions)?)
    }
}
