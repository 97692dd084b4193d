//! The generic path's attention logits for bf16/f16 scores on the CPU kernels' device, in one
//! pass: `scale · s + bias` in f32 for the softmax, rounded where Candle's three ops (an affine,
//! a broadcast add, a cast) round it, so that [`super::capped_attention`] gives the same bits with
//! it as without (the test below checks).

use candle_core::{DType, Tensor};

/// `scale · s + bias` for bf16/f16 scores `s` `(…, rows, tk)` on the CPU kernels' device, in f32
/// for the softmax, rounded where Candle's ops round it on the generic path (`Tensor::affine`
/// with the scale in the scores' dtype, a broadcast add, a cast): one pass instead of three,
/// the same bits (a test checks). Row `r` takes the bias row `r mod queries` `(queries, tk)`.
pub(super) struct HalfLogits {
    pub(super) scale: f64,
    pub(super) queries: usize,
}

impl HalfLogits {
    /// Whether the op takes `scores`: bf16 or f16 on the CPU kernels' device.
    pub(super) fn takes(scores: &Tensor) -> bool {
        matches!(scores.dtype(), DType::BF16 | DType::F16) && crate::cpu_op::kernels_run_on(scores.device())
    }

    fn logits<T: HalfFloat>(&self, s: &[T], bias: Option<&[T]>, tk: usize) -> candle_core::Result<Vec<f32>> {
        let queries = self.queries.max(1);
        if tk == 0 || !s.len().is_multiple_of(tk) || bias.is_some_and(|b| b.len() != queries * tk) {
            candle_core::bail!("attention logits: {} scores, {tk} keys, {queries} bias rows", s.len());
        }
        // `Tensor::affine` rounds its factor to the dtype, then each op rounds its result;
        // `+ 0.0` is the affine's addend (it turns −0 into +0).
        let mul = T::round_f64(self.scale);
        let fill = |r: usize, row: &mut [std::mem::MaybeUninit<f32>]| {
            let scores = &s[r * tk..(r + 1) * tk];
            match bias {
                Some(b) => {
                    let b = &b[(r % queries) * tk..(r % queries + 1) * tk];
                    for ((o, &x), &b) in row.iter_mut().zip(scores).zip(b) {
                        o.write(T::round(T::round(x.to_f32() * mul) + 0.0 + b.to_f32()));
                    }
                }
                None => {
                    for (o, &x) in row.iter_mut().zip(scores) {
                        o.write(T::round(x.to_f32() * mul) + 0.0);
                    }
                }
            }
        };
        // SAFETY: every row of `tk` is written, and the rows tile the output (`s.len()` is a
        // multiple of `tk`, checked above).
        unsafe {
            crate::cpu_op::written_by(s.len(), |out| {
                tessera_kernels::for_each_row(tessera_kernels::ThreadPool::global(), out, tk, 64, &fill)
            })
        }
    }

    fn run(
        &self,
        s: &candle_core::CpuStorage,
        sl: &candle_core::Layout,
        bias: Option<(&candle_core::CpuStorage, &candle_core::Layout)>,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use crate::cpu_op::contiguous as slice;
        use candle_core::CpuStorage::{BF16, F16};
        let tk = sl.shape().dims().last().copied().unwrap_or(0);
        let out = match (s, bias) {
            (BF16(d), None) => self.logits(slice(d, sl, "attention logits")?, None, tk)?,
            (BF16(d), Some((BF16(b), bl))) => {
                self.logits(slice(d, sl, "attention logits")?, Some(slice(b, bl, "attention logits bias")?), tk)?
            }
            (F16(d), None) => self.logits(slice(d, sl, "attention logits")?, None, tk)?,
            (F16(d), Some((F16(b), bl))) => {
                self.logits(slice(d, sl, "attention logits")?, Some(slice(b, bl, "attention logits bias")?), tk)?
            }
            _ => candle_core::bail!("attention logits take bf16 or f16 scores and a bias of the same dtype"),
        };
        Ok((candle_core::CpuStorage::F32(out), sl.shape().clone()))
    }
}

/// bf16 and f16 as f32 values: exact widening, and rounding to the nearest value of the type
/// (what `half`'s arithmetic does after each f32 operation).
trait HalfFloat: Copy + Sync {
    fn to_f32(self) -> f32;
    fn round(x: f32) -> f32;
    /// `x` rounded to the type (once, as `WithDType::from_f64` rounds it).
    fn round_f64(x: f64) -> f32;
}

impl HalfFloat for half::bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::bf16::from_f32(x).to_f32()
    }
    #[inline(always)]
    fn round_f64(x: f64) -> f32 {
        half::bf16::from_f64(x).to_f32()
    }
}

impl HalfFloat for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }
    #[inline(always)]
    fn round_f64(x: f64) -> f32 {
        half::f16::from_f64(x).to_f32()
    }
}

impl candle_core::CustomOp1 for HalfLogits {
    fn name(&self) -> &'static str {
        "tessera-half-logits"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        self.run(s, l, None)
    }
}

impl candle_core::CustomOp2 for HalfLogits {
    fn name(&self) -> &'static str {
        "tessera-half-logits"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        sl: &candle_core::Layout,
        b: &candle_core::CpuStorage,
        bl: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        self.run(s, sl, Some((b, bl)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use crate::mask::AttentionMask;
    use candle_core::Device;

    /// The CPU's one-pass half-precision logits are the generic path's three ops (affine,
    /// broadcast add, cast to f32) bit for bit: bf16 and f16, a scale that is no power of two,
    /// grouped rows, no bias, a mask's 0/−∞ bias and arbitrary finite biases (whose adds round).
    #[test]
    fn half_logits_are_candles_ops_bit_for_bit() -> Result<()> {
        let dev = Device::Cpu;
        let (b, kv_heads, groups, tq, tk) = (2, 3, 4, 5, 70);
        let scale = 1.0 / 128f64.sqrt();
        for dtype in [DType::BF16, DType::F16] {
            let s = Tensor::randn(0f32, 20.0, (b, kv_heads, groups * tq, tk), &dev)?.to_dtype(dtype)?;
            let mask = AttentionMask::SlidingWindow { window: 30 }.bias(tq, tk, dtype, &dev)?;
            let arbitrary = Tensor::randn(0f32, 3.0, (tq, tk), &dev)?.to_dtype(dtype)?;
            for bias in [None, mask.as_ref(), Some(&arbitrary)] {
                let op = HalfLogits { scale, queries: tq };
                let fast = match bias {
                    Some(bias) => s.apply_op2_no_bwd(bias, &op)?,
                    None => s.apply_op1_no_bwd(&op)?,
                };
                let scaled = (&s * scale)?;
                let slow = match bias {
                    Some(bias) => scaled.reshape((b, kv_heads, groups, tq, tk))?.broadcast_add(bias)?.reshape((
                        b,
                        kv_heads,
                        groups * tq,
                        tk,
                    ))?,
                    None => scaled,
                }
                .to_dtype(DType::F32)?;
                assert_eq!(fast.dims(), slow.dims());
                let bits = |t: &Tensor| -> Result<Vec<u32>> {
                    Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|x| x.to_bits()).collect())
                };
                let (fast, slow) = (bits(&fast)?, bits(&slow)?);
                let differ = fast.iter().zip(&slow).filter(|(a, b)| a != b).count();
                assert_eq!(differ, 0, "{dtype:?}, bias {}: {differ} of {} logits differ", bias.is_some(), slow.len());
            }
        }
        Ok(())
    }
}
