#!/usr/bin/env bash
# The GPU's code path on the CPU: the f32 parity tests that scripts/gpu/ runs on a GPU (the files
# of crates/tessera/tests/device_suite), run here with tessera's CPU kernels off
# (TESSERA_KERNELS=off), so every op goes through Candle's device-generic ops as it does on CUDA
# and Metal: the same layer code, masks, caches and dtype handling, with Candle's CPU kernels in
# place of its CUDA ones. (The suite's bf16/f16 file, half_precision, takes that path on the CPU
# anyway — the kernels are f32 — and runs with the other tests.) Then the engine's tests
# (continuous batching, prefix cache: what `tessera serve` runs), whose batched rows equal each
# sequence alone within f32 rounding there instead of bit for bit (batching.rs says why).
# Part of scripts/test.sh; takes the same cargo arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
TESSERA_KERNELS=off TESSERA_TEST_DEVICE=cpu cargo test -p tessera "$@" \
  --test tiny_models --test vlm --test vlm_families --test smollm2 --test embeddings --test native_model \
  --test batching --test prefix_cache
