//! The crate's parity tests in one executable, for a GPU machine (scripts/gpu/build.sh builds it
//! with `--features cuda`; scripts/gpu/device.sh runs it there with `TESSERA_TEST_DEVICE=cuda`).
//! One executable because each one embeds Candle's CUDA kernels (~18 MB compressed) and what
//! travels to the GPU machine is limited. The CPU runs these files as separate test targets, and
//! again with `TESSERA_KERNELS=off` (scripts/test_generic.sh): through Candle's device-generic
//! ops, the code path the GPU runs.
//!
//! Each file is written as its own test crate, with its own `mod common;`, so here every module
//! holds its own copy of `../common.rs`: intended, hence the lint allowed below.
#![allow(clippy::duplicate_mod)]

#[path = "../batching.rs"]
mod batching;
#[path = "../embeddings.rs"]
mod embeddings;
#[path = "../gguf_pairs.rs"]
mod gguf_pairs;
#[path = "../gguf_pairs_gemma3.rs"]
mod gguf_pairs_gemma3;
#[path = "../gguf_pairs_gemma4.rs"]
mod gguf_pairs_gemma4;
#[path = "../gguf_pairs_internvl.rs"]
mod gguf_pairs_internvl;
#[path = "../gguf_pairs_minicpm.rs"]
mod gguf_pairs_minicpm;
#[path = "../gguf_pairs_mistral3.rs"]
mod gguf_pairs_mistral3;
#[path = "../gguf_pairs_qwen.rs"]
mod gguf_pairs_qwen;
#[path = "../gguf_pairs_qwen3_5.rs"]
mod gguf_pairs_qwen3_5;
#[path = "../half_attention.rs"]
mod half_attention;
#[path = "../half_precision.rs"]
mod half_precision;
#[path = "../minicpm_tower.rs"]
mod minicpm_tower;
#[path = "../native_model.rs"]
mod native_model;
#[path = "../prefix_cache.rs"]
mod prefix_cache;
#[path = "../quantized_pairs.rs"]
mod quantized_pairs;
#[path = "../quantized_qwen3_5.rs"]
mod quantized_qwen3_5;
#[path = "../smollm2.rs"]
mod smollm2;
#[path = "../tiny_models.rs"]
mod tiny_models;
#[path = "../vlm.rs"]
mod vlm;
#[path = "../vlm_families.rs"]
mod vlm_families;
