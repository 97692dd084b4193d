//! Pixtral, the vision tower of Mistral 3 (Mistral Small 3.1 / 3.2) and Pixtral-12B, with Mistral
//! 3's projector, as transformers v5.23 runs them (`modeling_pixtral.py`, `modeling_mistral3.py`):
//!
//! - the processor's size rule ([`resized_size`]): the image scaled down (never up) to fit a
//!   `longest_edge` square keeping its aspect, each side then rounded **up** to a whole number of
//!   `patch × merge` tokens — native resolution, no tiles;
//! - the tower ([`PixtralVision`]): a patch Conv2d without bias, `ln_pre` RMSNorm, then pre-norm
//!   layers (RMSNorm → attention without biases, rotated by a 2-D RoPE over each patch's
//!   `(row, col)`: rows on the even, columns on the odd frequencies of one ladder → RMSNorm →
//!   gated MLP). The tower's norms have ε 1e-5 whatever the config says. Several images of a batch
//!   run as one sequence under a block-diagonal mask, each seeing only itself: the same as
//!   running each alone, which is what [`PixtralVision::forward`] does;
//! - the projector ([`PixtralProjector`], `Mistral3MultiModalProjector`): RMSNorm, the patch
//!   merger (each `merge × merge` block of patches unfolded **channel-major** — value `c` of
//!   patch `(i, j)` of the block at `c · merge² + i · merge + j`, as `F.unfold` lays it out — and
//!   projected back to the tower's width without bias), then linear → act → linear into the
//!   text model's width.

use candle_core::{DType, Tensor};
use tessera_decoder::{
    Activation, Attention, AttentionConfig, AttentionInput, AttentionMask, GatedMlp, Linear, NormStyle, RmsNorm,
    RopeStyle, Weights,
};

use crate::error::{Result, VisionError};
use crate::patchify::PatchEmbedding;
use crate::rope2d::{axial_angles, inv_freq};
use crate::tower::check_heads;

/// `PixtralVisionConfig` as tessera runs it (transformers' defaults filled in by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct PixtralVisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub patch_size: usize,
    pub hidden_act: Activation,
    /// The 2-D RoPE base.
    pub rope_theta: f64,
    /// How the q/k rows are laid out: `Half` as transformers stores them, `Interleaved` as
    /// llama.cpp's converter writes them into an mmproj (permuted as a Llama's).
    pub rope_style: RopeStyle,
}

/// The epsilon of every Pixtral RMSNorm (`PixtralAttentionLayer`, `ln_pre`: fixed in code).
const NORM_EPS: f64 = 1e-5;

impl PixtralVisionConfig {
    /// `hidden_size / num_attention_heads` (transformers recomputes it, whatever `head_dim` says).
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    pub fn validate(&self) -> Result<()> {
        check_heads(self.hidden_size, self.num_attention_heads)?;
        let bad = |m: String| Err(VisionError::Config(m));
        if !self.head_dim().is_multiple_of(4) {
            return bad(format!("vision head_dim {} must be a multiple of 4 (2-D RoPE)", self.head_dim()));
        }
        if self.patch_size == 0 || self.num_hidden_layers == 0 {
            return bad("vision patch_size and num_hidden_layers must be positive".into());
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("vision rope_theta {} must be a positive number", self.rope_theta));
        }
        Ok(())
    }

    fn attention(&self) -> AttentionConfig {
        let head_dim = self.head_dim();
        AttentionConfig {
            hidden_size: self.hidden_size,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_attention_heads,
            head_dim,
            qkv_bias: false,
            out_bias: false,
            scale: 1.0 / (head_dim as f64).sqrt(),
            out_name: "o_proj",
            output_gate: false,
            k_eq_v: false,
            v_norm: false,
            softcap: None,
            qk_norm: None,
        }
    }
}

/// `PixtralImageProcessor`'s output size `(height, width)` for an image of `height × width`
/// within `max_h × max_w` (`longest_edge` on both): scaled by `1 / max(h / max_h, w / max_w)`
/// when that ratio exceeds 1 (each side floored), then each side rounded up to a multiple of
/// `unit` (the processor's `patch_size × spatial_merge_size`).
pub fn resized_size(height: usize, width: usize, max_h: usize, max_w: usize, unit: usize) -> (usize, usize) {
    let (mut h, mut w) = (height, width);
    let ratio = (height as f64 / max_h as f64).max(width as f64 / max_w as f64);
    if ratio > 1.0 {
        h = (height as f64 / ratio).floor() as usize;
        w = (width as f64 / ratio).floor() as usize;
    }
    // `(x - 1) // unit + 1` tokens a side, as `_num_image_tokens` counts them (0 stays 0).
    let up = |x: usize| if x == 0 { 0 } else { ((x - 1) / unit + 1) * unit };
    (up(h), up(w))
}

#[derive(Clone, Debug)]
struct Layer {
    attention_norm: RmsNorm,
    attention: Attention,
    ffn_norm: RmsNorm,
    feed_forward: GatedMlp,
}

/// Pixtral's vision transformer.
#[derive(Clone, Debug)]
pub struct PixtralVision {
    cfg: PixtralVisionConfig,
    patch: PatchEmbedding,
    ln_pre: RmsNorm,
    layers: Vec<Layer>,
    /// `head_dim / 4` frequencies each: the ladder's even entries (rows) and odd ones (columns).
    row_freqs: Vec<f32>,
    col_freqs: Vec<f32>,
    dtype: DType,
}

