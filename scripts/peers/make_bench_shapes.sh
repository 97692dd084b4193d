#!/usr/bin/env bash
# Writes the bench's model shapes at real sizes and quantizes them with the peer llama.cpp's
# llama-quantize (scripts/peers/build_llamacpp.sh): Llama-shaped GGUFs with random f16 weights
# and SmolLM2's vocabulary and tokenizer (copied from models/smollm2-135m-instruct's GGUF),
# written tensor by tensor with the pinned llama.cpp's gguf-py (scripts/peers/bench_shape_gguf.py),
# then Q4_0, Q4_K_M, Q5_K_M, Q6_K and Q8_0 files made from the f16 one.
#
#   1b: width 2048, 16 layers, MLP 8192, 32 / 8 heads (Llama-3.2-1B's shape): f16 2.2 GB, all
#       five types 4.2 GB more.
#   8b: width 4096, 32 layers, MLP 14336, 32 / 8 heads (Llama-3-8B's shape): f16 16 GB, the
#       five types 30 GB more. Not made unless asked for (SHAPES="1b 8b"); KEEP_F16=0 deletes
#       each f16 file once its types are made.
#
# Files go to ~/.cache/tessera-peers/models/bench-shapes/llama-<shape>.<type>.gguf (override the
# root with TESSERA_PEERS_CACHE). Idempotent: existing files are kept. Widths are multiples of
# 256, so the K-quant types have no fallbacks (Q4_K_M is Q4_K + Q6_K). Prints each file's size
# and its tensors' bytes and types (also written beside it, <file>.bytes.json: what a decode
# step reads) to stderr; last line of stdout: the directory.
#
# Usage: SHAPES="1b" QUANT_TYPES="Q4_0 Q4_K_M" KEEP_F16=1 scripts/peers/make_bench_shapes.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# LLAMA_CPP_PYTHON_VERSION, cache, src and fetch_llamacpp_source (llama.cpp commit 0c1e57098).
source "$root/scripts/peers/llamacpp_source.sh"
shapes="${SHAPES:-1b}"
types="${QUANT_TYPES:-Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0}"
keep_f16="${KEEP_F16:-1}"
out="$cache/models/bench-shapes"

vocab_src="$("$root/scripts/fetch_smollm2.sh" | tail -1)"
bin="$(LLAMACPP_TARGETS="${LLAMACPP_TARGETS:-llama-bench llama-quantize}" "$root/scripts/peers/build_llamacpp.sh" | tail -1)"
fetch_llamacpp_source
mkdir -p "$out"

# A Python with numpy and PyYAML (gguf-py imports both): the one on PATH, or a small venv of
# the two under the cache.
py=python3
if ! "$py" -c "import numpy, yaml" 2>/dev/null; then
  venv="$cache/numpy-venv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import numpy, yaml" 2>/dev/null; then
    echo "[make_bench_shapes] creating $venv (numpy, PyYAML)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "numpy~=2.2.6" "PyYAML>=5.1" >&2
  fi
  py="$venv/bin/python"
fi

for shape in $shapes; do
  f16="$out/llama-$shape.f16.gguf"
  missing=""
  for t in $types; do [ -s "$out/llama-$shape.$t.gguf" ] || missing="$missing $t"; done
  if [ -n "$missing" ] && [ ! -s "$f16" ]; then
    echo "[make_bench_shapes] writing $f16" >&2
    nice -n 15 env PYTHONPATH="$src/vendor/llama.cpp/gguf-py" "$py" "$root/scripts/peers/bench_shape_gguf.py" \
      --shape "$shape" --vocab-from "$vocab_src" --out "$f16.part" 2>"$out/.llama-$shape.f16.log" \
      || { tail -20 "$out/.llama-$shape.f16.log" >&2; rm -f "$f16.part"; exit 1; }
    mv "$f16.part" "$f16"
  fi
  for t in $missing; do
    dst="$out/llama-$shape.$t.gguf"
    log="$out/.llama-$shape.$t.quantize.log"
    nice -n 15 "$bin/llama-quantize" "$f16" "$dst.part" "$t" "$(nproc)" >"$log" 2>&1 \
      || { tail -30 "$log" >&2; rm -f "$dst.part"; exit 1; }
    mv "$dst.part" "$dst"
  done
  [ "$keep_f16" = 1 ] || rm -f "$f16"
  for t in $types; do
    dst="$out/llama-$shape.$t.gguf"
    # The bytes a decode step reads: every tensor once (the tied embedding as the LM head).
    [ -s "$dst.bytes.json" ] || env PYTHONPATH="$src/vendor/llama.cpp/gguf-py" "$py" - "$dst" >"$dst.bytes.json" <<'PY'
import collections, json, sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
by_type = collections.Counter(t.tensor_type.name for t in r.tensors)
print(json.dumps({"tensor_bytes": sum(int(t.n_bytes) for t in r.tensors), "tensors_by_type": by_type}))
PY
    echo "[make_bench_shapes] llama-$shape $t: $(du -h "$dst" | cut -f1) $(cat "$dst.bytes.json")" >&2
  done
done
echo "$out"
