//! What the CPU custom ops (fused attention, softmax, SwiGLU, GELU, quantized matmul) share:
//! reading an input as one contiguous f32 slice.

use candle_core::{CpuStorage, Layout};

/// The f32 values `l` views in `s`, which must be contiguous f32 storage; `op` names the
/// operation in the error otherwise.
pub(crate) fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else { candle_core::bail!("{op} takes f32 tensors") };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{op} takes contiguous tensors"),
    }
}
