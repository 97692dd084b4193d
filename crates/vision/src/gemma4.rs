//! Gemma 4's vision side as transformers v5.23 runs it (`modeling_gemma4.py`,
//! `image_processing_pil_gemma4.py`):
//!
//! - the processor's size rule ([`resized_size`]): the image scaled, keeping its aspect, to the
//!   largest size of at most `max_soft_tokens · k²` patches whose sides are multiples of
//!   `patch · k` (`k` the pooling kernel), rounded **down**; bicubic; pixels rescaled to [0, 1]
//!   and not normalized; patches flattened row-major over the grid, each `(row, col, channel)`;
//! - the tower ([`Gemma4Vision`]): the patches `2·(x − ½)` through `input_proj` plus a learned
//!   embedding of each patch's column and of its row; layers like the text model's (four
//!   RMSNorms with plain weights, q/k norms, a parameter-free value norm, scale 1, a gated
//!   tanh-GELU MLP), attending both ways, their queries and keys rotated by a 2-D RoPE: the first
//!   half of each head by the patch's column, the second by its row, each half `rotate_half`
//!   on its own; linear layers optionally clamped to stored bounds (`use_clipped_linears`);
//! - the pooler: each `k × k` block of patches averaged, times `√hidden`, then optionally
//!   standardized (`(x − std_bias) · std_scale`);
//! - the embedder ([`Gemma4Embedder`], `embed_vision`): a parameter-free RMSNorm and one
//!   projection into the text model's width.

use candle_core::{DType, Device, IndexOp, Tensor};
use tessera_decoder::attention::scaled_dot_product_attention;
use tessera_decoder::{Activation, Linear, NormStyle, RmsNorm, RopeAngles, RopeStyle, Weights};

use crate::error::{Result, VisionError};
use crate::image_io::RgbImage;
use crate::resize::Filter;
use crate::rope2d::inv_freq;

/// `Gemma4VisionConfig` as tessera runs it (transformers' defaults filled in by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4VisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub hidden_act: Activation,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub pooling_kernel_size: usize,
    pub patch_size: usize,
    pub position_embedding_size: usize,
    pub use_clipped_linears: bool,
    pub standardize: bool,
}

impl Gemma4VisionConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VisionError::Config(m));
        for (name, n) in [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("patch_size", self.patch_size),
            ("pooling_kernel_size", self.pooling_kernel_size),
            ("position_embedding_size", self.position_embedding_size),
        ] {
            if n == 0 {
                return bad(format!("vision_config.{name} must be positive"));
            }
        }
        if self.num_key_value_heads == 0 || !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return bad(format!(
                "vision_config: {} key/value heads do not group {} heads",
                self.num_key_value_heads, self.num_attention_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(4) {
            return bad(format!("vision_config.head_dim {} must be a multiple of 4 (2-D RoPE)", self.head_dim));
        }
        Ok(())
    }
}

/// The processor's target `(height, width)` for an image of `height × width` under a budget of
/// `max_patches` patches (`get_aspect_ratio_preserving_size`); errors where transformers raises.
pub fn resized_size(height: usize, width: usize, patch: usize, max_patches: usize, k: usize) -> Result<(usize, usize)> {
    let total = (height * width) as f64;
    let target_px = (max_patches * patch * patch) as f64;
    let factor = (target_px / total).sqrt();
    let side = k * patch;
    let mut h = ((factor * height as f64) / side as f64).floor() as usize * side;
    let mut w = ((factor * width as f64) / side as f64).floor() as usize * side;
    if h == 0 && w == 0 {
        return Err(VisionError::Config(format!("a {width}×{height} image resizes to 0 × 0 under the patch budget")));
    }
    let max_side = (max_patches / (k * k)) * side;
    if h == 0 {
        h = side;
        w = ((width / height) * side).min(max_side);
    } else if w == 0 {
        w = side;
        h = ((height / width) * side).min(max_side);
    }
    if (h * w) as f64 > target_px {
        return Err(VisionError::Config(format!(
            "a {width}×{height} image would resize to {w}×{h}, beyond {max_patches} patches of {patch}"
        )));
    }
    Ok((h, w))
}

