//! CPU matmul kernels for GGUF-quantized weights, and the only SIMD code of tessera.
//!
//! One safe entry point, [`QMatrix::matmul`], computes `x · Wᵀ` for a quantized weight
//! matrix `W` and f32 activations `x`; the decoder's linear layer calls it on the CPU.
//! Underneath:
//! - [`blocks`]: the GGUF block layouts (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q4_K`,
//!   `Q5_K`, `Q6_K`), dequantization, and llama.cpp's activation quantization
//!   (`Q8_0`/`Q8_1`/`Q8_K`);
//! - [`dot`]: portable integer dot products (the reference twins of the SIMD kernels);
//! - `x86` (AVX2, AVX-512 VNNI) and `neon` (dotprod) row kernels, chosen at run time
//!   ([`Isa::best`], overridable with `TESSERA_KERNELS`);
//! - [`ThreadPool`]: a persistent pool, one part per thread per matmul;
//! - [`attention`]: fused attention for decode steps (scores, softmax and values in one pass),
//!   [`dense`]: f32 linear layers with bias, residual and GELU in the matmul's pass, and
//!   attention over many queries as two GEMMs per head on strided projections,
//!   and [`ops`]: the polynomial `exp` and SwiGLU's `silu(gate)·up`.
//!
//! Arithmetic follows ggml (llama.cpp's `ggml/src/ggml-quants.c` and
//! `ggml-cpu/arch/*/quants.c`), so logits agree with llama.cpp's on the same file.

mod alloc;
pub mod attention;
pub mod blocks;
pub mod dense;
pub mod dot;
mod error;
#[cfg(target_arch = "x86_64")]
mod igemm;
mod invariant;
mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod ops;
mod panels;
mod pool;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use alloc::{budgets_enforced, keep_freed_memory, with_memory_budget, BudgetError, BudgetedAlloc};
pub use blocks::{ActKind, Q8Block, Q8KBlock, QType};
pub use error::{KernelError, Result};
pub use invariant::row_invariant;
pub use matmul::{enabled, Isa, Layout, QMatrix, GEMM_MIN_TOKENS};
pub use pool::{default_threads, for_each_row, ThreadPool, MAX_THREADS};
