//! Which instruction set the kernels run on: [`Isa`], detected once at run time (and
//! overridable with `TESSERA_KERNELS`), and for each weight type the SIMD row kernel of
//! that set (`x86` or `neon`), or none where the portable dot product (`dot.rs`) serves.

use std::sync::OnceLock;

use crate::blocks::{ActKind, Q8Block, Q8KBlock, QType};

/// Whether the CPU runs tessera's kernels at all: yes, unless `TESSERA_KERNELS` is `off`. Off,
/// the decoder takes Candle's device-generic ops on the CPU too: the path CUDA and Metal run,
/// so that a machine without a GPU executes (and its tests check) that path. Read once.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| !std::env::var("TESSERA_KERNELS").is_ok_and(|v| v.eq_ignore_ascii_case("off")))
}

/// An instruction set the dot-product kernels can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 VNNI (`vpdpbusd`) with AVX-512 F/VL/BW and AVX2.
    Avx512Vnni,
    /// aarch64 NEON with the dotprod extension (`sdot`).
    NeonDotprod,
}

impl Isa {
    /// Every instruction set this CPU can run, the portable one first.
    pub fn available() -> Vec<Isa> {
        Self::detected().to_vec()
    }

    /// [`available`](Self::available), detected once (matmuls check it on every call).
    pub(super) fn detected() -> &'static [Isa] {
        static DETECTED: OnceLock<Vec<Isa>> = OnceLock::new();
        DETECTED.get_or_init(Self::detect)
    }

    fn detect() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if crate::x86::has_avx2() {
                v.push(Isa::Avx2);
            }
            if crate::x86::has_vnni() {
                v.push(Isa::Avx512Vnni);
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if crate::neon::has_dotprod() {
                v.push(Isa::NeonDotprod);
            }
        }
        v
    }

    /// The fastest available set, or the one named by `TESSERA_KERNELS`
    /// (`portable`, `avx2`, `avx512vnni`, `neon`) when this CPU has it. Detected once.
    /// (`TESSERA_KERNELS=off` turns the kernels off altogether: see [`enabled`].)
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let avail = Self::detected();
            let forced = std::env::var("TESSERA_KERNELS").ok().and_then(|v| Self::parse(&v));
            match forced {
                Some(f) if avail.contains(&f) => f,
                _ => *avail.last().unwrap_or(&Isa::Portable),
            }
        })
    }

    pub fn parse(s: &str) -> Option<Isa> {
        match s.to_ascii_lowercase().as_str() {
            "portable" | "scalar" => Some(Isa::Portable),
            "avx2" => Some(Isa::Avx2),
            "avx512vnni" | "avx512" | "vnni" => Some(Isa::Avx512Vnni),
            "neon" | "dotprod" => Some(Isa::NeonDotprod),
            _ => None,
        }
    }

    /// Whether this set's kernels read `t`'s panel layout (`panels.rs`, `kpanels.rs`): on AVX-512
    /// VNNI and AVX2, every type that has one.
    pub fn reads_panels(self, t: QType) -> bool {
        matches!(self, Isa::Avx512Vnni | Isa::Avx2) && crate::panels::has_panels(t)
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::NeonDotprod => "neon-dotprod",
        }
    }
}

/// Dot of one weight row with one token's `Q8` activations.
pub(super) type RowFn = unsafe fn(&[u8], &[Q8Block]) -> f32;

/// The SIMD row kernel of `t` on `isa`, if there is one.
pub(super) fn simd_row_fn(t: QType, isa: Isa) -> Option<RowFn> {
    if t.activation() != ActKind::Q8 {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(crate::x86::row_fn(t, false)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(crate::x86::row_fn(t, true)),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => Some(crate::neon::row_fn(t)),
        _ => None,
    }
}

/// Dots of four weight rows with one token's `Q8` activations.
pub(super) type Rows4Fn = unsafe fn([&[u8]; 4], &[Q8Block]) -> [f32; 4];

/// The four-row SIMD kernel of `t` on `isa`, if there is one.
pub(super) fn simd_rows4_fn(t: QType, isa: Isa) -> Option<Rows4Fn> {
    if t.activation() != ActKind::Q8 {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(crate::x86::rows4_fn(t, false)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(crate::x86::rows4_fn(t, true)),
        _ => None,
    }
}

/// Dot of one weight row with one token's `Q8_K` activations.
pub(crate) type RowKFn = unsafe fn(&[u8], &[Q8KBlock]) -> f32;

/// The SIMD row kernel of the k-quant `t` on `isa`, if there is one.
pub(super) fn simd_row_k_fn(t: QType, isa: Isa) -> Option<RowKFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::x86::row_k_fn(t, false),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => crate::x86::row_k_fn(t, true),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => crate::neon::row_k_fn(t),
        _ => {
            let _ = t;
            None
        }
    }
}