/// The patches `(n, patch² · 3)` of `img` (already resized; sides multiples of `patch`),
/// rescaled to [0, 1], row-major over the grid, each patch `(row, col, channel)`; and the grid
/// `(rows, cols)`.
pub fn patches(img: &RgbImage, patch: usize, device: &Device) -> Result<(Tensor, usize, usize)> {
    let (rows, cols) = (img.height / patch, img.width / patch);
    let mut out = Vec::with_capacity(rows * cols * patch * patch * 3);
    for (r, c) in (0..rows).flat_map(|r| (0..cols).map(move |c| (r, c))) {
        for y in 0..patch {
            for x in 0..patch {
                let p = img.pixel(c * patch + x, r * patch + y);
                out.extend(p.iter().map(|&v| (v as f64 * (1.0 / 255.0)) as f32));
            }
        }
    }
    Ok((Tensor::from_vec(out, (rows * cols, patch * patch * 3), device)?, rows, cols))
}

/// `img` resized as the processor resizes it (bicubic, skipped when the size is already right).
pub fn resized(img: &RgbImage, patch: usize, max_patches: usize, k: usize) -> Result<RgbImage> {
    let (h, w) = resized_size(img.height, img.width, patch, max_patches, k)?;
    if (h, w) == (img.height, img.width) {
        return Ok(img.clone());
    }
    Ok(crate::preprocess::resize(img, h, w, Filter::Bicubic))
}

/// A linear layer stored as `{name}.linear.weight`, clamped to `{name}.{input,output}_{min,max}`
/// when the tower clips (`Gemma4ClippableLinear`).
#[derive(Clone, Debug)]
struct ClippedLinear {
    linear: Linear,
    bounds: Option<[f64; 4]>,
}

impl ClippedLinear {
    fn load(vb: &Weights, input: usize, output: usize, name: &str, clipped: bool) -> Result<Self> {
        let vb = vb.pp(name);
        let linear = vb.linear(input, output, false, "linear")?;
        let bounds = match clipped {
            true => {
                let scalar =
                    |n: &str| -> Result<f64> { Ok(vb.get_with_dtype(&[], n, DType::F32)?.to_scalar::<f32>()? as f64) };
                Some([scalar("input_min")?, scalar("input_max")?, scalar("output_min")?, scalar("output_max")?])
            }
            false => None,
        };
        Ok(Self { linear, bounds })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let Some([in_lo, in_hi, out_lo, out_hi]) = self.bounds else { return Ok(self.linear.forward(x)?) };
        let y = self.linear.forward(&x.clamp(in_lo, in_hi)?)?;
        Ok(y.clamp(out_lo, out_hi)?)
    }
}

#[derive(Clone, Debug)]
struct Layer {
    norms: [RmsNorm; 4],
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    v_norm: RmsNorm,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
}

/// The patch embedding `input_proj` `(h, p·p·3)` (a patch's values row, column, channel), or
/// the Conv2d kernel `conv.weight` `(h, 3, p, p)` llama.cpp's mmproj stores it as, turned back.
fn patch_projection(vb: &Weights, h: usize, p: usize) -> Result<Linear> {
    if !vb.contains("conv.weight") {
        return Ok(vb.linear(3 * p * p, h, false, "input_proj")?);
    }
    let kernel = vb.get(&[h, 3, p, p], "conv.weight")?;
    let weight = kernel.permute((0, 2, 3, 1))?.reshape((h, 3 * p * p))?.contiguous()?;
    Ok(Linear::new(tessera_decoder::MatrixWeight::Dense(weight), None)?)
}

/// The tower: patch embedding, encoder layers, pooler (and standardization).
#[derive(Clone, Debug)]
pub struct Gemma4Vision {
    cfg: Gemma4VisionConfig,
    input_proj: Linear,
    /// `(2, position_embedding_size, hidden)`: columns, rows.
    positions: Tensor,
    layers: Vec<Layer>,
    /// `(std_bias, std_scale)`.
    standardize: Option<(Tensor, Tensor)>,
}

