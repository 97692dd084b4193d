//! Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks"): the linear-attention
//! layer that Qwen3.5's text model (`Qwen3_5GatedDeltaNet`) interleaves with full-attention
//! layers. Instead of a growing KV cache, each sequence carries a fixed-size state: the last
//! `kernel − 1` inputs of a causal depthwise convolution and, per value head, a `k_dim × v_dim`
//! matrix `S`. Per token, with `q`, `k` L2-normalized (and `q` scaled by `1/√k_dim`),
//! `β = σ(b)` and the decay `g = −exp(A_log)·softplus(a + dt_bias)`:
//!
//! ```text
//! S ← exp(g)·S;   S ← S + k ⊗ β·(v − Sᵀk);   o = Sᵀq
//! ```
//!
//! then `o` is RMS-normalized per head, scaled by the norm's weight, gated by `silu(z)` and
//! projected out. Value heads share key heads in groups (`repeat_interleave`: value head `h`
//! reads key head `h / (v_heads / k_heads)`).
//!
//! transformers runs a prompt with the chunked form of the same recurrence (64 tokens at a time,
//! a triangular solve per chunk) and a decode step with the per-token form; they agree up to f32
//! rounding. Here both run the per-token form, in f32 on the host, so that a prompt run whole,
//! in pieces or a token at a time leaves the same state and gives the same outputs bit for bit.
//! The projections are [`Linear`] layers (dense or quantized). Weight names are the checkpoint's
//! (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, `conv1d`, `A_log`, `dt_bias`,
//! `norm`, `out_proj`); a GGUF source maps them to llama.cpp's, whose converter also changes
//! three things the [`DeltaLayout`] says how to read.

use candle_core::{DType, Tensor};

use crate::error::{DecoderError, Result};
use crate::linear::Linear;
use crate::weights::Weights;

/// A Gated DeltaNet layer's sizes (Qwen3.5's `linear_*` config keys).
#[derive(Clone, Debug, PartialEq)]
pub struct GatedDeltaConfig {
    pub hidden_size: usize,
    /// `linear_num_key_heads`.
    pub key_heads: usize,
    /// `linear_num_value_heads`: a multiple of `key_heads`.
    pub value_heads: usize,
    /// `linear_key_head_dim`.
    pub key_head_dim: usize,
    /// `linear_value_head_dim`.
    pub value_head_dim: usize,
    /// `linear_conv_kernel_dim`.
    pub conv_kernel: usize,
    /// The gated norm's epsilon (`rms_norm_eps`).
    pub eps: f64,
    /// How the weights are laid out: transformers' or llama.cpp's.
    pub layout: DeltaLayout,
}

/// How a Gated DeltaNet layer's weights are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeltaLayout {
    /// transformers' checkpoint: `A_log`, the conv kernel `(channels, 1, kernel)`, value heads
    /// grouped by key head (value head `h` reads key head `h / (value_heads / key_heads)`).
    #[default]
    Checkpoint,
    /// llama.cpp's converter (`conversion/qwen.py`, `Qwen3NextModel` and
    /// `_LinearAttentionVReorderBase`): `A_log` stored as `A = −exp(A_log)` (`ssm_a`), the conv
    /// kernel squeezed to `(channels, kernel)`, and, where value heads outnumber key heads, the
    /// value heads tiled over the key heads (value head `h` reads key head `h % key_heads`): the
    /// converter permutes every per-value-head row and column alike (`in_proj_qkv`'s value rows,
    /// `in_proj_z`, `in_proj_a` / `b`, the conv's value channels, `dt_bias`, `A`, `out_proj`'s
    /// columns), so the layer runs its heads in that order rather than permuting back — the
    /// same sums, and matrices quantized in the file stay as they are.
    LlamaCpp,
}

impl GatedDeltaConfig {
    fn key_dim(&self) -> usize {
        self.key_heads * self.key_head_dim
    }

    fn value_dim(&self) -> usize {
        self.value_heads * self.value_head_dim
    }

    /// The convolution's channels: queries, keys and values.
    fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    fn check(&self) -> Result<()> {
        let sizes = [self.hidden_size, self.key_heads, self.value_heads, self.key_head_dim, self.value_head_dim];
        if sizes.contains(&0) || self.conv_kernel == 0 {
            return Err(DecoderError::Config(format!("a Gated DeltaNet layer has a zero size: {self:?}")));
        }
        if !self.value_heads.is_multiple_of(self.key_heads) {
            return Err(DecoderError::Config(format!(
                "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                self.value_heads, self.key_heads
            )));
        }
        Ok(())
    }
}

/// One sequence's state in one Gated DeltaNet layer: fixed in size, whatever the sequence's
/// length. A new sequence starts from zeros.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaState {
    /// The convolution's last `kernel − 1` inputs per channel, `(conv_dim, kernel − 1)`.
    conv: Vec<f32>,
    /// `S` per value head, `(value_heads, key_head_dim, value_head_dim)`.
    recurrent: Vec<f32>,
}

