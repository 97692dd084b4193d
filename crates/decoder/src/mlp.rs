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
        let gate = self.act.apply(&self.gate_proj.forward(x)?)?;
        let up = self.up_proj.forward(x)?;
        self.down_proj.forward(&(gate * up)?)
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
        Ok(Self {
            fc1: vb.linear(hidden, intermediate, true, "fc1")?,
            fc2: vb.linear(intermediate, hidden, true, "fc2")?,
            act,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&self.act.apply(&self.fc1.forward(x)?)?)
    }
}
