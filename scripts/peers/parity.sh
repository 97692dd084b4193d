#!/usr/bin/env bash
# tessera against llama.cpp on every SmolLM2 block type (dev-time; CI checks the shipped Q4_1):
# reruns the test `quantized_q4_1_agrees_with_llama_cpp_step_by_step` on each file that
# scripts/peers/quantize_smollm2.sh makes, against tests/fixtures/llamacpp/<file>.json (written
# by scripts/peers/llamacpp_reference.sh). Prints the largest logit difference per file.
set -euo pipefail
cd "$(dirname "$0")/../.."
models=$(bash scripts/peers/quantize_smollm2.sh | tail -1)
for t in Q4_0 Q5_0 Q5_1 Q8_0 Q4_K_M Q5_K_M Q6_K; do
  f="$models/SmolLM2-135M-Instruct.$t.gguf"
  TESSERA_PARITY_GGUF="$f" cargo test -q -p tessera --test smollm2 quantized_q4_1_agrees_with_llama_cpp_step_by_step \
    -- --exact --nocapture 2>&1 | grep -E "largest|panicked|assertion|test result" || true
done
