#!/usr/bin/env bash
# Speed and peak memory of SmolLM2-135M-Instruct (Q4_1 GGUF kept quantized, and dequantized to
# f32) at 1 and 2 threads: prompt processing (pp, tokens/s over a 128-token prompt) and
# generation (tg, tokens/s over 64 tokens decoded one at a time with the KV cache).
# Usage: scripts/bench.sh [extra tessera-bench args]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(bash scripts/fetch_smollm2.sh)
cargo build --release -q -p tessera-cli --bin tessera-bench
echo "| engine | weights | threads | prompt tok/s | generate tok/s | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- |"
for threads in 1 2; do
  ./target/release/tessera-bench --model "$model" --threads "$threads" "$@"
  ./target/release/tessera-bench --model "$model" --dtype f32 --threads "$threads" "$@"
done
