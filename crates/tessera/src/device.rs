//! Device and dtype selection: `auto` picks CUDA, then Metal, then the CPU. Asking for a
//! device this build or machine lacks is an error, not a panic.

use std::str::FromStr;

use candle_core::{DType, Device};

use crate::error::{Result, TesseraError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
    Metal(usize),
}

impl FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (name, ordinal) = match s.split_once(':') {
            Some((n, o)) => (n, o.parse::<usize>().map_err(|_| format!("bad device ordinal in `{s}`"))?),
            None => (s, 0),
        };
        match name {
            "auto" | "cpu" if s.contains(':') => Err(format!("`{name}` takes no device number (got `{s}`)")),
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(ordinal)),
            "metal" => Ok(Self::Metal(ordinal)),
            _ => Err(format!("unknown device `{s}` (expected auto, cpu, cuda[:N] or metal[:N])")),
        }
    }
}

impl DeviceChoice {
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(i) => {
                if !cfg!(feature = "cuda") {
                    return Err(TesseraError::Device(
                        format!("cuda:{i}"),
                        "this build has no CUDA support (rebuild with `--features cuda`)".into(),
                    ));
                }
                let device = Device::new_cuda(i).map_err(|e| TesseraError::Device(format!("cuda:{i}"), one_line(e)))?;
                tune_cuda(&device)?;
                Ok(device)
            }
            Self::Metal(i) => {
                if !cfg!(feature = "metal") {
                    return Err(TesseraError::Device(
                        format!("metal:{i}"),
                        "this build has no Metal support (rebuild with `--features metal`)".into(),
                    ));
                }
                Device::new_metal(i).map_err(|e| TesseraError::Device(format!("metal:{i}"), one_line(e)))
            }
            Self::Auto => {
                if cfg!(feature = "cuda") && candle_core::utils::cuda_is_available() {
                    if let Ok(d) = Device::new_cuda(0) {
                        tune_cuda(&d)?;
                        return Ok(d);
                    }
                }
                if cfg!(feature = "metal") && candle_core::utils::metal_is_available() {
                    if let Ok(d) = Device::new_metal(0) {
                        return Ok(d);
                    }
                }
                Ok(Device::Cpu)
            }
        }
    }
}

/// What `TESSERA_CUDA_DEFAULTS` (a comma-separated list: `events`, `all`) keeps of the CUDA
/// defaults that [`tune_cuda`] changes; unset or empty keeps none. For measuring what each change
/// is worth on a GPU (`scripts/gpu/bench.py`), not for users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct CudaDefaults {
    /// cudarc's two CUDA events made and destroyed with every allocation.
    events: bool,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl CudaDefaults {
    fn from_env() -> Result<Self> {
        Self::parse(&std::env::var("TESSERA_CUDA_DEFAULTS").unwrap_or_default())
    }

    fn parse(s: &str) -> Result<Self> {
        let mut keep = Self::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "events" | "all" => keep.events = true,
                _ => {
                    return Err(TesseraError::InvalidInput(format!(
                        "TESSERA_CUDA_DEFAULTS: unknown item `{item}` (expected a comma-separated list of events, all)"
                    )))
                }
            }
        }
        Ok(keep)
    }
}

/// A per-allocation cost of cudarc's defaults that tessera does not need, removed before the
/// device's first allocation (it can be kept with [`CudaDefaults`], to measure it): cudarc makes
/// two CUDA events with every allocation and destroys them with it (a few µs of driver calls each;
/// a decode step allocates for every op of every layer). They are recorded and waited on only in
/// cudarc's multi-stream mode, which a context enters when a stream is created on it; Candle's
/// `Device::new_cuda` runs on the per-thread default stream and neither it nor tessera creates
/// another, so the events are made and never used.
///
/// The stream-ordered memory pool keeps its default release threshold of 0. Raising it to keep
/// freed memory in the pool (as PyTorch's caching allocator does) was measured slower on an H200
/// (2026-11-27, SmolVLM-256M bf16 decode, 4 comparisons: the default threshold 1.04–1.41× the
/// raised one; scripts/gpu/README.md), so tessera no longer changes it.
#[cfg(feature = "cuda")]
fn tune_cuda(device: &Device) -> Result<()> {
    let Device::Cuda(cuda) = device else { return Ok(()) };
    if !CudaDefaults::from_env()?.events {
        // SAFETY: no tensor exists on this device yet, and no second stream is ever created on
        // its context (see above), so no event was ever going to order anything.
        unsafe { cuda.disable_event_tracking() };
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn tune_cuda(_device: &Device) -> Result<()> {
    Ok(())
}

/// A device error's message on one line, without Candle's backtrace.
fn one_line(e: candle_core::Error) -> String {
    let text = tessera_decoder::error::without_backtrace(e).to_string();
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(": ")
}

/// The working dtype when none is asked for: f32 on the CPU, bf16 on CUDA/Metal.
pub fn default_dtype(device: &Device) -> DType {
    match device {
        Device::Cpu => DType::F32,
        _ => DType::BF16,
    }
}

/// Parses `f32`, `f16`, `bf16`.
pub fn parse_dtype(s: &str) -> Result<DType> {
    match s {
        "f32" | "float32" => Ok(DType::F32),
        "f16" | "float16" => Ok(DType::F16),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        _ => Err(TesseraError::InvalidInput(format!("unknown dtype `{s}` (expected f32, f16 or bf16)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_defaults_parse_their_list_and_name_a_bad_item() {
        let keep = |events| CudaDefaults { events };
        for (s, want) in [("", keep(false)), (" events ", keep(true)), ("all", keep(true)), ("events,all", keep(true))]
        {
            assert_eq!(CudaDefaults::parse(s).ok(), Some(want), "{s:?}");
        }
        let err = CudaDefaults::parse("events,pool").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("TESSERA_CUDA_DEFAULTS") && err.contains("`pool`"), "{err}");
    }
}
