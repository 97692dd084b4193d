#!/usr/bin/env bash
# Builds tessera for an NVIDIA Hopper GPU (sm_90) on this machine, which has no GPU, and packs what
# the GPU machine runs into .gpu/ (ignored by git; name it in the device tool's `carry`):
#   .gpu/binaries.tar.xz   stripped, in one archive: device_suite (the parity tests in one executable,
#                          crates/tessera/tests/device_suite), tessera (the CLI), tessera-bench (the
#                          speed bench). One xz stream with a 256 MiB window, so that Candle's CUDA
#                          kernels and flash-attention's, which each binary embeds, are stored once:
#                          19.4 MB for the three (each ~160 MB stripped, ~90 MB of it flash-attention's
#                          kernels); without flash-attention 12.5 MB, where one by one took 26.5 MB.
#   .gpu/smolvlm-tokenizer.json.xz   SmolVLM's tokenizer for bench.py's image -> first token
#   .gpu/smollm2.skeleton.xz   the test GGUF's header without its weights (scripts/gpu/gguf_skeleton.py):
#                              the GPU machine fills in random weights for the quantized CUDA decode figure
# scripts/gpu/device.sh unpacks and runs them there. What travels is limited to 64 MiB with the
# tracked files, which are more than that since 2026-11-29: each call carries a part of them
# (scripts/gpu/travel.sh, scripts/gpu/README.md "Device calls"); the script prints the sizes.
# .gpu/REVISION names the commit they were built from:
#   scripts/gpu/build.sh            # all three
#   scripts/gpu/build.sh suite      # or: bins (the archive then holds only those)
# Features: cuda and flash-attn (FEATURES=cuda builds without flash-attention). flash-attn's build
# (third_party/candle-flash-attn: 17 kernel files, ~25 min on 2 cores the first time) needs CUTLASS at the
# commit its build script names, which cudaforge clones from GitHub into ~/.cudaforge; offline,
# this script clones it from CUTLASS_GIT (a local clone or mirror of github.com/NVIDIA/cutlass).
# The compiled kernels are kept in ~/.cache/flash-attn-sm$CUDA_COMPUTE_CAP-cuda-$toolkit across clean builds.
# The CUDA toolkit (13.0, the GPU machine's: see below) comes from PyPI into ~/.cache/cuda-13.0.88,
# with a libcuda link stub; the build runs in target/cuda-13.0.88.
# A cold build on a fresh machine (2 cores; toolkit download, CUTLASS checkout and flash-attention
# included) took 47 min on 2026-11-27: device_suite 34.5 min, then the two binaries 6.5 min. Nothing
# here survives between sessions' machines, so a session lent a GPU starts with this build.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
case "$what" in all | suite | bins) ;; *) echo "usage: $0 [all|suite|bins]" >&2; exit 2 ;; esac
repo=$PWD
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}

# The toolkit: CUDA 13.0 from PyPI, the version of the GPU machine's driver (580, CUDA 13.0:
# .library/device/KINDS.md). Candle's kernels travel as PTX, which the driver compiles when a
# program loads them, and a driver compiles PTX only up to its own version's ISA: a newer nvcc's
# (13.4: PTX ISA 9.4) would fail to load there (CUDA_ERROR_UNSUPPORTED_PTX_VERSION),
# where 13.0's is ISA 9.0. cudarc also takes its API version from this nvcc. CUDA_TOOLKIT=13.x.y
# builds for another driver.
toolkit=${CUDA_TOOLKIT:-13.0.88}
tk=$HOME/.cache/cuda-$toolkit
if [ ! -e "$tk/ready" ]; then
  python3 -m venv "$tk/venv"
  minor=${toolkit%.*}
  "$tk/venv/bin/pip" install -q --disable-pip-version-check nvidia-cuda-nvcc=="$toolkit" \
    nvidia-cuda-runtime=="$toolkit" nvidia-cuda-crt=="$toolkit" nvidia-nvvm=="$toolkit" \
    nvidia-cuda-nvrtc=="$toolkit" "nvidia-cuda-cccl==$minor.*" "nvidia-cublas==$minor.*" "nvidia-curand==10.*"
  touch "$tk/ready"
