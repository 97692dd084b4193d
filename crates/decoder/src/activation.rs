//! Activation functions, named as in Hugging Face configs (`hidden_act`).

use candle_core::Tensor;
use serde::Deserialize;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// `x·σ(x)` (SwiGLU's gate).
    #[serde(rename = "silu", alias = "swish")]
    Silu,
    /// The tanh approximation of GELU (`gelu_pytorch_tanh`, GeGLU's gate in Gemma).
    #[serde(rename = "gelu_pytorch_tanh", alias = "gelu_new", alias = "gelu_fast")]
    GeluTanh,
    /// The exact (erf) GELU.
    #[serde(rename = "gelu")]
    Gelu,
    /// `x·σ(1.702x)` (CLIP).
    #[serde(rename = "quick_gelu")]
    QuickGelu,
}

impl Activation {
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Self::Silu => candle_nn::ops::silu(x)?,
            Self::GeluTanh => x.gelu()?,
            Self::Gelu => x.gelu_erf()?,
            Self::QuickGelu => (x * candle_nn::ops::sigmoid(&(x * 1.702)?)?)?,
        })
    }
}
