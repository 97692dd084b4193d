#!/usr/bin/env bash
# llama.cpp loads and answers from a pair `tessera quantize` writes (issue 39): quantizes a
# checkpoint with `tessera quantize CKPT model.gguf --mmproj-out mmproj.gguf --type T`, then runs
# llama.cpp's `llama-mtmd-cli` and `tessera generate` on the pair, like for like, and compares the
# greedy texts (scripts/peers/mtmd_compare.sh: the same rendered prompt, both stopping at EOS).
# Not run in CI (llama.cpp is not built there); the outcome is recorded in docs/cli.md
# (`tessera quantize`).
#
# Usage: scripts/peers/check_quantize_pair.sh [CKPT…] (default: the full-size random-weight
# SmolVLM-256M-Instruct checkpoint scripts/peers/smolvlm_first_token.py writes under
# ~/.cache/tessera-peers/smolvlm-256m-random. Not the tiny test fixture: llama.cpp's idefics3
# slicing looks up a single `\n\n` token (`ĊĊ`, mtmd.cpp's tok_ov_img_start), which its 480-token
# vocabulary lacks, and llama-mtmd-cli then aborts on the id -1 (GGML_ASSERT in mtmd-helper.cpp).
# Each CKPT is checked in turn. The tiny fixtures' pairs as llama-quantize writes them, with the
# images and flags that make llama.cpp's preprocessing agree with the processors', are
# scripts/peers/compare_quantized_pairs.sh's.
# Settings: TYPES="Q4_K_M Q8_0" (default Q4_K_M), IMAGE (tests/fixtures/images/chelsea.png),
# MARKER (the chat template's image marker; default `<image>`), LLAMA_ARGS (more llama-mtmd-cli
# flags), and mtmd_compare.sh's (N, THREADS, PROMPT, TESSERA). Exit status 1 when a pair's texts
# differ.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/mtmd_compare.sh"
[ $# -gt 0 ] || set -- "$cache/smolvlm-256m-random"
image="${IMAGE:-$repo/tests/fixtures/images/chelsea.png}"
for ckpt in "$@"; do
  [ -f "$ckpt/config.json" ] || { echo "no checkpoint at $ckpt (scripts/peers/smolvlm_first_token.py writes it)" >&2; exit 1; }
done
status=0
for ckpt in "$@"; do
  for t in ${TYPES:-Q4_K_M}; do
    model="$mtmd_work/model-$t.gguf" mmproj="$mtmd_work/mmproj-$t.gguf"
    "$tessera" quantize "$ckpt" "$model" --mmproj-out "$mmproj" --type "$t" --threads "$mtmd_threads"
    # shellcheck disable=SC2086 # LLAMA_ARGS is a list of flags
    mtmd_compare "$(basename "$ckpt") $t" "$model" "$mmproj" "$image" "${MARKER:-<image>}" ${LLAMA_ARGS:-} || status=1
  done
done
exit $status
