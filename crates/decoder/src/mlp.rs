//! Gated feed-forward blocks: SwiGLU (Llama, Qwen2, Mistral) and GeGLU (Gemma),
//! `down(act(gate(x)) ⊙ up(x))` (Shazeer 2020, "GLU Variants Improve Transformer").

use candle_core::Tensor;

use crate::activation::Activation;
use crate::error::Result;
use crate::linear::Linear;
use crate::weights::Weights;

#[derive(Clone, Debug)]
pub struct GatedMlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    act: Activation,
}

impl GatedMlp {
    /// Loads `gate_proj`, `up_proj` (`hidden → intermediate`) and `down_proj` from `vb`.
    pub fn new(hidden: usize, intermediate: usize, act: Activation, bias: bool, vb: &Weights) -> Result<Self> {
        Ok(Self {
            gate_proj: vb.linear(hidden, intermediate, bias, "gate_proj")?,
            up_proj: vb.linear(hidden, intermediate, bias, "up_proj")?,
            down_proj: vb.linear(intermediate, hidden, bias, "down_proj")?,
            act,
        })
    }

    /// `x`: `(b, t, hidden)` → `(b, t, hidden)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_add(x, None)
    }

    /// [`forward`](Self::forward) plus `residual`, added in the down projection's pass.
    pub fn forward_add(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let [gate, up] = Linear::forward_shared([&self.gate_proj, &self.up_proj], x)?;
        if self.act == Activation::Silu && crate::cpu_op::kernels_take(&gate) {
            // One fused pass instead of silu, then a product (two temporaries).
            return self.down_proj.forward_add(&gate.apply_op2_no_bwd(&up, &SiluMul)?, residual);
        }
        self.down_proj.forward_add(&(self.act.apply(&gate)? * up)?, residual)
    }
}

/// `silu(gate) · up` by `tessera-kernels` on the CPU (f32, same shapes).
struct SiluMul;

impl candle_core::CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "tessera-silu-mul"
    }

    fn cpu_fwd(
        &self,
        gs: &candle_core::CpuStorage,
        gl: &candle_core::Layout,
        us: &candle_core::CpuStorage,
        ul: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (g, u) =
            (crate::cpu_op::contiguous_f32(gs, gl, "silu_mul")?, crate::cpu_op::contiguous_f32(us, ul, "silu_mul")?);
        if gl.shape() != ul.shape() {
            candle_core::bail!("silu_mul: gate {:?} and up {:?} differ", gl.shape(), ul.shape())
        }
        let mut out = vec![0f32; g.len()];
        tessera_kernels::ops::silu_mul(tessera_kernels::ThreadPool::global(), g, u, &mut out)
            .map_err(candle_core::Error::wrap)?;
        Ok((candle_core::CpuStorage::F32(out), gl.shape().clone()))
    }
}

/// The plain two-layer MLP of ViT-style towers: `fc2(act(fc1(x)))`.
#[derive(Clone, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    act: Activation,
}

impl Mlp {
    pub fn new(hidden: usize, intermediate: usize, act: Activation, vb: &Weights) -> Result<Self> {
        Self::named(hidden, intermediate, act, vb, ("fc1", "fc2"))
    }

    /// [`new`](Self::new) with other names for the two layers (Qwen3-VL: `linear_fc1`, `linear_fc2`).
    pub fn named(
        hidden: usize,
        intermediate: usize,
        act: Activation,
        vb: &Weights,
        (first, second): (&str, &str),
    ) -> Result<Self> {
        Ok(Self {
            fc1: vb.linear(hidden, intermediate, true, first)?,
            fc2: vb.linear(intermediate, hidden, true, second)?,
            act,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_add(x, None)
    }

    /// [`forward`](Self::forward) plus `residual`; the activation and the residual are applied
    /// in the matmuls' passes where the kernels can.
    pub fn forward_add(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        self.fc2.forward_add(&self.fc1.forward_act(x, self.act)?, residual)
    }
}
