//! RMSNorm (Zhang & Sennrich 2019), as in transformers' `LlamaRMSNorm`: normalise in f32,
//! scale by the weight. Gemma stores the weight as an offset from one (`x̂·(1+w)`).

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};

use crate::error::Result;
use crate::weights::Weights;

#[derive(Clone, Debug)]
pub struct RmsNorm {
    /// The effective scale (already `1 + w` for Gemma-style norms).
    weight: Tensor,
    eps: f32,
}

/// How a checkpoint stores the RMSNorm scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormStyle {
    /// `x̂·w` (Llama, Qwen2, Mistral).
    #[default]
    Plain,
    /// `x̂·(1+w)` (Gemma).
    OnePlusWeight,
}

impl RmsNorm {
    pub fn new(weight: Tensor, eps: f64, style: NormStyle) -> Result<Self> {
        let weight = match style {
            NormStyle::Plain => weight,
            NormStyle::OnePlusWeight => (weight.to_dtype(DType::F32)? + 1.0)?.to_dtype(weight.dtype())?,
        };
        Ok(Self { weight, eps: eps as f32 })
    }

    /// Loads `weight` of shape `(dim,)` from `vb`.
    pub fn load(dim: usize, eps: f64, style: NormStyle, vb: &Weights) -> Result<Self> {
        Self::new(vb.get(&[dim], "weight")?, eps, style)
    }

    /// A norm with no learned scale (`x̂`; Gemma 4's `v_norm`, `with_scale=False`).
    pub fn unscaled(dim: usize, eps: f64, dtype: DType, device: &candle_core::Device) -> Result<Self> {
        Self::new(Tensor::ones(dim, dtype, device)?, eps, NormStyle::Plain)
    }

    /// `x`: `(..., dim)` → same shape and dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        use crate::cpu_op::kernels_take;
        if kernels_take(x) && kernels_take(&self.weight) && self.weight.dims() == [x.dim(candle_core::D::Minus1)?] {
            return Ok(x.contiguous()?.apply_op2_no_bwd(&self.weight, &CpuRmsNorm { eps: self.eps })?);
        }
        Ok(candle_nn::ops::rms_norm(x, &self.weight, self.eps)?)
    }

    /// The obviously-correct twin of [`forward`](Self::forward), for tests.
    pub fn forward_slow(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let var = x.sqr()?.mean_keepdim(candle_core::D::Minus1)?;
        let x = x.broadcast_div(&(var + self.eps as f64)?.sqrt()?)?;
        Ok(x.to_dtype(dtype)?.broadcast_mul(&self.weight)?)
    }
}

/// Candle's `rms_norm` on the CPU in f32, bit for bit, by `tessera_kernels::ops::rms_norm`:
/// rows on the kernels' pool (Candle's own runs up to 32 rows on the calling thread, while the
/// pool waits, and more on rayon's threads), and the output not zeroed first.
struct CpuRmsNorm {
    eps: f32,
}

impl CustomOp2 for CpuRmsNorm {
    fn name(&self) -> &'static str {
        "tessera-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = crate::cpu_op::contiguous_f32(s1, l1, "rms_norm input")?;
        let alpha = crate::cpu_op::contiguous_f32(s2, l2, "rms_norm weight")?;
        let pool = tessera_kernels::ThreadPool::global();
        // SAFETY: `rms_norm` writes every element of its output when it returns Ok.
        let out = unsafe {
            crate::cpu_op::written_by(x.len(), |o| tessera_kernels::ops::rms_norm(pool, x, alpha, self.eps, o))?
        };
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// LayerNorm with weight and bias (vision towers).
#[derive(Clone, Debug)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub fn load(dim: usize, eps: f64, vb: &Weights) -> Result<Self> {
        Ok(Self { weight: vb.get(&[dim], "weight")?, bias: vb.get(&[dim], "bias")?, eps: eps as f32 })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(x, &self.weight, &self.bias, self.eps)?)
    }
}
