//! Rotary position embeddings (Su et al. 2021, "RoFormer"), with the frequency variants
//! transformers implements in `modeling_rope_utils.py` (default, linear, llama3).
//!
//! Two memory layouts rotate the same pairs differently:
//! - [`RopeStyle::Half`]: Hugging Face's `rotate_half`, pairing dimension `i` with `i + d/2`;
//! - [`RopeStyle::Interleaved`]: GPT-J / llama.cpp, pairing `2i` with `2i+1`. llama.cpp's
//!   converter permutes the rows of `attn_q`/`attn_k` so that interleaved rotation of the
//!   permuted weights gives exactly the same attention scores as `rotate_half` on the originals.

use candle_core::{DType, Device, Tensor};

use crate::error::{DecoderError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RopeStyle {
    #[default]
    Half,
    Interleaved,
}

/// How the inverse frequencies are derived from `theta`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    #[default]
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's wavelength-dependent scaling.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: usize },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
    pub style: RopeStyle,
}

impl Default for RopeConfig {
    fn default() -> Self {
        Self { theta: 10_000.0, scaling: RopeScaling::Default, style: RopeStyle::Half }
    }
}

impl RopeConfig {
    /// The `dim/2` inverse frequencies, computed in f32 as transformers does.
    pub fn inv_freq(&self, dim: usize) -> Vec<f32> {
        let base = self.theta as f32;
        let inv: Vec<f32> = (0..dim).step_by(2).map(|i| 1.0 / base.powf(i as f32 / dim as f32)).collect();
        match self.scaling {
            RopeScaling::Default => inv,
            RopeScaling::Linear { factor } => inv.into_iter().map(|f| f / factor as f32).collect(),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let old = original_max_position_embeddings as f32;
                let (factor, low, high) = (factor as f32, low_freq_factor as f32, high_freq_factor as f32);
                let low_freq_wavelen = old / low;
                let high_freq_wavelen = old / high;
                inv.into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_freq_wavelen { f / factor } else { f };
                        let medium = (high_freq_wavelen..=low_freq_wavelen).contains(&wavelen);
                        if medium {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect()
            }
        }
    }
}

/// A rotary embedding: its inverse frequencies, turned into the rotation angles of the
/// positions each forward runs ([`at`](Self::at)). No table is sized by the declared context:
/// the angles are computed for the positions a forward uses, once, and shared by every layer.
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    /// `(1, head_dim/2)`, f32.
    inv_freq: Tensor,
    style: RopeStyle,
    head_dim: usize,
    dtype: DType,
}

impl RotaryEmbedding {
    pub fn new(cfg: &RopeConfig, head_dim: usize, dtype: DType, device: &Device) -> Result<Self> {
        if !head_dim.is_multiple_of(2) || head_dim == 0 {
            return Err(DecoderError::Config(format!("RoPE needs an even head_dim, got {head_dim}")));
        }
        let inv_freq = cfg.inv_freq(head_dim);
        let half = inv_freq.len();
        Ok(Self { inv_freq: Tensor::from_vec(inv_freq, (1, half), device)?, style: cfg.style, head_dim, dtype })
    }

    /// The angles of `positions` `(t,)` (u32 or any integer/float dtype), `position × inv_freq` in
    /// f32 as transformers computes them.
    pub fn at(&self, positions: &Tensor) -> Result<RopeAngles> {
        let t = positions.dims1()?;
        let angles = positions.to_dtype(DType::F32)?.reshape((t, 1))?.broadcast_mul(&self.inv_freq)?;
        Ok(RopeAngles {
            cos: angles.cos()?.to_dtype(self.dtype)?,
            sin: angles.sin()?.to_dtype(self.dtype)?,
            style: self.style,
            head_dim: self.head_dim,
        })
    }

    /// [`at`](Self::at) the `t` consecutive positions from `start`.
    pub fn at_offset(&self, start: usize, t: usize) -> Result<RopeAngles> {
        let end = u32::try_from(start.saturating_add(t))
            .map_err(|_| DecoderError::Config(format!("position {} is beyond RoPE's u32 positions", start + t)))?;
        self.at(&Tensor::arange(start as u32, end, self.inv_freq.device())?)
    }
}

/// The `cos`/`sin` of one forward's positions, `(t, head_dim/2)`.
#[derive(Clone, Debug)]
pub struct RopeAngles {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    head_dim: usize,
}

impl RopeAngles {
    /// How many positions these angles rotate.
    pub fn len(&self) -> usize {
        self.cos.dims()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rotates `x`: `(b, heads, t, head_dim)`, row `i` at the `i`-th position.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (cos, sin) = self.check(x)?;
        let x = x.contiguous()?;
        Ok(match self.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope(&x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?,
        })
    }

    /// The obviously-correct twin of [`apply`](Self::apply), for tests.
    pub fn apply_slow(&self, x: &Tensor) -> Result<Tensor> {
        let (cos, sin) = self.check(x)?;
        Ok(match self.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope_slow(x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i_slow(x, &cos, &sin)?,
        })
    }

    fn check(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (_, _, t, d) = x.dims4()?;
        if d != self.head_dim {
            return Err(DecoderError::Config(format!("RoPE built for head_dim {} got {d}", self.head_dim)));
        }
        if t != self.len() {
            return Err(DecoderError::Config(format!("RoPE angles for {} positions, the input has {t}", self.len())));
        }
        Ok((self.cos.to_dtype(x.dtype())?, self.sin.to_dtype(x.dtype())?))
    }
}
