#!/usr/bin/env bash
# Quantized pairs against llama.cpp (issue 39, proof point 2): llama-quantize's Q8_0 and Q4_K_M
# files of the tiny VLM pairs (tests/fixtures/quant/<name>-<type>/{model,mmproj}.gguf, written by
# scripts/make_quant_references.sh from llama.cpp's own f32 pairs) run by llama.cpp's
# `llama-mtmd-cli` and by `tessera generate`, greedy, like for like (scripts/peers/mtmd_compare.sh:
# the same rendered prompt, both stopping at EOS, the greedy texts compared).
# Not run in CI (llama.cpp is not built there).
#
# Why the texts once differed on all four pairs, each cause checked by dumping llama.cpp's image
# features (MTMD_DEBUG_EMBEDDINGS=FILE) beside tessera's (`tessera embed --layer 0`) and
# transformers' on the f32 pairs (tessera = transformers to 3e-5 in each case):
#  1. The prompt: llama-mtmd-cli sends the user's message as one string, `<__media__>` in front
#     of the question, so the Hugging Face templates' image parts (LLaVA-interleave's `<image>`
#     and `\n` before the text) render differently; tessera's prompt is transformers'. Both now
#     get the template rendered once with image parts (scripts/peers/mtmd_prompt.py).
#  2. The image's preprocessing: llama.cpp pads LLaVA images to a square and resizes Qwen images
#     to its own token budget (8-4096 tokens, not the processor's pixel budget). Each pair gets
#     an image both preprocess to the same pixels (tests/fixtures/vlm/images/chelsea_square_*.png,
#     scripts/peers/mtmd_images.py: already the model's size, or a multiple of the merge size
#     within both budgets).
#  3. llama.cpp's own vision graphs, which no input makes agree with transformers:
#     - LLaVA 1.5 (CLIP): clip.cpp's llava graph appends the class embedding after the patches
#       (ggml_concat(patches, class)), adds position rows 0..n in that order and keeps rows 1..n,
#       so its features are those of a tower whose class token is last (a numpy CLIP so ordered
#       gives llama.cpp's features to 0.05; the Hugging Face order gives tessera's to 2e-5).
#       llava-tiny is left out of the default list; named, it runs and differs.
#     - Qwen2.5-VL's window attention: with one window (a 16 x 16 image: 2 x 2 merged tokens, the
#       tiny tower's window) the features agree to 0.01; with two windows (32 x 16) llama.cpp's
#       differ from transformers' by 2.0 of 9.3 (not separated further). The Qwen2.5-VL pair gets
#       the one-window image, with --image-min-tokens / --image-max-tokens 4 (llama.cpp's
#       minimum is 8 tokens).
#  4. EOS: tessera ran with --ignore-eos, llama-mtmd-cli stops at EOS; both stop now.
#  On the remaining inputs the features agree within ggml's f16 GELU tables (0.05 of 52 for
#  LLaVA-interleave, 0.03 of 29 for Qwen2-VL).
#
# Usage: scripts/peers/compare_quantized_pairs.sh [name…] (default: llava-interleave-tiny
#   qwen2-vl-tiny qwen2.5-vl-tiny; gemma3-tiny and qwen3-vl-tiny when named). TYPES (default "Q8_0 Q4_K_M"), and mtmd_compare.sh's settings.
#   smolvlm-tiny cannot run: llama.cpp's idefics3 slicing looks up a single `\n\n` token, which
#   the 480-token vocabulary lacks, and llama-mtmd-cli aborts (GGML_ASSERT in mtmd-helper.cpp).
#   Exit status 1 when any pair's texts differ.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/mtmd_compare.sh"
source "$(cd "$(dirname "$0")" && pwd)/mtmd_pairs.sh"
[ $# -gt 0 ] || set -- llava-interleave-tiny qwen2-vl-tiny qwen2.5-vl-tiny
status=0
for name in "$@"; do
  mtmd_pair_args "$name" || { echo "$name: no like-for-like settings here" >&2; status=1; continue; }
  for t in ${TYPES:-Q8_0 Q4_K_M}; do
    dir="$repo/tests/fixtures/quant/$name-$t"
    [ -f "$dir/model.gguf" ] || { echo "no $dir (scripts/make_quant_references.sh)" >&2; status=1; continue; }
    mtmd_compare "$name $t" "$dir/model.gguf" "$dir/mmproj.gguf" "${args[@]}" || status=1
  done
done
exit $status
