#!/usr/bin/env bash
# Runs the kernel tests (crates/kernels) as aarch64 code under qemu-user, so the NEON
# dotprod kernels are executed, not only compiled. Installs what it needs: Debian's
# qemu-user and gcc-aarch64-linux-gnu (linker, libc), and the Rust aarch64 target.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
    $sudo_cmd apt-get update -q >/dev/null && $sudo_cmd apt-get install -y -q "${need[@]}" >/dev/null
  }
fi
rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# `max` emulates every extension qemu knows, dotprod included.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_DIR=target/aarch64
cargo test -p tessera-kernels --release --target aarch64-unknown-linux-gnu "$@"
