//! What the CPU custom ops (fused attention, softmax, SwiGLU, GELU, quantized matmul, RMSNorm)
//! share: reading an input as one contiguous f32 slice, and an output the kernels write whole.

use std::mem::MaybeUninit;

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

/// `len` f32 written by `fill` without zeroing them first (a kernel that overwrites its whole
/// output: a memset of each had been 3% of a batched decode step).
///
/// # Safety
/// When `fill` returns `Ok`, it has written every element of the slice it was given.
pub(crate) unsafe fn written_by<E>(
    len: usize,
    fill: impl FnOnce(&mut [MaybeUninit<f32>]) -> Result<(), E>,
) -> candle_core::Result<Vec<f32>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut out = Vec::with_capacity(len);
    fill(&mut out.spare_capacity_mut()[..len]).map_err(candle_core::Error::wrap)?;
    // SAFETY: `fill` returned Ok, so by the caller's promise the first `len` are written.
    unsafe { out.set_len(len) };
    Ok(out)
}
