#!/usr/bin/env bash
# The main job on llama.cpp's files, tessera against llama.cpp's `llama-mtmd-cli` (issue 39, point 3):
# a random-weight checkpoint that transformers writes from a real config, converted by llama.cpp's
# own convert_hf_to_gguf.py into an f16 text GGUF + f16 mmproj, the text model quantized to
# Q4_K_M by llama-quantize; then, in one run, rounds alternating the engines, each a whole process
# with THREADS threads on skimage's chelsea (451x300) and one question:
#   image -> first token  the process's wall time for 1 generated token (load, preprocessing, tower,
#                         prefill, first token), best of the rounds
#   decode tok/s          65 greedy tokens (EOS ignored), each engine's own decode rate: llama.cpp's
#                         `eval time` line (llama_perf_context_print), tessera's `generated … tok/s`;
#                         best of the rounds
# Shapes (--shape, default smolvlm-256m; `all` runs both, one table each):
#   smolvlm-256m  SmolVLM-256M-Instruct (tests/fixtures/real_configs): 13 tiles of 512 px, 832 image
#                 tokens; checkpoint by scripts/peers/smolvlm_first_token.py (~/.cache/tessera-peers/
#                 smolvlm-256m-random)
#   qwen2vl-2b    Qwen2-VL-2B-Instruct: 704 patches of 14 px, 176 image tokens; checkpoint (4.4 GB, f16)
#                 by scripts/peers/qwen2vl_2b_random.py (~/.cache/tessera-peers/qwen2-vl-2b-random)
# Pairs go to ~/.cache/tessera-peers/models/<shape>-pair/ (made once). Not run in CI (llama.cpp is
# not built there). Needs llama-mtmd-cli and llama-quantize:
#   LLAMACPP_TARGETS="llama-bench llama-quantize llama-mtmd-cli" bash scripts/peers/build_llamacpp.sh
# On a shared machine, run it under something that pauses other work, and from a directory and a
# binary outside the worktrees if that pauser stops processes there.
# Usage: scripts/peers/vlm_pair_bench.sh [--shape smolvlm-256m|qwen2vl-2b|all]
#        (ROUNDS=2 THREADS=2 TESSERA=target/release/tessera; TESSERA_BASE=another/tessera adds that
#        binary as a third engine, `tessera-base`, in the same rounds: a before/after comparison)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/scripts/peers/llamacpp_source.sh"
llama="$src/vendor/llama.cpp" bin="$src/build/bin"
rounds="${ROUNDS:-2}" threads="${THREADS:-2}" n=64
tessera="${TESSERA:-$repo/target/release/tessera}" base="${TESSERA_BASE:-}"
engines="tessera llama"
[ -z "$base" ] || engines="tessera-base tessera llama"
image="$repo/tests/fixtures/images/chelsea.png" prompt="What is in this image?"
shape=smolvlm-256m
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape="${2:?--shape needs a value}"; shift 2 ;;
    --shape=*) shape="${1#--shape=}"; shift ;;
    *) echo "unknown argument $1 (usage: $0 [--shape smolvlm-256m|qwen2vl-2b|all])" >&2; exit 2 ;;
  esac
done
case "$shape" in
  smolvlm-256m | qwen2vl-2b) shapes="$shape" ;;
  all) shapes="smolvlm-256m qwen2vl-2b" ;;
  *) echo "unknown shape $shape (smolvlm-256m, qwen2vl-2b or all)" >&2; exit 2 ;;
