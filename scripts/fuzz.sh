#!/usr/bin/env bash
# Fuzzes tessera's readers of untrusted input with cargo-fuzz (libFuzzer, nightly Rust):
# gguf, safetensors, config_json, chat_template, image, mmproj, http_body (fuzz/fuzz_targets/). Each corpus is
# seeded from the files the tests already have; crashes are saved under fuzz/artifacts/<target>/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
# Installs cargo-fuzz (cargo install) when missing. The build is a second, instrumented build of
# the crates (nightly, sanitizer-coverage, fuzz/target).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=${*:-gguf safetensors config_json chat_template image mmproj http_body}
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
start=$SECONDS
# No AddressSanitizer (safe Rust; ASan would slow every run): libFuzzer still catches panics,
# aborts, timeouts and out-of-memory.
cargo +nightly fuzz build --release -s none
echo "fuzz build: $((SECONDS - start)) s"
python3 scripts/fuzz_seeds.py fuzz/corpus
for t in $targets; do
  mkdir -p "fuzz/artifacts/$t"
  # The tiny pairs' mmproj files reach 400 KiB; a request body has no use for more than 64 KiB.
  case $t in mmproj) max_len=1048576 ;; http_body) max_len=65536 ;; *) max_len=262144 ;; esac
  # -rss_limit_mb: every allocation is bounded by the input's size; -timeout: one input's work.
  cargo +nightly fuzz run --release -s none "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=$max_len -print_final_stats=1 2>&1 \
    | grep -E "^(stat::|#[0-9]+[[:space:]]+DONE|==|SUMMARY|Done)|panicked|ERROR" || true
  if ls "fuzz/artifacts/$t"/* >/dev/null 2>&1; then
    echo "FAIL: fuzz target $t found inputs that crash: fuzz/artifacts/$t/"
    exit 1
  fi
done
