//! What the CPU custom ops (fused attention, softmax, SwiGLU, GELU, quantized matmul, RMSNorm)
//! share: reading an input as one contiguous f32 slice, and an output the kernels write whole.

use std::mem::MaybeUninit;

use candle_core::{CpuStorage, DType, Device, Layout, Tensor};

/// Whether tessera's CPU kernels run on `device`: it is the CPU and the kernels are on
/// ([`tessera_kernels::enabled`]; `TESSERA_KERNELS=off` sends the CPU down Candle's
/// device-generic ops, the path every other device takes). Every fast path asks this.
pub fn kernels_run_on(device: &Device) -> bool {
    device.is_cpu() && tessera_kernels::enabled()
}

/// Whether the CPU kernels take `t`: f32 on a device they run on.
pub(crate) fn kernels_take(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && kernels_run_on(t.device())
}

/// The f32 values `l` views in `s`, which must be contiguous f32 storage; `op` names the
/// operation in the error otherwise.
pub(crate) fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else { candle_core::bail!("{op} takes f32 tensors") };
    contiguous(data, l, op)
}

/// The values `l` views in `data` (a storage's elements of any dtype), which it must view
/// contiguously; `op` names the operation in the error otherwise.
pub(crate) fn contiguous<'a, T>(data: &'a [T], l: &Layout, op: &str) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{op} takes contiguous tensors"),
    }
}

/// The contiguous f32 values of a CPU tensor's storage; `what` names it in the error otherwise.
pub(crate) fn storage_f32<'a>(s: &'a candle_core::Storage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    match s {
        candle_core::Storage::Cpu(c) => contiguous_f32(c, l, what),
        _ => candle_core::bail!("{what} is not on the CPU"),
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
    // SAFETY: the caller's promise, for the one output.
    let mut outs = unsafe { all_written_by(&[len], |o| fill(&mut *o[0]))? };
    outs.pop().ok_or_else(|| candle_core::Error::Msg("an output went missing".into()))
}

/// [`written_by`] for several outputs, `lens[i]` f32 each, filled by one call.
///
/// # Safety
/// When `fill` returns `Ok`, it has written every element of every slice it was given.
pub(crate) unsafe fn all_written_by<E>(
    lens: &[usize],
    fill: impl FnOnce(&mut [&mut [MaybeUninit<f32>]]) -> Result<(), E>,
) -> candle_core::Result<Vec<Vec<f32>>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut outs: Vec<Vec<f32>> = lens.iter().map(|&len| Vec::with_capacity(len)).collect();
    let mut slices: Vec<&mut [MaybeUninit<f32>]> =
        outs.iter_mut().zip(lens).map(|(o, &len)| &mut o.spare_capacity_mut()[..len]).collect();
    fill(&mut slices).map_err(candle_core::Error::wrap)?;
    for (o, &len) in outs.iter_mut().zip(lens) {
        // SAFETY: `fill` returned Ok, so by the caller's promise the first `len` are written.
        unsafe { o.set_len(len) };
    }
    Ok(outs)
}
