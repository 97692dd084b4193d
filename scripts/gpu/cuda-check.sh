#!/usr/bin/env bash
# Type-checks the CUDA build (`cargo check --all-targets --features cuda`) on a machine with no
# GPU, no driver and no CUDA toolkit: what CI runs to keep the GPU-only Rust code compiling.
#
#   scripts/gpu/cuda-check.sh fast
#
# A fake nvcc answers `--version` for cudarc and writes empty .ptx/.o/.a files for cudaforge
# (candle-kernels, candle-flash-attn), so no kernel is compiled and nothing downloads but crates;
# every cfg(feature = "cuda") line of Rust is type-checked. Nothing this builds can run:
# scripts/gpu/build.sh installs the real toolkit and makes the binaries a GPU machine runs.
# scripts/gpu/lint.sh runs clippy with the same fake nvcc and target folder (run this first).
#
# Env: CARGO_FEATURES (default cuda), CUDA_CI_DIR (where the fake nvcc goes, default
# $HOME/.cache/cuda-ci), CUDA_COMPUTE_CAP (default 80; there is no nvidia-smi to ask).
#
# Trimmed from a shared tool that also installed nvcc from PyPI wheels for `check` and `build`
# modes; the project uses only `fast`.
set -euo pipefail
mode=${1:-fast}
if [ "$mode" != fast ]; then
  echo "usage: $0 fast (the real CUDA build is scripts/gpu/build.sh)" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
features=${CARGO_FEATURES:-cuda}
bin=${CUDA_CI_DIR:-$HOME/.cache/cuda-ci}/fakenvcc/bin
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-80}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
mkdir -p "$bin"
cat >"$bin/nvcc" <<'EOF'
#!/bin/sh
# fake nvcc: answers --version for cudarc, writes empty .ptx/.o/.a for cudaforge (candle-kernels)
case " $* " in
  *" --version "*) printf 'nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) NVIDIA\nBuilt on fake\nCuda compilation tools, release 13.4, V13.4.0\nBuild fake\n'; exit 0;;
  *" --list-gpu-code "*) printf 'sm_75\nsm_80\nsm_86\nsm_89\nsm_90\n'; exit 0;;
esac
mode=obj; outdir=; out=; src=; prev=
for a in "$@"; do
  case "$prev" in --output-directory) outdir=$a;; -o) out=$a;; esac
  case "$a" in --ptx) mode=ptx;; --lib) mode=lib;; *.cu) src=$a;; esac
  prev=$a
done
case $mode in
  ptx) : > "${outdir:-.}/$(basename "$src" .cu).ptx";;
  obj) : > "$out";;
  lib) rm -f "$out"; ar rc "$out";;
esac
EOF
chmod +x "$bin/nvcc"
# A target folder of its own (not CARGO_TARGET_DIR), and NVCC in the environment (candle-kernels'
# build script tracks it), so that the fake compiler's empty PTX can never reach a real build.
# scripts/gpu/lint.sh uses the same folder and reuses what this checked.
PATH=$bin:$PATH NVCC=$bin/nvcc CARGO_TARGET_DIR=target/cuda-fakecheck \
  nice -n 19 cargo check --all-targets --features "$features"
