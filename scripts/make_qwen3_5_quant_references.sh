#!/usr/bin/env bash
# Writes tests/fixtures/quant/qwen3.5-tiny-{Q8_0,Q4_K_M}/ (issue 39, quantized Qwen3.5): llama.cpp's
# f32 `qwen35` text GGUF of the tiny checkpoint (tests/fixtures/vlm/qwen3.5-tiny-gguf, from
# scripts/make_gguf_pairs.sh qwen3_5) quantized by llama-quantize (model.gguf) with its mmproj
# (mmproj.gguf), and llama.cpp's greedy steps with top-5 logits on the text model (llamacpp.json,
# scripts/peers/llamacpp_reference.sh). crates/tessera/tests/quantized_qwen3_5.rs checks tessera
# against them; crates/tessera/tests/quantize_export.rs checks `tessera quantize`'s pair of the
# folder against model.gguf and mmproj.gguf byte for byte. Not run in CI; the
# outputs are committed. Needs the llama.cpp build of scripts/peers/build_llamacpp.sh.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/peers/llamacpp_source.sh"
quantize="$src/build/bin/llama-quantize"
[ -x "$quantize" ] || { echo "no $quantize: run scripts/peers/build_llamacpp.sh first" >&2; exit 1; }
f32="$repo/tests/fixtures/vlm/qwen3.5-tiny-gguf/qwen3.5-tiny-f32.gguf"
for t in Q8_0 Q4_K_M; do
  out="$repo/tests/fixtures/quant/qwen3.5-tiny-$t"
  mkdir -p "$out"
  "$quantize" "$f32" "$out/model.gguf" "$t" 2 >/dev/null
  "$quantize" "$(dirname "$f32")/mmproj-qwen3.5-tiny-f32.gguf" "$out/mmproj.gguf" "$t" 2 >/dev/null
  "$repo/scripts/peers/llamacpp_reference.sh" "$out/model.gguf" "$out/llamacpp.json"
done