esac
[ -x "$bin/llama-mtmd-cli" ] && [ -x "$bin/llama-quantize" ] || { echo "build llama-mtmd-cli and llama-quantize first (see the header)" >&2; exit 1; }
[ -x "$tessera" ] || { echo "no tessera at $tessera: cargo build --release -p tessera-cli" >&2; exit 1; }
[ -z "$base" ] || [ -x "$base" ] || { echo "no tessera at TESSERA_BASE=$base" >&2; exit 1; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# The pair of one shape, made once: prints "MODEL MMPROJ".
make_pair() {
  local name="$1" ckpt="$2" writer="$3" pair="$cache/models/$1-pair"
  [ -f "$ckpt/config.json" ] || { echo "no checkpoint at $ckpt ($writer writes it)" >&2; exit 1; }
  mkdir -p "$pair"
  if [ ! -f "$pair/model-Q4_K_M.gguf" ] || [ ! -f "$pair/mmproj-f16.gguf" ]; then
    echo "[vlm_pair_bench] converting $ckpt into $pair" >&2
    "$cache/convert-venv/bin/python" "$llama/convert_hf_to_gguf.py" "$ckpt" --outtype f16 --outfile "$pair/model-f16.gguf" >"$pair/convert.log" 2>&1
    "$cache/convert-venv/bin/python" "$llama/convert_hf_to_gguf.py" "$ckpt" --outtype f16 --mmproj --outfile "$pair/mmproj-f16.gguf" >>"$pair/convert.log" 2>&1
    LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" "$pair/model-f16.gguf" "$pair/model-Q4_K_M.gguf" Q4_K_M "$threads" >"$pair/quantize.log" 2>&1
  fi
  echo "$pair/model-Q4_K_M.gguf $pair/mmproj-f16.gguf"
}

wall() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>"$log"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
llama_run() { wall env LD_LIBRARY_PATH="$bin" "$bin/llama-mtmd-cli" -m "$m" --mmproj "$mm" --image "$image" -p "$prompt" \
  -n "$1" --temp 0 --ignore-eos -t "$threads" -lv 4; }
llama_rate() { sed -n 's/.* eval time .*, *\([0-9.]*\) tokens per second.*/\1/p' "$log" | grep -v '^$' | tail -1; }
tessera_run() { wall "$tessera" generate -m "$m" --mmproj "$mm" --image "$image" -p "$prompt" --max-new-tokens "$1" \
  --temperature 0 --ignore-eos --threads "$threads"; }
tessera-base_run() { tessera="$base" tessera_run "$@"; }
tessera-base_rate() { tessera_rate; }
tessera_rate() { sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$log" | tail -1; }

for s in $shapes; do
  case "$s" in
    smolvlm-256m)
      title="SmolVLM-256M-Instruct shape (random weights)"
      read -r m mm < <(make_pair "$s" "${CKPT:-$cache/smolvlm-256m-random}" scripts/peers/smolvlm_first_token.py) ;;
    qwen2vl-2b)
      title="Qwen2-VL-2B-Instruct shape (random weights)"
      read -r m mm < <(make_pair "$s" "${CKPT_QWEN2VL:-$cache/qwen2-vl-2b-random}" scripts/peers/qwen2vl_2b_random.py) ;;
  esac
  [ -n "${mm:-}" ] || exit 1
  declare -A first=() decode=()
  for r in $(seq "$rounds"); do
    for e in $engines; do
      a=$(${e}_run 1)
      ${e}_run $((n + 1)) >/dev/null
      d=$(${e}_rate)
      [ -n "$d" ] || { echo "$e: no decode rate in its output" >&2; cat "$log" >&2; exit 1; }
      printf '%s round %s %-8s image->first token %6.2f s  decode %6.1f tok/s\n' "$s" "$r" "$e" "$a" "$d"
      [ -z "${first[$e]:-}" ] || [ "$(echo "$a < ${first[$e]}" | bc)" = 1 ] && first[$e]=$a
      [ -z "${decode[$e]:-}" ] || [ "$(echo "$d > ${decode[$e]}" | bc)" = 1 ] && decode[$e]=$d
    done
  done
  echo
  echo "$title, text Q4_K_M + mmproj f16 by llama.cpp's converter, $threads threads, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "| engine | image → first token (s) | decode (tok/s) |"
  echo "| --- | --- | --- |"
  for e in $engines; do printf '| %s | %.2f | %.1f |\n' "$([ $e = llama ] && echo llama-mtmd-cli || echo $e)" "${first[$e]}" "${decode[$e]}"; done
  printf 'tessera / llama-mtmd-cli: image -> first token %.2fx (target <= 0.7x), decode %.2fx (target >= 1.0x)\n\n' \
    "$(echo "${first[tessera]} / ${first[llama]}" | bc -l)" "$(echo "${decode[tessera]} / ${decode[llama]}" | bc -l)"
  [ -z "$base" ] || printf 'tessera / tessera-base: image -> first token %.2fx, decode %.2fx\n\n' \
    "$(echo "${first[tessera]} / ${first[tessera-base]}" | bc -l)" "$(echo "${decode[tessera]} / ${decode[tessera-base]}" | bc -l)"
  unset first decode
done