impl Gemma4Vision {
    /// Loads `patch_embedder.*`, `encoder.layers.*` and (with `standardize`) `std_bias`,
    /// `std_scale` from `vb` (the tower's root, `model.vision_tower`).
    pub fn new(cfg: &Gemma4VisionConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let (h, p) = (cfg.hidden_size, cfg.patch_size);
        let (q_out, kv_out) = (cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim);
        let clip = cfg.use_clipped_linears;
        let eps = cfg.rms_norm_eps;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let vb = vb.pp("encoder.layers").pp(i);
                let norm = |n: &str| RmsNorm::load(h, eps, NormStyle::Plain, &vb.pp(n));
                let attn = vb.pp("self_attn");
                let mlp = vb.pp("mlp");
                let head_norm = |n: &str| RmsNorm::load(cfg.head_dim, eps, NormStyle::Plain, &attn.pp(n));
                Ok(Layer {
                    norms: [
                        norm("input_layernorm")?,
                        norm("post_attention_layernorm")?,
                        norm("pre_feedforward_layernorm")?,
                        norm("post_feedforward_layernorm")?,
                    ],
                    q: ClippedLinear::load(&attn, h, q_out, "q_proj", clip)?,
                    k: ClippedLinear::load(&attn, h, kv_out, "k_proj", clip)?,
                    v: ClippedLinear::load(&attn, h, kv_out, "v_proj", clip)?,
                    o: ClippedLinear::load(&attn, q_out, h, "o_proj", clip)?,
                    q_norm: head_norm("q_norm")?,
                    k_norm: head_norm("k_norm")?,
                    v_norm: RmsNorm::unscaled(cfg.head_dim, eps, vb.dtype(), vb.device())?,
                    gate: ClippedLinear::load(&mlp, h, cfg.intermediate_size, "gate_proj", clip)?,
                    up: ClippedLinear::load(&mlp, h, cfg.intermediate_size, "up_proj", clip)?,
                    down: ClippedLinear::load(&mlp, cfg.intermediate_size, h, "down_proj", clip)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let standardize = match cfg.standardize {
            true => Some((
                vb.get_with_dtype(&[h], "std_bias", DType::F32)?,
                vb.get_with_dtype(&[h], "std_scale", DType::F32)?,
            )),
            false => None,
        };
        Ok(Self {
            cfg: cfg.clone(),
            input_proj: patch_projection(&vb.pp("patch_embedder"), h, p)?,
            positions: vb.pp("patch_embedder").get(&[2, cfg.position_embedding_size, h], "position_embedding_table")?,
            layers,
            standardize,
        })
    }

    pub fn config(&self) -> &Gemma4VisionConfig {
        &self.cfg
    }

    /// The encoder's output `(1, n, hidden)` for `patches` `(n, 3·patch²)` on a `rows × cols` grid.
    pub fn encode(&self, patches: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let n = rows * cols;
        if patches.dim(0)? != n {
            return Err(VisionError::Config(format!("{} patches for a {rows}×{cols} grid", patches.dim(0)?)));
        }
        if rows.max(cols) > self.cfg.position_embedding_size {
            return Err(VisionError::Config(format!(
                "a {rows}×{cols} patch grid exceeds the {} learned positions per side",
                self.cfg.position_embedding_size
            )));
        }
        let device = patches.device();
        let dtype = self.positions.dtype();
        let x = ((patches.to_dtype(dtype)? - 0.5)? * 2.0)?;
        let cols_idx: Vec<u32> = (0..n).map(|i| (i % cols) as u32).collect();
        let rows_idx: Vec<u32> = (0..n).map(|i| (i / cols) as u32).collect();
        let pos = (self.positions.i(0)?.index_select(&Tensor::new(cols_idx, device)?, 0)?
            + self.positions.i(1)?.index_select(&Tensor::new(rows_idx, device)?, 0)?)?;
        let mut x = (self.input_proj.forward(&x)? + pos)?.unsqueeze(0)?;
        // The 2-D RoPE: each half of a head by one coordinate, frequencies over a quarter head.
        let freqs = inv_freq(self.cfg.rope_theta, self.cfg.head_dim / 2);
        let angles = |coord: &dyn Fn(usize) -> usize| -> Result<RopeAngles> {
            let a: Vec<f32> = (0..n).flat_map(|i| freqs.iter().map(move |f| coord(i) as f32 * f)).collect();
            let a = Tensor::from_vec(a, (n, freqs.len()), device)?;
            Ok(RopeAngles::from_angles(&a, RopeStyle::Half, self.cfg.head_dim / 2, dtype)?)
        };
        let rope = (angles(&|i| i % cols)?, angles(&|i| i / cols)?);
        for layer in &self.layers {
            x = self.layer(layer, &x, &rope)?;
        }
        Ok(x)
    }

    fn layer(&self, l: &Layer, x: &Tensor, (cols, rows): &(RopeAngles, RopeAngles)) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let d = self.cfg.head_dim;
        let heads =
            |y: Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((b, t, n, d))?.transpose(1, 2)?.contiguous()?) };
        let rotate = |y: &Tensor| -> Result<Tensor> {
            let first = cols.apply(&y.narrow(3, 0, d / 2)?.contiguous()?)?;
            let second = rows.apply(&y.narrow(3, d / 2, d / 2)?.contiguous()?)?;
            Ok(Tensor::cat(&[first, second], 3)?)
        };
        let h = l.norms[0].forward(x)?;
        let q = rotate(&l.q_norm.forward(&heads(l.q.forward(&h)?, self.cfg.num_attention_heads)?)?)?;
        let k = rotate(&l.k_norm.forward(&heads(l.k.forward(&h)?, self.cfg.num_key_value_heads)?)?)?;
        let v = l.v_norm.forward(&heads(l.v.forward(&h)?, self.cfg.num_key_value_heads)?)?;
        let (a, _) = scaled_dot_product_attention(&q, &k, &v, None, 1.0)?;
        let a = a.transpose(1, 2)?.reshape((b, t, self.cfg.num_attention_heads * d))?;
        let x = (x + l.norms[1].forward(&l.o.forward(&a)?)?)?;
        let h = l.norms[2].forward(&x)?;
        let m = (self.cfg.hidden_act.apply(&l.gate.forward(&h)?)? * l.up.forward(&h)?)?;
        Ok((&x + l.norms[3].forward(&l.down.forward(&m)?)?)?)
    }

    /// The soft tokens `(tokens, hidden)` of an encoded `rows × cols` grid `(1, n, hidden)`:
    /// each `k × k` block averaged (in f32), row-major over the pooled grid, times `√hidden`,
    /// standardized when the tower does; in the encoder's dtype.
    pub fn pool(&self, encoded: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let k = self.cfg.pooling_kernel_size;
        if !rows.is_multiple_of(k) || !cols.is_multiple_of(k) {
            return Err(VisionError::Config(format!("a {rows}×{cols} patch grid does not pool by {k}")));
        }
        let hidden = self.cfg.hidden_size;
        let x = encoded.to_dtype(DType::F32)?.reshape((rows / k, k, cols / k, k, hidden))?;
        let x = x.permute((0, 2, 1, 3, 4))?.reshape((rows / k * (cols / k), k * k, hidden))?;
        let x = ((x.sum(1)? / (k * k) as f64)? * (hidden as f64).sqrt())?;
        let x = match &self.standardize {
            Some((bias, scale)) => x.broadcast_sub(bias)?.broadcast_mul(scale)?,
            None => x,
        };
        Ok(x.to_dtype(encoded.dtype())?)
    }
}

/// `embed_vision`: a parameter-free RMSNorm, then `embedding_projection` into the text width.
#[derive(Clone, Debug)]
pub struct Gemma4Embedder {
    norm: RmsNorm,
    projection: Linear,
}

impl Gemma4Embedder {
    pub fn new(vision_hidden: usize, text_hidden: usize, eps: f64, vb: &Weights) -> Result<Self> {
        Ok(Self {
            norm: RmsNorm::unscaled(vision_hidden, eps, vb.dtype(), vb.device())?,
            projection: vb.linear(vision_hidden, text_hidden, false, "embedding_projection")?,
        })
    }

    pub fn forward(&self, soft: &Tensor) -> Result<Tensor> {
        Ok(self.projection.forward(&self.norm.forward(soft)?)?)
    }
}
