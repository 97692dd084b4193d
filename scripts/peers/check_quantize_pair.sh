#!/usr/bin/env bash
# llama.cpp loads and answers from a pair `tessera quantize` writes (issue 39): quantizes a SmolVLM
# checkpoint with `tessera quantize CKPT model.gguf --mmproj-out mmproj.gguf --type T`, runs
# llama.cpp's `llama-mtmd-cli` on the pair (greedy, N tokens) and `tessera generate` on the same
# pair, and compares the two greedy texts. Not run in CI (llama.cpp is not built there); the
# outcome is recorded in docs/cli.md (`tessera quantize`).
#
# Usage: scripts/peers/check_quantize_pair.sh [CKPT…] (default: the full-size random-weight
# SmolVLM-256M-Instruct checkpoint scripts/peers/smolvlm_first_token.py writes under
# ~/.cache/tessera-peers/smolvlm-256m-random. Not the tiny test fixture: llama.cpp's idefics3
# slicing looks up a single `\n\n` token (`ĊĊ`, mtmd.cpp's tok_ov_img_start), which its 480-token
# vocabulary lacks, and llama-mtmd-cli then aborts on the id -1 (GGML_ASSERT in mtmd-helper.cpp).
# Each CKPT is checked in turn; the tiny Qwen2-VL / Qwen2.5-VL fixtures work too (e.g.
# `IMAGE=tests/fixtures/vlm/images/chelsea_crop_20x14.png scripts/peers/check_quantize_pair.sh
# tests/fixtures/vlm/qwen2-vl-tiny tests/fixtures/vlm/qwen2.5-vl-tiny`); llama.cpp's Qwen path
# reads no pixel budget from the mmproj (it allows 8–4096 image tokens) and its texts then differ
# from tessera's, which keeps the checkpoint's budget: LLAMA_ARGS passes it flags such as
# `--image-max-tokens N`.
# Settings: TYPES="Q4_K_M Q8_0" (default Q4_K_M), N=8, THREADS=2, PROMPT, IMAGE (tests/fixtures/images/chelsea.png),
# LLAMA_ARGS (more llama-mtmd-cli flags), TESSERA (a built tessera binary; default: cargo build --release).
# Needs llama-mtmd-cli: LLAMACPP_TARGETS="llama-bench llama-quantize llama-mtmd-cli"
# bash scripts/peers/build_llamacpp.sh. Exit status 1 when a pair's texts differ.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/scripts/peers/llamacpp_source.sh"
[ $# -gt 0 ] || set -- "$cache/smolvlm-256m-random"
types="${TYPES:-Q4_K_M}"
n="${N:-8}"
threads="${THREADS:-2}"
prompt="${PROMPT:-What is in this image?}"
image="${IMAGE:-$repo/tests/fixtures/images/chelsea.png}"
bin="$src/build/bin"
[ -x "$bin/llama-mtmd-cli" ] || { echo "no $bin/llama-mtmd-cli: build it (see the header)" >&2; exit 1; }
for ckpt in "$@"; do
  [ -f "$ckpt/config.json" ] || { echo "no checkpoint at $ckpt (scripts/peers/smolvlm_first_token.py writes it)" >&2; exit 1; }
done

tessera="${TESSERA:-}"
if [ -z "$tessera" ]; then
  (cd "$repo" && cargo build --release -q -p tessera-cli --bin tessera) >&2
  tessera="${CARGO_TARGET_DIR:-$repo/target}/release/tessera"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

status=0
for ckpt in "$@"; do
for t in $types; do
  model="$work/model-$t.gguf" mmproj="$work/mmproj-$t.gguf"
  echo "== $ckpt $t"
  "$tessera" quantize "$ckpt" "$model" --mmproj-out "$mmproj" --type "$t" --threads "$threads"
  # shellcheck disable=SC2086 # LLAMA_ARGS is a list of flags
  theirs="$(LD_LIBRARY_PATH="$bin" "$bin/llama-mtmd-cli" -m "$model" --mmproj "$mmproj" --image "$image" \
      -p "$prompt" -n "$n" --temp 0 -t "$threads" ${LLAMA_ARGS:-} 2>"$work/llama.log")" \
    || { tail -20 "$work/llama.log" >&2; echo "$t: llama-mtmd-cli failed on the pair" >&2; status=1; continue; }
  ours="$("$tessera" generate -m "$model" --mmproj "$mmproj" --image "$image" -p "$prompt" \
      --max-new-tokens "$n" --temperature 0 --ignore-eos --threads "$threads" --json 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])')"
  # llama-mtmd-cli prints the generated text between newlines; compare without them.
  theirs="$(printf '%s' "$theirs" | tr -d '\n')"
  echo "$t llama-mtmd-cli: [$theirs]"
  echo "$t tessera:        [$ours]"
  if [ "$theirs" = "$ours" ]; then echo "$t: same greedy text"; else echo "$t: the greedy texts differ"; status=1; fi
done
done
exit $status
