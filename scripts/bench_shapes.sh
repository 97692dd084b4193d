#!/usr/bin/env bash
# tessera against llama.cpp on the Llama shapes at real sizes (`scripts/bench.sh --shape 1b`
# runs this; not part of CI). The files are scripts/peers/make_bench_shapes.sh's: random weights,
# SmolLM2's vocabulary, quantized by the peer llama.cpp's llama-quantize. For each type and
# thread count, in this order within one run:
#   - the machine's read bandwidth (`tessera-bench --read-bandwidth`, same threads),
#   - tessera: prompt processing of 512 tokens, generation of 64 from an empty cache,
#   - llama.cpp: `llama-bench -p 512 -n 64` (the same),
#   - ik_llama.cpp (scripts/peers/build_ik_llamacpp.sh, pinned 8337e4c): its `llama-bench`, the same,
#   - the read bandwidth again; the row shows the mean of the two probes.
# Decode is bytes per token bound: a step reads every tensor once (the tied embedding as the LM
# head; <file>.bytes.json, written by make_bench_shapes.sh), so the read limit is bandwidth /
# bytes per token, and each engine's decode is shown as a fraction of it.
#
# Usage: scripts/bench_shapes.sh [--shape 1b|8b] [--types "Q4_0 Q4_K_M"] [--threads "1 2"] [--reps N] [--no-ik]
set -euo pipefail
cd "$(dirname "$0")/.."
shape=1b
types="Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0"
threads="1 2"
reps=3
ik=1
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --no-ik) ik=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
llama_bin=$(LLAMACPP_TARGETS="llama-bench llama-quantize" bash scripts/peers/build_llamacpp.sh | tail -1)
ik_bin=""
[ "$ik" = 1 ] && ik_bin=$(bash scripts/peers/build_ik_llamacpp.sh | tail -1)
models=$(SHAPES="$shape" QUANT_TYPES="$types" bash scripts/peers/make_bench_shapes.sh | tail -1)
cargo build --release -q -p tessera-cli --bin tessera-bench
bench="${CARGO_TARGET_DIR:-target}/release/tessera-bench"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, commit $(git rev-parse --short HEAD)"
echo "# llama-$shape, llama.cpp: $(basename "$(dirname "$(dirname "$llama_bin")")"), ik_llama.cpp: $([ -n "$ik_bin" ] && echo 8337e4c || echo "not run"), reps $reps"
echo "| type | threads | MB/token | read GB/s | tessera pp512 | llama.cpp pp512 | ik pp512 | ratio llama / ik | tessera tg64 | llama.cpp tg64 | ik tg64 | ratio llama / ik | tessera tg / read limit | llama.cpp tg / read limit |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $types; do
  f="$models/llama-$shape.$t.gguf"
  for n in $threads; do
    "$bench" --read-bandwidth --threads "$n" --json >"$out/bw0.json"
    "$bench" --model "$f" --threads "$n" --prompt-tokens 512 --gen-tokens 64 --reps "$reps" --json >"$out/ts.json"
    "$llama_bin/llama-bench" -m "$f" -t "$n" -p 512 -n 64 -r "$reps" -o json >"$out/lc.json" 2>/dev/null
    echo '[]' >"$out/ik.json"
    [ -n "$ik_bin" ] && "$ik_bin/llama-bench" -m "$f" -t "$n" -p 512 -n 64 -r "$reps" -o json >"$out/ik.json" 2>/dev/null
    "$bench" --read-bandwidth --threads "$n" --json >"$out/bw1.json"
    python3 - "$t" "$n" "$out" "$f.bytes.json" <<'PY'
import json, sys
t, n, out, sizes = sys.argv[1:5]
ts = json.load(open(f"{out}/ts.json"))
lc = json.load(open(f"{out}/lc.json"))
pp = next(r["avg_ts"] for r in lc if r["n_prompt"] > 0)
tg = next(r["avg_ts"] for r in lc if r["n_gen"] > 0)
ik = json.load(open(f"{out}/ik.json"))
ikpp = next((r["avg_ts"] for r in ik if r["n_prompt"] > 0), None)
iktg = next((r["avg_ts"] for r in ik if r["n_gen"] > 0), None)
fmt = lambda v, spec: "-" if v is None else format(v, spec)
ratio = lambda a, b: "-" if b is None else f"{a / b:.2f}"
bw = (json.load(open(f"{out}/bw0.json"))["read_gb_s"] + json.load(open(f"{out}/bw1.json"))["read_gb_s"]) / 2
per_token = json.load(open(sizes))["tensor_bytes"]
limit = bw * 1e9 / per_token  # tokens/s if a step only streamed its weights at the probe's rate
tp, tt = ts["pp_tok_s"], ts["tg_tok_s"]
print(f"| {t} | {n} | {per_token / 1e6:.0f} | {bw:.1f} | {tp:.0f} | {pp:.0f} | {fmt(ikpp, '.0f')} | {tp / pp:.2f} / {ratio(tp, ikpp)} | "
      f"{tt:.1f} | {tg:.1f} | {fmt(iktg, '.1f')} | {tt / tg:.2f} / {ratio(tt, iktg)} | {tt / limit:.2f} | {tg / limit:.2f} |")
PY
  done
done
