//! Attention in bf16 and f16 at the head sizes of the real models (64: SmolVLM, SigLIP, CLIP;
//! 128: llava-1.5-7b), against the same inputs in f32 on the same device. On CUDA built with
//! `flash-attn` (scripts/gpu/build.sh) this runs flash-attention's 64- and 128-wide kernels (the
//! tiny checkpoints of `half_precision`, 8 and 16 wide, run in the 64-wide one), and it must run
//! there: `flash_attention` returning `None` on such a device fails the test. Elsewhere the half
//! path is Candle's ops (tessera's one-pass logits on the CPU), held to the same bound.
//!
//! Each case reads the keys and values through a cache's narrowed view (a buffer longer than
//! the keys, filled past them with values that must not count), as generation does: a whole
//! prompt, a later block of a prompt over the cache, a decode step, and a vision tower's
//! bidirectional block.

mod common;

use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use tessera_decoder::attention::{attention_in_query_chunks, capped_attention, flash_attention, Scores};
use tessera_decoder::{flash_attention_enabled, AttentionMask};

/// Deterministic values in [-4, 4] (a sum of four uniforms: roughly normal, σ ≈ 1.15), on `device`.
fn values(seed: u64, shape: &[usize], device: &Device) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let data: Vec<f32> = (0..n).map(|_| (uniform() + uniform() + uniform() + uniform()) * 2.0).collect();
    Ok(Tensor::from_vec(data, shape, device)?)
}

struct Case {
    what: &'static str,
    heads: usize,
    kv_heads: usize,
    d: usize,
    queries: usize,
    keys: usize,
    mask: AttentionMask,
}

/// The largest |half − f32| over a case's outputs, in units of the dtype's rounding of 1
/// (bf16: 2⁻⁸, f16: 2⁻¹¹), and whether flash-attention computed it.
fn error_in_ulps(case: &Case, dtype: DType, device: &Device, seed: u64) -> Result<(f32, bool)> {
    let Case { heads, kv_heads, d, queries, keys, .. } = *case;
    let capacity = keys + 64; // the cache's buffer: positions past `keys` hold other values
    let q = values(seed, &[1, heads, queries, d], device)?.to_dtype(dtype)?;
    let k = values(seed + 1, &[1, kv_heads, capacity, d], device)?.to_dtype(dtype)?.narrow(2, 0, keys)?;
    let v = values(seed + 2, &[1, kv_heads, capacity, d], device)?.to_dtype(dtype)?.narrow(2, 0, keys)?;
    let scores = Scores::scaled(1.0 / (d as f64).sqrt());

    let up = |t: &Tensor| t.to_dtype(DType::F32);
    let bias = case.mask.bias(queries, keys, DType::F32, device)?;
    let (reference, _) = capped_attention(&up(&q)?, &up(&k)?, &up(&v)?, bias.as_ref(), scores)?;

    let flash_here = flash_attention_enabled() && device.is_cuda();
    let (half, flashed) = match flash_attention(&q, &k, &v, &case.mask, scores)? {
        Some(out) => (out.transpose(1, 2)?, true), // (b, t, heads, d) → (b, heads, t, d)
        None => {
            ensure!(!flash_here, "{}: flash-attention is on for CUDA but did not take {dtype:?}", case.what);
            (attention_in_query_chunks(&q, &k, &v, &case.mask, None, scores, queries)?, false)
        }
    };
    let err = (half.to_dtype(DType::F32)? - reference)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    let ulp = if dtype == DType::BF16 { 2f32.powi(-8) } else { 2f32.powi(-11) };
    Ok((err / ulp, flashed))
}

/// The bound on |half − f32|, in units of the dtype's rounding of 1. Outputs are weighted means
/// of values in [-4, 4]; rounding the logits (Candle's path: scores, scale and mask in the
/// dtype), the probabilities and the output leaves them within 7.6 units on the CPU (llava-7b's
/// 128-wide heads, in f16); 12 leaves room for cuBLAS's and the kernels' other summation orders.
/// What a mistake costs, measured on the CPU: the wrong mask (bidirectional for causal) 846
/// units; a scale 1% off, 50–80 units in f16 on the prompts (bf16's own rounding hides it).
const MAX_ULPS: f32 = 12.0;

#[test]
fn half_attention_at_real_head_sizes_matches_f32() -> Result<()> {
    let device = common::test_device()?;
    let causal = AttentionMask::Causal;
    let cases = [
        Case {
            what: "SmolVLM text, a whole prompt",
            heads: 9,
            kv_heads: 3,
            d: 64,
            queries: 300,
            keys: 300,
            mask: causal.clone(),
        },
        Case {
            what: "SmolVLM text, a later block",
            heads: 9,
            kv_heads: 3,
            d: 64,
            queries: 37,
            keys: 337,
            mask: causal.clone(),
        },
        Case {
            what: "SmolVLM text, a decode step",
            heads: 9,
            kv_heads: 3,
            d: 64,
            queries: 1,
            keys: 338,
            mask: causal.clone(),
        },
        Case {
            what: "llava-7b text, a whole prompt",
            heads: 32,
            kv_heads: 32,
            d: 128,
            queries: 200,
            keys: 200,
            mask: causal.clone(),
        },
        Case {
            what: "llava-7b text, a decode step",
            heads: 32,
            kv_heads: 32,
            d: 128,
            queries: 1,
            keys: 201,
            mask: causal,
        },
        Case {
            what: "a vision tower",
            heads: 12,
            kv_heads: 12,
            d: 64,
            queries: 257,
            keys: 257,
            mask: AttentionMask::Bidirectional,
        },
    ];
    let mut report = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for dtype in [DType::BF16, DType::F16] {
            let (ulps, flashed) = error_in_ulps(case, dtype, &device, 10 * i as u64)?;
            let path = if flashed { "flash-attention" } else { "generic" };
            report.push(format!("{} ({dtype:?}, {path}): {ulps:.2} units", case.what));
            ensure!(
                ulps <= MAX_ULPS,
                "{} in {dtype:?} ({path}): {ulps:.2} units of rounding from f32 (bound {MAX_ULPS})",
                case.what
            );
        }
    }
    println!("{}", report.join("\n"));
    Ok(())
}
