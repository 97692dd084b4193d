//! tessera's CPU compute kernels: matmuls of GGUF-quantized weights, fused f32 layers and
//! attention, the thread pool they run on, and the allocator that bounds a chat template's
//! memory. All of tessera's SIMD code (`std::arch` intrinsics) is here.
//!
//! The entry points are safe functions. The other crates call them directly:
//! - `tessera-decoder`, on the CPU while [`enabled`] (`TESSERA_KERNELS=off` sends it down
//!   Candle's device-generic ops): [`QMatrix`] from its linear layer (`matmul_uninit`,
//!   `matmul_add_uninit`, `matmul_shared_uninit`) and weight loading (`new`, `dequantize`),
//!   [`quantize::quantize_rows`] (load-time quantization), [`dense::linear`], [`dense::attend_many`],
//!   [`PackedF32`] and [`dense::packs_weights`] (f32 weights packed when a layer loads),
//!   [`attention::attend`], [`attention::attend_rows`], [`attention::scale_mask_softmax`],
//!   [`ops::rms_norm`], [`ops::silu_mul`], [`ops::gelu_tanh`], [`ops::f32_to_f16`] (KV writes),
//!   [`for_each_row`] on [`ThreadPool::global`], and [`row_invariant`] around a batched decode step;
//! - `tessera-vision`: [`ops::add_scaled_u8`] and [`for_each_row`] for Pillow-exact resizing;
//! - `tessera-text`: [`QMatrix`] for quantized token embeddings (rows dequantized on lookup) and
//!   [`with_memory_budget`] around chat-template rendering;
//! - the binaries (`tessera-cli`): [`BudgetedAlloc`] as the global allocator,
//!   [`keep_freed_memory`] and [`MAX_THREADS`].
//!
//! `unsafe` here, each block with its `SAFETY` argument: SIMD intrinsics in `#[target_feature]`
//! functions, called only once [`Isa::best`] has found the instruction set on this CPU; raw
//! pointers through which pool threads write disjoint parts of one output; outputs written whole
//! from uninitialised memory (the `MaybeUninit` outputs of the `*_uninit` matmuls and of
//! [`ops::rms_norm`]); and the [`BudgetedAlloc`] `GlobalAlloc` implementation. Outside this crate
//! `unsafe` is in `tessera-decoder` (`cpu_op` hands these kernels uninitialised outputs, relying
//! on their promise to write every element; `Weights` memory-maps safetensors files) and in
//! `tessera`'s CUDA device setup (`device.rs`: cudarc's driver calls); the other crates have none.
//!
//! Underneath:
//! - [`blocks`]: the GGUF block layouts (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q4_K`,
//!   `Q5_K`, `Q6_K`), dequantization, and llama.cpp's activation quantization
//!   (`Q8_0`/`Q8_1`/`Q8_K`);
//! - [`quantize`]: weight quantization into those blocks, as llama-quantize writes them
//!   (ports of ggml's reference quantizers), on the pool's threads;
//! - [`dot`]: portable integer dot products (the reference twins of the SIMD kernels);
//! - `x86` (AVX2, AVX-512 VNNI) and `neon` (dotprod) row kernels, chosen at run time
//!   ([`Isa::best`], overridable with `TESSERA_KERNELS`), and on AVX-512 VNNI the int8 prefill
//!   GEMM (`igemm`) and the 16-row panel layout (`panels`);
//! - [`ThreadPool`]: a persistent pool, one part per thread per matmul;
//! - [`attention`]: fused attention for decode steps (scores, softmax and values in one pass),
//!   [`dense`]: f32 linear layers with bias, residual and GELU in the matmul's pass, and
//!   attention over many queries as two GEMMs per head on strided projections, on AVX-512 by
//!   `sgemm` (tessera's f32 GEMM; weights packed at load into [`PackedF32`]),
//!   and [`ops`]: the polynomial `exp`, SwiGLU's `silu(gate)·up`, the tanh GELU, RMSNorm and
//!   f16 conversion.
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
mod kpanels;
mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod ops;
mod panels;
mod pool;
pub mod quantize;
mod sgemm;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use alloc::{budgets_enforced, keep_freed_memory, with_memory_budget, BudgetError, BudgetedAlloc};
pub use blocks::{ActKind, Q8Block, Q8KBlock, QType};
pub use error::{KernelError, Result};
pub use invariant::row_invariant;
pub use matmul::{enabled, Isa, Layout, QMatrix, GEMM_MIN_TOKENS};
pub use pool::{default_threads, for_each_row, ThreadPool, MAX_THREADS};
pub use sgemm::PackedF32;
