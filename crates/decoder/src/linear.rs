//! A linear layer whose weight is a dense tensor or quantized GGUF blocks. On the CPU,
//! quantized weights go through tessera's own kernels (`tessera-kernels`: SIMD int8 dot
//! products for decode, a tiled GEMM for prefill); on GPUs through Candle's quantized matmul.

use std::sync::Arc;

use candle_core::quantized::QMatMul;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Shape, Tensor};
use tessera_kernels::QMatrix;

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
    Packed(PackedMatMul),
    Quantized(QMatMul),
}

impl Linear {
    pub fn new(weight: MatrixWeight, bias: Option<Tensor>) -> Result<Self> {
        let (weight, out_dim) = match weight {
            MatrixWeight::Dense(w) => {
                let out = w.dim(0)?;
                (LinearWeight::Dense(candle_nn::Linear::new(w, None)), out)
            }
            MatrixWeight::Packed(m) => {
                let out = m.rows();
                (LinearWeight::Packed(PackedMatMul(m)), out)
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
            LinearWeight::Packed(p) => {
                // The kernels take f32 activations.
                let dtype = x.dtype();
                let y = x.to_dtype(DType::F32)?.contiguous()?.apply_op1_no_bwd(p)?;
                y.to_dtype(dtype)?
            }
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

/// `x Wᵀ` by `tessera-kernels` as a Candle CPU op.
#[derive(Clone, Debug)]
struct PackedMatMul(Arc<QMatrix>);

impl CustomOp1 for PackedMatMul {
    fn name(&self) -> &'static str {
        "tessera-qmatmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let w = &self.0;
        let x = crate::cpu_op::contiguous_f32(storage, layout, "quantized matmul")?;
        let dims = layout.shape().dims();
        let k = dims.last().copied().unwrap_or(0);
        if k != w.cols() {
            candle_core::bail!("quantized matmul: input width {k}, the weight takes {} ({:?})", w.cols(), w);
        }
        let m = x.len() / k.max(1);
        let mut out = vec![0f32; m * w.rows()];
        w.matmul(x, m, &mut out).map_err(candle_core::Error::wrap)?;
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = w.rows();
        }
        Ok((CpuStorage::F32(out), Shape::from(out_dims)))
    }
}
