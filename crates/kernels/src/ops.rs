//! Elementwise ops of the fused CPU paths: a vectorisable `exp` for softmax arguments and
//! SwiGLU's `silu(gate) · up` in one pass.

use crate::error::{KernelError, Result};
use crate::pool::{SendPtr, ThreadPool};

/// `eᵡ` for x ≤ 0 (softmax arguments), relative error < 2e-7; 0 below −87.
#[inline]
pub fn exp(x: f32) -> f32 {
    if x < -87.0 {
        return 0.0;
    }
    // eˣ = 2ⁿ · e^r, n = round(x / ln 2), |r| ≤ ln2 / 2; e^r by its Taylor polynomial to r⁷.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12582912.0; // 1.5 · 2²³: adding it rounds to an integer (no libm call)
    let n = (x * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `silu(g) · u = g · σ(g) · u` elementwise into `out` (SwiGLU's gate), with the polynomial
/// `exp`; split across the pool when large.
pub fn silu_mul(pool: &ThreadPool, gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    if gate.len() != up.len() || gate.len() != out.len() {
        return Err(KernelError::Shape(format!("silu_mul of {} × {} into {}", gate.len(), up.len(), out.len())));
    }
    let body = |g: &[f32], u: &[f32], o: &mut [f32]| {
        for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
            let sig = if g >= 0.0 {
                1.0 / (1.0 + exp(-g))
            } else {
                let e = exp(g);
                e / (1.0 + e)
            };
            *o = g * sig * u;
        }
    };
    let n = gate.len();
    let parts = pool.threads();
    if n < 1 << 14 || parts == 1 {
        body(gate, up, out);
        return Ok(());
    }
    let per = n.div_ceil(parts);
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|p| {
        let dst = &dst;
        let (a, b) = ((p * per).min(n), ((p + 1) * per).min(n));
        // SAFETY: part p writes out[a..b] only.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add(a), b - a) };
        body(&gate[a..b], &up[a..b], o);
    })
}

