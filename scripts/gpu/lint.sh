#!/usr/bin/env bash
# Lints the code only a GPU build compiles (features `cuda` and `flash-attn`: the flash-attention
# call, the device_suite test executable) on a machine without a GPU or a CUDA toolkit: clippy, with
# the fake nvcc of scripts/gpu/cuda-check.sh fast (it compiles no kernel: run that first) and a
# stand-in CUTLASS checkout, an empty include/ at the commit third_party/candle-flash-attn pins
# (cudaforge checks only the commit, and the fake nvcc reads no header). Nothing this builds can
# run; scripts/gpu/build.sh makes the real binaries. CI runs it after the CUDA type-check.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc=${CUDA_CI_DIR:-$HOME/.cache/cuda-ci}/fakenvcc/bin/nvcc
[ -x "$nvcc" ] || { echo "no fake nvcc at $nvcc: run scripts/gpu/cuda-check.sh fast first" >&2; exit 1; }
commit=$(sed -n 's/^const CUTLASS_COMMIT: &str = "\([0-9a-f]\{40\}\)";$/\1/p' third_party/candle-flash-attn/build.rs)
[ -n "$commit" ] || { echo "no CUTLASS_COMMIT in third_party/candle-flash-attn/build.rs" >&2; exit 1; }
# The target folder cuda-check.sh fast uses, so that the dependencies it checked are reused.
target=target/cuda-fakecheck
home=$PWD/$target/cudaforge
stub=$home/git/checkouts/cutlass-${commit:0:16}
if [ ! -d "$stub/.git" ]; then
  mkdir -p "$stub/include"
  git -C "$stub" init -q
  echo "$commit" >"$stub/.git/HEAD"
fi
for features in tessera-cli/cuda tessera-cli/flash-attn; do
  echo "clippy --features $features (fake nvcc, stand-in CUTLASS)"
  CUDAFORGE_HOME=$home PATH=$(dirname "$nvcc"):$PATH NVCC=$nvcc CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-80} \
    CARGO_TARGET_DIR=$target nice cargo clippy --workspace --all-targets --features "$features" -- -D warnings
done
