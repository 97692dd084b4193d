//! Flash-attention v2 (Dao 2023, "FlashAttention-2") on CUDA, through candle-flash-attn (the
//! `flash-attn` feature; tessera's build: third_party/candle-flash-attn). The generic path tries it
//! first and takes Candle's ops where it does not apply. Without the feature it never applies.

#[cfg(feature = "flash-attn")]
use candle_core::DType;
use candle_core::Tensor;

use super::Scores;
use crate::error::Result;
use crate::mask::AttentionMask;

/// Flash-attention v2 (the `flash-attn` feature) for `q` `(b, heads, tq, d)` over `k`/`v`
/// `(b, kv_heads, tk, d)` on CUDA in f16/bf16, when the mask is causal (bottom-right aligned, so
/// a prompt's later blocks and cached decoding work) or bidirectional, with no soft-cap and `k`/`v`
/// in the queries' dtype: `(b, tq, heads, d)`, or `None` where it does not apply (the caller
/// takes the generic path). It reads the tensors through their strides (the head-major layout and
/// a cache's narrowed view: no copies); the scores stay in f32 inside the kernel.
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &AttentionMask,
    scores: Scores,
) -> Result<Option<Tensor>> {
    #[cfg(feature = "flash-attn")]
    {
        let causal = match mask {
            AttentionMask::Causal => true,
            AttentionMask::Bidirectional => false,
            _ => return Ok(None),
        };
        let dtype = q.dtype();
        if scores.softcap.is_some()
            || !flash_attention_enabled()
            || !q.device().is_cuda()
            || !matches!(dtype, DType::F16 | DType::BF16)
            || k.dtype() != dtype
            || v.dtype() != dtype
            || !flash_takes_head(q.dim(3)?)
        {
            return Ok(None);
        }
        // flash_attn takes (b, seq, heads, d) with the last dimension contiguous.
        let rows = |x: &Tensor| -> Result<Tensor> {
            let x = x.transpose(1, 2)?;
            Ok(if x.stride()[3] == 1 { x } else { x.contiguous()? })
        };
        Ok(Some(candle_flash_attn::flash_attn(&rows(q)?, &rows(k)?, &rows(v)?, scores.scale as f32, causal)?))
    }
    #[cfg(not(feature = "flash-attn"))]
    {
        let _ = (q, k, v, mask, scores);
        Ok(None)
    }
}

/// Whether the flash-attention kernels take heads `d` wide: multiples of 8 up to 256 (tessera's
/// build of candle-flash-attn has the 64-, 96-, 128- and 256-wide kernels; a narrower head runs
/// masked in the next one up: third_party/candle-flash-attn/README.md).
#[cfg(feature = "flash-attn")]
fn flash_takes_head(d: usize) -> bool {
    d.is_multiple_of(8) && d <= 256
}

/// Whether attention on CUDA runs flash-attention where it applies (f16/bf16, causal or
/// bidirectional masks, no captured weights): when built with the `flash-attn` feature, unless
/// `TESSERA_FLASH_ATTN` is `off` (to measure what it is worth).
pub fn flash_attention_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    cfg!(feature = "flash-attn")
        && *ENABLED.get_or_init(|| !std::env::var("TESSERA_FLASH_ATTN").is_ok_and(|v| v.eq_ignore_ascii_case("off")))
}
