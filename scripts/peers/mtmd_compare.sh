# Sourced by compare_quantized_pairs.sh and check_quantize_pair.sh: one GGUF + mmproj pair run by
# llama.cpp's `llama-mtmd-cli` and by `tessera generate`, greedy, like for like, and the two
# greedy texts compared.
#
# Like for like: both engines get the same rendered prompt (scripts/peers/mtmd_prompt.py renders
# the text GGUF's chat template once; tessera takes it with --raw, llama-mtmd-cli through a chat
# template that passes the message through, `{{ messages[0].content }}`, with `<__media__>` where
# the template's image marker was); both stop at the model's end-of-generation token (no
# --ignore-eos: llama-mtmd-cli cannot ignore it); the image count of tokens llama.cpp decodes must
# equal tessera's `image_tokens`. The texts are compared as UTF-8 with each invalid byte sequence
# replaced by U+FFFD (random weights generate byte tokens that split characters; tessera's JSON
# text holds the replacement, llama-mtmd-cli prints the raw bytes), after dropping the newlines
# llama-mtmd-cli frames its answer with. llama-mtmd-cli prints no logits or ids, so equal texts are
# the check that both computed the same greedy ids from the same files.
#
# Needs: llama-mtmd-cli (LLAMACPP_TARGETS="llama-quantize llama-mtmd-cli" bash
# scripts/peers/build_llamacpp.sh) and llama.cpp's converter venv (jinja2, gguf-py;
# scripts/peers/convert_hf.py sets it up) for the prompt. Settings: N (new tokens, 16), THREADS (2),
# PROMPT, TESSERA (a built tessera binary; default: cargo build --release), TESSERA_ARGS (more
# `tessera generate` flags).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/scripts/peers/llamacpp_source.sh"
mtmd_bin="$src/build/bin"
mtmd_py="${CONVERT_VENV:-$cache/convert-venv}/bin/python"
mtmd_n="${N:-16}" mtmd_threads="${THREADS:-2}" mtmd_question="${PROMPT:-What is in this image?}"
[ -x "$mtmd_bin/llama-mtmd-cli" ] || { echo "no $mtmd_bin/llama-mtmd-cli: build it (see the header)" >&2; exit 1; }
[ -x "$mtmd_py" ] || { echo "no $mtmd_py (llama.cpp's converter venv: scripts/peers/convert_hf.py)" >&2; exit 1; }
tessera="${TESSERA:-}"
if [ -z "$tessera" ]; then
  (cd "$repo" && cargo build --release -q -p tessera-cli --bin tessera) >&2
  tessera="${CARGO_TARGET_DIR:-$repo/target}/release/tessera"
fi
mtmd_work="$(mktemp -d)"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$mtmd_work"' EXIT

# mtmd_compare LABEL MODEL MMPROJ IMAGE MARKER [llama-mtmd-cli flags…]: prints both texts;
# status 1 when they differ or either engine fails.
mtmd_compare() {
  local label="$1" model="$2" mmproj="$3" image="$4" marker="$5"
  shift 5
  local w="$mtmd_work"
  "$mtmd_py" "$repo/scripts/peers/mtmd_prompt.py" "$src/vendor/llama.cpp/gguf-py" "$model" "$mtmd_question" \
    "$marker" "$w/ours.txt" "$w/theirs.txt" || return 1
  # The prompts with their trailing newline (the assistant turn's), which $(…) alone would drop.
  local ours theirs
  ours="$(cat "$w/ours.txt"; printf x)" theirs="$(cat "$w/theirs.txt"; printf x)"
  local run=("$tessera" generate -m "$model" --mmproj "$mmproj" --image "$image" --raw -p "${ours%x}"
    --temperature 0 --threads "$mtmd_threads" --json ${TESSERA_ARGS:-})
  "${run[@]}" --max-new-tokens "$mtmd_n" --logprobs 2 >"$w/ours.json" 2>"$w/ours.log" \
    || { tail -3 "$w/ours.log" >&2; echo "$label: tessera failed" >&2; return 1; }
  LD_LIBRARY_PATH="$mtmd_bin" "$mtmd_bin/llama-mtmd-cli" -m "$model" --mmproj "$mmproj" --image "$image" \
    -p "${theirs%x}" --jinja --chat-template '{{ messages[0].content }}' \
    -n "$mtmd_n" --temp 0 -t "$mtmd_threads" -v "$@" >"$w/theirs.out" 2>"$w/theirs.log" \
    || { tail -5 "$w/theirs.log" >&2; echo "$label: llama-mtmd-cli failed" >&2; return 1; }
  # Where the texts part, tessera's text after each of its first k tokens (rerun with k new tokens).
  : >"$w/prefixes.jsonl"
  if ! python3 "$repo/scripts/peers/mtmd_texts.py" same "$w/ours.json" "$w/theirs.out" "$w/ours.txt.specials.json"; then
    local k
    for ((k = 1; k <= mtmd_n; k++)); do
      "${run[@]}" --max-new-tokens "$k" >>"$w/prefixes.jsonl" 2>/dev/null || return 1
      echo >>"$w/prefixes.jsonl"
    done
  fi
  python3 "$repo/scripts/peers/mtmd_texts.py" report "$w/ours.json" "$w/theirs.out" "$w/ours.txt.specials.json" "$w/theirs.log" \
    "$w/prefixes.jsonl" "$label"
}
