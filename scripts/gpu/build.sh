#!/usr/bin/env bash
# Builds tessera for an NVIDIA Hopper GPU (sm_90) on this machine, which has no GPU, and packs what
# the GPU machine runs into .gpu/ (ignored by git; name it in the device tool's `carry`):
#   .gpu/device_suite.xz   the parity tests in one executable (crates/tessera/tests/device_suite)
#   .gpu/tessera.xz        the CLI            .gpu/tessera-bench.xz   the speed bench
#   .gpu/smolvlm-tokenizer.json.xz   SmolVLM's tokenizer for bench.py's image -> first token
#   .gpu/smollm2.skeleton.xz   the test GGUF's header without its weights (scripts/gpu/gguf_skeleton.py):
#                              the GPU machine fills in random weights for the quantized CUDA decode figure
# scripts/gpu/device.sh unpacks and runs them there. What travels is limited to 64 MiB with the
# tracked files (35.2 MiB on 2026-11-26); all of it (27.3 MiB: suite 8.9, tessera 9.5,
# tessera-bench 8.1, data 0.8) fits in one run with ~1.5 MiB to spare, or one run carries the
# suite and another the binaries. .gpu/REVISION names the commit they were built from:
#   scripts/gpu/build.sh            # all three (20 min on 2 cores from a clean target/cuda, toolkit ~700 MB)
#   scripts/gpu/build.sh suite      # or: bins
# The CUDA toolkit (nvcc 13.4 from PyPI, a libcuda link stub) is installed by
# ../shared/tools/cuda-check.sh into ~/.cache/cuda-ci; the build runs in target/cuda.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
case "$what" in all | suite | bins) ;; *) echo "usage: $0 [all|suite|bins]" >&2; exit 2 ;; esac
repo=$PWD
shared=${SHARED:-$repo/../shared}
work=${CUDA_CI_DIR:-$HOME/.cache/cuda-ci}
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}

# The toolkit: cuda-check.sh installs it on its first `build`; a one-file crate is enough to run it.
if [ ! -x "$work/venv/bin/python" ] || [ ! -e "$work/toolkit-ready" ]; then
  probe=$(mktemp -d)
  mkdir -p "$probe/src"
  printf '[package]\nname = "probe"\nversion = "0.0.0"\nedition = "2021"\n[features]\ncuda = []\n' >"$probe/Cargo.toml"
  echo 'fn main() {}' >"$probe/src/main.rs"
  PROJ=$probe CUDA_CI_DIR=$work bash "$shared/tools/cuda-check.sh" build
  rm -rf "$probe"
  touch "$work/toolkit-ready"
fi
cuda=$("$work/venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
export PATH=$cuda/bin:$PATH CUDA_HOME=$cuda
export CARGO_TARGET_DIR=$repo/target/cuda
mkdir -p .gpu

pack() { # pack NAME BINARY
  strip -o ".gpu/$1" "$2"
  xz -T0 -9 -f ".gpu/$1"
  echo "$1: $(du -h "$2" | cut -f1) built, $(du -h ".gpu/$1.xz" | cut -f1) packed"
}

start=$SECONDS
# SmolVLM's tokenizer (SmolLM2's vocabulary from the test GGUF, and the checkpoint's added tokens) for
# scripts/gpu/bench.py's image -> first token; needs a Python with `tokenizers` and numpy, and gguf-py
# from scripts/peers/build_llamacpp.sh. Without it bench.py uses a word-level stand-in.
if [ "$what" != suite ]; then
  ${PYTHON:-python3} - <<'PY' || echo "note: no .gpu/smolvlm-tokenizer.json (bench.py falls back to a stand-in)"
import pathlib, sys
sys.path.insert(0, "scripts/peers")
import smolvlm_first_token
smolvlm_first_token.write_tokenizer(pathlib.Path(".gpu"))
pathlib.Path(".gpu/tokenizer.json").rename(".gpu/smolvlm-tokenizer.json")
PY
  [ -f .gpu/smolvlm-tokenizer.json ] && xz -9 -f .gpu/smolvlm-tokenizer.json
  gguf=models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$gguf" ] || bash scripts/fetch_smollm2.sh
  ${PYTHON:-python3} scripts/gpu/gguf_skeleton.py strip "$gguf" .gpu/smollm2.skeleton
  xz -9 -f .gpu/smollm2.skeleton
fi
if [ "$what" != bins ]; then
  suite=$(nice cargo test --release -p tessera --features cuda --test device_suite --no-run --message-format=json-render-diagnostics \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "device_suite" and m.get("executable"):
        print(m["executable"])')
  pack device_suite "$suite"
fi
if [ "$what" != suite ]; then
  nice cargo build --release -p tessera-cli --features cuda --bin tessera --bin tessera-bench
  pack tessera "$CARGO_TARGET_DIR/release/tessera"
  pack tessera-bench "$CARGO_TARGET_DIR/release/tessera-bench"
fi
# What the binaries were built from: device.sh prints it beside the GPU's name, and a later session
# here compares it with `git rev-parse HEAD` before reusing .gpu/ instead of building again.
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' with uncommitted changes') ($what, $(date -u +%F))" >.gpu/REVISION
echo "built in $((SECONDS - start)) s; what travels besides the tracked files (limit: 64 MiB in all):"
du -ch .gpu/*.xz | tail -1
echo "libraries the GPU machine must provide:"
objdump -p "$CARGO_TARGET_DIR/release/tessera" 2>/dev/null | awk '/NEEDED/ {print "  " $2}' || true