fi
cuda=$("$tk/venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
for l in cudart.so.13 nvrtc.so.13 curand.so.10 cublas.so.13 cublasLt.so.13; do # names -l finds
  ln -sf "lib$l" "$cuda/lib/lib${l%%.so.*}.so"
done
# libcuda is the driver's, in no wheel: a stub to link against, from this toolkit's cuda.h, whose
# every entry point returns CUDA_ERROR_NO_DEVICE.
if [ ! -f "$cuda/lib/stubs/libcuda.so" ]; then
  mkdir -p "$cuda/lib/stubs"
  {
    echo 'typedef int CUresult;'
    gcc -E -P -x c "$cuda/include/cuda.h" | tr '\n' ' ' \
      | grep -oE 'CUresult\s+(__attribute__\(\(\w+\)\)\s+)?cu[A-Z]\w*\s*\(' | grep -oE 'cu[A-Z]\w*' | sort -u \
      | grep -vxE 'cuGetErrorString|cuGetErrorName' | sed 's/.*/CUresult &(void){return 100;}/'
    echo 'CUresult cuGetErrorString(int e,const char**p){if(p)*p="no CUDA driver (libcuda stub)";return 0;}'
    echo 'CUresult cuGetErrorName(int e,const char**p){if(p)*p=(e==100?"CUDA_ERROR_NO_DEVICE":"CUDA_ERROR_STUB");return 0;}'
  } >"$tk/cuda_stub.c"
  gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$cuda/lib/stubs/libcuda.so" "$tk/cuda_stub.c"
  ln -sf libcuda.so "$cuda/lib/stubs/libcuda.so.1"
fi
export PATH=$cuda/bin:$PATH CUDA_HOME=$cuda # cudarc: nvcc --version, and $CUDA_HOME/lib{,/stubs} to link
nvcc --version | tail -1
# One target folder per toolkit: cargo does not rebuild Candle's PTX when only nvcc changes.
export CARGO_TARGET_DIR=$repo/target/cuda-$toolkit
features=${FEATURES:-cuda,flash-attn}
mkdir -p .gpu

if [[ ",$features," == *",flash-attn,"* ]]; then
  # CUTLASS where cudaforge looks for it (~/.cudaforge/git/checkouts/cutlass-<commit's first 16>),
  # at the commit the (vendored) candle-flash-attn build script pins.
  fa=third_party/candle-flash-attn/build.rs
  commit=$(sed -n 's/^const CUTLASS_COMMIT: &str = "\([0-9a-f]*\)";/\1/p' "$fa")
  [ -n "$commit" ] || { echo "no CUTLASS_COMMIT in $fa" >&2; exit 1; }
  cutlass=${CUDAFORGE_HOME:-$HOME/.cudaforge}/git/checkouts/cutlass-${commit:0:16}
  if [ "$(git -C "$cutlass" rev-parse HEAD 2>/dev/null)" != "$commit" ] || [ ! -d "$cutlass/include" ]; then
    if [ -z "${CUTLASS_GIT:-}" ]; then
      # Online, cudaforge clones it itself; offline, say what to do instead of failing inside cargo.
      timeout 20 git ls-remote https://github.com/NVIDIA/cutlass.git HEAD >/dev/null 2>&1 || {
        echo "CUTLASS $commit is not in $cutlass and GitHub is unreachable: set CUTLASS_GIT to a clone of github.com/NVIDIA/cutlass" >&2
        exit 1
      }
    else
      rm -rf "$cutlass"
      mkdir -p "$(dirname "$cutlass")"
      git clone -q --no-checkout "$CUTLASS_GIT" "$cutlass"
      # Only the headers are needed (a mirror may lack large blobs elsewhere in the tree).
      git -C "$cutlass" checkout -q "$commit" -- include tools/util/include
      git -C "$cutlass" update-ref --no-deref HEAD "$commit"
    fi
  fi
  export CANDLE_FLASH_ATTN_BUILD_DIR=${CANDLE_FLASH_ATTN_BUILD_DIR:-$HOME/.cache/flash-attn-sm$CUDA_COMPUTE_CAP-cuda-$toolkit}
  export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
  mkdir -p "$CANDLE_FLASH_ATTN_BUILD_DIR"
fi

stage=$CARGO_TARGET_DIR/gpu-pack # the stripped binaries, archived together at the end
rm -rf "$stage"
mkdir -p "$stage"
stripped() { # NAME BINARY
  strip -o "$stage/$1" "$2"
  echo "$1: $(du -h "$2" | cut -f1) built, $(du -h "$stage/$1" | cut -f1) stripped"
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
  suite=$(nice cargo test --release -p tessera --features "$features" --test device_suite --no-run --message-format=json-render-diagnostics \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "device_suite" and m.get("executable"):
        print(m["executable"])')
  stripped device_suite "$suite"
fi
if [ "$what" != suite ]; then
  nice cargo build --release -p tessera-cli --features "$features" --bin tessera --bin tessera-bench
  stripped tessera "$CARGO_TARGET_DIR/release/tessera"
  stripped tessera-bench "$CARGO_TARGET_DIR/release/tessera-bench"
fi
# The driver's first step there, here: it JIT-compiles the PTX each binary embeds, and refuses PTX
# its CUDA version's ptxas would (a newer ISA, as nvcc 13.4 writes). ~15 s.
python3 scripts/gpu/ptx_check.py "$cuda/bin/ptxas" "$stage"/*
rm -f .gpu/device_suite.xz .gpu/tessera.xz .gpu/tessera-bench.xz # packed one by one by earlier builds
tar -C "$stage" -cf - $(ls "$stage") | xz -T1 --lzma2=preset=9e,dict=256MiB >.gpu/binaries.tar.xz
echo "binaries.tar.xz: $(du -h .gpu/binaries.tar.xz | cut -f1) ($(ls "$stage" | tr '\n' ' '))"
# What the binaries were built from: device.sh prints it beside the GPU's name, and a later session
# here compares it with `git rev-parse HEAD` before reusing .gpu/ instead of building again.
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' with uncommitted changes') ($what, features $features, CUDA $toolkit, $(date -u +%F))" >.gpu/REVISION
echo "built in $((SECONDS - start)) s; what travels besides the tracked files (limit: 64 MiB in all):"
du -ch .gpu/*.xz
echo "libraries the GPU machine must provide:"
objdump -p "$CARGO_TARGET_DIR/release/tessera" 2>/dev/null | awk '/NEEDED/ {print "  " $2}' || true
