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
                Device::new_cuda(i).map_err(|e| TesseraError::Device(format!("cuda:{i}"), one_line(e)))
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
