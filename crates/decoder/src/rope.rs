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

/// Precomputed `cos`/`sin` tables, `(max_positions, head_dim/2)`.
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    head_dim: usize,
}

impl RotaryEmbedding {
    pub fn new(cfg: &RopeConfig, head_dim: usize, max_positions: usize, dtype: DType, device: &Device) -> Result<Self> {
        if !head_dim.is_multiple_of(2) {
            return Err(DecoderError::Config(format!("RoPE needs an even head_dim, got {head_dim}")));
        }
        let inv_freq = cfg.inv_freq(head_dim);
        let half = inv_freq.len();
        let mut angles = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            angles.extend(inv_freq.iter().map(|f| p as f32 * f));
        }
        let angles = Tensor::from_vec(angles, (max_positions, half), device)?;
        Ok(Self {
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
            style: cfg.style,
            head_dim,
        })
    }

    pub fn max_positions(&self) -> usize {
        self.cos.dims()[0]
    }

    /// Rotates `x`: `(b, heads, t, head_dim)` whose first position is `offset`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let (_, _, t, d) = x.dims4()?;
        if d != self.head_dim {
            return Err(DecoderError::Config(format!("RoPE built for head_dim {} got {d}", self.head_dim)));
        }
        if offset + t > self.max_positions() {
            return Err(DecoderError::ContextOverflow { requested: offset + t, max: self.max_positions() });
        }
        let cos = self.cos.narrow(0, offset, t)?.to_dtype(x.dtype())?;
        let sin = self.sin.narrow(0, offset, t)?.to_dtype(x.dtype())?;
        let x = x.contiguous()?;
        Ok(match self.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope(&x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?,
        })
    }

    /// The obviously-correct twin of [`apply`](Self::apply), for tests.
    pub fn apply_slow(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let (_, _, t, _) = x.dims4()?;
        let cos = self.cos.narrow(0, offset, t)?.to_dtype(x.dtype())?;
        let sin = self.sin.narrow(0, offset, t)?.to_dtype(x.dtype())?;
        Ok(match self.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope_slow(x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i_slow(x, &cos, &sin)?,
        })
    }
}
