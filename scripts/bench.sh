#!/usr/bin/env bash
# tessera against llama.cpp on the same GGUF files, side by side from one run (not part of CI).
#
# For SmolLM2-135M-Instruct in each block type (the shipped Q4_1, and Q4_0 / Q5_0 / Q5_1 /
# Q8_0 / Q4_K_M / Q5_K_M / Q6_K made from it by llama.cpp's llama-quantize), at 1 and 2 threads:
# prompt processing of 512 tokens and generation of 128 tokens, both after 64 tokens already in
# the cache (llama-bench's `-p 512 -n 128 -d 64`), tokens/s, and each engine's peak RSS.
# Then tessera's f32 decode against the machine's memory-read roofline.
# llama.cpp is built from the source bundled in PyPI's llama-cpp-python sdist
# (scripts/peers/build_llamacpp.sh, cached under ~/.cache/tessera-peers).
#
# With --shape 1b (or 8b), instead: the Llama shapes at real sizes that
# scripts/peers/make_bench_shapes.sh writes (random weights, SmolLM2's vocabulary) in Q4_0,
# Q4_K_M, Q5_K_M, Q6_K and Q8_0: prompt processing of 512 tokens and generation of 64 from an
# empty cache (llama-bench's `-p 512 -n 64`), and beside each row the machine's read bandwidth
# measured just before it (`tessera-bench --read-bandwidth`, same threads), the bytes a decode
# step reads (every tensor of the file once: the tied embedding is the LM head) and each
# engine's decode as a fraction of that read limit (bandwidth / bytes per token).
#
# Usage: scripts/bench.sh [--shape 1b|8b] [--types "Q4_1 Q4_K_M"] [--threads "1 2"] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/.."
types=""
threads="1 2"
reps=3
shape=""
while [ $# -gt 0 ]; do
  case "$1" in
    --types) types="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --shape) shape="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bench="${CARGO_TARGET_DIR:-target}/release/tessera-bench"
if [ -n "$shape" ]; then
  exec bash scripts/bench_shapes.sh --shape "$shape" --threads "$threads" --reps "$reps" \
    ${types:+--types "$types"}
fi
types="${types:-Q4_1 Q4_0 Q5_0 Q5_1 Q8_0 Q4_K_M Q5_K_M Q6_K}"
q41=$(bash scripts/fetch_smollm2.sh | tail -1)
llama_bin=$(bash scripts/peers/build_llamacpp.sh | tail -1)
models=$(bash scripts/peers/quantize_smollm2.sh | tail -1)
cargo build --release -q -p tessera-cli --bin tessera-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "# llama.cpp: $(basename "$(dirname "$(dirname "$llama_bin")")")"
for t in $types; do
  if [ "$t" = Q4_1 ]; then f="$q41"; else f="$models/SmolLM2-135M-Instruct.$t.gguf"; fi
  for n in $threads; do
    /usr/bin/time -f %M -o "$out/ts.rss" "$bench" --model "$f" --threads "$n" \
      --prompt-tokens 512 --gen-tokens 128 --depth 64 --reps "$reps" --json > "$out/ts.json"
    /usr/bin/time -f %M -o "$out/lc.rss" "$llama_bin/llama-bench" -m "$f" -t "$n" -p 512 -n 128 -d 64 \
      -r "$reps" -o json > "$out/lc.json" 2>/dev/null
    python3 - "$t" "$n" "$out" <<'PY'
import json, sys
t, n, out = sys.argv[1], sys.argv[2], sys.argv[3]
ts = json.load(open(f"{out}/ts.json"))
lc = json.load(open(f"{out}/lc.json"))
pp = next(r["avg_ts"] for r in lc if r["n_prompt"] > 0)
tg = next(r["avg_ts"] for r in lc if r["n_gen"] > 0)
rss_ts = int(open(f"{out}/ts.rss").read().split()[-1]) / 1024
rss_lc = int(open(f"{out}/lc.rss").read().split()[-1]) / 1024
print(f"| {t} | {n} | {ts['pp_tok_s']:.0f} | {pp:.0f} | {ts['pp_tok_s']/pp:.2f} | "
      f"{ts['tg_tok_s']:.0f} | {tg:.0f} | {ts['tg_tok_s']/tg:.2f} | {rss_ts:.0f} | {rss_lc:.0f} |")
PY
  done
done | { echo "| type | threads | tessera pp512 | llama.cpp pp512 | ratio | tessera tg128 | llama.cpp tg128 | ratio | tessera RSS MiB | llama.cpp RSS MiB |"; echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"; cat; }

echo
echo "| f32 (dequantized Q4_1) | threads | pp512 | tg128 | read GB/s | roofline tg (all weights read per token) | tg / roofline |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in $threads; do
  "$bench" --model "$q41" --dtype f32 --threads "$n" --prompt-tokens 512 --gen-tokens 128 \
    --depth 64 --reps "$reps" --json > "$out/f32.json"
  "$bench" --read-bandwidth --threads "$n" --json > "$out/bw.json"
  python3 - "$n" "$out" "$q41" <<'PY'
import json, sys, struct
n, out, path = sys.argv[1], sys.argv[2], sys.argv[3]
f = json.load(open(f"{out}/f32.json"))
bw = json.load(open(f"{out}/bw.json"))["read_gb_s"]
params = 134_515_008  # SmolLM2-135M: every weight (the tied embedding is the LM head) is read once per token
roof = bw * 1e9 / (params * 4)
print(f"| f32 | {n} | {f['pp_tok_s']:.0f} | {f['tg_tok_s']:.1f} | {bw:.1f} | {roof:.1f} | {f['tg_tok_s']/roof:.2f} |")
PY
done