impl DeltaState {
    /// The state's size in bytes.
    pub fn bytes(&self) -> usize {
        (self.conv.len() + self.recurrent.len()) * std::mem::size_of::<f32>()
    }
}

#[derive(Clone, Debug)]
pub struct GatedDeltaNet {
    cfg: GatedDeltaConfig,
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    out_proj: Linear,
    /// `(conv_dim, kernel)`.
    conv: Vec<f32>,
    /// `−exp(A_log)` per value head.
    neg_a: Vec<f32>,
    dt_bias: Vec<f32>,
    norm: Vec<f32>,
}

fn host(vb: &Weights, shape: &[usize], name: &str) -> Result<Vec<f32>> {
    Ok(vb.get_with_dtype(shape, name, DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

impl GatedDeltaNet {
    /// Loads the layer from `vb` (the layer's `linear_attn` prefix).
    pub fn new(cfg: &GatedDeltaConfig, vb: &Weights) -> Result<Self> {
        cfg.check()?;
        let (h, k) = (cfg.hidden_size, cfg.conv_kernel);
        let a = host(vb, &[cfg.value_heads], "A_log")?;
        let (neg_a, conv_shape) = match cfg.layout {
            DeltaLayout::Checkpoint => (a.iter().map(|a| -a.exp()).collect(), vec![cfg.conv_dim(), 1, k]),
            DeltaLayout::LlamaCpp => (a, vec![cfg.conv_dim(), k]),
        };
        Ok(Self {
            in_proj_qkv: vb.linear(h, cfg.conv_dim(), false, "in_proj_qkv")?,
            in_proj_z: vb.linear(h, cfg.value_dim(), false, "in_proj_z")?,
            in_proj_b: vb.linear(h, cfg.value_heads, false, "in_proj_b")?,
            in_proj_a: vb.linear(h, cfg.value_heads, false, "in_proj_a")?,
            out_proj: vb.linear(cfg.value_dim(), h, false, "out_proj")?,
            conv: host(vb, &conv_shape, "conv1d.weight")?,
            neg_a,
            dt_bias: host(vb, &[cfg.value_heads], "dt_bias")?,
            norm: host(vb, &[cfg.value_head_dim], "norm.weight")?,
            cfg: cfg.clone(),
        })
    }

    /// A new sequence's state: zeros.
    pub fn new_state(&self) -> DeltaState {
        let c = &self.cfg;
        DeltaState {
            conv: vec![0.0; c.conv_dim() * (c.conv_kernel - 1)],
            recurrent: vec![0.0; c.value_heads * c.key_head_dim * c.value_head_dim],
        }
    }

    /// `x`: `(1, t, hidden)`, the next `t` positions of the sequence whose state is `state`
    /// (advanced past them) → `(1, t, hidden)`.
    pub fn forward(&self, x: &Tensor, state: &mut DeltaState) -> Result<Tensor> {
        self.forward_sequences(x, &mut [state])
    }

    /// `x`: `(1, t, hidden)` → `(1, t, hidden)`. With one state, the rows are the next `t`
    /// positions of its sequence; with `n > 1`, `t == n` and row `i` is the next token of the
    /// sequence whose state is `states[i]` (a batched decode step). The projections run over
    /// every row at once; the recurrence runs per sequence on its own state, each advanced past
    /// its rows.
    pub fn forward_sequences(&self, x: &Tensor, states: &mut [&mut DeltaState]) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let n = states.len();
        if b != 1 || n == 0 || (n > 1 && n != t) {
            return Err(DecoderError::Config(format!(
                "a Gated DeltaNet layer takes (1, t, hidden) rows of one sequence, or one row for each of \
                 several: got ({b}, {t}) rows for {n} states"
            )));
        }
        let c = &self.cfg;
        let rows = |y: Tensor| -> Result<Vec<f32>> { Ok(y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?) };
        let [qkv, z, beta, a] =
            Linear::forward_shared([&self.in_proj_qkv, &self.in_proj_z, &self.in_proj_b, &self.in_proj_a], x)?;
        let (qkv, z, beta, a) = (rows(qkv)?, rows(z)?, rows(beta)?, rows(a)?);
        let (cd, vh, vd) = (c.conv_dim(), c.value_heads, c.value_head_dim);
        let per = t / n;
        let mut out = vec![0f32; t * c.value_dim()];
        for (s, state) in states.iter_mut().enumerate() {
            let r = s * per..(s + 1) * per;
            let mixed = self.convolve(&qkv[r.start * cd..r.end * cd], per, state);
            for (i, row) in r.clone().zip(mixed.chunks_exact(cd)) {
                let heads = i * vh..(i + 1) * vh;
                let o = &mut out[i * vh * vd..(i + 1) * vh * vd];
                self.recur(row, &z[i * vh * vd..(i + 1) * vh * vd], &beta[heads.clone()], &a[heads], state, o);
            }
        }
        let o = Tensor::from_vec(out, (1, t, c.value_dim()), x.device())?.to_dtype(x.dtype())?;
        self.out_proj.forward(&o)
    }

    /// One token: its convolved `row` `(conv_dim,)`, gate `z` `(value_heads·v_dim,)` and `b`, `a`
    /// `(value_heads,)` advance `state` and give the gated, normed output `o` `(value_heads·v_dim,)`.
    fn recur(&self, row: &[f32], z: &[f32], beta: &[f32], a: &[f32], state: &mut DeltaState, o: &mut [f32]) {
        let c = &self.cfg;
        let (kd, vd, key_dim) = (c.key_head_dim, c.value_head_dim, c.key_dim());
        let group = c.value_heads / c.key_heads;
        let scale = 1.0 / (kd as f32).sqrt();
        let (mut q, mut k) = (vec![0f32; kd], vec![0f32; kd]);
        for h in 0..c.value_heads {
            let kh = match c.layout {
                DeltaLayout::Checkpoint => h / group,
                DeltaLayout::LlamaCpp => h % c.key_heads,
            };
            l2_normalized(&row[kh * kd..(kh + 1) * kd], &mut q, scale);
            l2_normalized(&row[key_dim + kh * kd..key_dim + (kh + 1) * kd], &mut k, 1.0);
            let v = &row[2 * key_dim + h * vd..2 * key_dim + (h + 1) * vd];
            let decay = (self.neg_a[h] * softplus(a[h] + self.dt_bias[h])).exp();
            let s = &mut state.recurrent[h * kd * vd..(h + 1) * kd * vd];
            let o = &mut o[h * vd..(h + 1) * vd];
            delta_step(s, &q, &k, v, sigmoid(beta[h]), decay, o);
            gated_rms_norm(o, &z[h * vd..(h + 1) * vd], &self.norm, c.eps as f32);
        }
    }

    /// The causal depthwise convolution of `t` rows of `qkv` `(t, conv_dim)` after the state's
    /// last inputs, SiLU applied; the state keeps the last `kernel − 1` inputs.
    fn convolve(&self, qkv: &[f32], t: usize, state: &mut DeltaState) -> Vec<f32> {
        let (cd, kk) = (self.cfg.conv_dim(), self.cfg.conv_kernel);
        let keep = kk - 1;
        let mut out = vec![0f32; t * cd];
        let mut seq = vec![0f32; keep + t];
        for ch in 0..cd {
            seq[..keep].copy_from_slice(&state.conv[ch * keep..(ch + 1) * keep]);
            for i in 0..t {
                seq[keep + i] = qkv[i * cd + ch];
            }
            let w = &self.conv[ch * kk..(ch + 1) * kk];
            for i in 0..t {
                let sum: f32 = w.iter().zip(&seq[i..i + kk]).map(|(w, x)| w * x).sum();
                out[i * cd + ch] = silu(sum);
            }
            state.conv[ch * keep..(ch + 1) * keep].copy_from_slice(&seq[t..t + keep]);
        }
        out
    }
}

/// One token of one head: `S ← decay·S`, `S ← S + k ⊗ β(v − Sᵀk)`, `o = Sᵀq`; `S` is
/// `(k_dim, v_dim)` row-major.
fn delta_step(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], beta: f32, decay: f32, o: &mut [f32]) {
    let vd = v.len();
    s.iter_mut().for_each(|x| *x *= decay);
    let mut delta = vec![0f32; vd];
    for (r, &kr) in s.chunks_exact(vd).zip(k) {
        delta.iter_mut().zip(r).for_each(|(d, &x)| *d += x * kr);
    }
    delta.iter_mut().zip(v).for_each(|(d, &v)| *d = (v - *d) * beta);
    o.iter_mut().for_each(|x| *x = 0.0);
    for ((r, &kr), &qr) in s.chunks_exact_mut(vd).zip(k).zip(q) {
        for ((x, &d), o) in r.iter_mut().zip(&delta).zip(o.iter_mut()) {
            *x += kr * d;
            *o += *x * qr;
        }
    }
}

/// `x / √(Σx² + 1e-6) · scale` into `out` (FLA's and transformers' `l2norm`).
fn l2_normalized(x: &[f32], out: &mut [f32], scale: f32) {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = v * inv * scale);
}

/// `Qwen3_5RMSNormGated`: `o / rms(o) · weight · silu(gate)`.
fn gated_rms_norm(o: &mut [f32], gate: &[f32], weight: &[f32], eps: f32) {
    let inv = 1.0 / (o.iter().map(|v| v * v).sum::<f32>() / o.len() as f32 + eps).sqrt();
    for ((o, &w), &g) in o.iter_mut().zip(weight).zip(gate) {
        *o = w * (*o * inv) * silu(g);
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// PyTorch's `softplus` (β = 1, linear above 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}
