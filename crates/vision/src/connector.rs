//! Connectors: from vision-tower features to tokens in the language model's width.
//!
//! - Idefics3 / SmolVLM (`connector.modality_projection.proj`): pixel shuffle — each `s×s`
//!   block of neighbouring patches becomes one token of `s²·d` values (Idefics3's
//!   `Idefics3Connector.pixel_shuffle`, transformers v5.23) — then a bias-free linear layer.
//! - LLaVA (`multi_modal_projector.linear_1/linear_2`): linear → activation → linear.
//! - PaliGemma (`multi_modal_projector.linear`): one linear layer with bias.
//! - Gemma 3 (`multi_modal_projector`): the patch grid average-pooled to `tokens_per_side²`
//!   tokens, `mm_soft_emb_norm` (a `(1 + w)` RMSNorm; llama.cpp's mmproj stores `1 + w`), then
//!   `mm_input_projection_weight` (stored `(vision, text)`, applied as `x · W`).
//! - InternVL (`multi_modal_projector`): the same pixel shuffle as Idefics3 (InternVL's
//!   `pixel_shuffle` with `downsample_ratio` 0.5 is this one with `s = 2`), then `layer_norm`
//!   (`nn.LayerNorm`'s default ε 1e-5, not the tower's) and LLaVA's two-layer MLP.

use candle_core::Tensor;
use tessera_decoder::weights::MatrixWeight;
use tessera_decoder::{Activation, LayerNorm, Linear, NormStyle, RmsNorm, Weights};

use crate::error::{Result, VisionError};

#[derive(Clone, Debug)]
pub enum Connector {
    PixelShuffle {
        scale: usize,
        proj: Linear,
    },
    Mlp {
        linear_1: Linear,
        act: Activation,
        linear_2: Linear,
    },
    Linear(Linear),
    AvgPool {
        patches_per_side: usize,
        tokens_per_side: usize,
        norm: RmsNorm,
        proj: Linear,
    },
    /// Pixel shuffle, LayerNorm, then a [`Connector::Mlp`].
    ShuffleNormMlp {
        scale: usize,
        norm: LayerNorm,
        mlp: Box<Connector>,
    },
}

/// `nn.LayerNorm`'s default epsilon, which InternVL's projector norm keeps.
const TORCH_LAYER_NORM_EPS: f64 = 1e-5;

impl Connector {
    /// Idefics3: `vb` is the connector root (`model.connector`).
    pub fn pixel_shuffle(vision_hidden: usize, text_hidden: usize, scale: usize, vb: &Weights) -> Result<Self> {
        if scale == 0 {
            return Err(VisionError::Config("scale_factor must be positive".into()));
        }
        let proj = vb.pp("modality_projection").linear(vision_hidden * scale * scale, text_hidden, false, "proj")?;
        Ok(Self::PixelShuffle { scale, proj })
    }

    /// LLaVA: `vb` is `multi_modal_projector`.
    pub fn mlp(vision_hidden: usize, text_hidden: usize, act: Activation, bias: bool, vb: &Weights) -> Result<Self> {
        Ok(Self::Mlp {
            linear_1: vb.linear(vision_hidden, text_hidden, bias, "linear_1")?,
            act,
            linear_2: vb.linear(text_hidden, text_hidden, bias, "linear_2")?,
        })
    }

    /// PaliGemma: `vb` is `multi_modal_projector`.
    pub fn linear(vision_hidden: usize, projection_dim: usize, vb: &Weights) -> Result<Self> {
        Ok(Self::Linear(vb.linear(vision_hidden, projection_dim, true, "linear")?))
    }

    /// Gemma 3: `vb` is `multi_modal_projector`; `eps` is the vision tower's `layer_norm_eps`;
    /// `(patches_per_side, tokens_per_side)`: the grid pooled, and the pooled one;
    /// `norm_style`: how the file stores `mm_soft_emb_norm` (`(1 + w)` in a checkpoint).
    pub fn avg_pool(
        (vision_hidden, text_hidden): (usize, usize),
        (patches_per_side, tokens_per_side): (usize, usize),
        eps: f64,
        norm_style: NormStyle,
        vb: &Weights,
    ) -> Result<Self> {
        if tokens_per_side == 0 || !patches_per_side.is_multiple_of(tokens_per_side) {
            return Err(VisionError::Config(format!(
                "{tokens_per_side} tokens per side do not pool {patches_per_side} patches per side evenly"
            )));
        }
        // Applied transposed, so run dense; under a quantization plan rounded through the blocks
        // llama-quantize stores it in (the converter names it `mm_input_projection.weight`, a
        // matrix to llama-quantize), so that a folder computes as its quantized mmproj.
        let name = "mm_input_projection_weight";
        let w = vb.matrix_rows(vision_hidden, text_hidden, name, 0..vision_hidden, "mm_input_projection.weight")?;
        let w = w.dense(vb.dtype())?;
        Ok(Self::AvgPool {
            patches_per_side,
            tokens_per_side,
            norm: RmsNorm::load(vision_hidden, eps, norm_style, &vb.pp("mm_soft_emb_norm"))?,
            proj: Linear::new(MatrixWeight::Dense(w.t()?.contiguous()?), None)?,
        })
    }

