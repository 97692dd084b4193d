#!/usr/bin/env bash
# Writes tests/fixtures/quant/ (issue 39, `--quantize`): llama-quantize's per-tensor types and
# block hashes for a 256-wide Qwen2 checkpoint, and llama-quantize's Q8_0 / Q4_0 / Q4_K_M files of
# the tiny SmolVLM pair and the tiny Qwen2 checkpoint (scripts/make_quant_references.py says
# what and why). Not run in CI; the outputs are committed.
#
# Needs the llama.cpp build of scripts/peers/build_llamacpp.sh (llama-quantize, from the source
# llama-cpp-python 0.3.36's sdist vendors) and the converter's venv of scripts/make_gguf_pairs.sh.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/peers/llamacpp_source.sh"
venv="$cache/convert-venv"
quantize="$src/build/bin/llama-quantize"
[ -x "$quantize" ] || { echo "no $quantize: run scripts/peers/build_llamacpp.sh first" >&2; exit 1; }
[ -x "$venv/bin/python" ] || { echo "no converter venv $venv: run scripts/make_gguf_pairs.sh first" >&2; exit 1; }
"$venv/bin/python" "$repo/scripts/make_quant_references.py" "$src/vendor/llama.cpp" "$quantize"
ls -l "$repo/tests/fixtures/quant" >&2
