#!/usr/bin/env bash
# Requantizes the shipped SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch_smollm2.sh) with the
# peer llama.cpp (scripts/peers/build_llamacpp.sh, llama-cpp-python==0.3.36's vendored llama.cpp)
# into Q4_0, Q5_0, Q5_1, Q8_0, Q4_K_M, Q5_K_M and Q6_K variants under
# ~/.cache/tessera-peers/models/ (override with TESSERA_PEERS_CACHE). Uses --allow-requantize,
# so the weights carry the Q4_1 rounding error on top of the new format's: fine for comparing
# engines on the same file, not for judging quant quality. Idempotent: existing files are kept.
# Prints, to stderr, each file's tensor count per ggml type; last line of stdout: the dir.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${TESSERA_PEERS_CACHE:-$HOME/.cache/tessera-peers}"
out="$cache/models"
types="${QUANT_TYPES:-Q4_0 Q5_0 Q5_1 Q8_0 Q4_K_M Q5_K_M Q6_K}"

src="$("$root/scripts/fetch_smollm2.sh" | tail -1)"
bin="$("$root/scripts/peers/build_llamacpp.sh" | tail -1)"
mkdir -p "$out"

summarize() {  # $1 = llama-quantize log
  # llama-quantize logs one line per tensor: "[ i/ n] name - [shape], type = q4_1, converting
  # to q4_K .. size = ..." or "..., type = f32, size = ..." when the tensor is kept as is.
  sed -nE 's/.*type = +([A-Za-z0-9_]+), +(converting to ([A-Za-z0-9_]+)|size).*/\1 \3/p' "$1" \
    | awk '{ t = ($2 != "") ? $2 : $1; n[t]++ } END { for (k in n) printf "%s:%d ", k, n[k] }'
  # SmolLM2's n_embd = 576 is not a multiple of 256, so K-quants fall back (q5_0/q5_1/q8_0) for
  # every tensor whose rows are 576 wide; llama-quantize says how many.
  sed -nE 's/.*WARNING: ([0-9]+ of [0-9]+) tensor.*fallback.*/(\1 fallback)/p' "$1"
}

for t in $types; do
  dst="$out/SmolLM2-135M-Instruct.$t.gguf"
  log="$out/.SmolLM2-135M-Instruct.$t.quantize.log"
  if [ ! -s "$dst" ]; then
    nice -n 15 "$bin/llama-quantize" --allow-requantize "$src" "$dst.part" "$t" 2 >"$log" 2>&1 \
      || { tail -30 "$log" >&2; rm -f "$dst.part"; exit 1; }
    mv "$dst.part" "$dst"
  fi
  summary=""
  [ -f "$log" ] && summary="tensors by type: $(summarize "$log" | tr '\n' ' ')"
  echo "[quantize_smollm2] $t: $(du -h "$dst" | cut -f1)  $summary" >&2
done
echo "$out"