    /// InternVL: `vb` is `multi_modal_projector`; `scale` is `1 / downsample_ratio`.
    pub fn shuffle_norm_mlp(
        vision_hidden: usize,
        text_hidden: usize,
        scale: usize,
        act: Activation,
        vb: &Weights,
    ) -> Result<Self> {
        if scale == 0 {
            return Err(VisionError::Config("the pixel shuffle's scale must be positive".into()));
        }
        let width = vision_hidden * scale * scale;
        Ok(Self::ShuffleNormMlp {
            scale,
            norm: LayerNorm::load(width, TORCH_LAYER_NORM_EPS, &vb.pp("layer_norm"))?,
            mlp: Box::new(Self::mlp(width, text_hidden, act, true, vb)?),
        })
    }

    /// Tokens out per `n` tower features in.
    pub fn tokens_for(&self, n: usize) -> usize {
        match self {
            Self::PixelShuffle { scale, .. } | Self::ShuffleNormMlp { scale, .. } => n / (scale * scale),
            Self::AvgPool { tokens_per_side, .. } => tokens_per_side * tokens_per_side,
            _ => n,
        }
    }

    /// `(b, n, d_vision)` → `(b, n', d_text)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::PixelShuffle { scale, proj } => Ok(proj.forward(&pixel_shuffle(x, *scale)?)?),
            Self::Mlp { linear_1, act, linear_2 } => Ok(linear_2.forward(&act.apply(&linear_1.forward(x)?)?)?),
            Self::Linear(l) => Ok(l.forward(x)?),
            Self::AvgPool { patches_per_side, tokens_per_side, norm, proj } => {
                let pooled = avg_pool(x, *patches_per_side, *tokens_per_side)?;
                Ok(proj.forward(&norm.forward(&pooled)?)?)
            }
            Self::ShuffleNormMlp { scale, norm, mlp } => mlp.forward(&norm.forward(&pixel_shuffle(x, *scale)?)?),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::PixelShuffle { scale, .. } => format!("pixel shuffle ×{scale} + linear"),
            Self::Mlp { act, .. } => format!("two-layer MLP ({act:?})"),
            Self::Linear(_) => "linear".to_string(),
            Self::AvgPool { patches_per_side, tokens_per_side, .. } => {
                let k = patches_per_side / tokens_per_side;
                format!("{k}×{k} average pooling to {tokens_per_side}×{tokens_per_side}, RMSNorm + linear")
            }
            Self::ShuffleNormMlp { scale, mlp, .. } => format!("pixel shuffle ×{scale}, LayerNorm, {}", mlp.describe()),
        }
    }
}

/// `(b, n, d)` patch features of a `side × side` grid (row-major) → `(b, t², d)`: each `k × k`
/// block (`k = side / t`) averaged, as `nn.AvgPool2d(k, k)` over the grid.
pub fn avg_pool(x: &Tensor, side: usize, t: usize) -> Result<Tensor> {
    let (b, n, d) = x.dims3()?;
    if n != side * side || t == 0 || !side.is_multiple_of(t) {
        return Err(VisionError::Config(format!("cannot pool {n} features of a {side}×{side} grid to {t}×{t}")));
    }
    let k = side / t;
    // (b, t, k, t, k, d): row block, row in block, column block, column in block.
    let grid = x.reshape((b, t, k, t, k, d))?;
    let sum = grid.sum(4)?.sum(2)?; // (b, t, t, d)
    Ok((sum / (k * k) as f64)?.reshape((b, t * t, d))?)
}

/// Idefics3's pixel shuffle: `(b, n, d)` with `n = side²` → `(b, n/s², d·s²)`; token `(r, c)` of
/// the output holds the `s×s` block of patches starting at `(r·s, c·s)`, in the reference's
/// interleaving.
pub fn pixel_shuffle(x: &Tensor, s: usize) -> Result<Tensor> {
    let (b, n, d) = x.dims3()?;
    let side = (n as f64).sqrt().round() as usize;
    if side * side != n || s == 0 || !side.is_multiple_of(s) {
        return Err(VisionError::Config(format!(
            "pixel shuffle by {s} needs a square grid of patches whose side is a multiple of {s}, got {n} patches"
        )));
    }
    let x = x.reshape((b, side, side / s, d * s))?; // (b, h, w/s, d·s)
    let x = x.transpose(1, 2)?.contiguous()?; // (b, w/s, h, d·s)
    let x = x.reshape((b, side / s, side / s, d * s * s))?; // (b, w/s, h/s, d·s²)
    let x = x.transpose(1, 2)?.contiguous()?; // (b, h/s, w/s, d·s²)
    Ok(x.reshape((b, n / (s * s), d * s * s))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The slow twin: token (r, c), value index (i·s + j)·d + k holds patch (r·s + i, c·s + j)'s
    /// k-th value — derived from the reference's view/permute sequence by hand.
    #[test]
    fn pixel_shuffle_matches_its_definition() -> anyhow::Result<()> {
        let (side, d, s) = (4usize, 3usize, 2usize);
        let n = side * side;
        let values: Vec<f32> = (0..n * d).map(|v| v as f32).collect();
        let x = Tensor::from_vec(values.clone(), (1, n, d), &Device::Cpu)?;
        let y: Vec<Vec<f32>> = pixel_shuffle(&x, s)?.squeeze(0)?.to_vec2()?;
        for r in 0..side / s {
            for c in 0..side / s {
                for i in 0..s {
                    for j in 0..s {
                        for k in 0..d {
                            let patch = (r * s + i) * side + (c * s + j);
                            // The reference's layout: the row offset i varies slowest, then j.
                            assert_eq!(y[r * (side / s) + c][(i * s + j) * d + k], values[patch * d + k]);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
