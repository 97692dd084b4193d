//! A linear layer whose weight is either a dense tensor or quantized GGUF blocks.

use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor};

use crate::error::Result;
use crate::weights::MatrixWeight;

/// `y = x Wᵀ + b` over the last dimension; `W` is `(out, in)`.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: LinearWeight,
    bias: Option<Tensor>,
    out_dim: usize,
}

#[derive(Clone, Debug)]
enum LinearWeight {
    Dense(candle_nn::Linear),
    Quantized(QMatMul),
}

impl Linear {
    pub fn new(weight: MatrixWeight, bias: Option<Tensor>) -> Result<Self> {
        let (weight, out_dim) = match weight {
            MatrixWeight::Dense(w) => {
                let out = w.dim(0)?;
                (LinearWeight::Dense(candle_nn::Linear::new(w, None)), out)
            }
            MatrixWeight::Quantized(q) => {
                let out = q.shape().dims()[0];
                (LinearWeight::Quantized(QMatMul::from_arc(q)?), out)
            }
        };
        Ok(Self { weight, bias, out_dim })
    }

    /// A dense layer from plain tensors (tests, synthetic models).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        Self::new(MatrixWeight::Dense(weight), bias)
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `x`: `(..., in)` → `(..., out)`, in the dtype of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            LinearWeight::Dense(l) => l.forward(x)?,
            LinearWeight::Quantized(q) => {
                // Candle's quantized matmul takes f32 activations.
                let dtype = x.dtype();
                let y = q.forward(&x.to_dtype(DType::F32)?)?;
                y.to_dtype(dtype)?
            }
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(&b.to_dtype(y.dtype())?)?,
            None => y,
        })
    }
}
