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
        let on_kernels = crate::cpu_op::kernels_take(x) && x.is_contiguous();
        Ok(match self {
            Self::Silu => candle_nn::ops::silu(x)?,
            Self::GeluTanh if on_kernels => x.apply_op1_no_bwd(&GELU_TANH_CPU)?,
            Self::GeluTanh => x.gelu()?,
            Self::Gelu => x.gelu_erf()?,
            Self::QuickGelu if on_kernels => x.apply_op1_no_bwd(&QUICK_GELU_CPU)?,
            Self::QuickGelu => (x * candle_nn::ops::sigmoid(&(x * 1.702)?)?)?,
        })
    }
}

/// An activation by `tessera-kernels` on the CPU in f32, on every thread of the global pool.
struct ElementwiseCpu {
    /// Candle's name for the op.
    name: &'static str,
    /// The name in an error.
    what: &'static str,
    run: fn(&tessera_kernels::ThreadPool, &[f32], &mut [f32]) -> tessera_kernels::Result<()>,
}

/// `gelu_pytorch_tanh`: vectorised, with no libm `tanhf` per value.
const GELU_TANH_CPU: ElementwiseCpu =
    ElementwiseCpu { name: "tessera-gelu-tanh", what: "gelu", run: tessera_kernels::ops::gelu_tanh };

/// QuickGELU in one pass, the same bits as Candle's three ops (which run on one thread: 2% of a
/// 2B tower's CPU time in a profile, the other thread waiting).
const QUICK_GELU_CPU: ElementwiseCpu =
    ElementwiseCpu { name: "tessera-quick-gelu", what: "quick gelu", run: tessera_kernels::ops::quick_gelu };

impl candle_core::CustomOp1 for ElementwiseCpu {
    fn name(&self) -> &'static str {
        self.name
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let x = crate::cpu_op::contiguous_f32(s, l, self.what)?;
        let mut out = vec![0f32; x.len()];
        (self.run)(tessera_kernels::ThreadPool::global(), x, &mut out).map_err(candle_core::Error::wrap)?;
        Ok((candle_core::CpuStorage::F32(out), l.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The CPU kernel's QuickGELU gives the bits of Candle's `x * sigmoid(x * 1.702)`.
    #[test]
    fn quick_gelu_on_the_kernels_equals_candles_ops_bit_for_bit() {
        let values: Vec<f32> =
            (-4000..4000).map(|i| i as f32 * 0.013).chain([0.0, -0.0, 88.0, -104.0, 1e-30]).collect();
        let x = Tensor::new(values.as_slice(), &Device::Cpu).expect("tensor");
        let candle = (&x * candle_nn::ops::sigmoid(&(&x * 1.702).expect("scale")).expect("sigmoid")).expect("mul");
        let kernels = Activation::QuickGelu.apply(&x).expect("kernels");
        let bits = |t: &Tensor| t.to_vec1::<f32>().expect("values").iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(crate::cpu_op::kernels_take(&x), "the kernels take this tensor");
        assert_eq!(bits(&kernels), bits(&candle));
    }
}