impl PixtralVision {
    /// Loads the tower from `vb`, its root (`model.vision_tower`).
    pub fn new(cfg: &PixtralVisionConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let patch = PatchEmbedding::new(vb.pp("patch_conv").get(&[d, c, p, p], "weight")?, None)?;
        let norm = |vb: &Weights| RmsNorm::load(d, NORM_EPS, NormStyle::Plain, vb);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let l = vb.pp("transformer.layers").pp(i);
                Ok(Layer {
                    attention_norm: norm(&l.pp("attention_norm"))?,
                    attention: Attention::new(&cfg.attention(), &l.pp("attention"))?,
                    ffn_norm: norm(&l.pp("ffn_norm"))?,
                    feed_forward: GatedMlp::new(
                        d,
                        cfg.intermediate_size,
                        cfg.hidden_act,
                        false,
                        &l.pp("feed_forward"),
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ladder = inv_freq(cfg.rope_theta, cfg.head_dim());
        Ok(Self {
            cfg: cfg.clone(),
            patch,
            ln_pre: norm(&vb.pp("ln_pre"))?,
            layers,
            row_freqs: ladder.iter().step_by(2).copied().collect(),
            col_freqs: ladder.iter().skip(1).step_by(2).copied().collect(),
            dtype: vb.dtype(),
        })
    }

    pub fn config(&self) -> &PixtralVisionConfig {
        &self.cfg
    }

    /// One image's pixels `(1, C, H, W)` (sides multiples of the patch) → the last layer's
    /// output `(rows · cols, d)`, patches in raster order.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let p = self.cfg.patch_size;
        if b != 1 || c != self.cfg.num_channels || !h.is_multiple_of(p) || !w.is_multiple_of(p) || h == 0 || w == 0 {
            return Err(VisionError::Config(format!(
                "pixel values are {b}×{c}×{h}×{w}; the Pixtral tower takes one image of {} channels with sides a \
                 multiple of {p}",
                self.cfg.num_channels
            )));
        }
        let (rows, cols) = (h / p, w / p);
        let x = self.patch.forward_unfold(&pixels.to_dtype(self.dtype)?)?; // (1, rows·cols, d)
        let mut x = self.ln_pre.forward(&x)?;
        let positions = (0..rows * cols).map(|i| (i / cols, i % cols));
        let freqs = (self.row_freqs.as_slice(), self.col_freqs.as_slice());
        let rope = axial_angles(positions, freqs, self.cfg.rope_style, self.dtype, x.device())?;
        for layer in &self.layers {
            let input = AttentionInput {
                rope: Some(&rope),
                // One image alone: the block-diagonal mask's block.
                mask: &AttentionMask::Bidirectional,
                bias: None,
                cache: None,
                capture: false,
                residual: Some(&x),
            };
            let (y, _) = layer.attention.forward(&layer.attention_norm.forward(&x)?, input)?;
            x = layer.feed_forward.forward_add(&layer.ffn_norm.forward(&y)?, Some(&y))?;
        }
        Ok(x.squeeze(0)?)
    }
}

/// Mistral 3's projector: RMSNorm, patch merger, linear → act → linear.
#[derive(Clone, Debug)]
pub struct PixtralProjector {
    norm: RmsNorm,
    merging_layer: Linear,
    linear_1: Linear,
    act: Activation,
    linear_2: Linear,
    merge: usize,
}

impl PixtralProjector {
    /// Loads `multi_modal_projector` from `vb`: tower width `vision` → text width `text`;
    /// `norm_eps` is the text model's `rms_norm_eps`; `bias`: `multimodal_projector_bias`.
    pub fn new(
        vision: usize,
        text: usize,
        merge: usize,
        norm_eps: f64,
        act: Activation,
        bias: bool,
        vb: &Weights,
    ) -> Result<Self> {
        Ok(Self {
            norm: RmsNorm::load(vision, norm_eps, NormStyle::Plain, &vb.pp("norm"))?,
            merging_layer: vb.pp("patch_merger").linear(vision * merge * merge, vision, false, "merging_layer")?,
            linear_1: vb.linear(vision, text, bias, "linear_1")?,
            act,
            linear_2: vb.linear(text, text, bias, "linear_2")?,
            merge,
        })
    }

    /// Tower features `(rows · cols, d)` of a `rows × cols` patch grid → image tokens
    /// `(rows/merge · cols/merge, text)`, merged blocks in raster order.
    pub fn forward(&self, features: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let (n, d) = features.dims2()?;
        let m = self.merge;
        if n != rows * cols || !rows.is_multiple_of(m) || !cols.is_multiple_of(m) {
            return Err(VisionError::Config(format!(
                "{n} patch features do not form a {rows}×{cols} grid of whole {m}×{m} blocks"
            )));
        }
        let x = self.norm.forward(features)?;
        let x = x
            .reshape((rows / m, m, cols / m, m, d))? // (R, i, C, j, d)
            .permute((0, 2, 4, 1, 3))? // (R, C, d, i, j)
            .contiguous()?
            .reshape((rows / m * (cols / m), d * m * m))?;
        let x = self.merging_layer.forward(&x)?;
        let x = self.act.apply(&self.linear_1.forward(&x)?)?;
        Ok(self.linear_2.forward(&x)?)
    }

    pub fn describe(&self) -> String {
        format!("RMSNorm, {0}×{0} patch merger (channel-major unfold), linear → {1:?} → linear", self.merge, self.act)
    }
}
